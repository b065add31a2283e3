package apply

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// nobody is the other local user of these tests: it exists on every Debian system.
const nobody = 65534

// requireRoot skips a test that needs to act as another user.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to act as the user nobody")
	}
}

// asNobody runs a command as the user nobody, as the other user of the threat would.
func asNobody(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as nobody: %s %v: %v: %s", name, args, err, out)
	}
}

// secretDir is a directory only root may enter, where the journal's links point.
func secretDir(t *testing.T) string {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	return secret
}

// assertEmpty fails when dir holds anything: the daemon created a file through a link.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		t.Errorf("%s was created in the root-only directory through a link (%d bytes)", e.Name(), len(b))
	}
}

// linkedJournal is a journal directory in which the user nobody has planted the links
// apply.journal and apply.journal.lock, pointing into a root-only directory.
func linkedJournal(t *testing.T, dirMode os.FileMode, dirOwner int) (journal, secret string) {
	t.Helper()
	secret = secretDir(t)
	// nobody must reach the directory to plant the links: its parent is open to all.
	dir := filepath.Join(lab.SharedTempDir(t, ""), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The links are nobody's own work: the directory is theirs while they plant them.
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	journal = filepath.Join(dir, "apply.journal")
	asNobody(t, "ln", "-s", filepath.Join(secret, "stolen"), journal)
	asNobody(t, "ln", "-s", filepath.Join(secret, "stolen.lock"), journal+".lock")
	if err := os.Chown(dir, dirOwner, dirOwner); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		t.Fatal(err)
	}
	return journal, secret
}

// TestJournalRefusesLinks: symbolic links named apply.journal and apply.journal.lock, planted
// by another user, are never followed - by apply (ApplyPlan), by an append, by the change
// lock or by a read - whether the directory is that user's, world-writable and sticky like
// /tmp, or root's own; nothing is created where they point, nothing is changed, and the error
// names the link.
func TestJournalRefusesLinks(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		owner int
		want  string
	}{
		{"directory of another user", 0o755, nobody, "owned by uid 65534"},
		{"sticky world-writable directory", 0o777 | os.ModeSticky, 0, "symbolic link"},
		{"root's directory", 0o700, 0, "symbolic link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			journal, secret := linkedJournal(t, tc.mode, tc.owner)
			pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
			m, err := New(Config{Mode: ModeOn, Journal: journal}, nil, []Actuator{pg}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			live, _ := pg.Read(context.Background(), collector.WALSyncMethod)
			plan := []Proposal{{Finding: syncFinding("open_datasync", "fdatasync"), Live: &live}}
			out, err := m.ApplyPlan(context.Background(), plan)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "apply.journal") {
				t.Errorf("apply through linked journal files: %v; want a refusal naming apply.journal and %q", err, tc.want)
			}
			if calls := pg.setCalls(); len(calls) != 0 || out[0].ID != 0 {
				t.Errorf("apply changed %v (change %d) without a journal", calls, out[0].ID)
			}
			j := NewJournal(journal)
			if _, err := j.Append(Record{Time: time.Now(), Kind: KindIntent, Setting: "wal_buffers", New: "16MB"}); err == nil {
				t.Errorf("an append through the link succeeded")
			}
			if _, _, err := j.lockChanges(false); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the change lock through the link: %v; want a refusal saying %q", err, tc.want)
			}
			if _, _, err := j.Read(); err == nil {
				t.Errorf("a read through the link succeeded")
			}
			assertEmpty(t, secret)
		})
	}
}

// TestJournalRefusesUnsafeFiles: a journal that another user could write, or that is not the
// user's own single regular file, is refused with the file, what is wrong and what to do; one
// written by an older version (0600 or 0644, the user's) keeps working.
func TestJournalRefusesUnsafeFiles(t *testing.T) {
	requireRoot(t)
	rec := `{"id":1,"time":"2026-12-01T00:00:00Z","kind":"intent","setting":"wal_buffers","new":"16MB","old":{"value":"4MB"}}` + "\n"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, journal string)
		want  []string // nil: accepted
	}{
		{"0600", func(t *testing.T, _, j string) { write(t, j, rec, 0o600) }, nil},
		{"0644", func(t *testing.T, _, j string) { write(t, j, rec, 0o644) }, nil},
		{"0666", func(t *testing.T, _, j string) { write(t, j, rec, 0o666) }, []string{"0666", "chmod 0600"}},
		{"0620", func(t *testing.T, _, j string) { write(t, j, rec, 0o620) }, []string{"0620", "chmod 0600"}},
		{"owned by nobody", func(t *testing.T, _, j string) {
			write(t, j, rec, 0o600)
			if err := os.Chown(j, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}, []string{"uid 65534", "chown"}},
		{"hard link", func(t *testing.T, dir, j string) {
			write(t, j, rec, 0o600)
			if err := os.Link(j, filepath.Join(dir, "other-name")); err != nil {
				t.Fatal(err)
			}
		}, []string{"2 hard links"}},
		{"a directory", func(t *testing.T, _, j string) { os.Mkdir(j, 0o700) }, []string{"not a regular file"}},
		// A FIFO would hang a plain open for reading: it is refused at once.
		{"a FIFO", func(t *testing.T, _, j string) { syscall.Mkfifo(j, 0o600) }, []string{"not a regular file"}},
		{"directory writable by its group", func(t *testing.T, dir, j string) {
			write(t, j, rec, 0o600)
			if err := os.Chown(dir, 0, nobody); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o770); err != nil {
				t.Fatal(err)
			}
		}, []string{"0770", "chmod go-w"}},
		{"0666 lock file", func(t *testing.T, _, j string) {
			write(t, j, rec, 0o600)
			write(t, j+".lock", "", 0o666)
		}, []string{"apply.journal.lock", "0666"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			journal := filepath.Join(dir, "apply.journal")
			tc.setup(t, dir, journal)
			j := NewJournal(journal)
			_, appendErr := j.Append(Record{ID: 1, Time: time.Now(), Kind: KindOutcome, Outcome: Applied, Setting: "wal_buffers"})
			_, _, lockErr := j.lockChanges(false)
			err := appendErr
			if err == nil {
				err = lockErr
			}
			if tc.want == nil {
				if appendErr != nil || lockErr != nil {
					t.Fatalf("a journal of an older version refused: %v, %v", appendErr, lockErr)
				}
				recs, _, err := j.Read()
				if err != nil || len(recs) != 2 {
					t.Errorf("read back %d records, %v; want 2", len(recs), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want a refusal saying %v", tc.want)
			}
			for _, w := range append(tc.want, "apply.journal") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		})
	}
}

func write(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
