package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestApplyAndRollbackCLI: `apply` shows the diff and refuses the durability trades (never-auto)
// even with --yes, `apply --yes` applies the rest once, journaled, and `rollback --all` puts
// every setting back where it came from: lab.conf's back to lab.conf (not postgresql.auto.conf),
// an operator's ALTER SYSTEM value back into postgresql.auto.conf, a kernel knob and its ratio
// twin as they were.
func TestApplyAndRollbackCLI(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{
		"bgwriter_flush_after": "0", "fsync": "off", "synchronous_commit": "off",
	}})
	ctx := context.Background()
	if err := c.Exec(ctx, "ALTER SYSTEM SET checkpoint_flush_after = 0"); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	dir := t.TempDir()
	journal := filepath.Join(dir, "apply.journal")
	sysctlFile := sysctlFileIn(t, dir)
	common := []string{"--dsn", c.DSN(), "--window", "2s", "--interval", "1s", "--apply.journal", journal, "--apply.sysctl-file", sysctlFile}

	out, stderr, code := runCLI(t, append([]string{"apply", "--dry-run"}, common...)...)
	if code != 0 {
		t.Fatalf("apply --dry-run exited %d: %s", code, stderr)
	}
	t.Logf("apply --dry-run:\n%s", out)
	for _, want := range []string{
		"checkpoint_flush_after:", "0 -> 256kB", "bgwriter_flush_after:", "0 -> 512kB", "flush-after-disabled",
		"Not applied", "fsync:", "fsync is never applied automatically", "synchronous_commit:", "Nothing changed: run with --yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("apply --dry-run output lacks %q", want)
		}
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("apply --dry-run wrote the journal")
	}
	if v, _, _ := lab.ReadSetting(t, c, "bgwriter_flush_after"); v != "0" {
		t.Errorf("apply --dry-run changed bgwriter_flush_after to %s", v)
	}

	out, stderr, code = runCLI(t, append([]string{"apply", "--yes"}, common...)...)
	if code != 0 {
		t.Fatalf("apply --yes exited %d: %s\n%s", code, stderr, out)
	}
	t.Logf("apply --yes:\n%s", out)
	if !strings.Contains(out, "Roll back with: pgwal-advisor rollback --journal "+journal) {
		t.Errorf("apply --yes does not say how to roll back:\n%s", out)
	}
	for name, want := range map[string]string{"checkpoint_flush_after": "256kB", "bgwriter_flush_after": "512kB", "fsync": "off", "synchronous_commit": "off"} {
		if v, _, _ := lab.ReadSetting(t, c, name); v != want {
			t.Errorf("after apply --yes %s = %s, want %s", name, v, want)
		}
	}
	recs, _, err := apply.NewJournal(journal).Read()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range recs {
		kinds = append(kinds, fmt.Sprintf("%d:%s%s:%s", r.ID, r.Kind, r.Outcome, r.Setting))
	}
	if len(recs) != 4 || recs[0].Kind != apply.KindIntent || recs[1].Outcome != apply.Applied || recs[0].Origin != apply.OriginApply {
		t.Errorf("journal = %v, want two intents each followed by applied", kinds)
	}
	for _, r := range recs {
		if r.Setting == "fsync" || r.Setting == "synchronous_commit" {
			t.Errorf("the journal has a change of %s: %+v", r.Setting, r)
		}
	}

	// A kernel change in the same journal, as the daemon makes one, on a testdata procfs tree.
	procfs := filepath.Join(dir, "proc")
	if err := os.MkdirAll(filepath.Join(procfs, "sys", "vm"), 0o755); err != nil {
		t.Fatal(err)
	}
	for knob, v := range map[string]string{"dirty_background_bytes": "0", "dirty_background_ratio": "10", "dirty_bytes": "0", "dirty_ratio": "20"} {
		os.WriteFile(filepath.Join(procfs, "sys", "vm", knob), []byte(v+"\n"), 0o644)
	}
	k := apply.NewKernel(procfs, sysctlFile, zaptest.NewLogger(t))
	old, err := k.Read(ctx, apply.KnobDirtyBackgroundBytes)
	if err != nil {
		t.Fatal(err)
	}
	j := apply.NewJournal(journal)
	in, err := j.Append(apply.Record{Time: time.Now(), Kind: apply.KindIntent, Origin: apply.OriginDaemon, Setting: apply.KnobDirtyBackgroundBytes,
		Action: rules.ActionSysctl, Old: &old, New: "67108864"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := k.Set(ctx, apply.KnobDirtyBackgroundBytes, "67108864")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(apply.Record{ID: in[0].ID, Time: time.Now(), Kind: apply.KindOutcome, Outcome: apply.Applied, Setting: apply.KnobDirtyBackgroundBytes, Live: &live}); err != nil {
		t.Fatal(err)
	}

	// The guard takes a recorded sysctl.d file only beside the configured one.
	out, stderr, code = runCLI(t, "rollback", "--journal", journal, "--all", "--dsn", c.DSN(), "--path.procfs", procfs, "--apply.sysctl-file", sysctlFile)
	if code != 0 {
		t.Fatalf("rollback --all exited %d: %s\n%s", code, stderr, out)
	}
	t.Logf("rollback --all:\n%s", out)
	if v, src, file := lab.ReadSetting(t, c, "bgwriter_flush_after"); v != "0" || src != "configuration file" || !strings.HasSuffix(file, "lab.conf") {
		t.Errorf("after rollback bgwriter_flush_after = %s from %s %s, want 0 from lab.conf", v, src, file)
	}
	if v, _, file := lab.ReadSetting(t, c, "checkpoint_flush_after"); v != "0" || !strings.HasSuffix(file, "postgresql.auto.conf") {
		t.Errorf("after rollback checkpoint_flush_after = %s from %s, want the operator's 0 in postgresql.auto.conf", v, file)
	}
	for knob, want := range map[string]string{"dirty_background_bytes": "0", "dirty_background_ratio": "10"} {
		if b, _ := os.ReadFile(filepath.Join(procfs, "sys", "vm", knob)); strings.TrimSpace(string(b)) != want {
			t.Errorf("after rollback vm.%s = %s, want %s", knob, b, want)
		}
	}
	if _, err := os.Stat(sysctlFile); !os.IsNotExist(err) {
		t.Errorf("the sysctl.d file is still there after the rollback")
	}
	recs, _, _ = j.Read()
	rolled := 0
	for _, r := range recs {
		if r.Outcome == apply.RolledBack && r.Origin == apply.OriginRollback {
			rolled++
		}
	}
	if rolled != 3 {
		t.Errorf("%d rolled_back records, want 3", rolled)
	}

	out, _, code = runCLI(t, "rollback", "--journal", journal, "--all", "--dsn", c.DSN(), "--path.procfs", procfs)
	if code != 0 || !strings.Contains(out, "Nothing to roll back") {
		t.Errorf("a second rollback --all: exit %d, %q", code, out)
	}
	if _, stderr, code := runCLI(t, "rollback", "--journal", journal, "--id", "1", "--dsn", c.DSN()); code != cli.ExitFailure || !strings.Contains(stderr, "not in effect") {
		t.Errorf("rollback --id 1 of a rolled-back change: exit %d, %s", code, stderr)
	}
	// A --journal that does not exist is a mistyped path, not an empty journal: exit 3.
	missing := filepath.Join(t.TempDir(), "no-such.journal")
	out, stderr, code = runCLI(t, "rollback", "--journal", missing, "--all", "--dsn", c.DSN())
	if code != cli.ExitFailure || strings.Contains(out, "Nothing to roll back") || !strings.Contains(stderr, "does not exist") {
		t.Errorf("rollback of a missing --journal: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// An unreadable journal (a directory here): the error alone, and exit 3.
	out, stderr, code = runCLI(t, "rollback", "--journal", t.TempDir(), "--all", "--dsn", c.DSN())
	if code != cli.ExitFailure || strings.Contains(out, "Nothing to roll back") || !strings.Contains(stderr, "journal") {
		t.Errorf("rollback of an unreadable journal: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestApplyUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"apply", "--yes", "--dry-run"},
		{"apply", "--apply.settings", "fsync"},
		{"apply", "--apply.settings", "shared_buffers"},
		{"apply", "--window", "1s", "--interval", "5s"},
		{"rollback", "--journal", "x"},
		{"rollback", "--journal", "x", "--all", "--id", "2"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != cli.ExitBadUsage || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d and a message", args, code, stderr, cli.ExitBadUsage)
		}
	}
}

// sysctlFileIn makes dir/sysctl.d and returns the advisor's sysctl.d file there: the commands
// take --apply.sysctl-file only directly in a sysctl.d directory (apply.CheckSysctlFile).
func sysctlFileIn(t *testing.T, dir string) string {
	t.Helper()
	d := filepath.Join(dir, "sysctl.d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(d, "90-pgwal-advisor.conf")
}
