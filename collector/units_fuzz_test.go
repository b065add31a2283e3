package collector

import (
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// memorySeeds are values as pg_settings, SHOW and postgresql.conf give them, with the overflow
// cases that once wrapped to a negative size.
var memorySeeds = []string{
	"128MB", "16MB", "4MB", "64kB", "8kB", "1GB", "2TB", "-1", "0", "8192", " 16MB ", "4 MB",
	"1.5MB", "4mb", "MB", "", "9223372036854775807TB", "16777217TB", "8388608TB", "-8388608TB",
	"9223372036854775807B", "9223372036854775808", "-9223372036854775808",
}

var timeSeeds = []string{
	"200ms", "30s", "5min", "1h", "1d", "2us", "1.5s", "30", "-1", "5 min", "0", "10ms", "60min",
	"5m", "", "s", ".", "-", "1." + strings.Repeat("0", 300) + "d", "1" + strings.Repeat("0", 305) + "d",
}

// memoryGrammar is what ParseMemory accepts once trimmed: an integer and an optional unit.
var memoryGrammar = regexp.MustCompile(`(?s)^(-?[0-9]+)(.*)$`)

// FuzzParseMemory checks ParseMemory against an exact big-integer reading of the same text:
// it returns the exact product whenever that fits in an int64 and an error otherwise, and its
// result survives FormatMemory and back.
func FuzzParseMemory(f *testing.F) {
	for _, s := range memorySeeds {
		f.Add(s)
	}
	units := map[string]int64{"": 1, "B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseMemory(s)

		var want *big.Int
		if m := memoryGrammar.FindStringSubmatch(strings.TrimSpace(s)); m != nil {
			if size, ok := units[strings.TrimSpace(m[2])]; ok {
				n, _ := new(big.Int).SetString(m[1], 10)
				want = n.Mul(n, big.NewInt(size))
			}
		}
		switch {
		case want == nil:
			if err == nil {
				t.Fatalf("ParseMemory(%q) = %d, want an error: not a number and a unit", s, got)
			}
			return
		case !want.IsInt64():
			if err == nil {
				t.Fatalf("ParseMemory(%q) = %d, want an error: %s bytes does not fit in an int64", s, got, want)
			}
			return
		case err != nil:
			t.Fatalf("ParseMemory(%q) = error %v, want %s", s, err, want)
		case got != want.Int64():
			t.Fatalf("ParseMemory(%q) = %d, want %s", s, got, want)
		}
		if back, err := ParseMemory(FormatMemory(got)); err != nil || back != got {
			t.Fatalf("ParseMemory(FormatMemory(%d)) = %d, %v; want %d", got, back, err, got)
		}
	})
}

// FuzzFormatMemory checks that every int64 formats as a value ParseMemory reads back exactly.
func FuzzFormatMemory(f *testing.F) {
	for _, n := range []int64{0, 1, 512, 1536, 64 << 10, 16 << 20, 3 << 30, 1 << 40, -1, -(16 << 20), math.MaxInt64, math.MinInt64} {
		f.Add(n)
	}
	shape := regexp.MustCompile(`^-?[0-9]+(B|kB|MB|GB|TB)$`)
	f.Fuzz(func(t *testing.T, n int64) {
		s := FormatMemory(n)
		if !shape.MatchString(s) {
			t.Fatalf("FormatMemory(%d) = %q, want a number and a unit", n, s)
		}
		if back, err := ParseMemory(s); err != nil || back != n {
			t.Fatalf("ParseMemory(FormatMemory(%d) = %q) = %d, %v", n, s, back, err)
		}
	})
}

// FuzzParseSeconds checks that ParseSeconds returns only finite values, that a value without a
// minus sign is not negative, that the unit scales the number, and that the result reads back
// exactly when written out in seconds.
func FuzzParseSeconds(f *testing.F) {
	for _, s := range timeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSeconds(s)
		if err != nil {
			return
		}
		if math.IsInf(got, 0) || math.IsNaN(got) {
			t.Fatalf("ParseSeconds(%q) = %g, want a finite number or an error", s, got)
		}
		if got < 0 && !strings.Contains(s, "-") {
			t.Fatalf("ParseSeconds(%q) = %g: negative without a minus sign", s, got)
		}
		num, unit := splitNumber(strings.TrimSpace(s), true)
		if unit != "" {
			n, err := strconv.ParseFloat(num, 64)
			factor, ok := UnitSeconds(unit)
			if err != nil || !ok || n*factor != got {
				t.Fatalf("ParseSeconds(%q) = %g, want %s times %q = %g", s, got, num, unit, n*factor)
			}
		}
		text := strconv.FormatFloat(got, 'f', -1, 64) + "s"
		if back, err := ParseSeconds(text); err != nil || back != got {
			t.Fatalf("ParseSeconds(%q) = %g, %v; want %g (from %q)", text, back, err, got, s)
		}
	})
}

// FuzzUnitBytes checks UnitBytes against an exact reading: a positive multiple of a known unit
// that fits in an int64, and false for anything else.
func FuzzUnitBytes(f *testing.F) {
	for _, s := range []string{"B", "kB", "8kB", "16MB", "GB", "TB", "", "8", "ms", "kb", "0kB", "8388608TB", "9223372036854775807MB"} {
		f.Add(s)
	}
	units := map[string]int64{"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
	grammar := regexp.MustCompile(`^([0-9]*)(B|kB|MB|GB|TB)$`)
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := UnitBytes(s)
		m := grammar.FindStringSubmatch(s)
		if m == nil {
			if ok {
				t.Fatalf("UnitBytes(%q) = %d, want false: not a unit", s, got)
			}
			return
		}
		want := big.NewInt(units[m[2]])
		if m[1] != "" {
			n, _ := new(big.Int).SetString(m[1], 10)
			want.Mul(want, n)
		}
		if want.Sign() <= 0 || !want.IsInt64() {
			if ok {
				t.Fatalf("UnitBytes(%q) = %d, want false: %s bytes", s, got, want)
			}
			return
		}
		if !ok || got != want.Int64() {
			t.Fatalf("UnitBytes(%q) = %d, %v; want %s", s, got, ok, want)
		}
	})
}
