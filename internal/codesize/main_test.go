package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// write puts a Go file of the given source at root/rel.
func write(t *testing.T, root, rel, src string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// body returns a function of n lines in all.
func body(name string, n int) string {
	return fmt.Sprintf("func %s() {\n%s}\n", name, strings.Repeat("\t_ = 1\n", n-2))
}

func TestMeasure(t *testing.T) {
	root := t.TempDir()
	write(t, root, "rules/long.go", "package rules\n\n"+body("long", 81)+body("fits", 80))
	write(t, root, "rules/long_test.go", "package rules\n\n"+body("longTest", 200))
	write(t, root, "internal/lab/x.go", "package lab\n\n"+body("labLong", 200))
	write(t, root, "advisor/table.go", "package advisor\n\nfunc table() []int {\n\tx := 1\n\treturn []int{\n"+
		strings.Repeat("\t\tx,\n", 100)+"\t}\n}\n")
	write(t, root, "advisor/big.go", "package advisor\n\n"+strings.Repeat("// filler\n", 520))
	write(t, root, "rules/testdata/skip.go", "package x\n\n"+body("skipped", 200))

	rep, err := measure(root)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rep.violations, "\n")
	for _, want := range []string{"rules/long.go:3 long: 81 lines", "advisor/big.go: 522 lines"} {
		if !strings.Contains(got, want) {
			t.Errorf("violations miss %q; got:\n%s", want, got)
		}
	}
	for _, not := range []string{"fits", "longTest", "labLong", "table", "skipped"} {
		if strings.Contains(got, not) {
			t.Errorf("violations name %q, which keeps the rules; got:\n%s", not, got)
		}
	}
	if len(rep.violations) != 2 {
		t.Errorf("got %d violations, want 2:\n%s", len(rep.violations), got)
	}
}
