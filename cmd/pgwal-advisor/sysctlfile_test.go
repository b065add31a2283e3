package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

// TestCommandsRefuseForeignSysctlFile (issue 33, row 4): run --apply on, apply --yes and rollback
// refuse a --apply.sysctl-file that is not the advisor's own before they touch anything, with
// exit 64 and what to give instead; the file is left exactly as it was. On b4517f4
// `run --apply=on --apply.sysctl-file /etc/shadow` started.
func TestCommandsRefuseForeignSysctlFile(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(filepath.Dir(sysctlFileIn(t, dir)), "99-local.conf")
	const content = "vm.swappiness = 10\n"
	if err := os.WriteFile(foreign, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(dir, "apply.journal")
	for _, path := range []string{"/etc/shadow", "sysctl.d/90-pgwal-advisor.conf", foreign} {
		for _, args := range [][]string{
			{"run", "--apply", "on", "--apply.journal", journal, "--dsn", closedPortDSN(t)},
			{"apply", "--yes", "--apply.journal", journal, "--dsn", closedPortDSN(t)},
			{"rollback", "--all", "--journal", journal, "--dsn", closedPortDSN(t)},
		} {
			_, stderr, code := runCLI(t, append(args, "--apply.sysctl-file", path)...)
			if code != cli.ExitBadUsage || !strings.Contains(stderr, "--apply.sysctl-file") || !strings.Contains(stderr, "90-pgwal-advisor.conf") {
				t.Errorf("%s --apply.sysctl-file %s: exit %d, stderr %q; want %d naming the flag and a file of its own", args[0], path, code, stderr, cli.ExitBadUsage)
			}
		}
	}
	b, err := os.ReadFile(foreign)
	st, _ := os.Stat(foreign)
	if err != nil || string(b) != content || st.Mode().Perm() != 0o640 {
		t.Errorf("the foreign file changed: %q, %v (%v)", b, st.Mode(), err)
	}
}
