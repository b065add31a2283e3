package collector

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// PostgreSQL's memory units. kB is 1024 bytes, as in the server (PostgreSQL docs, "Parameter
// Names and Values").
var memoryUnits = []struct {
	name string
	size int64
}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}}

// timeUnits are PostgreSQL's time units in seconds.
var timeUnits = map[string]float64{"us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600, "d": 86400}

func memoryUnitBytes(unit string) (int64, bool) {
	for _, u := range memoryUnits {
		if u.name == unit {
			return u.size, true
		}
	}
	return 0, false
}

// UnitBytes is the size in bytes of one unit of a memory setting as pg_settings names it
// ("B", "kB", "MB"). The unit may carry a multiplier: shared_buffers is in "8kB" pages.
func UnitBytes(unit string) (int64, bool) {
	i := 0
	for i < len(unit) && unit[i] >= '0' && unit[i] <= '9' {
		i++
	}
	mult := int64(1)
	if i > 0 {
		m, err := strconv.ParseInt(unit[:i], 10, 64)
		// A unit of zero bytes would turn every value into 0.
		if err != nil || m == 0 {
			return 0, false
		}
		mult = m
	}
	b, ok := memoryUnitBytes(unit[i:])
	if !ok {
		return 0, false
	}
	return MulBytes(mult, b)
}

// MulBytes is n units of unitBytes bytes, and false when that does not fit in an int64: a
// wrapped product would be a plausible size (or a negative one) where the input was nonsense.
func MulBytes(n, unitBytes int64) (int64, bool) {
	if unitBytes <= 0 {
		return 0, false
	}
	if n > math.MaxInt64/unitBytes || n < math.MinInt64/unitBytes {
		return 0, false
	}
	return n * unitBytes, true
}

// UnitSeconds is the length in seconds of one unit of a time setting ("us", "ms", "s", "min",
// "h", "d").
func UnitSeconds(unit string) (float64, bool) {
	f, ok := timeUnits[unit]
	return f, ok
}

// ParseMemory reads a memory size as SHOW prints it or postgresql.conf takes it ("64kB", "16MB",
// "1GB"); a number without a unit is bytes.
func ParseMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	num, unit := splitNumber(s, false)
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse memory size %q: want a number and a unit such as 16MB", s)
	}
	if unit == "" {
		return n, nil
	}
	b, ok := memoryUnitBytes(unit)
	if !ok {
		return 0, fmt.Errorf("parse memory size %q: unknown unit %q (want B, kB, MB, GB or TB)", s, unit)
	}
	v, ok := MulBytes(n, b)
	if !ok {
		return 0, fmt.Errorf("parse memory size %q: more than %s bytes", s, strconv.FormatInt(math.MaxInt64, 10))
	}
	return v, nil
}

// ParseSeconds reads a time as SHOW prints it or postgresql.conf takes it ("200ms", "30s",
// "5min"); a number without a unit is seconds.
func ParseSeconds(s string) (float64, error) {
	s = strings.TrimSpace(s)
	num, unit := splitNumber(s, true)
	n, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("parse time %q: want a number and a unit such as 5min", s)
	}
	f := 1.0
	if unit != "" {
		var ok bool
		if f, ok = UnitSeconds(unit); !ok {
			return 0, fmt.Errorf("parse time %q: unknown unit %q (want us, ms, s, min, h or d)", s, unit)
		}
	}
	// 400 digits parse as +Inf with a range error above, but 300 digits of days overflow only
	// here; an infinite duration has no use as a bound and cannot be encoded as JSON.
	if v := n * f; !math.IsInf(v, 0) {
		return v, nil
	}
	return 0, fmt.Errorf("parse time %q: out of range", s)
}

// splitNumber splits a leading, optionally negative number (with a fraction when fraction is
// set) from the unit that follows it.
func splitNumber(s string, fraction bool) (num, unit string) {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || fraction && s[i] == '.' || i == 0 && s[i] == '-') {
		i++
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// FormatMemory writes a byte count the way PostgreSQL prints memory settings and
// postgresql.conf takes them: in the largest unit that divides it exactly ("64kB", "16MB").
func FormatMemory(n int64) string {
	for _, u := range memoryUnits {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return "0B"
}

// FormatBytes writes a byte count for people, in PostgreSQL's units (kB = 1024 bytes, as
// pg_settings and postgresql.conf use them): whole above 10 of a unit, one decimal below ("93MB",
// "6.4GB"). It is the one byte format of findings, tables, charts and the lab's reports.
func FormatBytes(n float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	i := 0
	for math.Abs(n) >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if n == math.Trunc(n) || math.Abs(n) >= 10 {
		return fmt.Sprintf("%.0f%s", n, units[i])
	}
	return fmt.Sprintf("%.1f%s", n, units[i])
}
