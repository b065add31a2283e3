package apply

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestApplyCrossoverRealServer (issue 32): on a real server under seed 001's load, a change
// predicted too small for one window to judge (fdatasync -> fsync, 1% less WAL I/O, injected) goes
// into a crossover trial: each switch is made on the server (ALTER SYSTEM and a reload, through
// the guard) and journaled with the value the server runs. The daemon stops in a period of the
// new value, as a crash leaves it; the next one puts the old value back (postgresql.auto.conf
// reset: the setting comes from lab.conf again) and records the change rolled back, not
// rejected.
func TestApplyCrossoverRealServer(t *testing.T) {
	t.Parallel()
	r := newSeedRig(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "fdatasync", "track_wal_io_timing": "on"})
	src := injected{src: r.adv, f: rules.Finding{Rule: "injected-small", Severity: rules.Warning, Setting: collector.WALSyncMethod,
		Current: "fdatasync", Recommended: "fsync", Action: rules.ActionReload, Summary: "a change too small to judge in one window, injected by the test",
		Predicted: &rules.Predicted{Name: rules.PredictWALIO, Current: 0.02, Value: 0.0198, Unit: rules.UnitSecondsPerMB, Basis: "test"}}}
	cfg := Config{Mode: ModeOn, Settings: []string{collector.WALSyncMethod}, Journal: r.journal,
		VerifyWindow: 8 * time.Second, Cooldown: time.Second, MaxPerDay: DefaultMaxPerDay, RejectFor: time.Hour, PollInterval: 200 * time.Millisecond}
	m, err := New(cfg, src, []Actuator{newPostgres(t, r.c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	stop := runManager(m)
	t.Cleanup(stop) // stop may run twice: the second returns at once
	j := NewJournal(r.journal)
	// Period 4 runs the new value again, after the switches to the old one (period 2) and back.
	waitFor(t, 2*time.Minute, "the crossover trial's period 4 (the new value, after a switch to the old and back)", m, func() bool {
		recs, _, _ := j.Read()
		for _, rec := range recs {
			if rec.Outcome == Trial && rec.Trial != nil && rec.Trial.Period == 4 {
				return true
			}
		}
		return hasOutcome(t, j, 1, Verified) || hasOutcome(t, j, 1, RolledBack)
	}, r)
	stop()
	recs, _, _ := j.Read()
	var steps []string
	for _, rec := range recs {
		if rec.Outcome != Trial {
			continue
		}
		steps = append(steps, oldNew(rec.Trial.New))
		want := map[bool]string{true: "fsync", false: "fdatasync"}[rec.Trial.New]
		if rec.Trial.Period > 1 && (rec.Live == nil || rec.Live.Value != want) {
			t.Errorf("trial record of period %d: the server ran %+v, want %s", rec.Trial.Period, rec.Live, want)
		}
	}
	if got := strings.Join(steps, ","); got != "new,old,new" {
		t.Fatalf("trial records %s, want new,old,new (the start, the switch to the old value and back)", got)
	}
	if val, _, _ := lab.ReadSetting(t, r.c, collector.WALSyncMethod); val != "fsync" {
		t.Fatalf("in period 4 the server runs %s, want fsync", val)
	}

	// The daemon is gone mid-trial; the next one recovers.
	m2, err := New(cfg, src, []Actuator{newPostgres(t, r.c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "recovery of the unfinished trial", m2, func() bool {
		m2.Step(context.Background()) //nolint:errcheck // judged by the journal
		return hasOutcome(t, j, 1, RolledBack)
	}, r)
	if val, src, file := lab.ReadSetting(t, r.c, collector.WALSyncMethod); val != "fdatasync" || src != "configuration file" || !strings.HasSuffix(file, "lab.conf") {
		t.Errorf("after recovery wal_sync_method = %s from %s %s, want fdatasync from lab.conf", val, src, file)
	}
	if rb := recordOf(t, j, 1, RolledBack); !strings.Contains(rb.Reason, "did not finish") || hasOutcome(t, j, 1, Rejected) {
		t.Errorf("recovery recorded %q (rejected %v), want rolled back after an unfinished trial, not rejected", rb.Reason, hasOutcome(t, j, 1, Rejected))
	}
}
