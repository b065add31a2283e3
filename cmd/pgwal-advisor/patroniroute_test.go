package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// dcsParameter reads one parameter of the cluster's configuration (GET /config).
func dcsParameter(t *testing.T, m lab.PatroniMember, name string) (string, bool) {
	t.Helper()
	resp, err := http.Get(m.RESTURL + "/config")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct {
		PostgreSQL struct {
			Parameters map[string]any `json:"parameters"`
		} `json:"postgresql"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	v, ok := cfg.PostgreSQL.Parameters[name]
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	return s, true
}

// TestApplyThroughPatroni (issue 31): with --apply.patroni-url, apply --yes changes a setting in
// Patroni's configuration of the cluster (PATCH /config), the member runs it, postgresql.auto.conf
// is untouched, and the journal records the route and the DCS's old value; rollback puts the DCS
// back. Patroni's REST API refusing the credentials (401) or not answering is a clear error, exit
// 3, and no ALTER SYSTEM fallback.
func TestApplyThroughPatroni(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	m := lab.NewTestPatroni(t, map[string]string{"bgwriter_flush_after": "0"})
	dir := t.TempDir()
	pw := filepath.Join(dir, "patroni-password")
	if err := os.WriteFile(pw, []byte("restpass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(bad, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(dir, "apply.journal")
	auto := filepath.Join(m.DataDir, "postgresql.auto.conf")
	before, err := os.ReadFile(auto)
	if err != nil {
		t.Fatal(err)
	}
	route := func(url, password string) []string {
		return []string{"--dsn", m.DSN(), "--apply.journal", journal, "--apply.sysctl-file", sysctlFileIn(t, dir),
			"--apply.patroni-url", url, "--apply.patroni-user", "patroni", "--apply.patroni-password-file", password}
	}
	applyArgs := []string{"apply", "--yes", "--window", "2s", "--interval", "1s", "--apply.settings", "bgwriter_flush_after"}

	for _, tc := range []struct{ name, url, password, want string }{
		{"wrong password", m.RESTURL, bad, "refused the credentials"},
		{"REST API down", "http://127.0.0.1:1", pw, "is Patroni running"},
	} {
		out, stderr, code := runCLI(t, append(applyArgs, route(tc.url, tc.password)...)...)
		if code != 3 || !strings.Contains(stderr+out, tc.want) {
			t.Errorf("apply --yes, %s: exit %d, want 3 saying %q:\n%s\n%s", tc.name, code, tc.want, out, stderr)
		}
		if v, _ := dcsParameter(t, m, "bgwriter_flush_after"); v != "0" {
			t.Errorf("%s: the DCS's bgwriter_flush_after is %q, want 0", tc.name, v)
		}
	}

	out, stderr, code := runCLI(t, append(applyArgs, route(m.RESTURL, pw)...)...)
	if code != 0 {
		t.Fatalf("apply --yes through Patroni exited %d:\n%s\n%s", code, out, stderr)
	}
	if v, _ := dcsParameter(t, m, "bgwriter_flush_after"); v != "512kB" {
		t.Errorf("after apply the DCS's bgwriter_flush_after is %q, want 512kB", v)
	}
	if v := settingOf(t, m.DSN(), "bgwriter_flush_after"); v != "512kB" {
		t.Errorf("after apply the member runs bgwriter_flush_after = %s, want 512kB", v)
	}
	if after, _ := os.ReadFile(auto); string(after) != string(before) {
		t.Errorf("postgresql.auto.conf was written:\n%s", after)
	}
	if j, _ := os.ReadFile(journal); !strings.Contains(string(j), `"route":"patroni"`) || !strings.Contains(string(j), `"dcs":"0"`) {
		t.Errorf("the journal does not record the route and the DCS's old value:\n%s", j)
	}

	out, stderr, code = runCLI(t, "rollback", "--all", "--journal", journal, "--dsn", m.DSN(), "--apply.sysctl-file", sysctlFileIn(t, dir),
		"--apply.patroni-url", m.RESTURL, "--apply.patroni-user", "patroni", "--apply.patroni-password-file", pw)
	if code != 0 {
		t.Fatalf("rollback --all through Patroni exited %d:\n%s\n%s", code, out, stderr)
	}
	if v, _ := dcsParameter(t, m, "bgwriter_flush_after"); v != "0" {
		t.Errorf("after rollback the DCS's bgwriter_flush_after is %q, want 0", v)
	}
	if v := settingOf(t, m.DSN(), "bgwriter_flush_after"); v != "0" {
		t.Errorf("after rollback the member runs bgwriter_flush_after = %s, want 0", v)
	}
	if after, _ := os.ReadFile(auto); string(after) != string(before) {
		t.Errorf("postgresql.auto.conf was written by the rollback:\n%s", after)
	}
}

// settingOf reads a setting's running value over a connection of its own.
func settingOf(t *testing.T, dsn, name string) string {
	t.Helper()
	out, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", dsn)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("collect exited %d (%v): %s", code, err, stderr)
	}
	v, _ := jsonPath(t, doc, ".postgres.settings."+name+".value").(string)
	return v
}

// TestPatroniPairSwitchover (issue 31): on a real Patroni pair with seed 001's settings in the
// DCS, the Patroni route changes wal_sync_method (reload: the replica runs it too) and
// wal_buffers (Patroni restarts the replica, then the leader), a switchover keeps both, and
// `rollback --all` from the other member - the new leader, whose data directory differs - puts
// the DCS back on both; postgresql.auto.conf is untouched throughout.
func TestPatroniPairSwitchover(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	ms := lab.NewTestPatroniCluster(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"}, 2)
	m1, m2 := ms[0], ms[1]
	ctx := context.Background()
	autoBefore := map[string]string{}
	for _, m := range ms {
		b, _ := os.ReadFile(filepath.Join(m.DataDir, "postgresql.auto.conf"))
		autoBefore[m.Name] = string(b)
	}
	pg := apply.NewPostgres(m1.DSN(), apply.PostgresOptions{})
	defer pg.Close(ctx)
	route := apply.NewPatroni(apply.PatroniOptions{URL: m1.RESTURL, Username: "patroni", Password: "restpass"}, pg)
	dir := t.TempDir()
	journal := filepath.Join(dir, "apply.journal")
	j := apply.NewJournal(journal)
	change := func(setting, value string) {
		t.Helper()
		old, err := route.Read(ctx, setting)
		if err != nil {
			t.Fatal(err)
		}
		in, err := j.Append(apply.Record{Time: time.Now(), Kind: apply.KindIntent, Origin: apply.OriginApply, Setting: setting, Old: &old, New: value})
		if err != nil {
			t.Fatal(err)
		}
		live, err := route.Set(ctx, setting, value)
		if err != nil {
			t.Fatal(err)
		}
		outcome := apply.Applied
		if live.PendingRestart {
			outcome = apply.PendingRestart
		}
		if _, err := j.Append(apply.Record{ID: in[0].ID, Time: time.Now(), Kind: apply.KindOutcome, Origin: apply.OriginApply, Outcome: outcome, Setting: setting, New: value, Live: &live}); err != nil {
			t.Fatal(err)
		}
	}
	insert := seed001Insert(t, m1)
	change("wal_sync_method", "fdatasync")
	change("wal_buffers", "16MB")
	if err := route.RestartPending(ctx); err != nil {
		t.Fatal(err)
	}
	runs := func(what string, want map[string]string) {
		t.Helper()
		for _, m := range ms {
			waitFor(t, 30*time.Second, fmt.Sprintf("%s: %s to run %v", what, m.Name, want), func() bool {
				for k, v := range want {
					if settingOf(t, m.DSN(), k) != v {
						return false
					}
				}
				return true
			})
		}
	}
	runs("after the change", map[string]string{"wal_sync_method": "fdatasync", "wal_buffers": "16MB"})
	after := seed001Insert(t, m1)

	switchover(t, m1, m2)
	runs("after the switchover", map[string]string{"wal_sync_method": "fdatasync", "wal_buffers": "16MB"})
	t.Logf("seed 001's insert of 1M rows on the leader (this machine's disk, 2 runs each): 64kB/open_datasync %v; 16MB/fdatasync %v; on the new leader after the switchover %v",
		insert, after, seed001Insert(t, m2))

	pw := filepath.Join(dir, "patroni-password")
	if err := os.WriteFile(pw, []byte("restpass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := runCLI(t, "rollback", "--all", "--journal", journal, "--dsn", m2.DSN(), "--apply.sysctl-file", sysctlFileIn(t, dir),
		"--apply.patroni-url", m2.RESTURL, "--apply.patroni-user", "patroni", "--apply.patroni-password-file", pw)
	if code != 0 {
		t.Fatalf("rollback --all from the new leader exited %d:\n%s\n%s", code, out, stderr)
	}
	if err := apply.NewPatroni(apply.PatroniOptions{URL: m2.RESTURL, Username: "patroni", Password: "restpass"}, pg).RestartPending(ctx); err != nil {
		t.Fatal(err)
	}
	runs("after the rollback", map[string]string{"wal_sync_method": "open_datasync", "wal_buffers": "64kB"})
	for _, m := range ms {
		if b, _ := os.ReadFile(filepath.Join(m.DataDir, "postgresql.auto.conf")); string(b) != autoBefore[m.Name] {
			t.Errorf("%s's postgresql.auto.conf was written:\n%s", m.Name, b)
		}
	}
}

// seed001Insert times seed 001's statement, a single INSERT of a million integers into a table
// with a primary key, twice on the member, and returns the durations (reported, not judged).
//
// It runs only with PGWAL_PATRONI_INSERT=1 (docs/benchmarks.md, "Seed 001 under Patroni"): the
// figures are for a person to read, and the suite need not spend half a minute on them.
func seed001Insert(t *testing.T, m lab.PatroniMember) []time.Duration {
	t.Helper()
	if os.Getenv("PGWAL_PATRONI_INSERT") != "1" {
		return nil
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var out []time.Duration
	for range 2 {
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS seed001; CREATE TABLE seed001 (id integer PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := conn.Exec(ctx, "INSERT INTO seed001 (id) SELECT generate_series(1, 1000000)"); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start).Round(10*time.Millisecond))
	}
	if _, err := conn.Exec(ctx, "DROP TABLE seed001"); err != nil {
		t.Fatal(err)
	}
	return out
}

// switchover asks Patroni to make candidate the leader in leader's place (POST /switchover) and
// waits until both members say so. Patroni answers 503 while the candidate is not yet a healthy
// replica (it reconnects to the leader after the leader's restart, say): asked again for a minute.
func switchover(t *testing.T, leader, candidate lab.PatroniMember) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		body := strings.NewReader(fmt.Sprintf(`{"leader":%q,"candidate":%q}`, leader.Name, candidate.Name))
		req, _ := http.NewRequest(http.MethodPost, leader.RESTURL+"/switchover", body)
		req.SetBasicAuth("patroni", "restpass")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("POST /switchover: %s: %s", resp.Status, msg)
		}
		time.Sleep(2 * time.Second)
	}
	lab.WaitPatroniRole(t, candidate, true)
	lab.WaitPatroniRole(t, leader, false)
}
