package stats

import (
	"math"
	"testing"
)

func TestStats(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"median odd", Median(xs), 3},
		{"median even", Median([]float64{1, 2, 3, 10}), 2.5},
		{"median none", Median(nil), 0},
		{"p5 of 5", Percentile(xs, 5), 1},
		{"p99 of 5", Percentile(xs, 99), 5},
		{"p50 of 4", Percentile([]float64{4, 3, 2, 1}, 50), 2},
		{"min", Min(xs), 1},
		{"max", Max(xs), 5},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if xs[0] != 5 {
		t.Errorf("Median and Percentile must not sort their input")
	}
}

func TestInterval95(t *testing.T) {
	for _, tc := range []struct {
		xs     []float64
		lo, hi float64
		ok     bool
	}{
		{xs: nil},
		{xs: []float64{1, 2}},
		// mean 2, s = 1, t(2) = 4.303: 2 -+ 4.303/sqrt(3)
		{xs: []float64{1, 2, 3}, lo: 2 - 4.303/math.Sqrt(3), hi: 2 + 4.303/math.Sqrt(3), ok: true},
		{xs: []float64{5, 5, 5, 5, 5}, lo: 5, hi: 5, ok: true},
		// 12 runs: past the table, the normal quantile. mean 6.5, s = sqrt(13)
		{xs: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, lo: 6.5 - 1.96*math.Sqrt(13)/math.Sqrt(12), hi: 6.5 + 1.96*math.Sqrt(13)/math.Sqrt(12), ok: true},
	} {
		lo, hi, ok := Interval95(tc.xs)
		if ok != tc.ok || math.Abs(lo-tc.lo) > 1e-9 || math.Abs(hi-tc.hi) > 1e-9 {
			t.Errorf("Interval95(%v) = %v, %v, %v; want %v, %v, %v", tc.xs, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
	}
}
