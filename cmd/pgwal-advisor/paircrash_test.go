package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// hostPair returns the host's four vm.dirty_* files as "bg_bytes bg_ratio bytes ratio".
func hostPair(t *testing.T) string {
	t.Helper()
	var got []string
	for _, n := range []string{"dirty_background_bytes", "dirty_background_ratio", "dirty_bytes", "dirty_ratio"} {
		b, err := os.ReadFile("/proc/sys/vm/" + n)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.TrimSpace(string(b)))
	}
	return strings.Join(got, " ")
}

func writeVM(t *testing.T, knob, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/vm/"+knob, []byte(value), 0); err != nil {
		t.Fatal(err)
	}
}

// TestPairCrashRecoveryRealProc (issue 33, row 5): on the host's /proc, the states a SIGKILL
// leaves in a vm.dirty_thresholds change from tuned's 64MB/512MB to the kernel's 10%/20% - after
// the first of the two writes (64MB/20%), and after both but before the sysctl.d file's rename -
// are settled as the advisor's own: the daemon's crash recovery and `rollback --all` put the old
// pair back from the mix, and recovery finishes the file when both writes were made. On b4517f4
// the mix was journaled abandoned ("someone else changed it") and the second state applied with
// nothing persisted for the next boot.
func TestPairCrashRecoveryRealProc(t *testing.T) {
	requireWritableProc(t)
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	const lowered = "67108864 0 536870912 0"
	for _, tc := range []struct {
		name  string
		crash func(t *testing.T) // the writes made before the kill, after the intent
		// byDaemon: the daemon's crash recovery settles it; otherwise rollback --all.
		byDaemon bool
	}{
		{"killed after the first write, rollback", func(t *testing.T) { writeVM(t, "dirty_ratio", "20") }, false},
		{"killed after the first write, the daemon", func(t *testing.T) { writeVM(t, "dirty_ratio", "20") }, true},
		{"killed before the sysctl.d rename, the daemon", func(t *testing.T) {
			writeVM(t, "dirty_ratio", "20")
			writeVM(t, "dirty_background_ratio", "10")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sysctlFile, journal := sysctlFileIn(t, dir), filepath.Join(dir, "apply.journal")
			_, low := loweredHostPair(t, sysctlFile)
			if _, err := apply.NewJournal(journal).Append(apply.Record{Time: time.Now(), Kind: apply.KindIntent, Origin: apply.OriginDaemon,
				Setting: apply.KnobDirtyThresholds, Action: rules.ActionSysctl, Old: &low, New: "10%/20%", Rule: "writeback-stalls-wal"}); err != nil {
				t.Fatal(err)
			}
			tc.crash(t)
			mid := hostPair(t)
			if !tc.byDaemon {
				out, stderr, code := runCLI(t, "rollback", "--all", "--journal", journal, "--path.procfs", "/proc", "--apply.sysctl-file", sysctlFile, "--dsn", c.DSN())
				if code != 0 || hostPair(t) != lowered {
					t.Fatalf("rollback --all from %s: exit %d, vm.dirty_* = %s, want %s\n%s\n%s", mid, code, hostPair(t), lowered, out, stderr)
				}
				return
			}
			d := startRun(t, "--dsn", c.DSN(), "--interval", "1s", "--apply", "on", "--apply.journal", journal,
				"--apply.sysctl-file", sysctlFile, "--path.procfs", "/proc", "--apply.settings", apply.KnobDirtyThresholds)
			waitFor(t, 20*time.Second, "the daemon to settle the intent", func() bool {
				b, _ := os.ReadFile(journal)
				return strings.Contains(string(b), `"kind":"outcome"`)
			})
			d.stop()
			j, _ := os.ReadFile(journal)
			if strings.Contains(string(j), `"abandoned"`) || strings.Contains(string(j), "someone else") {
				t.Errorf("recovery called the advisor's own change someone else's:\n%s", j)
			}
			f, _ := os.ReadFile(sysctlFile)
			switch {
			case strings.Contains(mid, " 0 20") && strings.HasPrefix(mid, "67108864"):
				if hostPair(t) != lowered || !strings.Contains(string(j), "stopped between its two writes") {
					t.Errorf("from the mix %s: vm.dirty_* = %s (want %s), journal:\n%s", mid, hostPair(t), lowered, j)
				}
			default:
				if hostPair(t) != "0 10 0 20" || !strings.Contains(string(f), "vm.dirty_ratio = 20") || !strings.Contains(string(f), "vm.dirty_background_ratio = 10") ||
					strings.Contains(string(f), "bytes") || !strings.Contains(string(j), "now written") {
					t.Errorf("from %s unpersisted: vm.dirty_* = %s, sysctl.d:\n%s\njournal:\n%s", mid, hostPair(t), f, j)
				}
			}
		})
	}
}
