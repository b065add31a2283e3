package equipment

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// TestSetClose: Close undoes in reverse order, goes on past a failure and returns it, and the
// work directories it made are gone.
func TestSetClose(t *testing.T) {
	e := New(zaptest.NewLogger(t), nil)
	d, err := e.Dir(t.TempDir(), "test-")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o755 || !strings.Contains(d, WorkPrefix()) {
		t.Fatalf("work directory %s: %v, %v; want mode 0755 and the work prefix %s", d, fi, err, WorkPrefix())
	}
	var order []int
	boom := errors.New("boom")
	e.Push(func() error { order = append(order, 1); return nil })
	e.Push(func() error { order = append(order, 2); return boom })
	e.Push(func() error { order = append(order, 3); return nil })
	if err := e.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want the failure", err)
	}
	if !slices.Equal(order, []int{3, 2, 1}) {
		t.Errorf("undone in order %v, want 3 2 1", order)
	}
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Errorf("work directory %s after Close: %v", d, err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("a second Close = %v, want nothing left to undo", err)
	}
}
