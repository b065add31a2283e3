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

// summary builds a MethodResult from raw samples, as a report carries it.
func summary(samples ...float64) MethodResult {
	return result(MethodResult{Name: Fdatasync, WritesPerSync: 1, WriteBytes: BlockBytes, Available: true}, samples)
}

func TestCompare(t *testing.T) {
	// The three worked examples of Welch's t-test on Wikipedia; t, df and p checked against an
	// independent numerical integration of the t density.
	ex1a := summary(27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4)
	ex1b := summary(27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4)
	ex2a := summary(17.2, 20.9, 22.6, 18.1, 21.7, 21.4, 23.5, 24.2, 14.7, 21.8)
	ex2b := summary(21.5, 22.8, 21.0, 23.0, 21.6, 23.6, 22.5, 20.7, 23.4, 21.8, 20.7, 21.7, 21.5, 22.5, 23.6, 21.5, 22.5, 23.5, 21.5, 21.8)
	ex3a := summary(19.8, 20.4, 19.6, 17.8, 18.5, 18.9, 18.3, 18.9, 19.5, 22.0)
	ex3b := summary(28.2, 26.6, 20.1, 23.3, 25.2, 22.1, 17.7, 27.6, 20.6, 13.7, 23.2, 17.5, 20.6, 18.0, 23.9, 21.6, 24.3, 20.4, 23.9, 13.3)
	tests := []struct {
		name string
		a, b MethodResult
		want Comparison
	}{
		{"welch example 1: significant", ex1a, ex1b, Comparison{Ratio: 20.82 / 22.986666666666668, T: -2.455356398, DF: 24.988529290, P: 0.021378001, Significant: true}},
		{"welch example 2: not significant", ex2a, ex2b, Comparison{Ratio: 20.61 / 22.135, T: -1.565433524, DF: 9.904741249, P: 0.148841697}},
		{"welch example 3: significant, unequal variances", ex3a, ex3b, Comparison{Ratio: 19.37 / 21.59, T: -2.225512040, DF: 24.524634944, P: 0.035484531, Significant: true}},
		{"symmetric", ex1b, ex1a, Comparison{Ratio: 22.986666666666668 / 20.82, T: 2.455356398, DF: 24.988529290, P: 0.021378001, Significant: true}},
		{"same samples", ex1a, ex1a, Comparison{Ratio: 1, T: 0, DF: 28, P: 1}},
		{"one sample is never significant", summary(100), summary(1, 2, 3), Comparison{Ratio: 50, P: 1}},
		{"constant and different", summary(4, 4, 4), summary(2, 2, 2), Comparison{Ratio: 2, P: 0, Significant: true}},
		{"constant and equal", summary(4, 4, 4), summary(4, 4), Comparison{Ratio: 1, P: 1}},
		{"empty b", summary(1, 2), MethodResult{}, Comparison{P: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compare(tt.a, tt.b)
			if got.Significant != tt.want.Significant {
				t.Errorf("Significant = %v, want %v (p = %.6f)", got.Significant, tt.want.Significant, got.P)
			}
			for _, c := range []struct {
				field     string
				got, want float64
			}{{"Ratio", got.Ratio, tt.want.Ratio}, {"T", got.T, tt.want.T}, {"DF", got.DF, tt.want.DF}, {"P", got.P, tt.want.P}} {
				if !near(c.got, c.want, 1e-6) {
					t.Errorf("%s = %.9g, want %.9g", c.field, c.got, c.want)
				}
			}
		})
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
