package bench

import (
	"math"
	"testing"
)

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
		lo, hi, ok := interval95(tc.xs)
		if ok != tc.ok || math.Abs(lo-tc.lo) > 1e-9 || math.Abs(hi-tc.hi) > 1e-9 {
			t.Errorf("interval95(%v) = %v, %v, %v; want %v, %v, %v", tc.xs, lo, hi, ok, tc.lo, tc.hi, tc.ok)
		}
	}
}
