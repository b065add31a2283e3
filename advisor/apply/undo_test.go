package apply

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// crashAfterSet is the real actuator on a server that crashes right after a change: Set
// changes the setting (ALTER SYSTEM, the reload), then the server goes down, and undoing the
// change fails as it would.
type crashAfterSet struct {
	*Postgres
	crash func()
}

func (a crashAfterSet) Set(ctx context.Context, name, value string) (Value, error) {
	old, err := a.Postgres.Read(ctx, name)
	if err != nil {
		return Value{}, err
	}
	if _, err := a.Postgres.Set(ctx, name, value); err != nil {
		return Value{}, err
	}
	a.crash()
	_, undoErr := a.Postgres.Restore(ctx, name, old)
	if undoErr == nil {
		return Value{}, errors.New("the server did not go down")
	}
	return Value{}, fmt.Errorf("the server went away after ALTER SYSTEM SET %s; undoing it failed too, restore %s by hand: %w", name, name, undoErr)
}

// TestApplyCrashAfterAlterSystem is the degraded row of issue 24: the server crashes right
// after ALTER SYSTEM, the undo fails, the server comes back running the new value. The
// journal must not say the change is over: rollback --all reads the live value, finds the
// journal's new one and restores the old.
func TestApplyCrashAfterAlterSystem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	const name = "checkpoint_completion_target"
	crash := func() {
		if out, err := c.Command(ctx, "pg_ctl", "stop", "-D", c.DataDir(), "-m", "immediate", "-w").CombinedOutput(); err != nil {
			t.Fatalf("crash the server: %v: %s", err, out)
		}
	}
	p := NewPostgres(c.DSN(), PostgresOptions{ConfirmTimeout: 10 * time.Second, Logger: zaptest.NewLogger(t)})
	defer p.Close(ctx)
	journal := filepath.Join(t.TempDir(), "apply.journal")
	m, err := New(Config{Mode: ModeOn, Settings: []string{name}, Journal: journal}, nil, []Actuator{crashAfterSet{p, crash}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	old, err := p.Read(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	f := rules.Finding{Rule: "checkpoint-spread", Setting: name, Current: old.Value, Recommended: "0.7", Action: rules.ActionReload}
	out, err := m.ApplyPlan(ctx, []Proposal{{Finding: f, Live: &old}})
	if err == nil || out[0].ID == 0 {
		t.Fatalf("apply through a crashing server: %v, change %d; want a failure journaled", err, out[0].ID)
	}
	t.Logf("apply: %s (outcome %s)", out[0].Error, out[0].Outcome)

	logFile := filepath.Join(c.DataDir(), "restart.log")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.Port(), c.SocketDir())
	if out, err := c.Command(ctx, "pg_ctl", "start", "-D", c.DataDir(), "-l", logFile, "-w", "-t", "60", "-o", opts).CombinedOutput(); err != nil {
		t.Fatalf("restart the server: %v: %s", err, out)
	}
	if v, _, file := lab.ReadSetting(t, c, name); v != "0.7" || !strings.HasSuffix(file, "postgresql.auto.conf") {
		t.Fatalf("after the crash the server runs %s=%s from %q; the test wants the new value running", name, v, file)
	}

	rp := newPostgres(t, c.DSN())
	results, err := Rollback(ctx, NewJournal(journal), []Actuator{rp}, 0, nil, zaptest.NewLogger(t))
	var b strings.Builder
	WriteRollback(&b, results)
	t.Logf("rollback --all:\n%s", b.String())
	if err != nil || len(results) != 1 || results[0].Restored != old.Value {
		t.Fatalf("rollback --all = %+v, %v; want change %d restored to %s", results, err, out[0].ID, old.Value)
	}
	if v, src, _ := lab.ReadSetting(t, c, name); v != old.Value || src != old.Source {
		t.Errorf("after rollback %s = %s (%s), want %s (%s)", name, v, src, old.Value, old.Source)
	}
	if last := outcomes(t, NewJournal(journal), out[0].ID); last[len(last)-1] != string(RolledBack) {
		t.Errorf("journal of the change: %v, want it to end rolled back", last)
	}
}

// restoreCounter counts the Restore calls of the fake actuator.
type restoreCounter struct {
	*fakePG
	restores int
}

func (r *restoreCounter) Restore(ctx context.Context, s string, old Value) (Value, error) {
	r.restores++
	return r.fakePG.Restore(ctx, s, old)
}

// TestRollbackComparesLive: rollback reads the live value and compares it with the journal's.
// A change whose old configuration is live again (an operator's undo, a failed change whose
// undo did work after all) is recorded rolled back without touching anything; an undo that
// failed, with the new value live, is restored; a forged record for fsync stays refused.
func TestRollbackComparesLive(t *testing.T) {
	ctx := context.Background()
	pg := newFakePG(map[string]string{
		collector.WALSyncMethod: "open_datasync", "checkpoint_completion_target": "0.9", "fsync": "on",
	}, nil)
	pg.operator("checkpoint_completion_target", "0.7") // the undo failed: ALTER SYSTEM's value runs
	rc := &restoreCounter{fakePG: pg}
	j := NewJournal(filepath.Join(t.TempDir(), "apply.journal"))
	oldSync, _ := pg.Read(ctx, collector.WALSyncMethod)
	appendChange(t, j, collector.WALSyncMethod, "fdatasync", oldSync, false) // applied; the old value is live
	cct := Value{Value: "0.9", Source: "configuration file", Context: "sighup"}
	appendChange(t, j, "checkpoint_completion_target", "0.7", cct, true)
	appendChange(t, j, "fsync", "on", Value{Value: "off", Source: "configuration file", Context: "sighup", AutoConf: strp("off")}, true)
	for id, why := range map[int]string{2: "ALTER SYSTEM SET checkpoint_completion_target: server closed the connection; undoing it failed too", 3: "undoing it failed too"} {
		if _, err := j.Append(Record{ID: id, Time: time.Now(), Kind: KindOutcome, Origin: OriginApply, Outcome: "undo_failed", Reason: why}); err != nil {
			t.Fatal(err)
		}
	}
	results, err := Rollback(ctx, j, []Actuator{rc}, 0, nil, zaptest.NewLogger(t))
	var b strings.Builder
	WriteRollback(&b, results)
	t.Logf("rollback --all:\n%s", b.String())
	if !errors.Is(err, ErrRefused) {
		t.Errorf("rollback error %v, want the fsync record refused", err)
	}
	by := map[string]RollbackResult{}
	for _, r := range results {
		by[r.Setting] = r
	}
	if r := by["fsync"]; r.Refused == "" || pg.value("fsync") != "on" {
		t.Errorf("fsync: %+v, fsync is %s; want the record refused and fsync on", r, pg.value("fsync"))
	}
	if r := by["checkpoint_completion_target"]; r.Error != "" || r.Restored != "0.9" || pg.value("checkpoint_completion_target") != "0.9" {
		t.Errorf("the change whose undo failed: %+v, live %s; want 0.9 restored", r, pg.value("checkpoint_completion_target"))
	}
	if r := by[collector.WALSyncMethod]; r.Error != "" || r.Refused != "" {
		t.Errorf("the change whose old value is live again: %+v; want it recorded, not refused or failed", r)
	}
	if rc.restores != 1 {
		t.Errorf("%d restores, want 1 (only the change whose new value was live)", rc.restores)
	}
	for id, want := range map[int]Outcome{1: RolledBack, 2: RolledBack} {
		if got := outcomes(t, j, id); got[len(got)-1] != string(want) {
			t.Errorf("change %d: %v, want it to end %s", id, got, want)
		}
	}
}

// TestReconcileUndoFailed: the daemon settles a change whose undo failed as it settles an
// intent without an outcome: the new value live goes on as applied, the old one live is
// recorded failed.
func TestReconcileUndoFailed(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync", "checkpoint_completion_target": "0.9"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	j := NewJournal(cfg.Journal)
	appendChange(t, j, collector.WALSyncMethod, "fdatasync", Value{Value: "open_datasync", Context: "sighup"}, true)
	appendChange(t, j, "checkpoint_completion_target", "0.7", Value{Value: "0.9", Context: "sighup"}, true)
	for _, id := range []int{1, 2} {
		if _, err := j.Append(Record{ID: id, Time: w.clock(), Kind: KindOutcome, Origin: OriginDaemon, Outcome: "undo_failed", Reason: "undoing it failed too"}); err != nil {
			t.Fatal(err)
		}
	}
	m := newTestManager(t, cfg, w, pg)
	run(t, m, w, 1)
	for id, want := range map[int]Outcome{1: Applied, 2: Failed} {
		if got := outcomes(t, j, id); got[len(got)-1] != string(want) {
			t.Errorf("change %d: %v, want it settled %s", id, got, want)
		}
	}
}
