package apply

import (
	"context"
	"fmt"
	"maps"

	"go.uber.org/zap"
)

// reconcile settles the unsettled changes - intents without an outcome, left by a crash
// between the intent and its outcome, and changes whose undo failed (undo_failed) - against
// the live values:
//   - the new value is live: applied, and verification goes on with the figures the intent
//     recorded from before the change;
//   - the old value is live: the change never took effect; its old configuration is restored
//     (ALTER SYSTEM may have written the file without the reload, a sysctl.d line may be
//     written) and the change recorded failed;
//   - anything else: someone else changed the setting meanwhile; abandoned.
//
// It returns why new changes must wait (an intent that could not be settled yet).
func (m *Manager) reconcile(ctx context.Context, l *ledger) (string, error) {
	var open []*change
	for _, c := range l.changes {
		if c.unsettled() || c.Last() == Trial && (m.trial == nil || m.trial.id != c.ID()) {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return "", nil
	}
	unlock, ok, err := m.journal.lockChanges(false)
	if err != nil {
		return "an unresolved intent in the journal", err
	}
	if !ok {
		return "another process is making a change (the journal's change lock is held)", nil
	}
	defer unlock()
	for _, c := range open {
		if err := m.reconcileOne(ctx, l, c); err != nil {
			return fmt.Sprintf("change %d (%s) is unsettled (%s) and could not be reconciled yet", c.ID(), c.Intent.Setting, unsettledWhy(c)), err
		}
	}
	return "", nil
}

func (m *Manager) reconcileOne(ctx context.Context, l *ledger, c *change) error {
	in := c.Intent
	if err := refuseSetting(in.Setting); err != nil {
		// Crash recovery acts on a journal, which is input: a record the guard refuses is
		// settled as failed without reading or writing the setting.
		m.logger.Warn("apply: journal record refused", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.Error(err))
		_, jerr := m.record(l, m.outcome(c, Failed, "reconciled after a crash: refused by the apply guard: "+err.Error(), nil))
		return jerr
	}
	a := m.actuator(in.Setting)
	if a == nil || in.Old == nil {
		_, err := m.record(l, m.outcome(c, Failed, "reconciled after a crash: no actuator or no recorded old value to check the change against; check "+in.Setting+" by hand", nil))
		return err
	}
	live, err := a.Read(ctx, in.Setting)
	if err != nil {
		return fmt.Errorf("reconcile change %d: %w", c.ID(), err)
	}
	if m.leftElsewhere(c, live) {
		return nil // unsettled until the daemon or rollback reaches its own server
	}
	if c.Last() == Trial {
		return m.reconcileTrial(ctx, l, c, a, live)
	}
	restartCtx := in.Old.Context == "postmaster"
	why := "reconciled after " + unsettledWhy(c)
	var rec Record
	switch {
	case sameValue(in.Setting, live.Value, in.New) && unpersisted(in.Setting, live, in.New):
		// Set again: it finds the kernel as it wants it and writes the sysctl.d file.
		done, err := a.Set(ctx, in.Setting, in.New)
		if err != nil {
			return fmt.Errorf("reconcile change %d: finish persisting %s=%s: %w", c.ID(), in.Setting, in.New, err)
		}
		rec = m.outcome(c, Applied, why+": the new value was live but not yet in the sysctl.d file, which is now written; verification goes on", &done)
	case sameValue(in.Setting, live.Value, in.New):
		rec = m.outcome(c, Applied, why+": the new value is live; verification goes on", &live)
	case restartCtx && live.PendingRestart && live.AutoConf != nil && sameValue(in.Setting, *live.AutoConf, in.New):
		rec = m.outcome(c, PendingRestart, why+": written and waiting for a restart of PostgreSQL", &live)
	case sameValue(in.Setting, live.Value, in.Old.Value), pairMidWrite(in.Setting, live, *in.Old, in.New):
		restored, err := a.Restore(ctx, in.Setting, *in.Old)
		if err != nil {
			return fmt.Errorf("reconcile change %d: restore the old configuration of %s: %w", c.ID(), in.Setting, err)
		}
		what := "the change had not taken effect"
		if !sameValue(in.Setting, live.Value, in.Old.Value) {
			what = fmt.Sprintf("the change stopped between its two writes (%s is %s)", in.Setting, live.Value)
		}
		rec = m.outcome(c, Failed, why+": "+what+"; the old configuration was restored", &restored)
	default:
		until := m.now().Add(m.cfg.RejectFor)
		rec = m.outcome(c, Abandoned, fmt.Sprintf("%s: %s is %s, neither the old %s nor the new %s: someone else changed it", why, in.Setting, live.Value, in.Old.Value, in.New), &live)
		rec.Until = &until
	}
	m.logger.Warn("apply: reconciled an unsettled change", zap.Int("id", c.ID()), zap.String("setting", in.Setting),
		zap.String("unsettled_by", unsettledWhy(c)), zap.String("outcome", string(rec.Outcome)), zap.String("live", live.Value))
	_, err = m.record(l, rec)
	return err
}

// unsettledWhy says what left a change unsettled.
func unsettledWhy(c *change) string {
	if c.Last() == UndoFailed {
		return "the change failed and its undo failed too"
	}
	return "a crash between intent and outcome"
}

// failed is the outcome of a change whose Set failed. The actuator undoes what it wrote before
// it returns the error, but when the server went away in between (a crash right after ALTER
// SYSTEM) the undo fails too, and the new value may come back with the server. Unless the live
// value shows the old configuration in place, the change is recorded undo_failed: it stays
// rollback-able, and crash recovery and rollback settle it against the live value later.
func (m *Manager) failed(ctx context.Context, c *change, a Actuator, origin string, setErr error) (Record, error) {
	in := c.Intent
	rec := m.outcome(c, Failed, setErr.Error(), nil)
	rec.Origin = origin
	live, err := a.Read(ctx, in.Setting)
	if err == nil {
		rec.Live = &live
		if in.Old != nil && configIs(in.Setting, live, *in.Old) {
			return rec, fmt.Errorf("change %d: %w", c.ID(), setErr)
		}
	}
	old := "its old value"
	if in.Old != nil {
		old = in.Old.Value
	}
	hint := fmt.Sprintf("the old configuration of %s could not be confirmed in place, so the change may be in effect: "+
		"pgwal-advisor rollback --id %d compares the live value with the journal's and restores %s (the daemon in apply mode does so itself)", in.Setting, c.ID(), old)
	rec.Outcome = UndoFailed
	rec.Reason += "; " + hint
	return rec, fmt.Errorf("change %d: %w; %s", c.ID(), setErr, hint)
}

// configIs reports whether live is the configuration old recorded: the running value, nothing
// more or less waiting for a restart, and the same in postgresql.auto.conf (PostgreSQL) or in
// the ratio twin and the sysctl.d file (kernel).
func configIs(setting string, live, old Value) bool {
	same := func(a, b *string) bool {
		return a == nil && b == nil || a != nil && b != nil && sameValue(setting, *a, *b)
	}
	return sameValue(setting, live.Value, old.Value) && live.PendingRestart == old.PendingRestart &&
		same(live.AutoConf, old.AutoConf) && live.TwinValue == old.TwinValue && same(live.Persisted, old.Persisted) &&
		maps.Equal(live.Sysctl, old.Sysctl) && (old.Route != RoutePatroni || same(live.DCS, old.DCS))
}

// reconcileTrial settles a crossover trial that a process left behind (a crash, a restart of the
// daemon): the old value is put back, whichever period the trial was in, and the change is
// recorded rolled back, not rejected: nothing judged it, and it may be proposed again. Someone
// else's value is left alone (abandoned).
func (m *Manager) reconcileTrial(ctx context.Context, l *ledger, c *change, a Actuator, live Value) error {
	in := c.Intent
	var rec Record
	switch {
	case sameValue(in.Setting, live.Value, in.New) || sameValue(in.Setting, live.Value, in.Old.Value):
		restored, err := a.Restore(ctx, in.Setting, *in.Old)
		if err != nil {
			return fmt.Errorf("reconcile change %d: restore the old value after a crossover trial that did not finish: %w", c.ID(), err)
		}
		rec = m.outcome(c, RolledBack, "reconciled after a crossover trial that did not finish (the process stopped during it): the old value is in force again; not rejected, nothing judged the change", &restored)
	default:
		until := m.now().Add(m.cfg.RejectFor)
		rec = m.outcome(c, Abandoned, fmt.Sprintf("reconciled after a crossover trial that did not finish: %s is %s, neither the old %s nor the new %s: someone else changed it", in.Setting, live.Value, in.Old.Value, in.New), &live)
		rec.Until = &until
	}
	m.logger.Warn("apply: reconciled a crossover trial that did not finish", zap.Int("id", c.ID()), zap.String("setting", in.Setting),
		zap.String("outcome", string(rec.Outcome)), zap.String("live", live.Value))
	_, err := m.record(l, rec)
	return err
}
