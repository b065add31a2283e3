package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// watch checks each change in effect: an operator's change makes the manager back off; a
// restart brings a pending change into effect; a verification window that has passed decides
// between verified and rolled back.
func (m *Manager) watch(ctx context.Context, l *ledger) error {
	var errs []error
	seen := map[string]bool{}
	// The changes as they are now: a record appended below may bring in another process's
	// records, and the ledger's slice with them.
	changes := l.changes
	if m.trial != nil {
		if c := l.byID[m.trial.id]; c == nil || c.Last() != Trial {
			m.trial = nil // ended by another process (rollback)
		}
	}
	for i := len(changes) - 1; i >= 0; i-- {
		c := changes[i]
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
		if m.leftElsewhere(c, live) {
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
	if c.Last() == Trial {
		if m.trial == nil || m.trial.id != c.ID() {
			return nil // another process's, or a crash's leftover: reconcile settles it
		}
		want := in.New
		if !crossoverPeriods[m.trial.k] {
			want = in.Old.Value
		}
		if !sameValue(s, live.Value, want) {
			m.trial = nil
			return m.abandon(l, c, live, fmt.Sprintf("%s is %s during a crossover trial, not the %s the trial set: someone else changed it", s, live.Value, want))
		}
		return m.stepTrial(ctx, l, c, a)
	}
	if c.Last() == PendingRestart {
		switch {
		case sameValue(s, live.Value, in.New):
			_, err := m.record(l, m.outcome(c, Applied, "PostgreSQL restarted: the new value is running", &live))
			m.logger.Info("apply: a pending change took effect after a restart", zap.Int("id", c.ID()), zap.String("setting", s), zap.String("value", live.Value))
			return err
		case live.PendingRestart && (live.AutoConf == nil || sameValue(s, *live.AutoConf, in.New)):
			m.restartInWindow(ctx, c, a)
			return nil // still waiting for the restart
		}
		return m.abandon(l, c, live, fmt.Sprintf("%s no longer waits for a restart with %s: it is %s (pending_restart %v)", s, in.New, live.Value, live.PendingRestart))
	}
	if !sameValue(s, live.Value, in.New) {
		if restoredInCluster(c, live) {
			_, err := m.record(l, m.outcome(c, RolledBack, "the cluster's configuration holds the old value again: rolled back from another member", &live))
			m.logger.Info("apply: a change was rolled back through the cluster's configuration from another member", zap.Int("id", c.ID()), zap.String("setting", s), zap.String("value", live.Value))
			return err
		}
		return m.abandon(l, c, live, fmt.Sprintf("%s is %s, not the %s the advisor applied: someone else changed it", s, live.Value, in.New))
	}
	if c.Last() != Applied || in.Before == nil || in.Origin != OriginDaemon {
		return nil // verified, or applied by hand with `apply --yes`: managed, not verified
	}
	return m.verify(ctx, l, c, a)
}

// restarter is a route that can have PostgreSQL restarted for a pending change (Patroni).
type restarter interface {
	RestartPending(ctx context.Context) error
}

// restartRetry is how long after a failed restart request the next one waits.
const restartRetry = 10 * time.Minute

// restartInWindow asks the route to restart what waits for change c's restart, when the route
// can and the operator's restart window is open; the next watch finds the new value running and
// verification starts from there. Without a window nothing is restarted, as before.
func (m *Manager) restartInWindow(ctx context.Context, c *change, a Actuator) {
	if g, ok := a.(guarded); ok {
		a = g.Actuator
	}
	r, ok := a.(restarter)
	now := m.now()
	if !ok || !m.cfg.RestartWindow.Contains(now) || now.Before(m.restartAfter[c.ID()]) {
		return
	}
	m.logger.Info("apply: asking the HA manager to restart PostgreSQL for a pending change, inside the restart window",
		zap.Int("id", c.ID()), zap.String("setting", c.Intent.Setting), zap.String("window", m.cfg.RestartWindow.String()))
	if err := r.RestartPending(ctx); err != nil {
		m.restartAfter[c.ID()] = now.Add(restartRetry)
		m.logger.Warn("apply: the restart through the HA manager failed; tried again in 10 minutes", zap.Int("id", c.ID()), zap.Error(err))
	}
}

// leftElsewhere reports whether change c was made on another server than the one live was read
// from; it is then left as the journal has it (its own server still runs the advisor's value,
// and only a rollback there can undo it), and said once and in the status.
func (m *Manager) leftElsewhere(c *change, live Value) bool {
	err := otherServer(c, live)
	if err == nil {
		delete(m.elsewhere, c.ID())
		return false
	}
	m.elsewhere[c.ID()] = err.Error()
	m.once(fmt.Sprintf("elsewhere:%d", c.ID()), func() {
		m.logger.Warn("apply: a change of the journal was made on another server; it is left alone", zap.Int("id", c.ID()), zap.Error(err))
	})
	return true
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
	v := compare(in.Before, after)
	check, checkNote := checkPrediction(in.Predicted, m.history.Since(start))
	// Not enough data, or (for a change that must help) no gain shown yet: more of the same
	// window, up to three, before the verdict stands.
	if !m.cfg.NoCrossover && switchable(in) && (v.decided && !v.better && !v.harm || nearMDE(in)) {
		// The window after could not tell the change from the load, or the change was
		// predicted too small for one window to: alternate the values.
		return m.startTrial(l, c, after, v, check, checkNote)
	}
	undecided := !v.harm && (!v.decided || after.MustImprove && !v.better)
	if undecided && latest.Before(start.Add(3*m.cfg.VerifyWindow)) {
		m.once(fmt.Sprintf("extend:%d", c.ID()), func() {
			m.logger.Info("apply: the figures cannot judge the change yet; the verification window is extended",
				zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("figures", v.reason))
		})
		return nil
	}
	if !v.worse {
		reason := v.reason
		if !v.decided {
			reason = "inconclusive, kept: " + reason
		} else if !v.better {
			reason = "kept, " + reason
		}
		rec := m.outcome(c, Verified, reason+checkNote, nil)
		rec.Unconfirmed = !v.better
		rec.Before, rec.After, rec.Comparison, rec.PredictionCheck = in.Before, after, v.changes, check
		m.logger.Info("apply: change verified", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("value", in.New),
			zap.String("figures", reason), predictionFields(check, checkNote))
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
	rb := m.outcome(c, RolledBack, v.reason+checkNote, &live)
	rb.Before, rb.After, rb.Comparison, rb.PredictionCheck = in.Before, after, v.changes, check
	rej := m.outcome(c, Rejected, v.reason, nil)
	rej.Until = &until
	m.logger.Warn("apply: change made things worse and was rolled back; the recommendation is rejected",
		zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("value", in.New),
		zap.String("restored", live.Value), zap.String("figures", v.reason), predictionFields(check, checkNote), zap.Time("rejected_until", until))
	_, err = m.record(l, rb, rej)
	return err
}

// checkPrediction measures a change's predicted figure over the history since it took effect
// and compares it with the prediction. The note is what the journal's reason and the log add:
// the comparison, or why there is none ("" when the change predicted nothing).
func checkPrediction(p *rules.Predicted, after *rules.History) (*rules.PredictionCheck, string) {
	if p == nil {
		return nil, ""
	}
	measured, ok := rules.MeasurePredicted(p.Name, after)
	if !ok {
		return nil, fmt.Sprintf("; predicted %s %.4g (from %.4g): not measurable after the change", p.Name, p.Value, p.Current)
	}
	c, ok := rules.CheckPrediction(*p, measured)
	if !ok {
		return nil, fmt.Sprintf("; predicted %s %.4g, measured %.4g: the prediction has no scale to judge it by", p.Name, p.Value, measured)
	}
	return &c, "; predicted " + c.String()
}

// predictionFields logs a prediction check: its figures, or the note saying why there are none.
func predictionFields(c *rules.PredictionCheck, note string) zap.Field {
	if c == nil {
		return zap.String("prediction", strings.TrimPrefix(note, "; "))
	}
	return zap.Dict("prediction", zap.String("figure", c.Name), zap.Float64("before", c.Current),
		zap.Float64("predicted", c.Predicted), zap.Float64("measured", c.Measured), zap.Float64("error", c.Error))
}

// restoredInCluster reports whether a change made through Patroni is undone in the cluster's
// configuration: the DCS holds what it held before the change (or nothing, as before) and the
// member runs the old value. The advisor's rollback on another member does exactly that (and
// removes its record), so the change ended there; it is no one else's change to back off from.
func restoredInCluster(c *change, live Value) bool {
	old := c.Intent.Old
	if old == nil || old.Route != RoutePatroni || live.Route != RoutePatroni || !sameValue(c.Intent.Setting, live.Value, old.Value) {
		return false
	}
	if old.DCS == nil || live.DCS == nil {
		return old.DCS == nil && live.DCS == nil
	}
	return sameValue(c.Intent.Setting, *live.DCS, *old.DCS)
}
