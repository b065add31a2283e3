package probes

import (
	"math"
	"slices"
)

// Statistics choices, in one place so that a reader can check them:
//
//   - Percentiles interpolate linearly between the order statistics at rank (n-1)*p (Hyndman
//     and Fan's type 7, the default of R and NumPy), so p50 of an even count is the midpoint.
//   - The 95% confidence interval of the mean is mean ± t(0.975, n-1) * s/√n with Student's t
//     at every n, not the normal 1.96: sync latencies are few and skewed on slow disks, where
//     the normal quantile would claim a narrower interval than the data support; for large n
//     the two agree (t(0.975, 1000) = 1.962).
//   - Two methods are compared by the rules (rules/stats.go), from the summaries a report
//     carries (mean, interval, sample count), so that they need no raw samples.

// confidence is the level of the intervals in Latency.
const confidence = 0.95

// Summarize computes the latency summary of samples given in microseconds. It does not modify
// samples. With fewer than two samples the interval collapses to the mean, as there is no
// spread to estimate.
func Summarize(samplesUS []float64) Latency {
	n := len(samplesUS)
	if n == 0 {
		return Latency{}
	}
	sorted := slices.Clone(samplesUS)
	slices.Sort(sorted)
	var acc running
	for _, x := range samplesUS {
		acc.add(x)
	}
	l := Latency{
		Mean:   acc.mean,
		StdDev: acc.stdDev(),
		P50:    percentile(sorted, 0.50),
		P90:    percentile(sorted, 0.90),
		P99:    percentile(sorted, 0.99),
		Max:    sorted[n-1],
		CILow:  acc.mean,
		CIHigh: acc.mean,
	}
	if n >= 2 {
		hw := acc.halfWidth()
		// A latency is never negative; a wide interval (one long stall among short syncs)
		// would otherwise print one.
		l.CILow, l.CIHigh = max(acc.mean-hw, 0), acc.mean+hw
	}
	return l
}

// percentile returns the p-quantile (0 <= p <= 1) of sorted, interpolating linearly between
// the neighbouring order statistics (type 7).
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	h := float64(n-1) * p
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// running accumulates the mean and variance in one pass (Welford's method), so that the stop
// rule can be checked after every round without re-reading the samples.
type running struct {
	n    int
	mean float64
	m2   float64
}

func (r *running) add(x float64) {
	r.n++
	d := x - r.mean
	r.mean += d / float64(r.n)
	r.m2 += d * (x - r.mean)
}

// stdDev is the sample standard deviation (n-1 denominator); 0 below two samples.
func (r *running) stdDev() float64 {
	if r.n < 2 {
		return 0
	}
	return math.Sqrt(r.m2 / float64(r.n-1))
}

// halfWidth is the half-width of the 95% confidence interval of the mean; +Inf below two
// samples, so that the stop rule never takes one sample for a precise one.
func (r *running) halfWidth() float64 {
	if r.n < 2 {
		return math.Inf(1)
	}
	return tQuantile(1-(1-confidence)/2, float64(r.n-1)) * r.stdDev() / math.Sqrt(float64(r.n))
}

// relHalfWidth is halfWidth relative to the mean, the quantity Config.Precision bounds.
func (r *running) relHalfWidth() float64 {
	if r.n < 2 || r.mean <= 0 {
		return math.Inf(1)
	}
	return r.halfWidth() / r.mean
}

// tCDF is Student's t cumulative distribution function with df degrees of freedom.
func tCDF(t, df float64) float64 {
	if df > 1e7 {
		// Indistinguishable from the normal here, and the continued fraction would need
		// thousands of terms.
		return 0.5 * math.Erfc(-t/math.Sqrt2)
	}
	x := df / (df + t*t)
	tail := 0.5 * regIncBeta(df/2, 0.5, x)
	if t > 0 {
		return 1 - tail
	}
	return tail
}

// tQuantile is the p-quantile of Student's t with df degrees of freedom, for 0.5 <= p < 1.
func tQuantile(p, df float64) float64 {
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	if df >= 30 {
		// Cornish-Fisher expansion (Abramowitz and Stegun 26.7.5): within 1e-5 of the exact
		// value from 30 degrees of freedom on, and cheap enough for the stop rule's every round.
		z2 := z * z
		g1 := (z2 + 1) * z / 4
		g2 := ((5*z2+16)*z2 + 3) * z / 96
		g3 := (((3*z2+19)*z2+17)*z2 - 15) * z / 384
		g4 := ((((79*z2+776)*z2+1482)*z2-1920)*z2 - 945) * z / 92160
		return z + g1/df + g2/(df*df) + g3/(df*df*df) + g4/(df*df*df*df)
	}
	// Few degrees of freedom: invert the exact CDF by bisection.
	lo, hi := 0.0, 2*z+1
	for tCDF(hi, df) < p {
		lo, hi = hi, 2*hi
	}
	for i := 0; i < 200 && hi-lo > 1e-12*hi; i++ {
		mid := (lo + hi) / 2
		if tCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// regIncBeta is the regularized incomplete beta function I_x(a, b), evaluated by its continued
// fraction (Numerical Recipes, 6.4) on the side where that converges quickly.
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log1p(-x))
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

// betaCF evaluates the incomplete beta continued fraction by the modified Lentz method.
func betaCF(a, b, x float64) float64 {
	const (
		maxIter = 100000
		eps     = 1e-15
		tiny    = 1e-300
	)
	qab, qap, qam := a+b, a+1, a-1
	c, d := 1.0, 1-qab*x/qap
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= maxIter; m++ {
		fm := float64(m)
		m2 := 2 * fm
		aa := fm * (b - fm) * x / ((qam + m2) * (a + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		aa = -(a + fm) * (qab + fm) * x / ((a + m2) * (qap + m2))
		d = 1 + aa*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + aa/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
