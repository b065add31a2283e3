package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestApplyUnderHAManager (issue 31): a server that CloudNativePG runs (its settings from
// custom.conf) or Stolon runs (postgresql.auto.conf linked to /dev/null) is named by collect, and
// apply --yes refuses ALTER SYSTEM there, exit 3, with the manager's own command for the setting;
// postgresql.auto.conf is not written.
func TestApplyUnderHAManager(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	for _, tc := range []struct {
		manager, command string
		makeIt           func(t *testing.T, c *lab.Cluster)
	}{
		{"cloudnativepg", `kubectl patch cluster CLUSTER --type merge -p '{"spec":{"postgresql":{"parameters":{"bgwriter_flush_after":"VALUE"}}}}'`, func(t *testing.T, c *lab.Cluster) {
			writeAs(t, filepath.Join(c.DataDir(), "custom.conf"), "bgwriter_flush_after = 0\n")
			appendTo(t, filepath.Join(c.DataDir(), "postgresql.conf"), "include 'custom.conf'\n")
		}},
		{"stolon", `stolonctl update --patch '{"pgParameters":{"bgwriter_flush_after":"VALUE"}}'`, func(t *testing.T, c *lab.Cluster) {
			auto := filepath.Join(c.DataDir(), "postgresql.auto.conf")
			if err := os.Remove(auto); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/null", auto); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.manager, func(t *testing.T) {
			c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"bgwriter_flush_after": "0"}})
			tc.makeIt(t, c)
			if err := c.Reload(context.Background()); err != nil {
				t.Fatal(err)
			}
			out, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", c.DSN())
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
				t.Fatalf("collect exited %d (%v): %s", code, err, stderr)
			}
			if got := jsonPath(t, doc, ".postgres.ha_manager.name"); got != tc.manager {
				t.Errorf(".postgres.ha_manager.name = %v, want %s", got, tc.manager)
			}
			before, _ := os.ReadFile(filepath.Join(c.DataDir(), "postgresql.auto.conf"))
			dir := t.TempDir()
			out, stderr, code = runCLI(t, "apply", "--yes", "--dsn", c.DSN(), "--window", "2s", "--interval", "1s",
				"--apply.journal", filepath.Join(dir, "apply.journal"), "--apply.settings", "bgwriter_flush_after", "--apply.sysctl-file", sysctlFileIn(t, dir))
			if code != 3 || !strings.Contains(stderr+out, tc.manager+" runs this server") || !strings.Contains(stderr+out, tc.command) {
				t.Errorf("apply --yes under %s: exit %d, want 3 with the manager's command %s:\n%s\n%s", tc.manager, code, tc.command, out, stderr)
			}
			if after, _ := os.ReadFile(filepath.Join(c.DataDir(), "postgresql.auto.conf")); string(after) != string(before) {
				t.Errorf("postgresql.auto.conf was written under %s:\n%s", tc.manager, after)
			}
			if v, _, _ := lab.ReadSetting(t, c, "bgwriter_flush_after"); v != "0" {
				t.Errorf("bgwriter_flush_after = %s under %s, want it untouched (0)", v, tc.manager)
			}
		})
	}
}

// writeAs writes a file owned as its directory is (the server's user), as the server's own files are.
func writeAs(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if err := os.Chown(path, int(sys.Uid), int(sys.Gid)); err != nil {
			t.Fatal(err)
		}
	}
}

func appendTo(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}
