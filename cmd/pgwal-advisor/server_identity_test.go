package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestJournalNamesItsServer (issue 33, row 3): a change applied on cluster A and then, with
// --dsn at cluster B, `rollback --all` refuses naming both servers and leaves B's own ALTER
// SYSTEM entry in place; the daemon pointed at B leaves A's change alone (no "abandoned" record);
// back at A, rollback restores it. On b4517f4 the rollback removed B's entry and the daemon
// journaled A's change abandoned for 7 days.
func TestJournalNamesItsServer(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	settings := map[string]string{"bgwriter_flush_after": "0"}
	a := lab.NewTestCluster(t, lab.ClusterOptions{Settings: settings})
	b := lab.NewTestCluster(t, lab.ClusterOptions{Settings: settings})
	ctx := context.Background()
	if err := b.Exec(ctx, "ALTER SYSTEM SET bgwriter_flush_after = '256kB'"); err != nil {
		t.Fatal(err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	journal := filepath.Join(dir, "apply.journal")
	only := []string{"--apply.journal", journal, "--apply.settings", "bgwriter_flush_after", "--apply.sysctl-file", sysctlFileIn(t, dir)}
	out, stderr, code := runCLI(t, append([]string{"apply", "--yes", "--dsn", a.DSN(), "--window", "2s", "--interval", "1s"}, only...)...)
	if code != 0 || !strings.Contains(out, "bgwriter_flush_after") {
		t.Fatalf("apply --yes on A exited %d:\n%s\n%s", code, out, stderr)
	}
	applied, _, _ := lab.ReadSetting(t, a, "bgwriter_flush_after")
	if applied == "0" {
		t.Fatalf("apply --yes left A's bgwriter_flush_after at 0")
	}
	j, err := os.ReadFile(journal)
	if err != nil || !strings.Contains(string(j), `"system_identifier"`) || !strings.Contains(string(j), a.DataDir()) {
		t.Fatalf("the intent does not name A's system identifier and data directory (%v):\n%s", err, j)
	}

	_, stderr, code = runCLI(t, "rollback", "--all", "--journal", journal, "--dsn", b.DSN())
	if code == 0 || !strings.Contains(stderr, "was made on the server with system identifier") || !strings.Contains(stderr, b.DataDir()) || !strings.Contains(stderr, a.DataDir()) {
		t.Errorf("rollback --all against B: exit %d, want a refusal naming both servers: %s", code, stderr)
	}
	if v, src, file := lab.ReadSetting(t, b, "bgwriter_flush_after"); v != "256kB" || !strings.HasSuffix(file, "postgresql.auto.conf") {
		t.Errorf("B's own entry: bgwriter_flush_after = %s from %s %s, want its 256kB in postgresql.auto.conf", v, src, file)
	}

	d := startRun(t, append([]string{"--dsn", b.DSN(), "--interval", "1s", "--apply", "on"}, only...)...)
	waitFor(t, 20*time.Second, "the daemon to say it leaves A's change alone", func() bool {
		return strings.Contains(d.stderr.String(), "made on another server")
	})
	if _, body := d.get(t, "/metrics"); !strings.Contains(body, "pgwal_advisor_apply_changes_elsewhere 1") {
		t.Errorf("/metrics lacks pgwal_advisor_apply_changes_elsewhere 1")
	}
	d.stop()
	if j, _ := os.ReadFile(journal); strings.Contains(string(j), `"abandoned"`) {
		t.Errorf("the daemon at B journaled A's change abandoned:\n%s", j)
	}

	out, stderr, code = runCLI(t, "rollback", "--all", "--journal", journal, "--dsn", a.DSN())
	if code != 0 {
		t.Fatalf("rollback --all against A exited %d:\n%s\n%s", code, out, stderr)
	}
	if v, _, _ := lab.ReadSetting(t, a, "bgwriter_flush_after"); v != "0" {
		t.Errorf("after rollback at A, bgwriter_flush_after = %s, want 0", v)
	}
}
