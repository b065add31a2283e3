package apply

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func newSampler(t *testing.T, c *lab.Cluster) *advisor.Sampler {
	t.Helper()
	pg := postgres.New(c.DSN(), postgres.Options{Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { pg.Close(context.Background()) })
	return &advisor.Sampler{Postgres: pg, Kernel: kernel.New("/proc"), Storage: storage.New("/proc", "/sys")}
}

func newPostgres(t *testing.T, dsn string) *Postgres {
	t.Helper()
	p := NewPostgres(dsn, PostgresOptions{ConfirmTimeout: 10 * time.Second, Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// waitSetting waits until a new connection sees name = want (after a reload).
func waitSetting(t *testing.T, c *lab.Cluster, name, want string) {
	t.Helper()
	for range 100 {
		if v, _, _ := lab.ReadSetting(t, c, name); v == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	v, _, _ := lab.ReadSetting(t, c, name)
	t.Fatalf("%s = %s, want %s", name, v, want)
}

// TestPostgresActuator covers the actuator on a real server: a setting from lab.conf, one
// from postgresql.auto.conf, a restart-context one, and a role without the privileges.
func TestPostgresActuator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"checkpoint_completion_target": "0.5"}})
	p := newPostgres(t, c.DSN())

	// From lab.conf: rollback returns it there (ALTER SYSTEM RESET).
	old, err := p.Read(ctx, "checkpoint_completion_target")
	if err != nil {
		t.Fatal(err)
	}
	if old.Value != "0.5" || old.Source != "configuration file" || !strings.HasSuffix(old.SourceFile, "lab.conf") || old.AutoConf != nil {
		t.Fatalf("old = %+v, want 0.5 from lab.conf, nothing in postgresql.auto.conf", old)
	}
	live, err := p.Set(ctx, "checkpoint_completion_target", "0.9")
	if err != nil {
		t.Fatal(err)
	}
	if live.Value != "0.9" || !strings.HasSuffix(live.SourceFile, "postgresql.auto.conf") {
		t.Errorf("after Set: %+v", live)
	}
	if _, err := p.Restore(ctx, "checkpoint_completion_target", old); err != nil {
		t.Fatal(err)
	}
	if v, src, file := lab.ReadSetting(t, c, "checkpoint_completion_target"); v != "0.5" || src != "configuration file" || !strings.HasSuffix(file, "lab.conf") {
		t.Errorf("after Restore: %s from %s %s, want 0.5 from lab.conf", v, src, file)
	}

	// From postgresql.auto.conf (an operator's ALTER SYSTEM): rollback sets it back there.
	if err := c.Exec(ctx, "ALTER SYSTEM SET max_wal_size = '2GB'"); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	waitSetting(t, c, "max_wal_size", "2GB")
	old, err = p.Read(ctx, "max_wal_size")
	if err != nil {
		t.Fatal(err)
	}
	if old.AutoConf == nil || *old.AutoConf != "2GB" {
		t.Fatalf("old = %+v, want postgresql.auto.conf's 2GB", old)
	}
	if _, err := p.Set(ctx, "max_wal_size", "4GB"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Restore(ctx, "max_wal_size", old); err != nil {
		t.Fatal(err)
	}
	if v, _, file := lab.ReadSetting(t, c, "max_wal_size"); v != "2GB" || !strings.HasSuffix(file, "postgresql.auto.conf") {
		t.Errorf("after Restore: max_wal_size %s from %s, want 2GB from postgresql.auto.conf", v, file)
	}

	// Restart context: written, pending restart, never restarted by the actuator.
	old, err = p.Read(ctx, "wal_buffers")
	if err != nil {
		t.Fatal(err)
	}
	live, err = p.Set(ctx, "wal_buffers", "16MB")
	if err != nil {
		t.Fatal(err)
	}
	if !live.PendingRestart || live.Value != old.Value {
		t.Errorf("after Set of wal_buffers: %+v, want the old value running and pending_restart", live)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := lab.ReadSetting(t, c, "wal_buffers"); v != "16MB" {
		t.Fatalf("after the restart wal_buffers = %s", v)
	}
	live, err = p.Restore(ctx, "wal_buffers", old)
	if err != nil {
		t.Fatal(err)
	}
	if !live.PendingRestart || live.Value != "16MB" {
		t.Errorf("restore after the restart: %+v, want 16MB running and pending_restart", live)
	}

	// A role without the privileges: Writable says what to grant; with them, it may.
	for _, sql := range []string{"CREATE ROLE advisor LOGIN", "GRANT pg_monitor TO advisor"} {
		if err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ap := newPostgres(t, strings.Replace(c.DSN(), "user=postgres", "user=advisor", 1))
	err = ap.Writable(ctx, "wal_sync_method")
	if err == nil || !strings.Contains(err.Error(), "GRANT ALTER SYSTEM ON PARAMETER wal_sync_method TO advisor") || !strings.Contains(err.Error(), "GRANT EXECUTE ON FUNCTION pg_reload_conf() TO advisor") {
		t.Errorf("Writable without grants = %v, want both GRANTs", err)
	}
	if _, err := ap.Set(ctx, "wal_sync_method", "fsync"); err == nil || !strings.Contains(err.Error(), "GRANT") {
		t.Errorf("Set without grants = %v, want a refusal naming the GRANT", err)
	}
	for _, sql := range []string{"GRANT ALTER SYSTEM ON PARAMETER wal_sync_method TO advisor", "GRANT EXECUTE ON FUNCTION pg_reload_conf() TO advisor"} {
		if err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := ap.Writable(ctx, "wal_sync_method"); err != nil {
		t.Errorf("Writable with grants: %v", err)
	}
	old, err = ap.Read(ctx, "wal_sync_method")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ap.Set(ctx, "wal_sync_method", "fsync"); err != nil {
		t.Fatalf("Set with grants: %v", err)
	}
	if _, err := ap.Restore(ctx, "wal_sync_method", old); err != nil {
		t.Fatal(err)
	}
	if v, src, _ := lab.ReadSetting(t, c, "wal_sync_method"); v != old.Value || src != old.Source {
		t.Errorf("after Restore by the granted role: %s (%s), want %s (%s)", v, src, old.Value, old.Source)
	}

	// A password never shows in an error.
	bad := newPostgres(t, "host=127.0.0.1 port=1 user=x password=sekrit connect_timeout=1")
	if _, err := bad.Read(ctx, "wal_sync_method"); err == nil || strings.Contains(err.Error(), "sekrit") {
		t.Errorf("error with the server down: %v", err)
	}
}

// seedRig is seed 001 on the simulated 4 ms disk: a batched bulk load into a cluster whose WAL
// is on the disk, an advisor probing the disk and evaluating with thresholds for seconds, and
// an apply manager over it.
type seedRig struct {
	c       *lab.Cluster
	disk    *simdisk.Disk
	adv     *advisor.Advisor
	journal string
}

func newSeedRig(t *testing.T, settings map[string]string) *seedRig {
	t.Helper()
	lab.RequireServer(t)
	disk := simdisk.MountForTest(t, simdisk.Options{Latency: 4 * time.Millisecond})
	mnt := disk.Mountpoint()
	ctx := context.Background()
	probeDir := filepath.Join(mnt, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered after the disk's cleanup, so the cluster stops before the disk is unmounted.
	c := lab.NewTestCluster(t, lab.ClusterOptions{WALDir: filepath.Join(mnt, "wal"), Settings: settings})

	// The load runs until the test ends; it reconnects after a restart.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for loadCtx.Err() == nil {
			// Batches, because pg_stat_wal counts a backend's WAL only at transaction end.
			if _, err := c.BatchedLoad(loadCtx, "foo", 10000000, 20000); err != nil && loadCtx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()

	th := rules.DefaultThresholds()
	th.RaiseAfter, th.ClearAfter, th.MinSpan, th.Window = 2*time.Second, 3*time.Second, 5*time.Second, 10*time.Second
	adv, err := advisor.New(newSampler(t, c), advisor.Config{
		Interval: time.Second, WaitInterval: 100 * time.Millisecond, HistoryWindow: 2 * time.Minute,
		ProbeDir: probeDir, Probe: probes.SchedulerConfig{Burst: 2 * time.Second, Interval: time.Minute},
		Thresholds: th,
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	advCtx, stopAdv := context.WithCancel(ctx)
	advDone := make(chan struct{})
	go func() {
		defer close(advDone)
		if err := adv.Run(advCtx); err != nil {
			t.Errorf("advisor: %v", err)
		}
	}()
	// Stopped before the cluster and the disk (cleanups run last registered first).
	t.Cleanup(func() {
		stopAdv()
		<-advDone
		stopLoad()
		wg.Wait()
	})
	return &seedRig{c: c, disk: disk, adv: adv, journal: filepath.Join(t.TempDir(), "apply.journal")}
}

// startManager runs a manager for wal_sync_method over src until the test ends.
func (r *seedRig) startManager(t *testing.T, src StateSource) *Manager {
	t.Helper()
	m, err := New(Config{
		Mode: ModeOn, Settings: []string{collector.WALSyncMethod}, Journal: r.journal,
		VerifyWindow: 6 * time.Second, Cooldown: 2 * time.Second, MaxPerDay: DefaultMaxPerDay, RejectFor: time.Hour, PollInterval: 200 * time.Millisecond,
	}, src, []Actuator{newPostgres(t, r.c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runManager(m))
	return m
}

// untried drops a crossover trial's records from a change's outcomes: under the suite's load the
// first window after a change may not judge it, and the trial that follows (docs/apply.md,
// "Crossover trials") reaches the same verdict by its pairs.
func untried(outcomes []string) []string {
	var out []string
	for _, o := range outcomes {
		if o != string(Trial) {
			out = append(out, o)
		}
	}
	return out
}

// runManager runs m until the returned stop is called; stop waits for Run to return.
func runManager(m *Manager) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// waitFor polls cond until it holds or the timeout passes; the failure shows the manager's
// status and, with a rig, the advisor's findings and what its rules still lacked.
func waitFor(t *testing.T, timeout time.Duration, what string, m *Manager, cond func() bool, rig ...*seedRig) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, r := range rig {
				st := r.adv.State()
				for _, f := range st.Findings {
					fmt.Fprintf(&b, "\n  finding %s %s: %s -> %s (%s)", f.Rule, f.Setting, f.Current, f.Recommended, f.Action)
				}
				for rule, why := range st.NotEnoughData {
					fmt.Fprintf(&b, "\n  not enough data: %s: %s", rule, why)
				}
				fmt.Fprintf(&b, "\n  probe report: %v (%s)", st.Probe != nil, st.ProbeDisabledReason)
			}
			t.Fatalf("%s did not happen within %v; apply status: %+v%s", what, timeout, m.Status(), b.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func logComparison(t *testing.T, r Record) {
	for _, c := range r.Comparison {
		t.Logf("%s: %s %.4g -> %.4g (%s)", r.Outcome, c.Name, c.Before, c.After, c.Verdict)
	}
}

// TestApplySeed001 is acceptance (1) and (3): on seed 001's slow start (open_datasync, 64kB,
// 4 ms per sync) the manager applies fdatasync (or fsync, when the probe measures it faster on
// this machine's disk at the time: both are seed 001's fix), verifies that the figures got
// better and journals it all; then an operator's ALTER SYSTEM makes it back off.
func TestApplySeed001(t *testing.T) {
	t.Parallel()
	r := newSeedRig(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync", "track_wal_io_timing": "on"})
	m := r.startManager(t, r.adv)
	j := NewJournal(r.journal)
	waitFor(t, 90*time.Second, "verification of fdatasync", m, func() bool { return hasOutcome(t, j, 1, Verified) || hasOutcome(t, j, 1, RolledBack) }, r)
	if got, want := strings.Join(untried(outcomes(t, j, 1)), ","), "intent,applied,verified"; got != want {
		t.Fatalf("journal of change 1 = %s, want %s", got, want)
	}
	recs, _, _ := j.Read()
	in := recs[0]
	if in.Setting != collector.WALSyncMethod || (in.New != "fdatasync" && in.New != "fsync") || in.Old.Value != "open_datasync" || !strings.HasSuffix(in.Old.SourceFile, "lab.conf") || in.Before == nil {
		t.Errorf("intent = %+v, want open_datasync (lab.conf) -> fdatasync or fsync with the figures before", in)
	}
	applied, operators := in.New, "fsync"
	if applied == "fsync" {
		operators = "fdatasync"
	}
	v := recordOf(t, j, 1, Verified)
	logComparison(t, v)
	better := 0
	for _, c := range v.Comparison {
		if c.Verdict == VerdictBetter {
			better++
		}
		if c.Verdict == VerdictWorse {
			t.Errorf("%s got worse: %+v", c.Name, c)
		}
	}
	if better == 0 {
		t.Errorf("verified without a better figure: %+v", v.Comparison)
	}
	// The rule's prediction went into the intent, and the verification reports it against what
	// it measured (or why it could not measure it).
	if p := in.Predicted; p == nil {
		t.Errorf("intent without the finding's prediction: %+v", in)
	} else if !strings.Contains(v.Reason, "predicted "+p.Name) {
		t.Errorf("verified reason %q does not report the prediction of %s", v.Reason, p.Name)
	} else if c := v.PredictionCheck; c != nil && (c.Name != p.Name || c.Current != p.Current || c.Predicted != p.Value) {
		t.Errorf("prediction check %+v is not of the intent's prediction %+v", *c, *p)
	} else {
		t.Logf("prediction (%s): %s", p.Basis, v.Reason)
	}
	if val, _, file := lab.ReadSetting(t, r.c, collector.WALSyncMethod); val != applied || !strings.HasSuffix(file, "postgresql.auto.conf") {
		t.Errorf("wal_sync_method = %s from %s, want %s from postgresql.auto.conf", val, file, applied)
	}

	// An operator takes over.
	ctx := context.Background()
	if err := r.c.Exec(ctx, "ALTER SYSTEM SET wal_sync_method = '"+operators+"'"); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "backing off", m, func() bool { return hasOutcome(t, j, 1, Abandoned) })
	time.Sleep(3 * time.Second) // a few more cycles: nothing more may happen
	if got, want := strings.Join(untried(outcomes(t, j, 1)), ","), "intent,applied,verified,abandoned"; got != want {
		t.Errorf("journal of change 1 = %s, want %s", got, want)
	}
	recs, _, _ = j.Read()
	for _, rec := range recs {
		if rec.Kind == KindIntent && rec.ID != 1 {
			t.Errorf("a change after the operator's: %+v", rec)
		}
	}
	if val, _, _ := lab.ReadSetting(t, r.c, collector.WALSyncMethod); val != operators {
		t.Errorf("wal_sync_method = %s, want the operator's %s", val, operators)
	}
	st := m.Status()
	if len(st.Changes) == 0 || st.Changes[0].State != string(Abandoned) {
		t.Errorf("status = %+v, want change 1 abandoned", st.Changes)
	}
}

// injected adds a finding to the advisor's state: a recommendation the rules would not make.
type injected struct {
	src StateSource
	f   rules.Finding
}

func (s injected) State() advisor.State {
	st := s.src.State()
	if st.Snapshot != nil {
		st.Findings = append(append([]rules.Finding(nil), st.Findings...), s.f)
		st.Recommendations = rules.Resolve(rules.All(), st.Findings).Recommendations
	}
	return st
}

// TestApplyRegressionRolledBack is acceptance (2): a change whose window after is worse (back
// to open_datasync under seed 001's load, 4 ms per sync) is rolled back to exactly what was
// there, rejected, and not proposed again, also by a new manager on the same journal.
func TestApplyRegressionRolledBack(t *testing.T) {
	t.Parallel()
	r := newSeedRig(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "fdatasync", "track_wal_io_timing": "on"})
	src := injected{src: r.adv, f: rules.Finding{Rule: "injected-regression", Severity: rules.Warning, Setting: collector.WALSyncMethod,
		Current: "fdatasync", Recommended: "open_datasync", Action: rules.ActionReload, Summary: "a bad recommendation, injected by the test"}}
	m := r.startManager(t, src)
	j := NewJournal(r.journal)
	waitFor(t, 90*time.Second, "the rollback", m, func() bool { return hasOutcome(t, j, 1, Rejected) || hasOutcome(t, j, 1, Verified) }, r)
	if got, want := strings.Join(untried(outcomes(t, j, 1)), ","), "intent,applied,rolled_back,rejected"; got != want {
		t.Fatalf("journal of change 1 = %s, want %s", got, want)
	}
	rb := recordOf(t, j, 1, RolledBack)
	logComparison(t, rb)
	if rb.Before == nil || rb.After == nil || !strings.Contains(rb.Reason, "worse") {
		t.Errorf("rolled_back record without its evidence: %+v", rb)
	}
	if val, src, file := lab.ReadSetting(t, r.c, collector.WALSyncMethod); val != "fdatasync" || src != "configuration file" || !strings.HasSuffix(file, "lab.conf") {
		t.Errorf("after the rollback wal_sync_method = %s from %s %s, want fdatasync from lab.conf", val, src, file)
	}
	// The rules' own findings from the bad window (fdatasync, back) clear after the tracker's
	// hysteresis; then the injected finding alone is refused for its rejection.
	waitFor(t, 15*time.Second, "the refusal of the rejected value", m, func() bool {
		for _, r := range m.Status().Refused {
			if r.Setting == collector.WALSyncMethod && strings.Contains(r.Reason, "not proposed again") {
				return true
			}
		}
		return false
	})
	// A new manager (a restart of the daemon) remembers the rejection.
	m2, err := New(Config{Mode: ModeOn, Settings: []string{collector.WALSyncMethod}, Journal: r.journal, VerifyWindow: time.Second},
		src, []Actuator{newPostgres(t, r.c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		time.Sleep(time.Second)
		if err := m2.Step(context.Background()); err != nil {
			t.Errorf("step: %v", err)
		}
	}
	recs, _, _ := j.Read()
	for _, rec := range recs {
		if rec.Kind == KindIntent && rec.ID != 1 {
			t.Errorf("the rejected recommendation was applied again: %+v", rec)
		}
	}
	if st := m2.Status(); len(st.Holds) != 1 || st.Holds[0].Value != "open_datasync" {
		t.Errorf("new manager's holds = %+v, want the rejection of open_datasync", st.Holds)
	}
}

// sampling is a StateSource that takes a fresh snapshot at each call.
type sampling struct {
	ctx context.Context
	s   *advisor.Sampler
}

func (s sampling) State() advisor.State {
	snap := s.s.Sample(s.ctx)
	return advisor.State{Snapshot: &snap}
}

// TestApplyCrashReconciled is acceptance (4): intents without an outcome, as a crash between
// the two leaves them, are reconciled against the live values when a manager starts.
func TestApplyCrashReconciled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	p := newPostgres(t, c.DSN())
	journal := filepath.Join(t.TempDir(), "apply.journal")
	j := NewJournal(journal)
	intent := func(name, to string) {
		t.Helper()
		old, err := p.Read(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		before := &Figures{Figures: []Figure{{Name: FigureFlushWaitShare, Value: 0.5, Samples: 100, Enough: true, Judged: true}}}
		if _, err := j.Append(Record{Time: time.Now(), Kind: KindIntent, Origin: OriginDaemon, Setting: name, Action: rules.ActionReload,
			Old: &old, New: to, Before: before}); err != nil {
			t.Fatal(err)
		}
	}
	// 1: the change was made, the outcome not written.
	intent("wal_sync_method", "fsync")
	// 2: ALTER SYSTEM was written, the reload never happened.
	intent("checkpoint_completion_target", "0.5")
	// 3: someone else changed the setting meanwhile.
	intent("max_wal_size", "2GB")
	for _, sql := range []string{
		"ALTER SYSTEM SET wal_sync_method = 'fsync'", "SELECT pg_reload_conf()",
	} {
		if err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	waitSetting(t, c, "wal_sync_method", "fsync")
	for _, sql := range []string{"ALTER SYSTEM SET max_wal_size = '4GB'", "SELECT pg_reload_conf()"} {
		if err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	waitSetting(t, c, "max_wal_size", "4GB")
	// Every backend rereads the files when it handles the reload's signal, at its next query:
	// the actuator's session must have done so before the unreloaded ALTER SYSTEM below.
	for v := ""; v != "4GB"; time.Sleep(50 * time.Millisecond) {
		got, err := p.Read(ctx, "max_wal_size")
		if err != nil {
			t.Fatal(err)
		}
		v = got.Value
	}
	// After the reload, so that it stays unapplied.
	if err := c.Exec(ctx, "ALTER SYSTEM SET checkpoint_completion_target = '0.5'"); err != nil {
		t.Fatal(err)
	}

	m, err := New(Config{Mode: ModeOn, Settings: []string{"wal_sync_method", "checkpoint_completion_target", "max_wal_size"}, Journal: journal, VerifyWindow: time.Hour},
		sampling{ctx, newSampler(t, c)}, []Actuator{p}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Step(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int]string{1: "intent,applied", 2: "intent,failed", 3: "intent,abandoned"} {
		if got := strings.Join(outcomes(t, j, id), ","); got != want {
			t.Errorf("change %d: journal %s, want %s", id, got, want)
		}
	}
	st := m.Status()
	states := map[string]string{}
	for _, c := range st.Changes {
		states[c.Setting] = c.State
	}
	if states["wal_sync_method"] != StateVerifying {
		t.Errorf("wal_sync_method is %s, want its verification to go on", states["wal_sync_method"])
	}
	// The half-made change is gone from postgresql.auto.conf: a reload keeps the old value.
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if v, src, _ := lab.ReadSetting(t, c, "checkpoint_completion_target"); v != "0.9" || src != "default" {
		t.Errorf("checkpoint_completion_target = %s (%s) after a reload, want the default 0.9", v, src)
	}
	if v, _, _ := lab.ReadSetting(t, c, "max_wal_size"); v != "4GB" {
		t.Errorf("max_wal_size = %s, want the other party's 4GB left alone", v)
	}
}
