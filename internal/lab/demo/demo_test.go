package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestDemo runs the README's main job end to end on a small insert. It checks what the demo
// did (findings, the changes it applied, both timings taken), not how fast: the gain is a
// figure for people, measured by the demo itself.
func TestDemo(t *testing.T) {
	lab.RequireServer(t)
	var out bytes.Buffer
	sum, err := Run(context.Background(), &out, Options{Rows: 20000, Timeout: 75 * time.Second, ProcFS: "/proc", SysFS: "/sys"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Log(out.String())
	if sum.BeforeSeconds <= 0 || sum.AfterSeconds <= 0 {
		t.Errorf("timings not taken: before %v, after %v", sum.BeforeSeconds, sum.AfterSeconds)
	}
	applied := map[string]string{}
	for _, a := range sum.Applied {
		applied[a.Setting] = a.To
	}
	if applied["wal_sync_method"] != "fdatasync" {
		t.Errorf("applied %v, want wal_sync_method -> fdatasync", sum.Applied)
	}
	if applied["wal_buffers"] == "" {
		t.Errorf("applied %v, want a larger wal_buffers", sum.Applied)
	}
	if !sum.Simulated && !strings.Contains(out.String(), "note:") {
		t.Errorf("no simulated disk and no note saying so")
	}
}
