package benchprobe

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParsePGTestFsync(t *testing.T) {
	raw, err := os.ReadFile("testdata/pg_test_fsync-15.txt")
	if err != nil {
		t.Fatal(err)
	}
	// One second between lines, so that the sections' spans can be checked.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var lines []stampedLine
	for i, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		lines = append(lines, stampedLine{at: t0.Add(time.Duration(i) * time.Second), text: l})
	}
	run, err := parsePGTestFsync(lines)
	if err != nil {
		t.Fatal(err)
	}
	want := []pgFigure{
		{Name: "open_datasync", WritesPerSync: 1, Available: true, OpsPerSec: 6913.682, UsecsPerOp: 145},
		{Name: "fdatasync", WritesPerSync: 1, Available: true, OpsPerSec: 7070.604, UsecsPerOp: 141},
		{Name: "fsync", WritesPerSync: 1, Available: true, OpsPerSec: 7537.291, UsecsPerOp: 133},
		{Name: "fsync_writethrough", WritesPerSync: 1},
		{Name: "open_sync", WritesPerSync: 1, Available: true, OpsPerSec: 4954.693, UsecsPerOp: 202},
		{Name: "open_datasync", WritesPerSync: 2},
		{Name: "fdatasync", WritesPerSync: 2, Available: true, OpsPerSec: 5608.422, UsecsPerOp: 178},
		{Name: "fsync", WritesPerSync: 2, Available: true, OpsPerSec: 5288.673, UsecsPerOp: 189},
		{Name: "fsync_writethrough", WritesPerSync: 2},
		{Name: "open_sync", WritesPerSync: 2, Available: true, OpsPerSec: 2569.111, UsecsPerOp: 389},
	}
	if len(run.Figures) != len(want) {
		t.Fatalf("got %d figures, want %d: %+v", len(run.Figures), len(want), run.Figures)
	}
	for i := range want {
		if run.Figures[i] != want[i] {
			t.Errorf("figure %d = %+v, want %+v", i, run.Figures[i], want[i])
		}
	}
	// Each section: header on line 3 (or 11), last figure 6 lines later.
	if got, want := run.SectionsSeconds, 12.0; got != want {
		t.Errorf("sections took %v s, want %v", got, want)
	}
	if f, ok := run.figure("open_sync", 2); !ok || f.OpsPerSec != 2569.111 {
		t.Errorf("figure(open_sync, 2) = %+v, %v", f, ok)
	}
}

func TestParsePGTestFsyncNoFigures(t *testing.T) {
	if _, err := parsePGTestFsync([]stampedLine{{text: "pg_test_fsync: error: could not open output file"}}); err == nil {
		t.Error("no figures parsed without an error")
	}
}
