package apply

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// driftWorld is a world where wal_sync_method does not matter (fdatasync and fsync cost the
// same, 0.05 s/MB) and the load's WAL cost per MB drifts up by 1% a second, with 5% noise: the window
// after any change looks worse than the one before it.
func driftWorld(t *testing.T, seed uint64) (*world, *fakePG) {
	pg := newFakePG(map[string]string{collector.WALSyncMethod: "fdatasync"}, nil)
	w := newWorld(pg)
	w.cost["fdatasync"] = [2]float64{0.05, 0.10}
	w.cost["fsync"] = w.cost["fdatasync"]
	rng := rand.New(rand.NewPCG(seed, 1))
	var extra float64
	tick := 0
	w.kernel = func(s *collector.Snapshot) {
		tick++
		// 8 MB a tick at 0.05 s/MB, times the drift and the noise.
		extra += 8 * 0.05 * (0.01*float64(tick) + 0.05*rng.NormFloat64())
		s.Postgres.WAL.SyncTimeSeconds += extra
	}
	return w, pg
}

// smallFinding recommends fsync over fdatasync with a prediction of a 2% gain: within three
// times what one window can detect here, so before and after cannot judge it.
func smallFinding() rules.Finding {
	return rules.Finding{Rule: "sync-method-slow", Severity: rules.Warning, Setting: collector.WALSyncMethod,
		Current: "fdatasync", Recommended: "fsync", Action: rules.ActionReload, Summary: "test",
		Predicted: &rules.Predicted{Name: rules.PredictWALIO, Current: 0.05, Value: 0.049, Unit: rules.UnitSecondsPerMB, Basis: "test"}}
}

// TestManagerCrossoverCancelsDrift (issue 32): a change that does nothing, under a load that
// drifts. Judged before/after it is rolled back as worse (the drift); with the crossover trial
// the old and new values alternate (journaled switch by switch), the pairs' drift cancels, and
// the change is kept as unconfirmed with its interval.
func TestManagerCrossoverCancelsDrift(t *testing.T) {
	w, pg := driftWorld(t, 1)
	cfg := testConfig(t, w, ModeOn)
	cfg.NoCrossover = true
	m := newTestManager(t, cfg, w, pg)
	w.setFindings(smallFinding())
	runUntil(t, m, w, 80, "the before/after verdict", func() bool { return hasOutcome(t, m.Journal(), 1, RolledBack) })
	r := recordOf(t, m.Journal(), 1, RolledBack)
	t.Logf("before/after's verdict: %s", r.Reason)
	if !strings.Contains(r.Reason, "worse: wal_io_seconds_per_mb") {
		t.Errorf("before/after under drift: rolled back with %q, want the drift called worse", r.Reason)
	}

	w, pg = driftWorld(t, 1)
	m = newTestManager(t, testConfig(t, w, ModeOn), w, pg)
	w.setFindings(smallFinding())
	runUntil(t, m, w, 150, "the crossover's verdict", func() bool { return hasOutcome(t, m.Journal(), 1, Verified) })
	recs, _, err := m.Journal().Read()
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, r := range recs {
		if r.Outcome == Trial {
			if r.Trial == nil {
				t.Fatalf("a trial record without its step: %+v", r)
			}
			steps = append(steps, oldNew(r.Trial.New))
			if r.Trial.Period > 1 && (r.Live == nil || r.Live.Value != map[bool]string{true: "fsync", false: "fdatasync"}[r.Trial.New]) {
				t.Errorf("trial record for period %d says live %+v", r.Trial.Period, r.Live)
			}
		}
	}
	if got := strings.Join(steps, ","); got != "new,old,new,old" {
		t.Errorf("trial records: %s, want the start (new) and three switches: new,old,new,old", got)
	}
	v := recordOf(t, m.Journal(), 1, Verified)
	t.Logf("the trial's verdict: %s", v.Reason)
	if !v.Unconfirmed || !strings.Contains(v.Reason, "crossover trial, 4 pairs") || !strings.Contains(v.Reason, "4 pairs)") {
		t.Errorf("verified %q (unconfirmed %v), want unconfirmed over 4 pairs with the interval", v.Reason, v.Unconfirmed)
	}
	if got := pg.value(collector.WALSyncMethod); got != "fsync" {
		t.Errorf("after the trial wal_sync_method = %s, want the kept fsync", got)
	}
	if st := m.Status().Changes[0]; st.State != StateUnconfirmed || len(st.Verdict) == 0 || st.Verdict[0].Effect == nil || st.Verdict[0].Effect.Pairs != 4 {
		t.Errorf("status of the change: %+v, want unconfirmed with the pairs' interval", st)
	}
}

// TestManagerCrossoverCrash (issue 32): a daemon that stops during a trial leaves the journal
// with a trial record; the next one (crash recovery) puts the old value back, whichever period
// the trial was in, and records the change rolled back, not rejected.
func TestManagerCrossoverCrash(t *testing.T) {
	for _, period := range []string{"new", "old"} {
		t.Run("in a period of the "+period+" value", func(t *testing.T) {
			w, pg := driftWorld(t, 2)
			cfg := testConfig(t, w, ModeOn)
			m := newTestManager(t, cfg, w, pg)
			w.setFindings(smallFinding())
			want := map[string]string{"new": "fsync", "old": "fdatasync"}[period]
			runUntil(t, m, w, 100, "a trial period of the "+period+" value", func() bool {
				return m.trial != nil && oldNew(crossoverPeriods[m.trial.k]) == period && pg.value(collector.WALSyncMethod) == want
			})
			// The daemon is gone; another starts on the same journal.
			w.setFindings()
			m2 := newTestManager(t, cfg, w, pg)
			run(t, m2, w, 2)
			if got := pg.value(collector.WALSyncMethod); got != "fdatasync" {
				t.Errorf("after recovery wal_sync_method = %s, want the old fdatasync", got)
			}
			rb := recordOf(t, m2.Journal(), 1, RolledBack)
			if !strings.Contains(rb.Reason, "crossover trial that did not finish") || hasOutcome(t, m2.Journal(), 1, Rejected) {
				t.Errorf("recovery recorded %q (rejected %v), want rolled back, not rejected", rb.Reason, hasOutcome(t, m2.Journal(), 1, Rejected))
			}
			if _, err := Rollback(context.Background(), m2.Journal(), []Actuator{pg}, 0, w.clock, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
