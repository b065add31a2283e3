package apply

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func TestManagerAppliesAndVerifies(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	w := newWorld(pg)
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))

	// The figures before a change need a window of snapshots first.
	run(t, m, w, 5)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("changed %v before the window before the change was measured", calls)
	}
	if !strings.Contains(m.Status().Waiting, "need") {
		t.Errorf("status.waiting = %q, want a word about the window", m.Status().Waiting)
	}
	runUntil(t, m, w, 20, "the change", func() bool { return pg.value(collector.WALSyncMethod) == "fdatasync" })
	if got := m.Status().Changes[0].State; got != StateVerifying {
		t.Errorf("state right after applying = %q, want %q", got, StateVerifying)
	}
	runUntil(t, m, w, 20, "verification", func() bool { return hasOutcome(t, m.Journal(), 1, Verified) })
	if got, want := strings.Join(outcomes(t, m.Journal(), 1), ","), "intent,applied,verified"; got != want {
		t.Errorf("journal of change 1 = %s, want %s", got, want)
	}
	v := recordOf(t, m.Journal(), 1, Verified)
	better := map[string]bool{}
	for _, c := range v.Comparison {
		better[c.Name] = c.Verdict == VerdictBetter
	}
	if !better[FigureIOSecondsPerMB] || !better[FigureFlushWaitShare] {
		t.Errorf("verified with comparison %+v, want both WAL figures better", v.Comparison)
	}
	// The prediction (0.1 -> 0.02 s/MB) against the 0.0125 measured: 0.0075 below it, on a
	// scale of 0.08 (the predicted change).
	if pc := v.PredictionCheck; pc == nil || pc.Name != rules.PredictWALWait || math.Abs(pc.Measured-0.0125) > 1e-9 ||
		math.Abs(pc.Error-(-0.0075/0.08)) > 1e-9 || !strings.Contains(v.Reason, "predicted "+rules.PredictWALWait) {
		t.Errorf("verified record's prediction check = %+v, reason %q; want 0.02 predicted, 0.0125 measured", pc, v.Reason)
	}
	if st := m.Status().Changes[0]; st.Prediction == nil || st.Predicted == nil || st.Prediction.Measured != v.PredictionCheck.Measured {
		t.Errorf("status of the change = %+v, want its prediction and the check", st)
	}
	recs, _, _ := m.Journal().Read()
	if in := recs[0]; in.Kind != KindIntent || in.Old == nil || in.Old.Value != "open_datasync" || in.New != "fdatasync" || in.Before == nil ||
		in.Rule != "sync-method-slow" || in.Predicted == nil || in.Predicted.Value != 0.02 {
		t.Errorf("intent = %+v, want old open_datasync, new fdatasync, the rule, the figures before and the prediction", in)
	}
	// The finding stays shown for a while after the change (the tracker's hysteresis): the
	// manager must not apply anything again.
	run(t, m, w, 10)
	if calls := pg.setCalls(); len(calls) != 1 {
		t.Errorf("set calls = %v, want exactly one", calls)
	}
}

func TestManagerRollsBackARegression(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	m := newTestManager(t, cfg, w, pg)
	// A recommendation that makes things worse (the rules would not make it: injected).
	w.setFindings(syncFinding("fdatasync", "open_datasync"))
	runUntil(t, m, w, 60, "the rollback", func() bool { return hasOutcome(t, m.Journal(), 1, Rejected) })
	if got, want := strings.Join(outcomes(t, m.Journal(), 1), ","), "intent,applied,rolled_back,rejected"; got != want {
		t.Errorf("journal = %s, want %s", got, want)
	}
	if got := pg.value(collector.WALSyncMethod); got != "fdatasync" {
		t.Errorf("after the rollback wal_sync_method = %s, want fdatasync", got)
	}
	if v := pg.values[collector.WALSyncMethod]; v.AutoConf != nil || v.SourceFile != "/data/lab.conf" {
		t.Errorf("after the rollback the setting comes from %q (auto.conf %v), want lab.conf and nothing in postgresql.auto.conf", v.SourceFile, v.AutoConf)
	}
	rb := recordOf(t, m.Journal(), 1, RolledBack)
	if rb.After == nil || rb.Before == nil || !strings.Contains(rb.Reason, "worse") {
		t.Errorf("rolled_back record lacks its evidence: %+v", rb)
	}
	// The injected finding predicted the rise (0.02 -> 0.1 s/MB), and 0.1 was measured.
	if pc := rb.PredictionCheck; pc == nil || math.Abs(pc.Measured-0.1) > 1e-9 || pc.Predicted != 0.1 {
		t.Errorf("rolled_back record's prediction check = %+v, want 0.1 measured", pc)
	}
	rej := recordOf(t, m.Journal(), 1, Rejected)
	if rej.Until == nil || rej.Until.Sub(rej.Time) != cfg.RejectFor {
		t.Errorf("rejected until %v, want %v after %v", rej.Until, cfg.RejectFor, rej.Time)
	}

	// Not proposed again, and a restart remembers it.
	run(t, m, w, 20)
	if calls := pg.setCalls(); len(calls) != 1 {
		t.Errorf("set calls = %v, want the one change only", calls)
	}
	m2 := newTestManager(t, cfg, w, pg)
	run(t, m2, w, 20)
	if calls := pg.setCalls(); len(calls) != 1 {
		t.Errorf("after a restart of the manager: set calls = %v, want the one change only", calls)
	}
	st := m2.Status()
	if len(st.Refused) != 1 || !strings.Contains(st.Refused[0].Reason, "not proposed again until") {
		t.Errorf("refused = %+v, want the rejection", st.Refused)
	}
	if len(st.Holds) != 1 || st.Holds[0].Kind != Rejected || st.Holds[0].Value != "open_datasync" {
		t.Errorf("holds = %+v, want the rejection of open_datasync", st.Holds)
	}
}

func TestManagerBacksOffAnOperatorsChange(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	w := newWorld(pg)
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	runUntil(t, m, w, 30, "the change", func() bool { return pg.value(collector.WALSyncMethod) == "fdatasync" })
	run(t, m, w, 3)
	// Mid-verification, an operator sets fsync.
	pg.operator(collector.WALSyncMethod, "fsync")
	w.setFindings(syncFinding("fsync", "fdatasync"))
	run(t, m, w, 30)
	if got, want := strings.Join(outcomes(t, m.Journal(), 1), ","), "intent,applied,abandoned"; got != want {
		t.Errorf("journal = %s, want %s (no rollback over the operator's change)", got, want)
	}
	if got := pg.value(collector.WALSyncMethod); got != "fsync" {
		t.Errorf("wal_sync_method = %s, want the operator's fsync", got)
	}
	if calls := pg.setCalls(); len(calls) != 1 {
		t.Errorf("set calls = %v: the manager touched the setting again", calls)
	}
	st := m.Status()
	if st.Changes[0].State != string(Abandoned) || !strings.Contains(st.Changes[0].Reason, "someone else") {
		t.Errorf("status = %+v, want abandoned with the reason", st.Changes[0])
	}
	if len(st.Refused) != 1 || !strings.Contains(st.Refused[0].Reason, "hands off") {
		t.Errorf("refused = %+v, want the hands-off period", st.Refused)
	}
}

// TestManagerReconcilesACrash covers the three cases of an intent without an outcome.
func TestManagerReconcilesACrash(t *testing.T) {
	for _, tc := range []struct {
		name   string
		live   string // what the setting is when the manager starts
		want   Outcome
		wantPG string
	}{
		{"new value live", "fdatasync", Applied, "fdatasync"},
		{"old value live", "open_datasync", Failed, "open_datasync"},
		{"someone else's value", "fsync", Abandoned, "fsync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
			w := newWorld(pg)
			cfg := testConfig(t, w, ModeOn)
			old, _ := pg.Read(context.Background(), collector.WALSyncMethod)
			j := NewJournal(cfg.Journal)
			before := &Figures{Figures: []Figure{{Name: FigureFlushWaitShare, Value: 0.85, Samples: 100, Enough: true, Judged: true}}}
			if _, err := j.Append(Record{Time: w.clock(), Kind: KindIntent, Origin: OriginDaemon, Setting: collector.WALSyncMethod,
				Action: rules.ActionReload, Old: &old, New: "fdatasync", Before: before}); err != nil {
				t.Fatal(err)
			}
			if tc.live != "open_datasync" {
				pg.operator(collector.WALSyncMethod, tc.live)
			}
			m := newTestManager(t, cfg, w, pg)
			run(t, m, w, 1)
			if got := outcomes(t, j, 1); len(got) < 2 || got[1] != string(tc.want) {
				t.Fatalf("journal = %v, want intent then %s", got, tc.want)
			}
			if got := pg.value(collector.WALSyncMethod); got != tc.wantPG {
				t.Errorf("wal_sync_method = %s, want %s", got, tc.wantPG)
			}
			if tc.want == Applied {
				if got := m.Status().Changes[0].State; got != StateVerifying {
					t.Errorf("after reconciling, state = %s, want verification to go on", got)
				}
				runUntil(t, m, w, 40, "verification", func() bool { return hasOutcome(t, j, 1, Verified) })
			}
			if tc.want == Failed && pg.values[collector.WALSyncMethod].AutoConf != nil {
				t.Errorf("a change that never took effect left postgresql.auto.conf set")
			}
		})
	}
}

func TestManagerNeverAppliesDurabilityTrades(t *testing.T) {
	pg := newFakePG(map[string]string{collector.Fsync: "off", collector.SynchronousCommit: "off", collector.FullPageWrites: "off"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	m := newTestManager(t, cfg, w, pg)
	w.setFindings(
		rules.Finding{Rule: "fsync-off", Setting: collector.Fsync, Current: "off", Recommended: "on", Action: rules.ActionNeverAuto},
		rules.Finding{Rule: "durability-traded-off", Setting: collector.SynchronousCommit, Current: "off", Recommended: "on", Action: rules.ActionNeverAuto},
		// Even a finding that claims a reload does not get through.
		rules.Finding{Rule: "made-up", Setting: collector.FullPageWrites, Current: "off", Recommended: "on", Action: rules.ActionReload},
	)
	run(t, m, w, 30)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("changed %v", calls)
	}
	for _, s := range []string{collector.Fsync, collector.SynchronousCommit, collector.FullPageWrites} {
		if pg.reads[s] != 0 {
			t.Errorf("read %s %d times: a never-applied setting must not even be read", s, pg.reads[s])
		}
	}
	st := m.Status()
	if len(st.Refused) != 3 {
		t.Fatalf("refused = %+v, want all three", st.Refused)
	}
	for _, r := range st.Refused {
		if !strings.Contains(r.Reason, "never") {
			t.Errorf("%s refused for %q, want never-applied", r.Setting, r.Reason)
		}
	}
	if _, err := ParseSettings([]string{"wal_buffers", "fsync"}); err == nil || !strings.Contains(err.Error(), "never applied") {
		t.Errorf("ParseSettings accepted fsync: %v", err)
	}
}

func TestManagerDryRun(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	w := newWorld(pg)
	m := newTestManager(t, testConfig(t, w, ModeDryRun), w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	run(t, m, w, 30)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("dry-run changed %v", calls)
	}
	recs, _, err := m.Journal().Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Kind != KindDryRun || recs[0].New != "fdatasync" || recs[0].Old.Value != "open_datasync" {
		t.Errorf("journal = %+v, want one dry_run record", recs)
	}
}

func TestManagerPacing(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync", collector.CheckpointCompletionTarget: "0.5"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	cfg.MaxPerDay = 1
	cfg.NoCrossover = true // one Set per change: a trial's switches would be more
	m := newTestManager(t, cfg, w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"),
		rules.Finding{Rule: "checkpoint-stalls", Setting: collector.CheckpointCompletionTarget, Current: "0.5", Recommended: "0.9", Action: rules.ActionReload})
	run(t, m, w, 60)
	if calls := pg.setCalls(); len(calls) != 1 {
		t.Fatalf("set calls = %v, want one (max one a day)", calls)
	}
	if st := m.Status(); !strings.Contains(st.Waiting, "max-per-day") {
		t.Errorf("waiting = %q, want the daily cap", st.Waiting)
	}
}

// TestManagerZeroIsZero: --apply.max-per-day 0 starts no change (it became 4), and
// --apply.cooldown 0 waits for nothing (it became 10 minutes).
func TestManagerZeroIsZero(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	cfg.MaxPerDay = 0
	m := newTestManager(t, cfg, w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	run(t, m, w, 60)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Errorf("max-per-day 0: set calls = %v, want none", calls)
	}

	m2, err := New(Config{Mode: ModeOn, Journal: filepath.Join(t.TempDir(), "apply.journal"), MaxPerDay: 1}, w, []Actuator{pg}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if m2.cfg.Cooldown != 0 {
		t.Errorf("cooldown 0 became %v, want 0", m2.cfg.Cooldown)
	}
}

func TestManagerPrivilegeSaidOnce(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	pg.writeErr[collector.WALSyncMethod] = errors.New("role advisor may not change wal_sync_method: as a superuser, GRANT ALTER SYSTEM ON PARAMETER wal_sync_method TO advisor;")
	w := newWorld(pg)
	core, logs := observer.New(zap.InfoLevel)
	m, err := New(testConfig(t, w, ModeOn), w, []Actuator{pg}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	run(t, m, w, 30)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("changed %v without the privilege", calls)
	}
	said := logs.FilterMessageSnippet("stays advice").FilterField(zap.String("setting", collector.WALSyncMethod))
	if n := said.Len(); n != 1 {
		t.Errorf("logged the missing privilege %d times, want once", n)
	}
	st := m.Status()
	if !strings.Contains(st.AdvisorOnly[collector.WALSyncMethod], "GRANT ALTER SYSTEM") {
		t.Errorf("advisor_only = %v, want the GRANT", st.AdvisorOnly)
	}
}

func TestManagerNoJournalNoChange(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	cfg.Journal = filepath.Join(t.TempDir(), "missing-dir", "apply.journal")
	m := newTestManager(t, cfg, w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	run(t, m, w, 30)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("changed %v without a journal", calls)
	}
	if st := m.Status(); st.JournalError == "" {
		t.Errorf("status has no journal error")
	}
}

func TestManagerPendingRestart(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync", collector.WALBuffers: "64kB"}, map[string]string{collector.WALBuffers: "postmaster"})
	w := newWorld(pg)
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg)
	w.setFindings(rules.Finding{Rule: "wal-buffers-small", Setting: collector.WALBuffers, Current: "64kB", Recommended: "16MB", Action: rules.ActionRestart})
	runUntil(t, m, w, 30, "pending restart", func() bool { return hasOutcome(t, m.Journal(), 1, PendingRestart) })
	run(t, m, w, 20)
	if calls := pg.setCalls(); len(calls) != 1 {
		t.Errorf("set calls = %v, want one (the pending change is not made again)", calls)
	}
	if got := m.Status().Changes[0].State; got != string(PendingRestart) {
		t.Errorf("state = %s, want pending_restart", got)
	}
	pg.restart()
	runUntil(t, m, w, 40, "verification after the restart", func() bool { return hasOutcome(t, m.Journal(), 1, Verified) })
	if got, want := strings.Join(outcomes(t, m.Journal(), 1), ","), "intent,pending_restart,applied,verified"; got != want {
		t.Errorf("journal = %s, want %s", got, want)
	}
}

func TestManagerOutdatedFindingAndDisagreement(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fsync", collector.CheckpointCompletionTarget: "0.5"}, nil)
	w := newWorld(pg)
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	run(t, m, w, 20)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("applied an out-of-date finding: %v", calls)
	}
	if st := m.Status(); st.Refused != nil {
		t.Errorf("an out-of-date finding is refused: %+v", st.Refused)
	}

	// Two rules want the completion target moved both ways: the resolver recommends nothing for
	// it, so nothing is proposed.
	other := rules.Finding{Rule: "other-rule", Setting: collector.CheckpointCompletionTarget, Current: "0.5", Recommended: "0.3", Action: rules.ActionReload}
	w.setFindings(rules.Finding{Rule: "checkpoint-stalls", Setting: collector.CheckpointCompletionTarget, Current: "0.5", Recommended: "0.9", Action: rules.ActionReload}, other)
	run(t, m, w, 20)
	if calls := pg.setCalls(); len(calls) != 0 {
		t.Fatalf("applied a setting two rules want moved both ways: %v", calls)
	}

	// For wal_sync_method the resolver decides (the preferred order here), and the intent names
	// the overruled rule.
	f2 := syncFinding("fsync", "open_sync")
	f2.Rule = "other-rule"
	w.setFindings(f2, syncFinding("fsync", "fdatasync"))
	runUntil(t, m, w, 20, "the change", func() bool { return len(pg.setCalls()) == 1 })
	if got := pg.setCalls()[0]; got != "wal_sync_method=fdatasync" {
		t.Errorf("applied %s, want fdatasync", got)
	}
	recs, _, _ := m.Journal().Read()
	if !strings.Contains(recs[0].Reason, "other-rule recommended open_sync (overruled") || recs[0].Rule != "sync-method-slow" {
		t.Errorf("intent = %+v, want the overruled rule in its reason and the deciding finding's rule", recs[0])
	}
}

func TestRollbackAll(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync", collector.CheckpointCompletionTarget: "0.5"}, nil)
	w := newWorld(pg)
	cfg := testConfig(t, w, ModeOn)
	cfg.Cooldown = time.Second
	cfg.NoCrossover = true // one Set per change: a trial's switches would be more
	m := newTestManager(t, cfg, w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"),
		rules.Finding{Rule: "checkpoint-stalls", Setting: collector.CheckpointCompletionTarget, Current: "0.5", Recommended: "0.9", Action: rules.ActionReload})
	runUntil(t, m, w, 120, "two changes", func() bool { return len(pg.setCalls()) == 2 })
	res, err := Rollback(context.Background(), m.Journal(), []Actuator{pg}, 0, w.clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].ID != 2 || res[1].ID != 1 {
		t.Errorf("rollback results = %+v, want change 2 then change 1", res)
	}
	if pg.value(collector.WALSyncMethod) != "open_datasync" || pg.value(collector.CheckpointCompletionTarget) != "0.5" {
		t.Errorf("after rollback --all: %s, %s", pg.value(collector.WALSyncMethod), pg.value(collector.CheckpointCompletionTarget))
	}
	for _, id := range []int{1, 2} {
		if !hasOutcome(t, m.Journal(), id, RolledBack) {
			t.Errorf("change %d has no rolled_back record", id)
		}
	}
	// Nothing left to roll back.
	if _, err := Rollback(context.Background(), m.Journal(), []Actuator{pg}, 1, w.clock, nil); err == nil || !strings.Contains(err.Error(), "not in effect") {
		t.Errorf("a second rollback of change 1: %v, want not in effect", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	m, err := New(Config{}, newWorld(newFakePG(nil, nil)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := m.Status()
	if st.Mode != ModeOff || len(st.Settings) != len(DefaultSettings()) || st.Reason == "" {
		t.Errorf("default status = %+v", st)
	}
	if _, err := ParseMode("yes"); err == nil {
		t.Errorf("ParseMode accepted yes")
	}
	if _, err := ParseSettings([]string{"shared_buffers"}); err == nil {
		t.Errorf("ParseSettings accepted shared_buffers")
	}
}

// neighbourStall makes the simulated server stall as writeback-stalls-wal sees it - a
// neighbour's pile of dirty pages, WAL flushes 100 ms slower, every active backend waiting on
// WAL I/O - for as long as
// stalls(knob value) says so, reading the live vm.dirty_background_bytes from the procfs tree.
func neighbourStall(t *testing.T, root string, stalls func(bg string) bool) func(s *collector.Snapshot) {
	var slowed float64 // WAL sync time the stall added, cumulative as the counter is
	return func(s *collector.Snapshot) {
		defer func() { s.Postgres.WAL.SyncTimeSeconds += slowed }()
		b, err := os.ReadFile(filepath.Join(root, "sys", "vm", "dirty_background_bytes"))
		if err != nil {
			t.Error(err)
			return
		}
		if !stalls(strings.TrimSpace(string(b))) {
			return
		}
		slowed += 10 // 100 ms more for each of the tick's 100 flushes
		s.Kernel.Meminfo.DirtyBytes, s.Kernel.Meminfo.WritebackBytes = 2<<30, 200<<20
		s.Postgres.WaitEvents = &collector.WaitEvents{Samples: 10, ActiveBackends: 40,
			Counts: map[string]int64{collector.EventIOWALSync: 20, collector.EventLWLockWALWrite: 20}}
	}
}

// writebackFindings are writeback-stalls-wal's pair of sysctl findings (a proven row's values).
func writebackFindings() []rules.Finding {
	return []rules.Finding{
		{Rule: "writeback-stalls-wal", Severity: rules.Warning, Setting: KnobDirtyBackgroundBytes,
			Current: "0 (ratio 10%)", Recommended: "67108864", Action: rules.ActionSysctl},
		{Rule: "writeback-stalls-wal", Severity: rules.Warning, Setting: KnobDirtyBytes,
			Current: "0 (ratio 20%)", Recommended: "268435456", Action: rules.ActionSysctl},
	}
}

func TestManagerKernel(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	root := procfsCopy(t)
	// The stall goes away once the background threshold is set: the change helped.
	w.kernel = neighbourStall(t, root, func(bg string) bool { return bg == "0" })
	sysctlFile := filepath.Join(t.TempDir(), "90-pgwal-advisor.conf")
	k := NewKernel(root, sysctlFile, nil)
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg, k)
	f := writebackFindings()[0]
	w.setFindings(f)
	runUntil(t, m, w, 40, "verification", func() bool { return hasOutcome(t, m.Journal(), 1, Verified) })
	recs, _, _ := m.Journal().Read()
	if old := recs[0].Old; old == nil || old.Value != "0" || old.Twin != "vm.dirty_background_ratio" || old.TwinValue != "10" || old.Persisted != nil {
		t.Errorf("intent's old value = %+v, want 0 with its ratio twin at 10 and nothing persisted", old)
	}
	if v := recordOf(t, m.Journal(), 1, Verified); !strings.Contains(v.Reason, FigureWritebackStall) {
		t.Errorf("verified by %q, want the stall (%s)", v.Reason, FigureWritebackStall)
	}
	if b, _ := os.ReadFile(sysctlFile); !strings.Contains(string(b), "vm.dirty_background_bytes = 67108864") {
		t.Errorf("sysctl file: %q", b)
	}
	if _, err := Rollback(context.Background(), m.Journal(), []Actuator{pg, k}, 1, w.clock, nil); err != nil {
		t.Fatal(err)
	}
	if got := readKnobFile(t, root, "dirty_background_bytes"); got != "0" {
		t.Errorf("after rollback dirty_background_bytes = %s", got)
	}
}

// A vm.dirty_* change that leaves the stall as it was is rolled back: kept only when it helped.
func TestManagerKernelDidNotHelp(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	root := procfsCopy(t)
	w.kernel = neighbourStall(t, root, func(string) bool { return true })
	sysctlFile := filepath.Join(t.TempDir(), "90-pgwal-advisor.conf")
	k := NewKernel(root, sysctlFile, nil)
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg, k)
	w.setFindings(writebackFindings()[0])
	// Before and after cannot show a gain, so a crossover trial alternates the knob (six periods
	// of 10 s) and its pairs cannot either.
	runUntil(t, m, w, 150, "rollback", func() bool { return hasOutcome(t, m.Journal(), 1, RolledBack) })
	if r := recordOf(t, m.Journal(), 1, RolledBack); !strings.Contains(r.Reason, "crossover trial, 4 pairs") || !strings.Contains(r.Reason, "did not help") {
		t.Errorf("rolled back because %q, want \"did not help\"", r.Reason)
	}
	if got := readKnobFile(t, root, "dirty_background_bytes"); got != "0" {
		t.Errorf("after the rollback dirty_background_bytes = %s, want 0", got)
	}
	if got := readKnobFile(t, root, "dirty_background_ratio"); got != "10" {
		t.Errorf("after the rollback dirty_background_ratio = %s, want 10", got)
	}
	if b, _ := os.ReadFile(sysctlFile); strings.Contains(string(b), "vm.dirty_background_bytes") {
		t.Errorf("the sysctl file still persists the rolled-back value: %q", b)
	}
}

// A read-only /proc/sys (a container): one line per knob saying so, both knobs stay advice,
// nothing is journaled or written, and the procfs tree and the sysctl file are as they were.
func TestManagerKernelReadOnly(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	root := procfsCopy(t)
	sysctlFile := filepath.Join(t.TempDir(), "90-pgwal-advisor.conf")
	k := NewKernel(root, sysctlFile, nil)
	k.writeCheck = func(path string) error {
		return &os.PathError{Op: "open", Path: path, Err: syscall.EROFS}
	}
	core, logs := observer.New(zap.InfoLevel)
	m, err := New(testConfig(t, w, ModeOn), w, []Actuator{pg, k}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	w.setFindings(writebackFindings()...)
	run(t, m, w, 30)
	if recs, _, _ := m.Journal().Read(); len(recs) != 0 {
		t.Errorf("changed a kernel setting on a read-only /proc/sys: %+v", recs)
	}
	for _, knob := range []string{KnobDirtyBackgroundBytes, KnobDirtyBytes} {
		said := logs.FilterMessageSnippet("stays advice").FilterField(zap.String("setting", knob))
		if said.Len() != 1 || !strings.Contains(m.Status().AdvisorOnly[knob], "read-only") {
			t.Errorf("%s: read-only /proc/sys said %d times; advisor_only %q", knob, said.Len(), m.Status().AdvisorOnly[knob])
		}
	}
	for knob, want := range map[string]string{"dirty_background_bytes": "0", "dirty_bytes": "0", "dirty_background_ratio": "10", "dirty_ratio": "20"} {
		if got := readKnobFile(t, root, knob); got != want {
			t.Errorf("%s = %s after a refused change, want %s", knob, got, want)
		}
	}
	if _, err := os.Stat(sysctlFile); !os.IsNotExist(err) {
		t.Errorf("a sysctl file was written on a read-only /proc/sys: %v", err)
	}

	// One knob of the pair unwritable: neither is changed (nothing half-applied).
	pg2 := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w2 := newWorld(pg2)
	root2 := procfsCopy(t)
	k2 := NewKernel(root2, filepath.Join(t.TempDir(), "90.conf"), nil)
	k2.writeCheck = func(path string) error {
		if strings.HasSuffix(path, "dirty_ratio") {
			return &os.PathError{Op: "open", Path: path, Err: syscall.EROFS}
		}
		return nil
	}
	m2 := newTestManager(t, testConfig(t, w2, ModeOn), w2, pg2, k2)
	w2.setFindings(writebackFindings()...)
	run(t, m2, w2, 30)
	if recs, _, _ := m2.Journal().Read(); len(recs) != 0 {
		t.Errorf("changed one knob of the pair while the other was refused: %+v", recs)
	}
	if got := readKnobFile(t, root2, "dirty_background_bytes"); got != "0" {
		t.Errorf("dirty_background_bytes = %s, want it untouched", got)
	}
}

// TestManagerWindowsRestartOnRoleChange (issue 31): a switchover during a change's verification
// does not let the verdict compare across it: the window after the change starts again when
// the server is primary again, and a window never holds another role's figures.
func TestManagerWindowsRestartOnRoleChange(t *testing.T) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "open_datasync"}, nil)
	w := newWorld(pg)
	w.sysid = "7400000000000000001"
	m := newTestManager(t, testConfig(t, w, ModeOn), w, pg)
	w.setFindings(syncFinding("open_datasync", "fdatasync"))
	runUntil(t, m, w, 30, "the change", func() bool { return pg.value(collector.WALSyncMethod) == "fdatasync" })
	run(t, m, w, 4)
	w.mu.Lock()
	w.standby = true // a switchover: this member is a standby now
	w.mu.Unlock()
	run(t, m, w, 3)
	if hasOutcome(t, m.Journal(), 1, Verified) {
		t.Fatal("verified while the server was a standby")
	}
	w.mu.Lock()
	w.standby = false // and the leader again
	w.mu.Unlock()
	back := w.clock().Add(time.Second) // the next snapshot's time
	runUntil(t, m, w, 40, "verification", func() bool { return hasOutcome(t, m.Journal(), 1, Verified) })
	v := recordOf(t, m.Journal(), 1, Verified)
	if v.Time.Before(back.Add(10 * time.Second)) {
		t.Errorf("verified at %v, %v after the server was primary again: the window (10s) held figures from before the switchover", v.Time, v.Time.Sub(back))
	}

	// Another server behind --dsn (a new system identifier) restarts the figures too: no new
	// change starts before a window of its own snapshots.
	w.mu.Lock()
	w.sysid = "7400000000000000002"
	w.mu.Unlock()
	run(t, m, w, 6) // past the cool-down (5s), short of a window (10s)
	if !strings.Contains(m.Status().Waiting, "need") {
		t.Errorf("after a new system identifier status.waiting = %q, want the window before a change measured again", m.Status().Waiting)
	}
}
