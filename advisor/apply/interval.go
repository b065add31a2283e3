package apply

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Confidence is the two-sided confidence of the verdicts' intervals; Power is the chance, at the
// minimum detectable effect, that the interval excludes no change.
const (
	Confidence = 0.95
	Power      = 0.80
)

// minSubSamples is the fewest sub-window (or per-event) values each side needs for an
// interval: with two, a variance has one degree of freedom and the interval is as wide as it is
// useless; three is where Welch's interval starts to say something.
const minSubSamples = 3

// Effect is a figure's change after a change of setting, as an interval on the difference of
// its means (after - before) over the sub-windows (or events) of each side: Welch's interval,
// which does not assume the two sides vary alike. Every judged figure is lower-is-better, so an
// interval wholly below zero is a gain and one wholly above a loss.
type Effect struct {
	// Diff is mean(after) - mean(before); Low and High bound it at Confidence.
	Diff float64 `json:"diff"`
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// Rel, RelLow and RelHigh are the same relative to mean(before) (0 when it is 0).
	Rel     float64 `json:"rel"`
	RelLow  float64 `json:"rel_low"`
	RelHigh float64 `json:"rel_high"`
	// NBefore and NAfter are the values each side had: sub-windows, or events (checkpoints).
	NBefore int `json:"n_before"`
	NAfter  int `json:"n_after"`
	// Pairs is a crossover trial's number of (old, new) pairs, whose differences the interval
	// is on (NBefore and NAfter are then 0).
	Pairs int `json:"pairs,omitempty"`
}

// welch returns the interval on mean(after) - mean(before); ok is false when either side has
// fewer than minSubSamples values.
func welch(before, after []float64) (Effect, bool) {
	e := Effect{NBefore: len(before), NAfter: len(after)}
	if len(before) < minSubSamples || len(after) < minSubSamples {
		return e, false
	}
	mb, vb := meanVar(before)
	ma, va := meanVar(after)
	e.Diff = ma - mb
	sb, sa := vb/float64(len(before)), va/float64(len(after))
	se := math.Sqrt(sb + sa)
	half := 0.0
	if se > 0 {
		df := (sb + sa) * (sb + sa) / (sb*sb/float64(len(before)-1) + sa*sa/float64(len(after)-1))
		half = tQuantile(1-(1-Confidence)/2, df) * se
	}
	e.Low, e.High = e.Diff-half, e.Diff+half
	if slices.Min(before) >= 0 && slices.Min(after) >= 0 {
		// Every figure is a non-negative rate or share: the mean after cannot fall below zero,
		// whatever the symmetric interval says.
		e.Low = max(e.Low, -mb)
	}
	if mb != 0 {
		e.Rel, e.RelLow, e.RelHigh = e.Diff/math.Abs(mb), e.Low/math.Abs(mb), e.High/math.Abs(mb)
	}
	return e, true
}

// mde is the minimum detectable effect of a figure whose values before a change are before:
// the difference of means that an interval at Confidence excludes zero for with Power, when the
// window after holds as many values varying as much. Absolute; ok false with too few values.
func mde(before []float64) (float64, bool) {
	n := len(before)
	if n < minSubSamples {
		return 0, false
	}
	_, v := meanVar(before)
	df := float64(2*n - 2)
	return (tQuantile(1-(1-Confidence)/2, df) + tQuantile(Power, df)) * math.Sqrt(2*v/float64(n)), true
}

// relativeMDE is mde over the mean of before (nil when there is none, or the mean is 0).
func relativeMDE(before []float64) *float64 {
	d, ok := mde(before)
	if !ok {
		return nil
	}
	mean, _ := meanVar(before)
	if mean == 0 {
		return nil
	}
	r := d / math.Abs(mean)
	return &r
}

func meanVar(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	if len(xs) > 1 {
		variance /= float64(len(xs) - 1)
	}
	return mean, variance
}

// tQuantile is Student's t distribution's quantile at p for df degrees of freedom (df >= 2):
// the Cornish-Fisher expansion (Abramowitz and Stegun 26.7.5) from 3 degrees of freedom, within
// 0.2% of the tables there (TestTQuantile), and a line between 2 (exact) and 3 below.
func tQuantile(p, df float64) float64 {
	if df < 3 {
		df = max(df, 2)
		// Exact for 2 degrees of freedom: t = (2p-1) sqrt(2 / (1 - (2p-1)^2)).
		a := 2*p - 1
		t2 := a * math.Sqrt(2/(1-a*a))
		return t2 + (df-2)*(tQuantile(p, 3)-t2)
	}
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	z2 := z * z
	g1 := (z2 + 1) * z / 4
	g2 := ((5*z2+16)*z2 + 3) * z / 96
	g3 := (((3*z2+19)*z2+17)*z2 - 15) * z / 384
	g4 := ((((79*z2+776)*z2+1482)*z2-1920)*z2 - 945) * z / 92160
	return z + g1/df + g2/(df*df) + g3/(df*df*df) + g4/(df*df*df*df)
}

// String is the effect as the journal's reasons and the log say it: "-31% (95% interval
// -40%..-22%, 12 windows before, 12 after)".
func (e Effect) String() string {
	if e.Pairs > 0 {
		return fmt.Sprintf("%+.0f%% (%.0f%% interval %+.0f%%..%+.0f%%, %d pairs)", 100*e.Rel, 100*Confidence, 100*e.RelLow, 100*e.RelHigh, e.Pairs)
	}
	return fmt.Sprintf("%+.0f%% (%.0f%% interval %+.0f%%..%+.0f%%, %d before, %d after)",
		100*e.Rel, 100*Confidence, 100*e.RelLow, 100*e.RelHigh, e.NBefore, e.NAfter)
}

// detectability says, before a change is made, what its verification can see: each judged
// figure's minimum detectable effect over the window before, relative to its level, and, when
// the finding predicts one of those figures, whether the predicted change is below it: such a
// change is unverifiable here, and is said to be so before it is made (it is still made, and
// rolled back only if a figure is shown worse). "" when no figure has an MDE.
func detectability(before *Figures, p *rules.Predicted) string {
	if before == nil {
		return ""
	}
	var parts []string
	for _, x := range before.Figures {
		if !x.Judged || x.MDE == nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%% (%d values)", x.Name, 100**x.MDE, len(x.Sub)))
	}
	if len(parts) == 0 {
		return ""
	}
	out := "detectable before the change: " + strings.Join(parts, ", ")
	if p == nil || p.Current == 0 {
		return out
	}
	x, ok := before.get(p.Name)
	if !ok || x.MDE == nil {
		return out
	}
	predicted, detectable := (p.Value-p.Current)/math.Abs(p.Current), *x.MDE
	if math.Abs(predicted) < detectable {
		return out + fmt.Sprintf("; the predicted change of %s, %+.0f%%, is below that: unverifiable here", p.Name, 100*predicted)
	}
	return out + fmt.Sprintf("; the predicted change of %s, %+.0f%%, is %.1f times that", p.Name, 100*predicted, math.Abs(predicted)/detectable)
}
