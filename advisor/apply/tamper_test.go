package apply

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// appendChange journals a change as a tampered journal would hold it: an intent, and an
// applied outcome unless intentOnly.
func appendChange(t *testing.T, j *Journal, setting, to string, old Value, intentOnly bool) {
	t.Helper()
	recs, err := j.Append(Record{Time: time.Now(), Kind: KindIntent, Origin: OriginDaemon, Setting: setting, Action: rules.ActionReload, Old: &old, New: to})
	if err != nil {
		t.Fatal(err)
	}
	if intentOnly {
		return
	}
	if _, err := j.Append(Record{ID: recs[0].ID, Time: time.Now(), Kind: KindOutcome, Origin: OriginDaemon, Outcome: Applied, Setting: setting, New: to}); err != nil {
		t.Fatal(err)
	}
}

func strp(s string) *string { return &s }

// TestRollbackTamperedJournal: a 0600 journal naming fsync and synchronous_commit (new on, old
// off) and a wal_buffers change whose old value is out of bounds. rollback --all refuses the
// three with a line each, still rolls back the honest record beside them, and says (ErrRefused)
// that something was refused. The guard is on the path: the last step hands the fsync record to
// the raw actuator, which does turn fsync off - so the first half of the test passes only
// because Rollback went through the guard.
func TestRollbackTamperedJournal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	p := newPostgres(t, c.DSN())
	path := filepath.Join(t.TempDir(), "apply.journal")
	j := NewJournal(path)
	off := Value{Value: "off", Source: "configuration file", Context: "sighup", AutoConf: strp("off")}
	appendChange(t, j, "fsync", "on", off, false)
	sc := off
	sc.Context = "user"
	appendChange(t, j, "synchronous_commit", "on", sc, false)
	wb, err := p.Read(ctx, "wal_buffers")
	if err != nil {
		t.Fatal(err)
	}
	appendChange(t, j, "wal_buffers", wb.Value, Value{Value: "2TB", Context: "postmaster", AutoConf: strp("2TB")}, false)
	// The honest record: checkpoint_completion_target 0.9 (the default) -> 0.7.
	cct, err := p.Read(ctx, "checkpoint_completion_target")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Set(ctx, "checkpoint_completion_target", "0.7"); err != nil {
		t.Fatal(err)
	}
	appendChange(t, j, "checkpoint_completion_target", "0.7", cct, false)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}

	results, err := Rollback(ctx, j, []Actuator{p}, 0, nil, zaptest.NewLogger(t))
	if !errors.Is(err, ErrRefused) {
		t.Errorf("Rollback error = %v, want it to say records were refused", err)
	}
	var b strings.Builder
	if err := WriteRollback(&b, results); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("rollback:\n%s", out)
	for _, s := range []string{"fsync", "synchronous_commit", "wal_buffers"} {
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "\t"+s+"\t") || strings.Contains(l, " "+s+" ") {
				line = l
			}
		}
		if !strings.Contains(line, "REFUSED") || !strings.Contains(line, "change ") {
			t.Errorf("no refusal line naming the change and %s in:\n%s", s, out)
		}
	}
	if strings.Contains(out, "Nothing to roll back") {
		t.Errorf("refusals beside \"Nothing to roll back\":\n%s", out)
	}
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	waitSetting(t, c, "checkpoint_completion_target", "0.9")
	for name, want := range map[string]string{"fsync": "on", "synchronous_commit": "on", "wal_buffers": wb.Value} {
		if v, src, file := lab.ReadSetting(t, c, name); v != want || strings.HasSuffix(file, "postgresql.auto.conf") {
			t.Errorf("%s = %s (%s %s) after the rollback, want %s untouched", name, v, src, file, want)
		}
	}

	// Without the guard the same record does what the report saw: fsync goes off.
	if _, err := p.Restore(ctx, "fsync", off); err != nil {
		t.Fatalf("the raw actuator refused the fsync record too (%v): the test would not tell the guard's work", err)
	}
	if v, _, _ := lab.ReadSetting(t, c, "fsync"); v != "off" {
		t.Errorf("the raw actuator left fsync %s: the guard's test above proves nothing", v)
	}
}

// TestReconcileRefusesDurabilityRecord: an intent-only record for fsync (a crash, or a forged
// journal) at a manager's start is settled as failed by the guard; fsync stays on.
func TestReconcileRefusesDurabilityRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	p := newPostgres(t, c.DSN())
	path := filepath.Join(t.TempDir(), "apply.journal")
	j := NewJournal(path)
	// old == live ("on"): without the guard, reconcile would Restore it (ALTER SYSTEM SET
	// fsync = ...): the old value is what reconciling a half-made change writes back.
	appendChange(t, j, "fsync", "off", Value{Value: "on", Context: "sighup", AutoConf: strp("off")}, true)
	m, err := New(Config{Mode: ModeOn, Settings: []string{"wal_sync_method"}, Journal: path, VerifyWindow: time.Hour},
		sampling{ctx, newSampler(t, c)}, []Actuator{p}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(outcomes(t, j, 1), ","); got != "intent,failed" {
		t.Errorf("fsync record: journal %s, want intent,failed", got)
	}
	if r := recordOf(t, j, 1, Failed); !strings.Contains(r.Reason, "refused") {
		t.Errorf("failed outcome's reason %q does not say it was refused", r.Reason)
	}
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if v, _, file := lab.ReadSetting(t, c, "fsync"); v != "on" || strings.HasSuffix(file, "postgresql.auto.conf") {
		t.Errorf("fsync = %s from %s after reconcile, want on and untouched", v, file)
	}
}

// TestRollbackRefusesForeignSysctlFile: vm.dirty_bytes records whose sysctl_file is outside the
// configured sysctl.d directory, named otherwise, or a symbolic link to another file: each is
// refused and the file it names survives. A testdata procfs tree stands in for /proc/sys.
func TestRollbackRefusesForeignSysctlFile(t *testing.T) {
	root := procfsCopy(t)
	dir := t.TempDir()
	k := NewKernel(root, filepath.Join(dir, "90-pgwal-advisor.conf"), zaptest.NewLogger(t))
	live, err := k.Read(context.Background(), KnobDirtyBytes)
	if err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "precious")
	beside := filepath.Join(dir, "precious.conf")
	link := filepath.Join(dir, "91-pgwal-advisor.conf")
	for _, f := range []string{victim, beside} {
		if err := os.WriteFile(f, []byte("vm.dirty_bytes = 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	j := NewJournal(filepath.Join(t.TempDir(), "apply.journal"))
	for _, f := range []string{victim, beside, link} {
		appendChange(t, j, KnobDirtyBytes, live.Value, Value{Value: "0", Twin: "vm.dirty_ratio", TwinValue: "20", SysctlFile: f}, false)
	}
	results, err := Rollback(context.Background(), j, []Actuator{k}, 0, nil, zaptest.NewLogger(t))
	if !errors.Is(err, ErrRefused) {
		t.Errorf("Rollback error = %v, want refusals", err)
	}
	if len(results) != 3 {
		t.Fatalf("results = %+v, want 3", results)
	}
	for _, r := range results {
		if r.Refused == "" || !strings.Contains(r.Refused, "sysctl_file") {
			t.Errorf("change %d: %+v, want a refusal naming the sysctl_file", r.ID, r)
		}
	}
	for _, f := range []string{victim, beside} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "vm.dirty_bytes = 1\n" {
			t.Errorf("%s after the rollback: %q, %v", filepath.Base(f), b, err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
	if got := readKnobFile(t, root, "dirty_bytes"); got != live.Value {
		t.Errorf("dirty_bytes = %s after refused rollbacks, want %s", got, live.Value)
	}
}
