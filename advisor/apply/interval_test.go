package apply

import (
	"math"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestTQuantile checks the t quantiles against Student's tables (two-sided 95% and one-sided
// 80%).
func TestTQuantile(t *testing.T) {
	for _, tc := range []struct{ p, df, want float64 }{
		{0.975, 2, 4.303}, {0.975, 3, 3.182}, {0.975, 5, 2.571}, {0.975, 10, 2.228}, {0.975, 22, 2.074}, {0.975, 30, 2.042}, {0.975, 1000, 1.962},
		{0.80, 2, 1.061}, {0.80, 3, 0.978}, {0.80, 5, 0.920}, {0.80, 10, 0.879}, {0.80, 30, 0.854},
	} {
		if got := tQuantile(tc.p, tc.df); math.Abs(got-tc.want)/tc.want > 0.002 {
			t.Errorf("t(%v, %v df) = %.4f, want %.3f", tc.p, tc.df, got, tc.want)
		}
	}
}

func TestWelch(t *testing.T) {
	// Two samples whose interval the textbook computes: means 10 and 8, variances 1 and 4, 10
	// values each: se = sqrt(0.1+0.4), df = 0.25/(0.01/9+0.16/9) = 13.2.
	before := []float64{9, 11, 9, 11, 9, 11, 9, 11, 9, 11} // mean 10, var 10/9
	after := []float64{6, 10, 6, 10, 6, 10, 6, 10, 6, 10}  // mean 8, var 40/9
	e, ok := welch(before, after)
	if !ok {
		t.Fatal("no interval from 10 values a side")
	}
	se := math.Sqrt(10.0/9/10 + 40.0/9/10)
	if math.Abs(e.Diff-(-2)) > 1e-12 || e.High >= 0 || math.Abs((e.High-e.Low)/2-tQuantile(0.975, 13.24)*se) > 0.01 {
		t.Errorf("welch = %+v, want -2 with a half-width near %.3f", e, tQuantile(0.975, 13.24)*se)
	}
	if math.Abs(e.Rel-(-0.2)) > 1e-12 {
		t.Errorf("relative change %v, want -0.2", e.Rel)
	}
	if _, ok := welch(before[:2], after); ok {
		t.Error("an interval from 2 values before")
	}
	// No variation on either side: the interval is the difference.
	if e, ok := welch([]float64{1, 1, 1}, []float64{2, 2, 2}); !ok || e.Low != 1 || e.High != 1 {
		t.Errorf("constant sides: %+v", e)
	}
}

func TestDetectability(t *testing.T) {
	before := &Figures{Figures: []Figure{fig(FigureIOSecondsPerMB, 10, 0.09, 0.11, 0.10, 0.12, 0.08), fig(FigureFlushWaitShare, 100)}}
	// sd 0.0158 over 5 values: (t(0.975, 8) + t(0.80, 8)) x 0.0158 x sqrt(2/5) = 0.032, 32% of 0.1.
	if got := detectability(before, nil); !strings.Contains(got, "wal_io_seconds_per_mb 32% (5 values)") || strings.Contains(got, FigureFlushWaitShare) {
		t.Errorf("detectability = %q, want the I/O figure's MDE, 32%%, and nothing for a figure without values", got)
	}
	small := &rules.Predicted{Name: rules.PredictWALIO, Current: 0.1, Value: 0.098}
	if got := detectability(before, small); !strings.Contains(got, "-2%, is below that: unverifiable here") {
		t.Errorf("a 2%% predicted change: %q, want it called unverifiable", got)
	}
	large := &rules.Predicted{Name: rules.PredictWALIO, Current: 0.1, Value: 0.01}
	if got := detectability(before, large); !strings.Contains(got, "-90%, is") || strings.Contains(got, "unverifiable") {
		t.Errorf("a 90%% predicted change: %q, want it verifiable", got)
	}
	if got := detectability(nil, large); got != "" {
		t.Errorf("no figures before: %q", got)
	}
}
