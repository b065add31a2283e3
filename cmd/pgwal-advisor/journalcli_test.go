package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
)

// TestRollbackRefusesLinkedJournal: `rollback --journal` naming a symbolic link is refused with
// a line that says so (exit 3), not read through the link, and not taken for a missing journal.
func TestRollbackRefusesLinkedJournal(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "elsewhere.journal")
	var b []byte
	for _, r := range []apply.Record{
		{ID: 1, Time: time.Now(), Kind: apply.KindIntent, Setting: "checkpoint_completion_target", New: "0.7", Old: &apply.Value{Value: "0.9"}},
		{ID: 1, Time: time.Now(), Kind: apply.KindOutcome, Outcome: apply.Applied, Setting: "checkpoint_completion_target", New: "0.7"},
	} {
		line, _ := json.Marshal(r)
		b = append(append(b, line...), '\n')
	}
	if err := os.WriteFile(real, b, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "apply.journal")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.journal")
	if err := os.Symlink(filepath.Join(dir, "nothing"), dangling); err != nil {
		t.Fatal(err)
	}
	for _, j := range []string{link, dangling} {
		out, stderr, code := runCLI(t, "rollback", "--journal", j, "--all", "--dsn", closedPortDSN(t))
		if code != 3 || !strings.Contains(stderr+out, "symbolic link") || strings.Contains(stderr+out, "Nothing to roll back") {
			t.Errorf("rollback --journal %s (a link): exit %d\n%s%s\nwant exit 3 and a refusal naming the link", filepath.Base(j), code, out, stderr)
		}
	}
}

// TestRollbackRefusesProcJournal: `rollback --journal /proc/self/mem` (a regular file of the
// caller's own that reads as nothing) is refused, exit 3, instead of reading as an empty journal
// and exiting 0 (issue 33).
func TestRollbackRefusesProcJournal(t *testing.T) {
	out, stderr, code := runCLI(t, "rollback", "--journal", "/proc/self/mem", "--all", "--dsn", closedPortDSN(t))
	if code != 3 || !strings.Contains(stderr, "pseudo file system") || strings.Contains(stderr+out, "Nothing to roll back") {
		t.Errorf("rollback --journal /proc/self/mem: exit %d, stdout %q, stderr %q; want 3 and a refusal", code, out, stderr)
	}
}
