package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestRollbackPairRealProc: on the host's own /proc/sys/vm, a vm.dirty_thresholds change from
// tuned's 64MB/512MB to the kernel's ratios, journaled as the daemon journals it, is undone by
// `pgwal-advisor rollback --id`: all four files back from the one record. It runs as root with
// a writable /proc/sys, and puts the host's values back in Cleanup whatever happens.
func TestRollbackPairRealProc(t *testing.T) {
	requireWritableProc(t)
	ctx := context.Background()
	dir := t.TempDir()
	sysctlFile, journal := sysctlFileIn(t, dir), filepath.Join(dir, "apply.journal")
	k, low := loweredHostPair(t, sysctlFile)
	j := apply.NewJournal(journal)
	in, err := j.Append(apply.Record{Time: time.Now(), Kind: apply.KindIntent, Origin: apply.OriginDaemon, Setting: apply.KnobDirtyThresholds,
		Action: rules.ActionSysctl, Old: &low, New: "10%/20%", Rule: "writeback-stalls-wal"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := k.Set(ctx, apply.KnobDirtyThresholds, "10%/20%")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(apply.Record{ID: in[0].ID, Time: time.Now(), Kind: apply.KindOutcome, Outcome: apply.Applied,
		Setting: apply.KnobDirtyThresholds, Live: &live}); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCLI(t, "rollback", "--journal", journal, "--id", "1", "--path.procfs", "/proc", "--apply.sysctl-file", sysctlFile)
	if code != 0 {
		t.Fatalf("rollback --id 1 exited %d: %s\n%s", code, stderr, out)
	}
	t.Logf("rollback --id 1: %s", strings.TrimSpace(out))
	var got []string
	for _, n := range []string{"dirty_background_bytes", "dirty_background_ratio", "dirty_bytes", "dirty_ratio"} {
		b, err := os.ReadFile("/proc/sys/vm/" + n)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.TrimSpace(string(b)))
	}
	if s := strings.Join(got, " "); s != "67108864 0 536870912 0" {
		t.Errorf("after rollback vm.dirty_* = %s, want 67108864 0 536870912 0", s)
	}
	if b, err := os.ReadFile(sysctlFile); err != nil || !strings.Contains(string(b), "vm.dirty_bytes = 536870912") || strings.Contains(string(b), "ratio") {
		t.Errorf("the sysctl.d file after rollback: %q, %v; want the lowered bytes back and no ratio line", b, err)
	}
}

// requireWritableProc skips unless the test may write the host's /proc/sys/vm (root, and not a
// container's read-only /proc/sys).
func requireWritableProc(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("writing /proc/sys/vm needs root")
	}
	f, err := os.OpenFile("/proc/sys/vm/dirty_bytes", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("/proc/sys/vm is not writable here: %v", err)
	}
	f.Close()
	lab.LockHostVMForTest(t)
}

// loweredHostPair puts the host's vm.dirty_thresholds at tuned's 64MB/512MB through a kernel
// actuator persisting in sysctlFile, and returns the actuator and that value as read; the
// host's own values are put back when the test ends, whatever happens.
func loweredHostPair(t *testing.T, sysctlFile string) (*apply.Kernel, apply.Value) {
	t.Helper()
	ctx := context.Background()
	k := apply.NewKernel("/proc", sysctlFile, zaptest.NewLogger(t))
	host, err := k.Read(ctx, apply.KnobDirtyThresholds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := k.Restore(ctx, apply.KnobDirtyThresholds, host); err != nil {
			t.Errorf("restore the host's vm.dirty_* (%s) BY HAND: %v", host.Value, err)
		}
	})
	if _, err := k.Set(ctx, apply.KnobDirtyThresholds, "67108864/536870912"); err != nil {
		t.Fatal(err)
	}
	low, err := k.Read(ctx, apply.KnobDirtyThresholds)
	if err != nil {
		t.Fatal(err)
	}
	return k, low
}
