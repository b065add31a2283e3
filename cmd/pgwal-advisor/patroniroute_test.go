package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
