package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// settingsQuery reads the named settings ($1, a text[]) with their value as SHOW prints it.
// pg_settings hides data_directory from roles without pg_read_all_settings (pg_monitor has it),
// so current_setting() is never evaluated for a setting the role may not see.
func settingsQuery(versionNum int) string {
	pendingRestart := "pending_restart"
	if versionNum < 90500 {
		// pending_restart appeared in 9.5.
		pendingRestart = "false"
	}
	return "SELECT name, setting, unit, source, context, " + pendingRestart + ", enumvals, current_setting(name) " +
		"FROM pg_settings WHERE name = ANY($1)"
}

// settingRow is one row of settingsQuery.
type settingRow struct {
	Name           string
	Setting        string
	Unit           *string
	Source         string
	Context        string
	PendingRestart bool
	EnumVals       []string
	Show           string
}

// walBuffersAuto is wal_buffers' "size it for me" value.
const walBuffersAuto = "-1"

// Bounds of the automatic wal_buffers size: 1/32 of shared_buffers, at least 64kB and at most
// one WAL segment (PostgreSQL docs, wal_buffers; XLOGChooseNumBuffers). The segment is 16MB
// unless initdb --wal-segsize chose otherwise.
const (
	minAutoWALBuffers = 64 << 10
	maxAutoWALBuffers = 16 << 20
)

// settingsFromRows normalizes pg_settings rows: memory settings get Bytes, time settings
// Seconds, and wal_buffers = -1 its effective size.
func settingsFromRows(rows []settingRow) map[string]collector.Setting {
	out := make(map[string]collector.Setting, len(rows))
	for _, r := range rows {
		out[r.Name] = settingFromRow(r)
	}
	if wb, ok := out[collector.WALBuffers]; ok && wb.Raw == walBuffersAuto {
		var sharedBuffers *int64
		if sb, ok := out[collector.SharedBuffers]; ok {
			sharedBuffers = sb.Bytes
		}
		wb.Bytes = autoWALBuffers(wb.Value, sharedBuffers)
		out[collector.WALBuffers] = wb
	}
	return out
}

func settingFromRow(r settingRow) collector.Setting {
	s := collector.Setting{
		Value:          r.Show,
		Raw:            r.Setting,
		Source:         r.Source,
		Context:        r.Context,
		PendingRestart: r.PendingRestart,
		EnumVals:       r.EnumVals,
	}
	if r.Unit != nil {
		s.Unit = *r.Unit
	}
	unit := s.Unit
	if r.Name == collector.CommitDelay && unit == "" {
		// commit_delay is in microseconds, but pg_settings gives it no unit (the GUC machinery
		// has no microsecond unit for integers; PostgreSQL docs, commit_delay).
		unit = "us"
	}
	kind, scale, ok := unitScale(unit)
	if !ok {
		return s
	}
	raw, err := strconv.ParseFloat(r.Setting, 64)
	// Negative values are sentinels ("-1: use the default", "disabled"), not sizes or durations.
	if err != nil || raw < 0 {
		return s
	}
	switch kind {
	case memoryUnit:
		b := int64(raw * scale)
		s.Bytes = &b
	case timeUnit:
		sec := raw * scale
		s.Seconds = &sec
	}
	return s
}

// autoWALBuffers is the effective size of wal_buffers = -1. The server resolves it at start and
// SHOW prints the result ("4MB"), so that is used; the formula is the fallback.
func autoWALBuffers(show string, sharedBuffers *int64) *int64 {
	if b, err := parseMemory(show); err == nil && b > 0 {
		return &b
	}
	if sharedBuffers == nil {
		return nil
	}
	b := min(max(*sharedBuffers/32, minAutoWALBuffers), maxAutoWALBuffers)
	return &b
}

type unitKind int

const (
	memoryUnit unitKind = iota + 1
	timeUnit
)

// unitScale reads a pg_settings unit ("8kB", "16MB", "B", "ms", "s", "min") as its kind and the
// size of one unit in bytes or seconds.
func unitScale(unit string) (unitKind, float64, bool) {
	// Memory units may carry a multiplier: shared_buffers is in "8kB" pages.
	i := 0
	for i < len(unit) && unit[i] >= '0' && unit[i] <= '9' {
		i++
	}
	mult := 1.0
	if i > 0 {
		m, err := strconv.Atoi(unit[:i])
		if err != nil {
			return 0, 0, false
		}
		mult = float64(m)
	}
	if b, ok := memoryUnitBytes(unit[i:]); ok {
		return memoryUnit, mult * float64(b), true
	}
	if i > 0 {
		return 0, 0, false
	}
	switch unit {
	case "us":
		return timeUnit, 1e-6, true
	case "ms":
		return timeUnit, 1e-3, true
	case "s":
		return timeUnit, 1, true
	case "min":
		return timeUnit, 60, true
	case "h":
		return timeUnit, 3600, true
	case "d":
		return timeUnit, 86400, true
	}
	return 0, 0, false
}

// memoryUnitBytes is the size of one of PostgreSQL's memory units; kB is 1024 bytes.
func memoryUnitBytes(unit string) (int64, bool) {
	switch unit {
	case "B":
		return 1, true
	case "kB":
		return 1 << 10, true
	case "MB":
		return 1 << 20, true
	case "GB":
		return 1 << 30, true
	case "TB":
		return 1 << 40, true
	}
	return 0, false
}

// parseMemory reads a memory size as SHOW prints it ("64kB", "4MB", "1GB").
func parseMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || i == 0 && s[i] == '-') {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse memory size %q: %w", s, err)
	}
	unit := strings.TrimSpace(s[i:])
	if unit == "" {
		return n, nil
	}
	b, ok := memoryUnitBytes(unit)
	if !ok {
		return 0, fmt.Errorf("parse memory size %q: unknown unit %q", s, unit)
	}
	return n * b, nil
}
