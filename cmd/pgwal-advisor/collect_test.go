package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// runCLI runs the command line in-process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// jsonPath reads a dotted path from decoded JSON.
func jsonPath(t *testing.T, doc map[string]any, path string) any {
	t.Helper()
	var cur any = doc
	for _, key := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", path, cur)
		}
		if cur, ok = m[key]; !ok {
			t.Fatalf("%s: no key %q", path, key)
		}
	}
	return cur
}

func TestCollectJSONContract(t *testing.T) {
	lab.RequireServer(t)
	shm, err := os.MkdirTemp("/dev/shm", "pgwal-collect-test-")
	if err != nil {
		t.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	if err := os.Chmod(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	c := lab.NewTestCluster(t, lab.ClusterOptions{
		WALDir:   filepath.Join(shm, "wal"),
		Settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync", "fsync": "off"},
	})
	if _, err := c.BulkInsert(context.Background(), "foo", 100000); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runCLI(t, "collect", "--dsn", c.DSN(), "--format", "json")
	if code != 0 {
		t.Fatalf("collect exited %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("collect output is not JSON: %v\n%s", err, out)
	}
	checks := []struct {
		path string
		want any
	}{
		{".postgres.settings.wal_buffers.value", "64kB"},
		{".postgres.settings.wal_buffers.bytes", float64(65536)},
		{".postgres.settings.wal_sync_method.value", "open_datasync"},
		{".postgres.settings.fsync.value", "off"},
		{".postgres.wal_dir", filepath.Join(shm, "wal")},
		{".wal_storage.fs_type", "tmpfs"},
		{".wal_storage.volatile", true},
	}
	for _, tc := range checks {
		if got := jsonPath(t, doc, tc.path); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.path, got, tc.want)
		}
	}
	if v := jsonPath(t, doc, ".postgres.version_num").(float64); v < 140000 {
		t.Errorf(".postgres.version_num = %v, want >= 140000", v)
	}
	for _, p := range []string{".postgres.wal.buffers_full", ".postgres.wal.writes", ".postgres.wal.syncs"} {
		if v := jsonPath(t, doc, p).(float64); p != ".postgres.wal.syncs" && v <= 0 {
			t.Errorf("%s = %v after a bulk insert at 64kB, want > 0", p, v)
		}
	}
	for _, knob := range []string{"dirty_background_ratio", "dirty_ratio", "dirty_bytes", "dirty_expire_centisecs"} {
		if _, ok := jsonPath(t, doc, ".kernel.vm."+knob).(float64); !ok {
			t.Errorf(".kernel.vm.%s is not a number", knob)
		}
	}
	if _, ok := jsonPath(t, doc, ".kernel.meminfo.dirty_bytes").(float64); !ok {
		t.Errorf(".kernel.meminfo.dirty_bytes is not a number")
	}
	if _, ok := jsonPath(t, doc, ".wal_storage.mount_options").([]any); !ok {
		t.Errorf(".wal_storage.mount_options is not a list")
	}
	jsonPath(t, doc, ".wal_storage.rotational")
	jsonPath(t, doc, ".wal_storage.write_cache")

	// Rates between snapshots.
	out, stderr, code = runCLI(t, "collect", "--dsn", c.DSN(), "--format", "json", "--interval", "200ms", "--count", "2")
	if code != 0 {
		t.Fatalf("collect --interval exited %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("collect --count 2 printed %d lines, want 2", len(lines))
	}
	var second map[string]any
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if s := jsonPath(t, second, ".rates.seconds").(float64); s <= 0 {
		t.Errorf(".rates.seconds = %v, want > 0", s)
	}

	// The table format names each part.
	out, _, code = runCLI(t, "collect", "--dsn", c.DSN())
	if code != 0 {
		t.Errorf("collect (table) exit %d, want 0", code)
	}
	for _, want := range []string{"wal_buffers", "64kB", "Kernel", "WAL storage", "VOLATILE"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
}

func TestCollectServerDown(t *testing.T) {
	out, stderr, code := runCLI(t, "collect", "--dsn", "host=127.0.0.1 port=1 user=x password=sekrit connect_timeout=2", "--format", "json")
	// Exit 3 says collect could not do its job; the JSON of the parts it could read is still
	// printed, and stderr says why.
	if code != cli.ExitFailure {
		t.Fatalf("collect with the server down exited %d, want %d: %s", code, cli.ExitFailure, stderr)
	}
	if !strings.Contains(stderr, "could not read PostgreSQL") || !strings.Contains(stderr, "unreachable") {
		t.Errorf("stderr %q: want the reason, with the target status", stderr)
	}
	if strings.Contains(out+stderr, "sekrit") {
		t.Errorf("the password leaked into the output")
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	parts := jsonPath(t, doc, ".parts").([]any)
	var pgErr string
	for _, p := range parts {
		m := p.(map[string]any)
		if m["name"] == "postgres" {
			pgErr, _ = m["error"].(string)
		}
	}
	if pgErr == "" {
		t.Errorf("the postgres part carries no error: %v", parts)
	}
	for _, p := range parts {
		if m := p.(map[string]any); m["name"] == "postgres" && m["status"] != "unreachable" {
			t.Errorf("postgres part status %v, want unreachable", m["status"])
		}
	}
	if _, ok := doc["kernel"]; !ok {
		t.Errorf("the kernel part is missing though only PostgreSQL is down")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"collect", "--format", "yaml"},
		{"collect", "--count", "3"},
		{"collect", "--no-such-flag"},
		{"collect", "--log.level", "loud"},
		{"collect", "--query-timeout", "0s"},
		{"check", "--wait-events.interval", "1ns"},
		{"apply", "--query-timeout", "1h"},
		{"run", "--apply", "sometimes", "--web.listen-address", "127.0.0.1:0"},
		// A listen address that cannot be bound, an unknown subcommand and a stray argument are
		// usage errors, said before PostgreSQL (a closed port here) is ever asked.
		{"run", "--web.listen-address", "999.999.1.1:99999", "--dsn", "host=127.0.0.1 port=1"},
		{"run", "--web.listen-address", "127.0.0.1:-1", "--dsn", "host=127.0.0.1 port=1"},
		{"run", "--web.listen-address", "[::1", "--dsn", "host=127.0.0.1 port=1"},
		{"run", "--web.listen-address", "999.999.1.1:9817", "--dsn", "host=127.0.0.1 port=1"},
		{"no-such-command"},
		{"check", "stray", "--dsn", "host=127.0.0.1 port=1"},
		{"run", "stray", "--dsn", "host=127.0.0.1 port=1"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != cli.ExitBadUsage || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want %d and a message", args, code, stderr, cli.ExitBadUsage)
		}
		if strings.Contains(stderr, "unreachable") {
			t.Errorf("%v: a usage error warns that PostgreSQL is unreachable: %q", args, stderr)
		}
	}
}

// A window shorter than the measured rules' MinSpan is refused before any connection (the DSN
// points at a closed port, so reaching it would exit 3, not 64), and the message names the
// least window that can judge, rounded up to whole intervals.
func TestCheckRefusesShortWindow(t *testing.T) {
	tests := []struct {
		args  []string
		least string
	}{
		{[]string{"--window", "10s"}, "--window 30s or longer"},
		{[]string{"--window", "29s", "--interval", "1s"}, "--window 30s or longer"},
		{[]string{"--window", "32s", "--interval", "7s"}, "--window 35s or longer"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := append([]string{"check", "--dsn", closedPortDSN(t), "--query-timeout", "1s"}, tt.args...)
			out, stderr, code := runCLI(t, args...)
			if code != cli.ExitBadUsage {
				t.Errorf("exit %d, want %d\nstderr: %s", code, cli.ExitBadUsage, stderr)
			}
			if !strings.Contains(stderr, tt.least) || !strings.Contains(stderr, "MinSpan 30s") {
				t.Errorf("stderr %q: want the minimum (%q) and the rules' MinSpan", stderr, tt.least)
			}
			if out != "" {
				t.Errorf("stdout %q: a refused check prints no findings", out)
			}
		})
	}
}
