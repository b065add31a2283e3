package apply

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// reconcile settles intents without an outcome, left by a crash between the intent and its
// outcome, against the live values:
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
		if c.Last() == "" {
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
			return fmt.Sprintf("change %d (%s) has an intent without an outcome that could not be reconciled yet", c.ID(), c.Intent.Setting), err
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
	restartCtx := in.Old.Context == "postmaster"
	var rec Record
	switch {
	case sameValue(in.Setting, live.Value, in.New):
		rec = m.outcome(c, Applied, "reconciled after a crash between intent and outcome: the new value is live; verification goes on", &live)
	case restartCtx && live.PendingRestart && live.AutoConf != nil && sameValue(in.Setting, *live.AutoConf, in.New):
		rec = m.outcome(c, PendingRestart, "reconciled after a crash between intent and outcome: written and waiting for a restart of PostgreSQL", &live)
	case sameValue(in.Setting, live.Value, in.Old.Value):
		restored, err := a.Restore(ctx, in.Setting, *in.Old)
		if err != nil {
			return fmt.Errorf("reconcile change %d: restore the old configuration of %s: %w", c.ID(), in.Setting, err)
		}
		rec = m.outcome(c, Failed, "reconciled after a crash between intent and outcome: the change had not taken effect; the old configuration was restored", &restored)
	default:
		until := m.now().Add(m.cfg.RejectFor)
		rec = m.outcome(c, Abandoned, fmt.Sprintf("reconciled after a crash: %s is %s, neither the old %s nor the new %s: someone else changed it", in.Setting, live.Value, in.Old.Value, in.New), &live)
		rec.Until = &until
	}
	m.logger.Warn("apply: reconciled a change interrupted by a crash", zap.Int("id", c.ID()), zap.String("setting", in.Setting),
		zap.String("outcome", string(rec.Outcome)), zap.String("live", live.Value))
	_, err = m.record(l, rec)
	return err
}
