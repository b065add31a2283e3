package probes

import (
	"math"
	"testing"
)

func near(got, want, relTol float64) bool {
	if want == 0 {
		return math.Abs(got) <= relTol
	}
	return math.Abs(got-want) <= relTol*math.Abs(want)
}

func TestSummarize(t *testing.T) {
	// t(0.975, 7), from the tables (and an independent numerical integration).
	const t7 = 2.3646242515927849
	sd8 := math.Sqrt(32.0 / 7)
	hw8 := t7 * sd8 / math.Sqrt(8)
	tests := []struct {
		name    string
		samples []float64
		want    Latency
	}{
		{"empty", nil, Latency{}},
		{"one sample: no spread, interval collapses", []float64{7}, Latency{Mean: 7, P50: 7, P90: 7, P99: 7, Max: 7, CILow: 7, CIHigh: 7}},
		{"two samples", []float64{2, 1}, Latency{
			Mean: 1.5, StdDev: math.Sqrt(0.5), P50: 1.5, P90: 1.9, P99: 1.99, Max: 2,
			// t(0.975, 1) = 12.706: the interval is honest about how little two samples say.
			CILow: 0, CIHigh: 1.5 + 12.706204736174762*math.Sqrt(0.5)/math.Sqrt2,
		}},
		{"unsorted textbook set", []float64{5, 2, 9, 4, 4, 7, 4, 5}, Latency{
			Mean: 5, StdDev: sd8, P50: 4.5, P90: 7.6, P99: 8.86, Max: 9,
			CILow: 5 - hw8, CIHigh: 5 + hw8,
		}},
		{"1..10", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, Latency{
			Mean: 5.5, StdDev: math.Sqrt(55.0 / 6), P50: 5.5, P90: 9.1, P99: 9.91, Max: 10,
			CILow: 5.5 - 2.2621571627409915*math.Sqrt(55.0/6)/math.Sqrt(10), CIHigh: 5.5 + 2.2621571627409915*math.Sqrt(55.0/6)/math.Sqrt(10),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.samples...)
			got := Summarize(in)
			check := []struct {
				field     string
				got, want float64
			}{
				{"Mean", got.Mean, tt.want.Mean}, {"StdDev", got.StdDev, tt.want.StdDev},
				{"P50", got.P50, tt.want.P50}, {"P90", got.P90, tt.want.P90}, {"P99", got.P99, tt.want.P99},
				{"Max", got.Max, tt.want.Max}, {"CILow", got.CILow, tt.want.CILow}, {"CIHigh", got.CIHigh, tt.want.CIHigh},
			}
			for _, c := range check {
				if !near(c.got, c.want, 1e-6) {
					t.Errorf("%s = %.9g, want %.9g", c.field, c.got, c.want)
				}
			}
			for i := range in {
				if in[i] != tt.samples[i] {
					t.Fatalf("Summarize modified its input: %v, want %v", in, tt.samples)
				}
			}
		})
	}
}

func TestTQuantile(t *testing.T) {
	// Two-sided 95% critical values from the t tables.
	tests := []struct {
		df, want float64
	}{
		{1, 12.706204736}, {2, 4.302652730}, {5, 2.570581836}, {7, 2.364624252}, {10, 2.228138852},
		{29, 2.045229642}, {30, 2.042272456}, {100, 1.983971519}, {1000, 1.962339081}, {1e9, 1.959963985},
	}
	for _, tt := range tests {
		if got := tQuantile(0.975, tt.df); !near(got, tt.want, 1e-5) {
			t.Errorf("tQuantile(0.975, %g) = %.9f, want %.9f", tt.df, got, tt.want)
		}
	}
}

func TestTCDF(t *testing.T) {
	tests := []struct {
		t, df, want float64
	}{
		{0, 3, 0.5},
		{12.706204736, 1, 0.975},
		{-12.706204736, 1, 0.025},
		{2.228138852, 10, 0.975},
		{1.959963985, 1e9, 0.975},
		{1, 1, 0.75}, // Cauchy: 1/2 + atan(1)/pi
	}
	for _, tt := range tests {
		if got := tCDF(tt.t, tt.df); !near(got, tt.want, 1e-7) {
			t.Errorf("tCDF(%g, %g) = %.9f, want %.9f", tt.t, tt.df, got, tt.want)
		}
	}
}

func TestRunningMatchesSummarize(t *testing.T) {
	xs := []float64{120, 95, 101, 3000, 99, 97, 130, 88}
	var r running
	for _, x := range xs {
		r.add(x)
	}
	l := Summarize(xs)
	if !near(r.mean, l.Mean, 1e-12) || !near(r.stdDev(), l.StdDev, 1e-12) {
		t.Errorf("running mean/sd = %g/%g, Summarize %g/%g", r.mean, r.stdDev(), l.Mean, l.StdDev)
	}
	if got, want := r.relHalfWidth(), (l.CIHigh-l.Mean)/l.Mean; !near(got, want, 1e-9) {
		t.Errorf("relHalfWidth = %g, want %g", got, want)
	}
	var one running
	one.add(5)
	if !math.IsInf(one.relHalfWidth(), 1) {
		t.Errorf("one sample: relHalfWidth = %g, want +Inf so that the stop rule waits", one.relHalfWidth())
	}
}
