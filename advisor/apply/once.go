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
	recs, _, err := m.journal.Read()
	if err != nil {
		return nil, err
	}
	m.checkPrivileges(ctx)
	return m.evaluate(ctx, newLedger(recs), st), nil
}

// ApplyPlan makes the plan's allowed changes one after another, each journaled (origin
// "apply"); each proposal comes back with its ID and outcome, or its error. Reload settings are
// confirmed running, restart settings reported pending restart. They are not verified (there
// is no window before them to compare with); the daemon in apply mode manages them from then
// on: it notices an operator's change and backs off.
func (m *Manager) ApplyPlan(ctx context.Context, plan []Proposal) ([]Proposal, error) {
	recs, _, err := m.journal.Read()
	if err != nil {
		return plan, err
	}
	l := newLedger(recs)
	out := make([]Proposal, len(plan))
	copy(out, plan)
	var errs []error
	for i := range out {
		p := &out[i]
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
// effect, newest first (so that two changes of one setting unwind in order). Each rollback is
// journaled (outcome rolled_back, origin "rollback"). A change whose setting someone else has
// changed since is not touched: restoring it would undo their change. An intent without an
// outcome (a crash) is rolled back when its new value is live, and recorded failed when the old
// one is.
func Rollback(ctx context.Context, j *Journal, acts []Actuator, id int, now func() time.Time, logger *zap.Logger) ([]RollbackResult, error) {
	if now == nil {
		now = time.Now
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	recs, _, err := j.Read()
	if err != nil {
		return nil, err
	}
	l := newLedger(recs)
	var targets []*change
	if id != 0 {
		c := l.byID[id]
		if c == nil {
			return nil, fmt.Errorf("rollback: no change %d in the journal %s (pgwal-advisor rollback --journal FILE lists none? see the intent records' ids)", id, j.Path())
		}
		if !c.InEffect() && c.Last() != "" {
			return nil, fmt.Errorf("rollback: change %d (%s=%s) is %s, not in effect: nothing to roll back", id, c.Intent.Setting, c.Intent.New, c.Last())
		}
		for _, n := range l.changes {
			if n.ID() > id && n.Intent.Setting == c.Intent.Setting && (n.InEffect() || n.Last() == "") {
				return nil, fmt.Errorf("rollback: change %d of %s is newer and in effect: roll it back first (or use --all)", n.ID(), c.Intent.Setting)
			}
		}
		targets = []*change{c}
	} else {
		for i := len(l.changes) - 1; i >= 0; i-- {
			if c := l.changes[i]; c.InEffect() || c.Last() == "" {
				targets = append(targets, c)
			}
		}
	}
	unlock, _, err := j.lockChanges(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []RollbackResult
	var errs []error
	for _, c := range targets {
		r, err := rollbackOne(ctx, j, l, acts, c, now, logger)
		out = append(out, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

func rollbackOne(ctx context.Context, j *Journal, l *ledger, acts []Actuator, c *change, now func() time.Time, logger *zap.Logger) (RollbackResult, error) {
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
	live, err := a.Read(ctx, in.Setting)
	if err != nil {
		return fail(fmt.Errorf("rollback change %d: %w", c.ID(), err))
	}
	isNew := sameValue(in.Setting, live.Value, in.New)
	pending := live.PendingRestart && (c.Last() == PendingRestart || live.AutoConf != nil && sameValue(in.Setting, *live.AutoConf, in.New))
	switch {
	case c.Last() == "" && !isNew && !pending && sameValue(in.Setting, live.Value, in.Old.Value):
		// A crash before the change took effect: make sure nothing of it is left, and say so.
		restored, err := a.Restore(ctx, in.Setting, *in.Old)
		if err != nil {
			return fail(fmt.Errorf("rollback change %d: %w", c.ID(), err))
		}
		r.Skipped = "the change never took effect (an intent without an outcome); its old configuration is in place"
		_, err = j.Append(Record{ID: c.ID(), Time: now(), Kind: KindOutcome, Origin: OriginRollback, Outcome: Failed, Setting: in.Setting,
			New: in.New, Reason: "found by rollback: the change never took effect", Live: &restored})
		return r, err
	case !isNew && !pending:
		return fail(fmt.Errorf("rollback change %d: %s is %s, not the %s the advisor set: someone else changed it since, and restoring %s would undo that; restore it by hand if you mean to",
			c.ID(), in.Setting, live.Value, in.New, in.Old.Value))
	}
	restored, err := a.Restore(ctx, in.Setting, *in.Old)
	if err != nil {
		return fail(fmt.Errorf("rollback change %d (%s): %w", c.ID(), in.Setting, err))
	}
	r.Restored, r.PendingRestart = restored.Value, restored.PendingRestart
	reason := "rolled back by pgwal-advisor rollback"
	if restored.PendingRestart {
		reason += "; PostgreSQL runs " + restored.Value + " until it is restarted"
		r.Restored = in.Old.Value
	}
	rec := Record{ID: c.ID(), Time: now(), Kind: KindOutcome, Origin: OriginRollback, Outcome: RolledBack, Setting: in.Setting,
		New: in.New, Reason: reason, Live: &restored}
	if _, err := j.Append(rec); err != nil {
		return fail(fmt.Errorf("journal the rollback of change %d (%s is restored): %w", c.ID(), in.Setting, err))
	}
	l.add(rec)
	logger.Info("change rolled back", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("from", in.New), zap.String("to", in.Old.Value))
	return r, nil
}
