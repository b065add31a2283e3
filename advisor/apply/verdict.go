package apply

import (
	"fmt"
	"math"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// FigureChange compares one figure before and after a change.
type FigureChange struct {
	Name   string  `json:"name"`
	Before float64 `json:"before"`
	After  float64 `json:"after"`
	Unit   string  `json:"unit"`
	// Verdict is "better", "worse", "same" (its interval holds no change, or the change is
	// below the figure's floor) or "not enough data".
	Verdict string `json:"verdict"`
	// Effect is the interval on the change of the figure's mean over the windows' parts (nil
	// when a side had too few); MDE the smallest change the window before could show.
	Effect *Effect  `json:"effect,omitempty"`
	MDE    *float64 `json:"mde,omitempty"`
}

// Verdicts of a FigureChange.
const (
	VerdictBetter   = "better"
	VerdictWorse    = "worse"
	VerdictSame     = "same"
	VerdictNoData   = "not enough data"
	verdictReported = "reported"
)

// verification is the result of comparing the figures before and after a change.
type verification struct {
	changes []FigureChange
	// worse is true when the change is to be rolled back; decided says whether any judged
	// figure had an interval; better whether one showed a gain, harm whether the verdict is
	// worse on the figures (not only for want of a gain).
	worse, decided, better, harm bool
	// reason is one line for the journal and the log.
	reason string
}

// compare judges a change on intervals (interval.go): a judged figure is worse when its
// interval on the change lies wholly above zero and the windows' difference passes the
// figure's floor, better when it lies wholly below zero by as much, and the same otherwise: the
// window could not tell the change from the figure's own variation. The change is worse when a
// judged figure is worse and none is better; when they disagree, the first judged figure with
// an interval decides (figureNames orders them). A figure without an interval (fewer than three
// parts or events on a side) is not enough data, whatever its point values say.
func compare(before, after *Figures) verification {
	var t tally
	for _, a := range after.Figures {
		b, ok := before.get(a.Name)
		fc := FigureChange{Name: a.Name, Before: b.Value, After: a.Value, Unit: a.Unit, MDE: b.MDE}
		e, hasInterval := welch(b.Sub, a.Sub)
		switch {
		case !a.Judged:
			fc.Verdict = verdictReported
		case !ok || !a.Enough || !b.Enough || !hasInterval:
			fc.Verdict = VerdictNoData
		default:
			// The floor is the whole windows' difference's: what a change must move the figure by
			// to matter (a stall's floor is seconds of stall a window, not a part).
			diff := a.Value - b.Value
			if a.Name == FigureWritebackStall {
				// A total: the window after may have been extended, so it is taken at the
				// length of the window before.
				diff = a.Value*spanRatio(before, after) - b.Value
			}
			fc = t.judge(fc, e, diff)
		}
		t.v.changes = append(t.v.changes, fc)
	}
	return t.conclude(fmt.Sprintf("not enough data on both sides of the change to judge it (an interval needs %d parts of each window with data)", minSubSamples),
		after.MustImprove)
}

// tally gathers the judged figures' verdicts of one comparison (compare, comparePairs).
type tally struct {
	v                   verification
	first               string
	anyWorse            bool
	worse, better, same []string
}

// judge gives fc its verdict from its interval e and the difference diff against the figure's
// floor, and counts it.
func (t *tally) judge(fc FigureChange, e Effect, diff float64) FigureChange {
	fc.Effect = &e
	floor := noiseOf(fc.Name).floor
	switch {
	case e.Low > 0 && diff > floor:
		fc.Verdict, t.anyWorse = VerdictWorse, true
		t.worse = append(t.worse, describe(fc))
	case e.High < 0 && -diff > floor:
		fc.Verdict, t.v.better = VerdictBetter, true
		t.better = append(t.better, describe(fc))
	default:
		fc.Verdict = VerdictSame
		t.same = append(t.same, describe(fc))
	}
	t.v.decided = true
	if t.first == "" {
		t.first = fc.Verdict
	}
	return fc
}

// conclude decides the change from its figures' verdicts: worse when a figure is worse and none
// better, or the first figure with an interval is worse; better when one is better; else
// unconfirmed (noData when no figure had an interval). A change that must improve (the vm.dirty_*
// knobs) and did not is rolled back like worse: "did not help".
func (t *tally) conclude(noData string, mustImprove bool) verification {
	v := t.v
	switch {
	case !v.decided:
		v.reason = noData
	case t.anyWorse && (!v.better || t.first == VerdictWorse):
		v.worse, v.harm = true, true
		v.reason = "worse: " + strings.Join(t.worse, ", ")
		if v.better {
			v.reason += "; better: " + strings.Join(t.better, ", ")
		}
	case v.better:
		v.reason = "better: " + strings.Join(t.better, ", ")
		if t.anyWorse {
			v.reason += "; worse: " + strings.Join(t.worse, ", ") + " (the first figure decides)"
		}
	default:
		v.reason = "unconfirmed: no interval excludes no change: " + strings.Join(t.same, ", ")
	}
	if mustImprove && !v.worse && !v.better {
		// Kept only when it helped: undecided or unconfirmed (after the extended windows, or a
		// crossover trial) is rolled back like worse.
		v.worse = true
		v.reason = "did not help: " + v.reason
	}
	return v
}

// spanRatio is the length of before's window over after's (1 when either is unknown).
func spanRatio(before, after *Figures) float64 {
	b, a := before.To.Sub(before.From), after.To.Sub(after.From)
	if b <= 0 || a <= 0 {
		return 1
	}
	return float64(b) / float64(a)
}

// describe is a figure's change as the reasons say it: "wal_flush_wait_share 0.420 -> 0.290,
// -31% (95% interval -40%..-22%, 12 before, 12 after; detectable 9%)".
func describe(fc FigureChange) string {
	s := fmt.Sprintf("%s %s -> %s", fc.Name, fmtFigure(fc.Before, fc.Unit), fmtFigure(fc.After, fc.Unit))
	if fc.Effect == nil {
		return s
	}
	s += ", " + fc.Effect.String()
	if fc.MDE != nil {
		s = strings.TrimSuffix(s, ")") + fmt.Sprintf("; detectable %.0f%%)", 100**fc.MDE)
	}
	return s
}

func fmtFigure(v float64, unit string) string {
	switch unit {
	case rules.UnitBytes:
		return fmt.Sprintf("%.0fMB", v/(1<<20))
	case rules.UnitSeconds:
		return fmt.Sprintf("%.3fs", v)
	case "seconds_per_mb":
		return fmt.Sprintf("%.4fs/MB", v)
	}
	if math.Abs(v) < 10 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
