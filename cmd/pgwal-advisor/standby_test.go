package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestApplyRefusesStandby: on a real standby (pg_basebackup -R of a throwaway primary) whose
// settings the rules would change, `apply --yes` exits 3 saying it is a standby and changes
// nothing: no journal, no ALTER SYSTEM into the standby's postgresql.auto.conf. The actuator every
// apply path goes through (apply, the daemon, rollback) refuses it too.
func TestApplyRefusesStandby(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby")
	}
	primary := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"bgwriter_flush_after": "0"}})
	standby := lab.NewTestStandby(t, primary)
	dir := t.TempDir()
	journal := filepath.Join(dir, "apply.journal")
	out, stderr, code := runCLI(t, "apply", "--yes", "--dsn", standby.DSN(), "--window", "2s", "--interval", "1s",
		"--apply.journal", journal, "--apply.sysctl-file", sysctlFileIn(t, dir))
	if code != 3 || !strings.Contains(stderr, "standby (in recovery)") {
		t.Errorf("apply --yes on a standby: exit %d, stderr %q; want 3 naming the standby", code, stderr)
	}
	if strings.Contains(out, "applied") && !strings.Contains(out, "Nothing changed") {
		t.Errorf("apply --yes on a standby reports changes:\n%s", out)
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("apply on a standby wrote the journal (%v)", err)
	}
	if v, _, _ := lab.ReadSetting(t, standby, "bgwriter_flush_after"); v != "0" {
		t.Errorf("the standby's bgwriter_flush_after is %s, want it untouched (0)", v)
	}
	if b, _ := os.ReadFile(filepath.Join(standby.DataDir(), "postgresql.auto.conf")); strings.Contains(string(b), "bgwriter_flush_after") {
		t.Errorf("the standby's postgresql.auto.conf was written:\n%s", b)
	}

	ctx := context.Background()
	pg := apply.NewPostgres(standby.DSN(), apply.PostgresOptions{})
	defer pg.Close(ctx)
	if _, err := pg.Set(ctx, "bgwriter_flush_after", "512kB"); !errors.Is(err, apply.ErrStandby) {
		t.Errorf("Set on a standby: %v, want ErrStandby", err)
	}
	if _, err := pg.Restore(ctx, "bgwriter_flush_after", apply.Value{Value: "0"}); !errors.Is(err, apply.ErrStandby) {
		t.Errorf("Restore on a standby: %v, want ErrStandby", err)
	}
}

// TestApplyUnreachableExits3: apply that could not read PostgreSQL says so and exits 3, as check
// and collect do, instead of "Nothing changed." and 0.
func TestApplyUnreachableExits3(t *testing.T) {
	dir := t.TempDir()
	out, stderr, code := runCLI(t, "apply", "--dsn", "host=127.0.0.1 port=1 user=nobody connect_timeout=2", "--window", "1s", "--interval", "1s",
		"--apply.journal", filepath.Join(dir, "apply.journal"))
	if code != 3 || !strings.Contains(stderr, "could not read PostgreSQL") {
		t.Errorf("apply against a closed port: exit %d, stderr %q; want 3 and the reason", code, stderr)
	}
	if strings.Contains(out, "Nothing changed") {
		t.Errorf("apply against a closed port printed the plan as if the server were read:\n%s", out)
	}
}

// TestWarnsPasswordInDSN: a password in --dsn (keyword or URL form) draws one warning naming the
// alternatives, without the password; a DSN without one draws none.
func TestWarnsPasswordInDSN(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		warn bool
	}{
		{"host=127.0.0.1 port=1 user=a password=sekrit", true},
		{"postgres://a:sekrit@127.0.0.1:1/x", true},
		{"postgres://a@127.0.0.1:1/x?password=sekrit", true},
		{"host=127.0.0.1 port=1 user=a", false},
	} {
		_, stderr, _ := runCLI(t, "collect", "--dsn", tc.dsn)
		got := strings.Count(stderr, "holds a password")
		if tc.warn && (got != 1 || !strings.Contains(stderr, "PGPASSFILE")) || !tc.warn && got != 0 {
			t.Errorf("--dsn %q: %d warnings in %q, want %v", tc.dsn, got, stderr, tc.warn)
		}
		if strings.Contains(stderr, "sekrit") {
			t.Errorf("--dsn %q: the password is in stderr: %q", tc.dsn, stderr)
		}
	}
}
