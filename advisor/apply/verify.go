package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// watch checks each change in effect: an operator's change makes the manager back off; a
// restart brings a pending change into effect; a verification window that has passed decides
// between verified and rolled back.
func (m *Manager) watch(ctx context.Context, l *ledger) error {
	var errs []error
	seen := map[string]bool{}
	for i := len(l.changes) - 1; i >= 0; i-- {
		c := l.changes[i]
		s := c.Intent.Setting
		if seen[s] {
			continue
		}
		seen[s] = true
		if !c.InEffect() {
			continue
		}
		a := m.actuator(s)
		if a == nil {
			continue
		}
		live, err := a.Read(ctx, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("watch change %d (%s): %w", c.ID(), s, err))
			continue
		}
		if err := m.watchOne(ctx, l, c, a, live); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) watchOne(ctx context.Context, l *ledger, c *change, a Actuator, live Value) error {
	in := c.Intent
	s := in.Setting
	if c.Last() == PendingRestart {
		switch {
		case sameValue(s, live.Value, in.New):
			_, err := m.record(l, m.outcome(c, Applied, "PostgreSQL restarted: the new value is running", &live))
			m.logger.Info("apply: a pending change took effect after a restart", zap.Int("id", c.ID()), zap.String("setting", s), zap.String("value", live.Value))
			return err
		case live.PendingRestart && (live.AutoConf == nil || sameValue(s, *live.AutoConf, in.New)):
			return nil // still waiting for the restart
		}
		return m.abandon(l, c, live, fmt.Sprintf("%s no longer waits for a restart with %s: it is %s (pending_restart %v)", s, in.New, live.Value, live.PendingRestart))
	}
	if !sameValue(s, live.Value, in.New) {
		return m.abandon(l, c, live, fmt.Sprintf("%s is %s, not the %s the advisor applied: someone else changed it", s, live.Value, in.New))
	}
	if c.Last() != Applied || in.Before == nil || in.Origin != OriginDaemon {
		return nil // verified, or applied by hand with `apply --yes`: managed, not verified
	}
	return m.verify(ctx, l, c, a)
}

// abandon records that someone else changed a managed setting: the manager keeps its hands off
// it for RejectFor.
func (m *Manager) abandon(l *ledger, c *change, live Value, reason string) error {
	until := m.now().Add(m.cfg.RejectFor)
	rec := m.outcome(c, Abandoned, reason, &live)
	rec.Until = &until
	m.logger.Warn("apply: a managed setting was changed by someone else; the advisor stops managing it",
		zap.Int("id", c.ID()), zap.String("setting", c.Intent.Setting), zap.String("live", live.Value),
		zap.String("applied", c.Intent.New), zap.Time("hands_off_until", until))
	_, err := m.record(l, rec)
	return err
}

// verifyingSince is when the change's verification window starts: its applied outcome, or the
// manager's first snapshot when it was started after that (the window must hold snapshots).
func (m *Manager) verifyingSince(c *change) time.Time {
	r, _ := c.outcome(Applied)
	if m.firstSnap.After(r.Time) {
		return m.firstSnap
	}
	return r.Time
}

func (m *Manager) verify(ctx context.Context, l *ledger, c *change, a Actuator) error {
	in := c.Intent
	start := m.verifyingSince(c)
	latest := m.lastSnap
	if latest.Before(start.Add(m.cfg.VerifyWindow)) {
		return nil
	}
	after := measure(m.history, in.Setting, start)
	v := compare(in.Before, after, m.cfg.Regression)
	if !v.decided && latest.Before(start.Add(3*m.cfg.VerifyWindow)) {
		m.once(fmt.Sprintf("extend:%d", c.ID()), func() {
			m.logger.Info("apply: not enough data to judge the change yet; the verification window is extended",
				zap.Int("id", c.ID()), zap.String("setting", in.Setting))
		})
		return nil
	}
	if !v.worse {
		reason := v.reason
		if !v.decided {
			reason = "inconclusive, kept: " + reason
		}
		rec := m.outcome(c, Verified, reason, nil)
		rec.Before, rec.After, rec.Comparison = in.Before, after, v.changes
		m.logger.Info("apply: change verified", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("value", in.New), zap.String("figures", reason))
		_, err := m.record(l, rec)
		return err
	}
	live, err := a.Restore(ctx, in.Setting, *in.Old)
	if err != nil {
		m.once(fmt.Sprintf("rollback:%d:%v", c.ID(), err), func() {
			m.logger.Error("apply: rolling back a change that made things worse failed; retrying at the next snapshot",
				zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.Error(err))
		})
		return fmt.Errorf("roll back change %d (%s): %w", c.ID(), in.Setting, err)
	}
	until := m.now().Add(m.cfg.RejectFor)
	rb := m.outcome(c, RolledBack, v.reason, &live)
	rb.Before, rb.After, rb.Comparison = in.Before, after, v.changes
	rej := m.outcome(c, Rejected, v.reason, nil)
	rej.Until = &until
	m.logger.Warn("apply: change made things worse and was rolled back; the recommendation is rejected",
		zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("value", in.New),
		zap.String("restored", live.Value), zap.String("figures", v.reason), zap.Time("rejected_until", until))
	_, err = m.record(l, rb, rej)
	return err
}
