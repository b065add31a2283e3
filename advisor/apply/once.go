package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
)

// Plan judges the findings of st as the daemon would, without its pacing (cool-down, daily
// cap, verification): for `pgwal-advisor apply`, which shows the diff and, with --yes, applies
// what the plan allows. It reads live values and checks privileges; it changes nothing.
func (m *Manager) Plan(ctx context.Context, st advisor.State) ([]Proposal, error) {
	l, _, err := m.journal.load()
	if err != nil {
		return nil, err
	}
	m.checkPrivileges(ctx)
	return m.evaluate(ctx, l, st), nil
}

// ApplyPlan makes the plan's allowed changes one after another, each journaled (origin
// "apply"); each proposal comes back with its ID and outcome, or its error. Reload settings are
// confirmed running, restart settings reported pending restart. They are not verified (there
// is no window before them to compare with); the daemon in apply mode manages them from then
// on: it notices an operator's change and backs off.
func (m *Manager) ApplyPlan(ctx context.Context, plan []Proposal) ([]Proposal, error) {
	l, _, err := m.journal.load()
	if err != nil {
		return plan, err
	}
	out := make([]Proposal, len(plan))
	copy(out, plan)
	var errs []error
	for i := range out {
		p := &out[i]
		if p.Refused != "" && m.serverRefuses[p.Finding.Setting] {
			// The server refuses every change: the command could not do its job (exit 3).
			errs = append(errs, fmt.Errorf("%s not changed: %s", p.Finding.Setting, p.Refused))
		}
		if !p.Allowed() {
			continue
		}
		rec, err := m.change(ctx, l, *p, OriginApply, nil)
		p.ID, p.Outcome = rec.ID, rec.Outcome
		if err != nil {
			p.Error = err.Error()
			errs = append(errs, err)
			if rec.ID == 0 {
				break // the journal failed: nothing more is changed
			}
		}
	}
	return out, errors.Join(errs...)
}

// RollbackResult is what became of one change's rollback.
type RollbackResult struct {
	ID       int    `json:"id"`
	Setting  string `json:"setting"`
	Restored string `json:"restored,omitempty"`
	// From is the value the change had set.
	From string `json:"from,omitempty"`
	// PendingRestart is set when PostgreSQL runs the changed value until its next restart.
	PendingRestart bool   `json:"pending_restart,omitempty"`
	Skipped        string `json:"skipped,omitempty"`
	Error          string `json:"error,omitempty"`
	// Refused is set when the guard refused the journal record: nothing was written for it.
	Refused string `json:"refused,omitempty"`
}

// Rollback restores the recorded old values: of change id, or with id 0 of every change in
// effect or unsettled, newest first (so that two changes of one setting unwind in order). Each
// is journaled (origin "rollback"). It reads the live value first and compares it with the
// journal's: the change's new value (or one waiting for a restart) is restored; the old value
// already live is recorded rolled back without touching anything (an intent without an outcome:
// failed, it never took effect); any other value is someone else's change and is not touched,
// since restoring would undo it. A change whose undo failed (undo_failed) is settled the same
// way, whatever the journal said of it before.
func Rollback(ctx context.Context, j *Journal, acts []Actuator, id int, now func() time.Time, logger *zap.Logger) ([]RollbackResult, error) {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	l, note, err := j.load()
	if err != nil {
		return nil, err
	}
	if note != "" {
		logger.Warn("apply journal needs attention", zap.String("detail", note))
	}
	var unlock func()
	if len(clusterLedgers(acts)) > 0 {
		// The changes the advisor made through Patroni on another member are this journal's to
		// roll back too: taken in first, under the lock (cluster.go).
		if unlock, _, err = j.lockChanges(true); err != nil {
			return nil, err
		}
		defer unlock()
		if _, err := adoptCluster(ctx, j, acts, now(), logger); err != nil {
			// The journal's own changes can still be rolled back; the cluster's are said.
			logger.Warn("rollback: the advisor's changes in the cluster's configuration could not be read; the journal's own are rolled back", zap.Error(err))
		}
		if l, _, err = j.load(); err != nil {
			return nil, err
		}
	}
	targets, err := rollbackTargets(j, l, id)
	if err != nil || len(targets) == 0 {
		return nil, err
	}
	if unlock == nil {
		if unlock, _, err = j.lockChanges(true); err != nil {
			return nil, err
		}
		defer unlock()
	}
	var out []RollbackResult
	var errs []error
	for _, c := range targets {
		r, err := rollbackOne(ctx, j, acts, c, now, logger)
		out = append(out, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if _, after, _ := j.load(); after != "" && after != note {
		logger.Warn("apply journal needs attention", zap.String("detail", after))
	}
	return out, errors.Join(errs...)
}

// rollbackTargets are the changes to roll back: change id, or with id 0 every change in effect
// or unsettled, newest first.
func rollbackTargets(j *Journal, l *ledger, id int) ([]*change, error) {
	var targets []*change
	if id == 0 {
		for i := len(l.changes) - 1; i >= 0; i-- {
			if c := l.changes[i]; c.InEffect() || c.unsettled() {
				targets = append(targets, c)
			}
		}
		return targets, nil
	}
	c := l.byID[id]
	if c == nil {
		return nil, fmt.Errorf("rollback: change %d is not in effect in the journal %s: there is no such change, or it ended (its records say how); see the intent records' ids", id, j.Path())
	}
	if !c.InEffect() && !c.unsettled() {
		return nil, fmt.Errorf("rollback: change %d (%s=%s) is %s, not in effect: nothing to roll back", id, c.Intent.Setting, c.Intent.New, c.Last())
	}
	for _, n := range l.changes {
		if n.ID() > id && n.Intent.Setting == c.Intent.Setting && (n.InEffect() || n.unsettled()) {
			return nil, fmt.Errorf("rollback: change %d of %s is newer and in effect: roll it back first (or use --all)", n.ID(), c.Intent.Setting)
		}
	}
	return []*change{c}, nil
}

func rollbackOne(ctx context.Context, j *Journal, acts []Actuator, c *change, now func() time.Time, logger *zap.Logger) (RollbackResult, error) {
	in := c.Intent
	r := RollbackResult{ID: c.ID(), Setting: in.Setting, From: in.New}
	fail := func(err error) (RollbackResult, error) {
		if errors.Is(err, ErrRefused) {
			r.Refused = err.Error()
		} else {
			r.Error = err.Error()
		}
		return r, err
	}
	if in.Old == nil {
		return fail(fmt.Errorf("rollback change %d: the journal has no old value of %s", c.ID(), in.Setting))
	}
	if err := refuseSetting(in.Setting); err != nil {
		return fail(fmt.Errorf("rollback change %d: %w", c.ID(), err))
	}
	a := actuatorFor(acts, in.Setting)
	if a == nil {
		return fail(fmt.Errorf("rollback change %d: no actuator for %s", c.ID(), in.Setting))
	}
	// The guard judges the record before anything else: a forged one is refused even where
	// the live value would leave nothing to write.
	if g, ok := a.(guarded); ok {
		if err := checkWrite(ctx, g.Actuator, in.Setting, in.Old.Value, in.Old); err != nil {
			return fail(fmt.Errorf("rollback change %d: %w", c.ID(), err))
		}
	}
	live, err := a.Read(ctx, in.Setting)
	if err != nil {
		return fail(fmt.Errorf("rollback change %d: %w", c.ID(), err))
	}
	if err := otherServer(c, live); err != nil {
		return fail(fmt.Errorf("rollback: %w; nothing was changed", err))
	}
	isNew := sameValue(in.Setting, live.Value, in.New)
	pending := live.PendingRestart && (c.Last() == PendingRestart || live.AutoConf != nil && sameValue(in.Setting, *live.AutoConf, in.New))
	oldLive := sameValue(in.Setting, live.Value, in.Old.Value)
	midWrite := pairMidWrite(in.Setting, live, *in.Old, in.New)
	switch {
	case configIs(in.Setting, live, *in.Old) || oldLive && !pending && !c.unsettled():
		return rollbackFound(j, c, live, now, logger)
	case !isNew && !pending && !oldLive && !midWrite:
		return fail(fmt.Errorf("rollback change %d: %s is %s, not the %s the advisor set: someone else changed it since, and restoring %s would undo that; restore it by hand if you mean to",
			c.ID(), in.Setting, live.Value, in.New, in.Old.Value))
	}
	restored, err := a.Restore(ctx, in.Setting, *in.Old)
	if err != nil {
		return fail(fmt.Errorf("rollback change %d (%s): %w", c.ID(), in.Setting, err))
	}
	r.Restored, r.PendingRestart = restored.Value, restored.PendingRestart
	o, reason := RolledBack, "rolled back by pgwal-advisor rollback"
	switch {
	case c.Last() == "" && !isNew && !pending:
		// A crash before the change took effect: what of it was written is undone.
		o, reason = Failed, "found by rollback: the change never took effect; what of it was written is undone"
		r.Skipped = "the change never took effect (an intent without an outcome); its old configuration is restored"
	case c.Last() == UndoFailed:
		reason += fmt.Sprintf(" (its undo had failed; %s was %s)", in.Setting, live.Value)
	}
	if restored.PendingRestart {
		reason += "; PostgreSQL runs " + restored.Value + " until it is restarted"
		r.Restored = in.Old.Value
	}
	rec := Record{ID: c.ID(), Time: now(), Kind: KindOutcome, Origin: OriginRollback, Outcome: o, Setting: in.Setting,
		New: in.New, Reason: reason, Live: &restored}
	if _, err := j.Append(rec); err != nil {
		return fail(fmt.Errorf("journal the rollback of change %d (%s is restored): %w", c.ID(), in.Setting, err))
	}
	logger.Info("change rolled back", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("found", live.Value),
		zap.String("from", in.New), zap.String("to", in.Old.Value), zap.String("outcome", string(o)))
	return r, nil
}

// rollbackFound records a change whose old value rollback found live: nothing is touched. An
// intent without an outcome never took effect (failed); any other change is rolled back, by
// whoever put the old value back or by its undo that did work after all.
func rollbackFound(j *Journal, c *change, live Value, now func() time.Time, logger *zap.Logger) (RollbackResult, error) {
	in := c.Intent
	r := RollbackResult{ID: c.ID(), Setting: in.Setting, From: in.New}
	o := RolledBack
	reason := fmt.Sprintf("found by rollback: %s is %s, the value before change %d; nothing was touched", in.Setting, live.Value, c.ID())
	r.Skipped = fmt.Sprintf("%s is already %s, the value before the change: nothing to restore (recorded rolled back)", in.Setting, live.Value)
	if c.Last() == "" {
		o, reason = Failed, "found by rollback: the change never took effect; its old configuration is in place"
		r.Skipped = "the change never took effect (an intent without an outcome); its old configuration is in place"
	}
	rec := Record{ID: c.ID(), Time: now(), Kind: KindOutcome, Origin: OriginRollback, Outcome: o, Setting: in.Setting,
		New: in.New, Reason: reason, Live: &live}
	if _, err := j.Append(rec); err != nil {
		r.Error = fmt.Sprintf("journal that change %d (%s) is no longer in effect: %v", c.ID(), in.Setting, err)
		return r, fmt.Errorf("journal that change %d (%s) is no longer in effect: %w", c.ID(), in.Setting, err)
	}
	logger.Info("change found rolled back", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("live", live.Value), zap.String("outcome", string(o)))
	return r, nil
}
