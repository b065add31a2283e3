package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestApplyUnderPatroni (issue 31): on a real Patroni 3 member (Debian's patroni and etcd, seed
// 001's settings in the DCS), collect names Patroni and its REST API without a flag, and apply
// --yes does not ALTER SYSTEM: exit 3, the patronictl command for the setting, postgresql.auto.conf
// unchanged and the member still running the DCS's value. On b4517f4 apply wrote a node-local
// override into postgresql.auto.conf that shadowed the cluster's configuration.
func TestApplyUnderPatroni(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	m := lab.NewTestPatroni(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync", "bgwriter_flush_after": "0"})
	out, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", m.DSN())
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("collect exited %d (%v): %s", code, err, stderr)
	}
	if got := jsonPath(t, doc, ".postgres.ha_manager.name"); got != "patroni" {
		t.Errorf(".postgres.ha_manager.name = %v, want patroni", got)
	}
	if got := jsonPath(t, doc, ".postgres.ha_manager.rest_url"); got != m.RESTURL {
		t.Errorf(".postgres.ha_manager.rest_url = %v, want %s", got, m.RESTURL)
	}
	auto := filepath.Join(m.DataDir, "postgresql.auto.conf")
	before, err := os.ReadFile(auto)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, stderr, code = runCLI(t, "apply", "--yes", "--dsn", m.DSN(), "--window", "2s", "--interval", "1s",
		"--apply.journal", filepath.Join(dir, "apply.journal"), "--apply.settings", "bgwriter_flush_after,wal_sync_method,wal_buffers",
		"--apply.sysctl-file", sysctlFileIn(t, dir))
	if code != 3 || !strings.Contains(stderr+out, "patroni runs this server") || !strings.Contains(stderr+out, "patronictl edit-config --pg bgwriter_flush_after=") {
		t.Errorf("apply --yes under Patroni: exit %d, want 3 with the patronictl command:\n%s\n%s", code, out, stderr)
	}
	if after, _ := os.ReadFile(auto); string(after) != string(before) {
		t.Errorf("postgresql.auto.conf was written under Patroni:\n%s", after)
	}
	out, _, _ = runCLI(t, "collect", "--format", "json", "--dsn", m.DSN())
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if got := jsonPath(t, doc, ".postgres.settings.bgwriter_flush_after.value"); got != "0" {
		t.Errorf("bgwriter_flush_after = %v after apply under Patroni, want the DCS's 0", got)
	}

	// An operator's ALTER SYSTEM of a parameter the DCS sets: the daemon's ha-override finding
	// names it with both values, from the REST API's GET /config.
	conn, err := pgx.Connect(context.Background(), m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "ALTER SYSTEM SET bgwriter_flush_after = '512kB'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(context.Background(), "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	d := startRun(t, "--dsn", m.DSN(), "--interval", "1s")
	waitFor(t, 30*time.Second, "the ha-override finding", func() bool {
		_, body := d.get(t, "/api/v1/findings")
		return strings.Contains(body, `"ha-override"`) && strings.Contains(body, "bgwriter_flush_after = 512kB (the cluster's: 0)")
	})
	d.stop()
}
