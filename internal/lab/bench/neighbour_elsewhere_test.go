package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// TestNeighbourElsewhereQuick runs the quick neighbour-elsewhere scenario end to end (a 300 MB
// writer on the second device; the defaults and one per-device limit): every configuration
// produced a run, the report renders its table and prose block, and the kernel's vm.dirty_*
// and every loop device's per-device limits are as they were, with nothing left behind.
func TestNeighbourElsewhereQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick neighbour-elsewhere scenario (about two minutes)")
	}
	requireEquipment(t)
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the neighbour-elsewhere scenario needs %s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vmBefore, bdiBefore := readKnobsT(t), readBDIT(t)
	rep, err := Run(ctx, Options{Quick: true, Scenarios: []string{NeighbourElsewhere}, Progress: logWriter{t}}, zaptest.NewLogger(t))
	if errors.Is(err, simdisk.ErrNoFUSE) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("quick neighbour-elsewhere scenario: %v", err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].ID != NeighbourElsewhere {
		t.Fatalf("scenarios = %+v, want neighbour-elsewhere alone", rep.Scenarios)
	}
	s := rep.Scenarios[0]
	if len(s.Configs) != 2 {
		t.Fatalf("%d configurations, want 2", len(s.Configs))
	}
	for _, c := range s.Configs {
		if len(c.Neighbour) != 1 || len(c.Runs) != 1 {
			t.Errorf("%s: %d runs (%d values), want 1", c.Name, len(c.Neighbour), len(c.Runs))
			continue
		}
		run := c.Neighbour[0]
		if run.Transactions == 0 || run.WALSyncs == 0 {
			t.Errorf("%s: %d transactions, %d WAL flushes: want some", c.Name, run.Transactions, run.WALSyncs)
		}
		if run.DirtyPeakBytes+run.WritebackPeakBytes < 32<<20 {
			t.Errorf("%s: Dirty peak %d, Writeback peak %d bytes: the bulk writer's pages were not seen", c.Name, run.DirtyPeakBytes, run.WritebackPeakBytes)
		}
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Neighbour elsewhere", "stall seconds (median, runs)", proseOpen + NeighbourElsewhere, "max_bytes 64MB"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if got := readKnobsT(t); got != vmBefore {
		t.Errorf("vm.dirty_* after the scenario = %s, before %s", got, vmBefore)
	}
	if got := readBDIT(t); got != bdiBefore {
		t.Errorf("loop devices' per-device limits after the scenario = %s, before %s", got, bdiBefore)
	}
	checkNothingLeft(t)
}

// TestBDIKnobsRestore: set writes the limits in order, restore puts strict_limit and max_ratio
// back, and a knob the suite may not change is refused before anything is written.
func TestBDIKnobsRestore(t *testing.T) {
	dir := t.TempDir()
	for n, v := range map[string]string{"strict_limit": "0", "max_ratio": "100", "max_bytes": "4892151808"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := &bdiKnobs{dir: dir, orig: map[string]int64{"strict_limit": 0, "max_ratio": 100}}
	if err := k.set(map[string]string{"min_ratio": "5"}); err == nil {
		t.Error("set min_ratio: no error")
	}
	if err := k.set(map[string]string{"strict_limit": "1", "max_bytes": "67108864"}); err != nil {
		t.Fatal(err)
	}
	if got := readT(t, dir, "strict_limit"); got != "1" {
		t.Errorf("strict_limit = %s after set", got)
	}
	if err := k.restore(); err != nil {
		t.Fatal(err)
	}
	if got := readT(t, dir, "strict_limit") + " " + readT(t, dir, "max_ratio"); got != "0 100" {
		t.Errorf("strict_limit max_ratio = %s after restore, want 0 100", got)
	}
}

// TestElsewhereBest: a grid point that ties the defaults is not the grid's best; one with
// fewer stall seconds is.
func TestElsewhereBest(t *testing.T) {
	res := &ScenarioResult{Configs: []ConfigResult{
		{Config: Config{Name: "kernel defaults", Roles: []string{RoleStart}}, Runs: []float64{0, 0}, Value: 0},
		{Config: Config{Name: "dirty 16MB/64MB", Roles: []string{RoleGrid}}, Runs: []float64{0, 0}, Value: 0},
	}}
	if got := elsewhereBest(res); got != "" {
		t.Errorf("all tied at 0: best = %q, want none", got)
	}
	res.Configs[0].Runs, res.Configs[0].Value = []float64{4, 6}, 5
	if got := elsewhereBest(res); got != "dirty 16MB/64MB" {
		t.Errorf("grid point below the defaults: best = %q", got)
	}
}

func readT(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// readBDIT reads the loop devices' strict_limit and max_ratio.
func readBDIT(t *testing.T) string {
	t.Helper()
	devs, err := filepath.Glob("/sys/class/bdi/7:*")
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, d := range devs {
		for _, n := range []string{"strict_limit", "max_ratio"} {
			if b, err := os.ReadFile(filepath.Join(d, n)); err == nil {
				parts = append(parts, filepath.Base(d)+"/"+n+"="+strings.TrimSpace(string(b)))
			}
		}
	}
	return strings.Join(parts, " ")
}
