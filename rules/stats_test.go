package rules

import (
	"math"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

func method(mean, lo, hi float64, samples int) probes.MethodResult {
	return probes.MethodResult{Samples: samples, LatencyUS: probes.Latency{Mean: mean, CILow: lo, CIHigh: hi}}
}

// compare is the significance test behind every wal_sync_method recommendation.
func TestCompare(t *testing.T) {
	th := DefaultThresholds() // ProbeZ 1.96, ProbeMinSamples 10
	se := func(lo, hi float64) float64 { return (hi - lo) / (2 * z95) }
	tests := []struct {
		name      string
		cur, cand probes.MethodResult
		want      speedup
	}{
		{"twice as fast, tight intervals", method(1000, 900, 1100, 50), method(500, 450, 550, 50),
			speedup{Gain: 0.5, Saved: 500e-6, Z: 500 / math.Hypot(se(900, 1100), se(450, 550)), Significant: true}},
		{"faster but within the noise", method(1000, 800, 1200, 50), method(900, 700, 1100, 50),
			speedup{Gain: 0.1, Saved: 100e-6, Z: 100 / math.Hypot(se(800, 1200), se(700, 1100))}},
		{"too few samples", method(1000, 900, 1100, 5), method(500, 450, 550, 50),
			speedup{Gain: 0.5, Saved: 500e-6, Z: 500 / math.Hypot(se(900, 1100), se(450, 550))}},
		{"slower is never significant", method(500, 450, 550, 50), method(1000, 900, 1100, 50),
			speedup{Gain: -1, Saved: -500e-6, Z: -500 / math.Hypot(se(900, 1100), se(450, 550))}},
		{"unknown error: zero-width interval", method(1000, 1000, 1000, 50), method(500, 450, 550, 50),
			speedup{Gain: 0.5, Saved: 500e-6}},
		{"unknown error: interval beside the mean", method(1000, 1100, 1200, 50), method(500, 450, 550, 50),
			speedup{Gain: 0.5, Saved: 500e-6}},
		{"no mean", method(0, 0, 0, 0), method(500, 450, 550, 50), speedup{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := compare(tt.cur, tt.cand, th)
			if got.Significant != tt.want.Significant {
				t.Errorf("Significant = %v, want %v (z = %.3f)", got.Significant, tt.want.Significant, got.Z)
			}
			for _, c := range []struct {
				field     string
				got, want float64
			}{{"Gain", got.Gain, tt.want.Gain}, {"Saved", got.Saved, tt.want.Saved}, {"Z", got.Z, tt.want.Z}} {
				if math.Abs(c.got-c.want) > 1e-9*math.Max(1, math.Abs(c.want)) {
					t.Errorf("%s = %.9g, want %.9g", c.field, c.got, c.want)
				}
			}
		})
	}
}
