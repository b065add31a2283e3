package main

import (
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestApplyAllowAlterSystemOff: on PostgreSQL 17 with allow_alter_system = off, apply --yes
// exits 3, names the setting that refuses it and what to do, and changes nothing. The daemon's
// side (no change started, the settings advice) is TestServerRefusesAlterSystem (advisor/apply).
func TestApplyAllowAlterSystemOff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL 17 cluster")
	}
	c := lab.NewTestCluster(t, lab.ClusterOptions{BinDir: lab.RequireVersion(t, 17),
		Settings: map[string]string{"bgwriter_flush_after": "0", "allow_alter_system": "off"}})
	dir := t.TempDir()
	out, stderr, code := runCLI(t, "apply", "--yes", "--dsn", c.DSN(), "--window", "2s", "--interval", "1s",
		"--apply.journal", dir+"/apply.journal", "--apply.sysctl-file", sysctlFileIn(t, dir))
	if code != 3 || !strings.Contains(out+stderr, "allow_alter_system is off") {
		t.Errorf("apply --yes with allow_alter_system off: exit %d, want 3 and the reason\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if v, _, _ := lab.ReadSetting(t, c, "bgwriter_flush_after"); v != "0" {
		t.Errorf("bgwriter_flush_after = %s, want 0", v)
	}
}
