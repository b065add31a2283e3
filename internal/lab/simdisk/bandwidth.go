package simdisk

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseBandwidth reads a bandwidth in bytes per second such as "80MB", "80MB/s", "80MiB" or
// "0" (unlimited). kB, MB, GB and TB are decimal, as disk vendors and docs/benchmarks.md's "80 MB/s" mean
// them; KiB, MiB, GiB and TiB are binary. Units are case-insensitive, and a bare number is bytes.
func ParseBandwidth(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, "/s")
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	}
	mult, ok := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	}[unit]
	if !ok {
		return 0, fmt.Errorf("bandwidth %q: unknown unit %q (want B, kB, MB, GB, KiB, MiB or GiB)", in, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bandwidth %q: want a non-negative number and a unit such as 80MB", in)
	}
	b := math.Round(v * mult)
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("bandwidth %q: too large", in)
	}
	return int64(b), nil
}
