// Package stats holds the summary statistics the lab's benchmarks report: medians, nearest-rank
// percentiles, extremes and the 95% interval of a mean. None of them sorts its input.
package stats

import (
	"math"
	"sort"
)

// Median returns the median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of xs (0 for none).
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(float64(len(s))*p/100+0.999999999) - 1
	rank = min(max(rank, 0), len(s)-1)
	return s[rank]
}

// Min returns the smallest of xs (0 for none).
func Min(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

// Max returns the largest of xs, at least 0: the lab's figures (latencies, counts, seconds)
// are never negative, and none has a maximum of 0.
func Max(xs []float64) float64 {
	var m float64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// tQuantile975 is Student's t distribution's 97.5% quantile for 1 to 10 degrees of freedom:
// the half-width of a two-sided 95% interval of a mean is t * s / sqrt(n).
var tQuantile975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}

// Interval95 is the 95% confidence interval of the mean of xs (Student's t, so that five runs
// give an honest width); ok is false below three runs, where it says nothing useful.
func Interval95(xs []float64) (lo, hi float64, ok bool) {
	n := len(xs)
	if n < 3 {
		return 0, 0, false
	}
	var mean float64
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	t := 1.96
	if df := n - 1; df <= len(tQuantile975) {
		t = tQuantile975[df-1]
	}
	h := t * sd / math.Sqrt(float64(n))
	return mean - h, mean + h, true
}
