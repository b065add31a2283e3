package bench

import "math"

// tQuantile975 is Student's t distribution's 97.5% quantile for 1 to 10 degrees of freedom:
// the half-width of a two-sided 95% interval of a mean is t * s / sqrt(n).
var tQuantile975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}

// interval95 is the 95% confidence interval of the mean of xs (Student's t, so that five runs
// give an honest width); ok is false below three runs, where it says nothing useful.
func interval95(xs []float64) (lo, hi float64, ok bool) {
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
