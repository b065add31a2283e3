package rules

import (
	"math"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// z95 is the two-sided 95% normal quantile; the probes report 95% intervals of the mean.
const z95 = 1.959964

// speedup compares a candidate probe result against the current one.
type speedup struct {
	// Gain is the relative saving, 1 - candidate/current mean (0.5: twice as fast).
	Gain float64
	// Saved is the absolute saving per sync, in seconds.
	Saved float64
	// Z is the difference of means over its standard error; 0 when the error is unknown.
	Z float64
	// Significant is true when both have enough samples and Z reaches the threshold.
	Significant bool
}

// compare tests whether cand is faster than cur: a one-sided Welch-style z test on the means,
// with each mean's standard error recovered from its 95% confidence interval. Only the fields
// every probe report has (Mean, CILow, CIHigh, Samples) are used; an interval of zero width
// means the error is unknown, and an unknown error is never significant. It is the project's
// one significance test: one-sided (a change is only worth making towards the faster method),
// at the configurable ProbeZ, gated by ProbeMinSamples.
func compare(cur, cand probes.MethodResult, t Thresholds) speedup {
	a, b := cur.LatencyUS, cand.LatencyUS
	var s speedup
	if a.Mean <= 0 || b.Mean <= 0 {
		return s
	}
	s.Gain = 1 - b.Mean/a.Mean
	s.Saved = (a.Mean - b.Mean) / 1e6
	seA, okA := stdErr(a)
	seB, okB := stdErr(b)
	if !okA || !okB {
		return s
	}
	se := math.Hypot(seA, seB)
	if se <= 0 {
		return s
	}
	s.Z = (a.Mean - b.Mean) / se
	s.Significant = cur.Samples >= t.ProbeMinSamples && cand.Samples >= t.ProbeMinSamples && s.Z >= t.ProbeZ
	return s
}

// stdErr recovers the standard error of a mean from its 95% interval. Dividing by the normal
// quantile rather than Student's t overstates the error for small samples: conservative.
func stdErr(l probes.Latency) (float64, bool) {
	w := l.CIHigh - l.CILow
	if w <= 0 || l.CILow > l.Mean || l.CIHigh < l.Mean {
		return 0, false
	}
	return w / (2 * z95), true
}

// better reports whether cand beats cur by enough to act on: significantly, by at least
// MinImprovement, and by at least MinGain per sync.
func (s speedup) better(t Thresholds) bool {
	return s.Significant && s.Gain >= t.MinImprovement && s.Saved >= t.MinGain.Seconds()
}

// probeResult returns a usable probe result for a method and pattern.
func probeResult(r *probes.Report, name string, writesPerSync int) (probes.MethodResult, bool) {
	if r == nil {
		return probes.MethodResult{}, false
	}
	m, ok := r.Method(name, writesPerSync)
	if !ok || !m.Available || m.Error != "" || m.Samples == 0 || m.LatencyUS.Mean <= 0 {
		return probes.MethodResult{}, false
	}
	return m, true
}

// freshProbe returns the probe report when it is recent enough to describe the device now,
// or why it cannot be used.
func freshProbe(in Input) (*probes.Report, string) {
	if in.Probe == nil {
		return nil, "no probe report (probing is off or has not run yet)"
	}
	if !in.Probe.Finished.IsZero() && in.Now.Sub(in.Probe.Finished) > in.Config.ProbeMaxAge {
		return nil, "the probe report is older than " + in.Config.ProbeMaxAge.String()
	}
	return in.Probe, ""
}

// usSeconds converts probe microseconds to seconds.
func usSeconds(us float64) float64 { return us / 1e6 }

// sinceWindow is the part of the history within d of now.
func sinceWindow(in Input, d time.Duration) *History {
	return in.History.Since(in.Now.Add(-d))
}

// coldStart says what is missing when a window is too short to compute rates over.
func coldStart(w *History, t Thresholds) string {
	if span := w.Span(); span < t.MinSpan {
		return "need " + t.MinSpan.String() + " of history, have " + span.Round(time.Second).String()
	}
	return ""
}
