package apply

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Value is a setting as it is live, with what is needed to restore it exactly. The journal
// records it before a change (old) and after (live).
type Value struct {
	// Value is the running value: as SHOW prints it for PostgreSQL ("64kB", "fdatasync"), the
	// decimal number for a kernel knob.
	Value string `json:"value"`

	// PostgreSQL: pg_settings' source, sourcefile and context, and pending_restart.
	Source         string `json:"source,omitempty"`
	SourceFile     string `json:"sourcefile,omitempty"`
	Context        string `json:"context,omitempty"`
	PendingRestart bool   `json:"pending_restart,omitempty"`
	// AutoConf is what postgresql.auto.conf holds for the setting; nil when it holds nothing.
	// Rollback sets it back with ALTER SYSTEM SET, or with ALTER SYSTEM RESET when nil, so the
	// setting returns to wherever it came from (postgresql.conf, an include, the default).
	AutoConf *string `json:"auto_conf,omitempty"`
	// EnumVals are the values the server accepts for an enum setting.
	EnumVals []string `json:"enumvals,omitempty"`

	// Kernel: writing a *_bytes knob zeroes its *_ratio twin (kernel docs, admin-guide/sysctl/vm),
	// so both are recorded; rollback restores the pair.
	Twin      string `json:"twin,omitempty"`
	TwinValue string `json:"twin_value,omitempty"`
	// Persisted is the value the sysctl.d file held for the knob (nil: none), in SysctlFile.
	Persisted  *string `json:"persisted,omitempty"`
	SysctlFile string  `json:"sysctl_file,omitempty"`
}

// sameValue compares two values of a setting the way the server reads them: memory sizes in
// bytes ("16384kB" is "16MB"), times in seconds, numbers as numbers, names case-insensitively.
func sameValue(setting, a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if strings.EqualFold(a, b) {
		return true
	}
	sp, _ := specFor(setting)
	switch sp.kind {
	case kindMemory:
		x, err1 := parseMemory(a)
		y, err2 := parseMemory(b)
		return err1 == nil && err2 == nil && x == y
	case kindSeconds:
		x, err1 := parseSeconds(a)
		y, err2 := parseSeconds(b)
		return err1 == nil && err2 == nil && math.Abs(x-y) < 1e-9
	case kindBool:
		x, ok1 := parseBool(a)
		y, ok2 := parseBool(b)
		return ok1 && ok2 && x == y
	case kindKernelBytes:
		x, err1 := parseKnob(a)
		y, err2 := parseKnob(b)
		return err1 == nil && err2 == nil && x == y
	}
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}

// parseMemory reads a PostgreSQL memory size ("64kB", "16MB", "1GB", "8192" bytes for a
// unitless number). kB is 1024 bytes, as in PostgreSQL.
func parseMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || i == 0 && s[i] == '-') {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse memory size %q: want a number and a unit such as 16MB", s)
	}
	mult := int64(1)
	switch strings.TrimSpace(s[i:]) {
	case "", "B":
	case "kB":
		mult = 1 << 10
	case "MB":
		mult = 1 << 20
	case "GB":
		mult = 1 << 30
	case "TB":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("parse memory size %q: unknown unit %q (want B, kB, MB, GB or TB)", s, s[i:])
	}
	return n * mult, nil
}

// parseSeconds reads a PostgreSQL time ("5min", "30s", "200ms"); a bare number is seconds.
func parseSeconds(s string) (float64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || i == 0 && s[i] == '-') {
		i++
	}
	n, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("parse time %q: want a number and a unit such as 5min", s)
	}
	scale := map[string]float64{"": 1, "us": 1e-6, "ms": 1e-3, "s": 1, "min": 60, "h": 3600, "d": 86400}
	f, ok := scale[strings.TrimSpace(s[i:])]
	if !ok {
		return 0, fmt.Errorf("parse time %q: unknown unit %q (want us, ms, s, min, h or d)", s, s[i:])
	}
	return n * f, nil
}

// parseBool reads PostgreSQL's boolean spellings.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "on", "true", "yes", "1", "t", "y":
		return true, true
	case "off", "false", "no", "0", "f", "n":
		return false, true
	}
	return false, false
}

// parseKnob reads a kernel knob's value. The rules print an unset bytes knob as "0 (ratio 10%)":
// the number is what counts.
func parseKnob(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ' '); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse kernel value %q: want a decimal number", s)
	}
	return n, nil
}

// numeric reads a value of a setting as the number its bounds are in (bytes, seconds, the
// number), and false for enum and boolean settings.
func numeric(sp spec, v string) (float64, bool, error) {
	switch sp.kind {
	case kindMemory:
		n, err := parseMemory(v)
		return float64(n), true, err
	case kindSeconds:
		n, err := parseSeconds(v)
		return n, true, err
	case kindKernelBytes:
		n, err := parseKnob(v)
		return float64(n), true, err
	case kindNumber:
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, true, fmt.Errorf("parse %q: want a number", v)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// humanBytes prints a byte count the way PostgreSQL writes memory settings when it divides
// evenly ("16MB"), else in bytes.
func humanBytes(n float64) string {
	for _, u := range []struct {
		name string
		size float64
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}} {
		if n != 0 && math.Mod(n, u.size) == 0 {
			return strconv.FormatFloat(n/u.size, 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatFloat(n, 'f', -1, 64) + "B"
}
