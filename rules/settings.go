package rules

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// latestPostgres returns the newest snapshot's PostgreSQL part, or what is missing. Rules
// judge configuration from the newest sample only: an older one may describe settings that
// have since been changed.
func latestPostgres(h *History) (*collector.Postgres, string) {
	s, ok := h.Latest()
	if !ok {
		return nil, "no snapshot yet"
	}
	if s.Postgres == nil {
		return nil, "no PostgreSQL sample in the latest snapshot" + partFailed(s, collector.PartPostgres)
	}
	return s.Postgres, ""
}

// partFailed points at a failed part of the snapshot rather than repeating its error: every
// rule that needs the part says the same, and the part's error is shown once where the parts
// are (check's .problems, the API's snapshot).
func partFailed(s collector.Snapshot, name string) string {
	p, ok := s.Part(name)
	if !ok || p.Error == "" {
		return ""
	}
	if p.Status != "" && p.Status != collector.TargetOK {
		return fmt.Sprintf(": collecting %s failed (%s; its error is in the snapshot's %q part)", name, p.Status, name)
	}
	return fmt.Sprintf(": collecting %s failed (its error is in the snapshot's %q part)", name, name)
}

// settings reads typed values from pg_settings rows.
type settings map[string]collector.Setting

func (s settings) value(name string) (string, bool) {
	v, ok := s[name]
	return v.Value, ok
}

// on reads a boolean setting as SHOW prints it.
func (s settings) on(name string) (bool, bool) {
	v, ok := s[name]
	if !ok {
		return false, false
	}
	switch strings.ToLower(v.Value) {
	case "on", "true", "yes", "1":
		return true, true
	case "off", "false", "no", "0":
		return false, true
	}
	return false, false
}

// bytes reads a memory setting in bytes: the collector's normalized value, else pg_settings'
// raw setting times its unit.
func (s settings) bytes(name string) (int64, bool) {
	v, ok := s[name]
	if !ok {
		return 0, false
	}
	if v.Bytes != nil {
		return *v.Bytes, *v.Bytes >= 0
	}
	unit, ok := collector.UnitBytes(v.Unit)
	if !ok {
		return 0, false
	}
	raw, err := strconv.ParseInt(v.Raw, 10, 64)
	if err != nil || raw < 0 {
		return 0, false
	}
	// A setting too large for its unit is not a size the rules can reason about.
	return collector.MulBytes(raw, unit)
}

// seconds reads a time setting in seconds.
func (s settings) seconds(name string) (float64, bool) {
	v, ok := s[name]
	if !ok {
		return 0, false
	}
	if v.Seconds != nil {
		return *v.Seconds, true
	}
	f, err := strconv.ParseFloat(v.Raw, 64)
	if err != nil {
		return 0, false
	}
	unit, ok := collector.UnitSeconds(v.Unit)
	if !ok {
		return 0, false
	}
	// ParseFloat reads "NaN" and "Inf"; neither is a duration, and evidence must encode as JSON.
	sec := f * unit
	return sec, !math.IsNaN(sec) && !math.IsInf(sec, 0)
}

// number reads a plain numeric setting (checkpoint_completion_target, commit_siblings).
func (s settings) number(name string) (float64, bool) {
	v, ok := s[name]
	if !ok {
		return 0, false
	}
	raw := v.Raw
	if raw == "" {
		raw = v.Value
	}
	f, err := strconv.ParseFloat(raw, 64)
	return f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
}

// humanSeconds writes a duration in seconds with three significant digits ("4.6ms", "6.9s").
func humanSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	for r := time.Duration(1); r < time.Hour; r *= 10 {
		if d < 1000*r {
			return d.Round(r).String()
		}
	}
	return d.Round(time.Second).String()
}

// pct writes a ratio as a percentage for a summary.
func pct(r float64) string {
	return fmt.Sprintf("%.0f%%", r*100)
}

// ceilPow2 is the smallest power of two not below n (n >= 1).
func ceilPow2(n int64) int64 {
	p := int64(1)
	for p < n && p*2 > 0 {
		p *= 2
	}
	return p
}
