package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// requireEquipment skips when PostgreSQL or FUSE is missing, except in CI (CI set), where a
// missing piece is a broken set-up and fails the test.
func requireEquipment(t *testing.T) {
	t.Helper()
	lab.RequireServer(t)
	fail := t.Skipf
	if os.Getenv("CI") != "" {
		fail = t.Fatalf
	}
	if os.Geteuid() != 0 {
		fail("the suite mounts FUSE and runs PostgreSQL as the postgres user: it needs root")
		return
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		fail("%v: %v", simdisk.ErrNoFUSE, err)
		return
	} else {
		f.Close()
	}
}

// TestQuickHarness runs the quick suite's seed 001 and seed 002: a smoke test of the harness
// (every configuration produced a result, the report renders, nothing is left behind), not of
// the figures.
func TestQuickHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick suite (a few minutes)")
	}
	requireEquipment(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	vmBefore := readKnobsT(t)
	// Seed 001's timing lab runs the daemon binary: built here and found on PATH.
	binDir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "pgwal-advisor"), "../../../cmd/pgwal-advisor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	t.Setenv("PATH", binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	rep, err := Run(ctx, Options{Quick: true, Scenarios: []string{Seed002, Seed001, Timing001}, Progress: logWriter{t}}, zaptest.NewLogger(t))
	if errors.Is(err, simdisk.ErrNoFUSE) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("quick suite: %v", err)
	}
	if got := len(rep.Scenarios); got != 3 || rep.Scenarios[0].ID != Seed001 || rep.Scenarios[1].ID != Timing001 || rep.Scenarios[2].ID != Seed002 {
		t.Fatalf("scenarios = %d, want seed001, timing, seed002", got)
	}
	timing := rep.Scenarios[1]
	rep.Scenarios = slices.Delete(rep.Scenarios, 1, 2)
	for _, s := range rep.Scenarios {
		if s.Error != "" {
			t.Errorf("%s: %s", s.ID, s.Error)
		}
		if s.Advisor == nil || len(s.Advisor.Rounds) == 0 {
			t.Errorf("%s: no advisor round", s.ID)
		}
		for _, role := range []string{RoleStart, RoleAdvisor, RoleGrid, RoleStatic} {
			if s.withRole(role) == nil {
				t.Errorf("%s: no configuration plays %s", s.ID, role)
			}
		}
		if s.GridBest == "" {
			t.Errorf("%s: no best grid configuration", s.ID)
		}
		for _, c := range s.Configs {
			if len(c.Runs) == 0 || c.Value <= 0 {
				t.Errorf("%s: configuration %q has no result: runs %v", s.ID, c.Name, c.Runs)
			}
		}
		if len(s.Targets) == 0 {
			t.Errorf("%s: no targets scored", s.ID)
		}
	}
	s1 := rep.Scenarios[0]
	// 2 wal_buffers x 2 methods, plus the static tuners' (and the advisor's unless it is one
	// of the grid's).
	if n := len(s1.Configs); n < 5 {
		t.Errorf("seed001 measured %d configurations, want at least 5", n)
	}
	if tm := timing.Timing; tm == nil || timing.Error != "" {
		t.Errorf("timing: no timing lab (%s)", timing.Error)
	} else {
		if tm.CheckError != "" || tm.StatementSeconds <= 0 || tm.Rows != sizesFor(true).s001TimingRows {
			t.Errorf("seed001 timing lab: check error %q, statement %.1f s, %d rows", tm.CheckError, tm.StatementSeconds, tm.Rows)
		}
		// check exits 0, 1 or 2 by the findings' severity; 3 or 64 is a failure to judge.
		if tm.CheckExit > 2 {
			t.Errorf("seed001 timing lab: check exited %d", tm.CheckExit)
		}
	}
	// The start is seed 001's bad configuration: the advisor must change it (wal_sync_method
	// reloads, so even one quick round applies it).
	if s1.AdvisorChanges["wal_sync_method"] == "" {
		t.Errorf("seed001: the advisor changed %v, want wal_sync_method among them", s1.AdvisorChanges)
	}
	s2 := rep.Scenarios[1]
	if s2.VolatileCheck == nil {
		t.Errorf("seed002: no check of the tmpfs cluster")
	}
	for _, c := range s2.Configs {
		if len(c.Clients) != len(sizesFor(true).s002Clients) {
			t.Errorf("seed002: %s measured %d client counts, want %d", c.Name, len(c.Clients), len(sizesFor(true).s002Clients))
		}
	}

	rep.Scenarios = append(rep.Scenarios, timing)
	var md, js bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Seed 001", "## Seed 002", "## Targets", "static tuners", "grid (best)", "Timing lab:"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	t.Log("\n" + md.String())

	if got := readKnobsT(t); got != vmBefore {
		t.Errorf("vm.dirty_* after the suite = %s, before %s", got, vmBefore)
	}
	checkNothingLeft(t)
}

// TestCancelTearsDown interrupts seed 003's quick scenario while the advisor watches (a loop
// device, an ext4 mount, a simulated disk and a cluster are up) and checks that everything is
// torn down and the kernel's dirty settings are as they were, as on Ctrl-C.
func TestCancelTearsDown(t *testing.T) {
	if testing.Short() {
		t.Skip("sets up seed 003's equipment")
	}
	requireEquipment(t)
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("seed 003 needs %s: %v", tool, err)
		}
	}
	vmBefore := readKnobsT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress := &cancelOn{t: t, line: "advisor round 1", cancel: cancel}
	rep, err := Run(ctx, Options{Quick: true, Scenarios: []string{Seed003}, Progress: progress}, zaptest.NewLogger(t))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel: %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Scenarios) != 1 || rep.Scenarios[0].Error == "" {
		t.Errorf("the interrupted scenario is not reported with its error: %+v", rep)
	}
	if got := readKnobsT(t); got != vmBefore {
		t.Errorf("vm.dirty_* after the cancelled suite = %s, before %s", got, vmBefore)
	}
	checkNothingLeft(t)
}

// cancelOn cancels a few seconds after a progress line containing line is written.
type cancelOn struct {
	t      *testing.T
	line   string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.t.Log(strings.TrimRight(string(p), "\n"))
	if strings.Contains(string(p), c.line) {
		time.AfterFunc(3*time.Second, c.cancel)
	}
	return len(p), nil
}

func readKnobsT(t *testing.T) string {
	t.Helper()
	var parts []string
	for _, n := range dirtyKnobs() {
		b, err := os.ReadFile(filepath.Join("/proc/sys/vm", n))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, n+"="+strings.TrimSpace(string(b)))
	}
	return strings.Join(parts, " ")
}

// checkNothingLeft fails when a mount, loop device or work directory of the suite remains.
func checkNothingLeft(t *testing.T) {
	t.Helper()
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), equipment.WorkPrefix()) {
		t.Errorf("a mount of the suite remains:\n%s", mounts)
	}
	if out, err := exec.Command("losetup", "--all").Output(); err == nil && strings.Contains(string(out), equipment.WorkPrefix()) {
		t.Errorf("a loop device of the suite remains: %s", out)
	}
	for _, parent := range []string{os.TempDir(), "/dev/shm"} {
		left, _ := filepath.Glob(filepath.Join(parent, equipment.WorkPrefix()+"*"))
		if len(left) > 0 {
			t.Errorf("work directories remain: %v", left)
		}
	}
}
