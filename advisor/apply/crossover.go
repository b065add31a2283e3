package apply

import (
	"context"
	"fmt"
	"math"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Trial is the outcome of one switch of a crossover trial: the value set for its next period.
const Trial Outcome = "trial"

// crossoverPeriods is a trial's order after the change's first window after it (true: the new
// value). With the window before the change (old) and the one after (new) it makes four pairs,
// old-new, new-old, old-new, new-old: a load that drifts steadily adds as much to the first
// and third pairs' differences as it takes from the second and fourth, so their mean is the
// change's alone. Three switches (and one more to put the new value back when it is kept).
var crossoverPeriods = []bool{true, false, false, true, true, false}

// TrialStep is what a trial record says: which period starts, of how many, with which value.
type TrialStep struct {
	Period int  `json:"period"`
	Of     int  `json:"of"`
	New    bool `json:"new"`
}

// trial is the crossover trial the manager runs (one at a time: no change starts meanwhile).
type trial struct {
	id int
	// k is the period running now (an index of crossoverPeriods), since its start.
	k     int
	start time.Time
	// figs are each ended period's figures, in the order of crossoverPeriods.
	figs []*Figures
	// first holds the change's window before and its first window after (the first pair).
	first [2]*Figures
	// waitSince is when a switch was first held back (a stall running), zero when none is.
	waitSince time.Time
	// check and checkNote are the prediction's check over the first window after the change,
	// which the trial's verdict carries (the trial's periods alternate: no one window is the
	// change's alone).
	check     *rules.PredictionCheck
	checkNote string
}

// switchable reports whether a change can go back and forth at once: a reload setting or a
// kernel knob (a restart setting cannot, and keeps its before/after verdict).
func switchable(in Record) bool {
	return in.Action == rules.ActionReload || in.Action == rules.ActionSysctl
}

// nearMDE reports whether a change's predicted effect on one of its judged figures is within
// three times that figure's minimum detectable effect before it: one window after cannot tell
// such a change from a load that drifts by as much, whatever its verdict says.
func nearMDE(in Record) bool {
	p := in.Predicted
	if p == nil || p.Current == 0 || in.Before == nil {
		return false
	}
	x, ok := in.Before.get(p.Name)
	if !ok || !x.Judged || x.MDE == nil {
		return false
	}
	return math.Abs(p.Value-p.Current)/math.Abs(p.Current) < 3**x.MDE
}

// startTrial starts a crossover trial for change c after its first window: the new value
// runs on for the next period. It is journaled as the first trial record.
func (m *Manager) startTrial(l *ledger, c *change, after *Figures, v verification, check *rules.PredictionCheck, checkNote string) error {
	now := m.lastSnap
	rec := m.outcome(c, Trial, fmt.Sprintf("the window after could not tell the change from the load (%s): a crossover trial of %d periods of %s alternates the old and new values",
		v.reason, len(crossoverPeriods), m.cfg.VerifyWindow), nil)
	rec.Trial = &TrialStep{Period: 1, Of: len(crossoverPeriods), New: true}
	if _, err := m.record(l, rec); err != nil {
		return err
	}
	m.trial = &trial{id: c.ID(), start: now, first: [2]*Figures{c.Intent.Before, after}, check: check, checkNote: checkNote}
	m.logger.Info("apply: crossover trial started", zap.Int("id", c.ID()), zap.String("setting", c.Intent.Setting),
		zap.Int("periods", len(crossoverPeriods)), zap.Duration("period", m.cfg.VerifyWindow), zap.String("figures", v.reason))
	return nil
}

// stepTrial ends the running period when its window has passed, switches the value for the
// next (never while a write-back stall runs: it would fall on one side of a pair), and
// decides when the last one ended.
func (m *Manager) stepTrial(ctx context.Context, l *ledger, c *change, a Actuator) error {
	t := m.trial
	in := c.Intent
	if m.lastSnap.Before(t.start.Add(m.cfg.VerifyWindow)) {
		return nil
	}
	next := t.k + 1
	if next < len(crossoverPeriods) && crossoverPeriods[next] != crossoverPeriods[t.k] {
		if why := m.stallInProgress(); why != "" {
			if t.waitSince.IsZero() {
				t.waitSince = m.lastSnap
				m.logger.Info("apply: the crossover trial's next switch waits", zap.Int("id", c.ID()), zap.String("why", why))
			}
			if m.lastSnap.Before(t.waitSince.Add(2 * m.cfg.VerifyWindow)) {
				return nil
			}
			// A stall that long is a period of its own: the trial ends with the pairs it has.
			return m.finishTrial(ctx, l, c, a)
		}
	}
	t.figs = append(t.figs, measureBetween(m.history, in.Setting, t.start, m.lastSnap))
	if next == len(crossoverPeriods) {
		return m.finishTrial(ctx, l, c, a)
	}
	if crossoverPeriods[next] != crossoverPeriods[t.k] {
		live, err := m.trialSet(ctx, a, in, crossoverPeriods[next])
		if err != nil {
			m.logger.Warn("apply: a crossover switch failed; the trial ends with the old value", zap.Int("id", c.ID()), zap.Error(err))
			return m.endTrial(ctx, l, c, a, RolledBack, "a crossover switch failed: "+err.Error()+"; the old value was put back", nil, false, false)
		}
		rec := m.outcome(c, Trial, fmt.Sprintf("crossover period %d of %d: the %s value", next+1, len(crossoverPeriods), oldNew(crossoverPeriods[next])), &live)
		rec.Trial = &TrialStep{Period: next + 1, Of: len(crossoverPeriods), New: crossoverPeriods[next]}
		if _, err := m.record(l, rec); err != nil {
			return err
		}
	}
	t.k, t.start, t.waitSince = next, m.lastSnap, time.Time{}
	return nil
}

func oldNew(isNew bool) string {
	if isNew {
		return "new"
	}
	return "old"
}

// trialSet sets the change's new value, or restores its old one, through the guarded actuator.
func (m *Manager) trialSet(ctx context.Context, a Actuator, in Record, isNew bool) (Value, error) {
	if isNew {
		return a.Set(ctx, in.Setting, in.New)
	}
	return a.Restore(ctx, in.Setting, *in.Old)
}

// finishTrial judges the trial's pairs and ends it: kept (the new value put back if the last
// period ran the old one) or rolled back.
func (m *Manager) finishTrial(ctx context.Context, l *ledger, c *change, a Actuator) error {
	t := m.trial
	pairs := [][2]*Figures{t.first}
	for i := 0; i+1 < len(t.figs); i += 2 {
		a0, b0 := t.figs[i], t.figs[i+1]
		if crossoverPeriods[i] { // new first: the pair is (old, new) all the same
			a0, b0 = b0, a0
		}
		pairs = append(pairs, [2]*Figures{a0, b0})
	}
	v := comparePairs(pairs, c.Intent.Before.MustImprove)
	reason := fmt.Sprintf("crossover trial, %d pairs of %s periods: %s", len(pairs), m.cfg.VerifyWindow, v.reason)
	if v.worse {
		return m.endTrial(ctx, l, c, a, RolledBack, reason, v.changes, false, v.harm || c.Intent.Before.MustImprove)
	}
	return m.endTrial(ctx, l, c, a, Verified, reason, v.changes, v.better, false)
}

// endTrial puts the value the verdict wants in place and records it: verified (the new value)
// or rolled back (the old value), with a rejection when the figures were against the change.
func (m *Manager) endTrial(ctx context.Context, l *ledger, c *change, a Actuator, o Outcome, reason string, cmp []FigureChange, better, reject bool) error {
	in := c.Intent
	t := m.trial
	m.trial = nil
	live, err := a.Read(ctx, in.Setting)
	want := in.Old.Value
	if o == Verified {
		want = in.New
	}
	if err == nil && !sameValue(in.Setting, live.Value, want) {
		live, err = m.trialSet(ctx, a, in, o == Verified)
	}
	if err != nil {
		m.once(fmt.Sprintf("trial-end:%d", c.ID()), func() {
			m.logger.Error("apply: ending a crossover trial failed; crash recovery settles it", zap.Int("id", c.ID()), zap.Error(err))
		})
		return fmt.Errorf("end the crossover trial of change %d (%s): %w", c.ID(), in.Setting, err)
	}
	rec := m.outcome(c, o, reason+t.checkNote, &live)
	// The figures of the window before and the first window after, as a before/after verdict
	// carries them; the pairs' intervals are in the comparison.
	rec.Comparison, rec.PredictionCheck, rec.Before, rec.After = cmp, t.check, t.first[0], t.first[1]
	rec.Unconfirmed = o == Verified && !better
	recs := []Record{rec}
	if reject {
		until := m.now().Add(m.cfg.RejectFor)
		rej := m.outcome(c, Rejected, reason, nil)
		rej.Until = &until
		recs = append(recs, rej)
	}
	m.logger.Info("apply: crossover trial ended", zap.Int("id", c.ID()), zap.String("setting", in.Setting),
		zap.String("outcome", string(o)), zap.String("value", live.Value), zap.String("figures", reason))
	_, err = m.record(l, recs...)
	return err
}

// comparePairs judges a trial's pairs (old, new): per judged figure, the interval on the mean
// of the pairs' differences (a paired t interval), each difference over one period of each,
// drift cancelled by the pairs' order. The order of decision is compare's.
func comparePairs(pairs [][2]*Figures, mustImprove bool) verification {
	var t tally
	for _, name := range judgedNames(pairs) {
		var diffs []float64
		var level float64
		for _, p := range pairs {
			b, okB := p[0].get(name)
			a, okA := p[1].get(name)
			if okA && okB && a.Enough && b.Enough {
				diffs = append(diffs, a.Value-b.Value)
				level += b.Value
			}
		}
		fc := FigureChange{Name: name, Verdict: VerdictNoData}
		if x, ok := pairs[0][0].get(name); ok {
			fc.Unit = x.Unit
		}
		if len(diffs) >= minSubSamples {
			level /= float64(len(diffs))
			e := pairedEffect(diffs, level)
			fc.Before, fc.After = level, level+e.Diff
			fc = t.judge(fc, e, e.Diff)
		}
		t.v.changes = append(t.v.changes, fc)
	}
	return t.conclude("not enough data in the pairs to judge the change", mustImprove)
}

// judgedNames are the judged figures of a trial's first window, in their order.
func judgedNames(pairs [][2]*Figures) []string {
	var out []string
	if len(pairs) == 0 || pairs[0][0] == nil {
		return nil
	}
	for _, x := range pairs[0][0].Figures {
		if x.Judged {
			out = append(out, x.Name)
		}
	}
	return out
}

// pairedEffect is the interval on the mean of paired differences (Student's t, n-1 degrees of
// freedom), relative to level (the old value's mean).
func pairedEffect(diffs []float64, level float64) Effect {
	mean, variance := meanVar(diffs)
	half := tQuantile(1-(1-Confidence)/2, float64(len(diffs)-1)) * math.Sqrt(variance/float64(len(diffs)))
	e := Effect{Diff: mean, Low: mean - half, High: mean + half, Pairs: len(diffs)}
	if level > 0 {
		// Every figure is a non-negative rate or share: the new value's mean cannot fall below
		// zero, whatever the symmetric interval says.
		e.Low = max(e.Low, -level)
	}
	if level != 0 {
		e.Rel, e.RelLow, e.RelHigh = e.Diff/math.Abs(level), e.Low/math.Abs(level), e.High/math.Abs(level)
	}
	return e
}

// measureBetween is measure over the snapshots from from to to.
func measureBetween(h *rules.History, setting string, from, to time.Time) *Figures {
	w := rules.NewHistory(h.Len())
	for _, s := range h.Since(from).Snapshots() {
		if s.Time.After(to) {
			break
		}
		w.Add(s)
	}
	return measure(w, setting, from)
}
