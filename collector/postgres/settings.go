package postgres

import (
	"context"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

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
	return "SELECT name, setting, unit, source, context, " + pendingRestart + ", enumvals, pg_catalog.current_setting(name) " +
		"FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) ANY($1::pg_catalog.text[])"
}

// querySettings runs q, settingsQuery or a narrowing of it, over the setting table's names.
func querySettings(ctx context.Context, conn *pgx.Conn, q string) (map[string]collector.Setting, error) {
	rows, err := conn.Query(ctx, q, collector.SettingNames())
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (settingRow, error) {
		var r settingRow
		err := row.Scan(&r.Name, &r.Setting, &r.Unit, &r.Source, &r.Context, &r.PendingRestart, &r.EnumVals, &r.Show)
		return r, err
	})
	if err != nil {
		return nil, err
	}
	return settingsFromRows(list), nil
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
	raw, err := strconv.ParseFloat(r.Setting, 64)
	// Negative values are sentinels ("-1: use the default", "disabled"), not sizes or durations.
	// ParseFloat also reads "NaN" and "Inf", which are neither (and do not encode as JSON).
	if err != nil || raw < 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return s
	}
	if b, ok := collector.UnitBytes(unit); ok {
		// Memory settings are integers: multiply exactly. A size past int64 is no real
		// setting; converting it would give a wrapped or negative number. 1<<63 is exact in
		// float64, and every float64 below it converts to an int64.
		if n, err := strconv.ParseInt(r.Setting, 10, 64); err == nil {
			if v, ok := collector.MulBytes(n, b); ok {
				s.Bytes = &v
			}
		} else if v := raw * float64(b); v < 1<<63 {
			n := int64(v)
			s.Bytes = &n
		}
	} else if sec, ok := collector.UnitSeconds(unit); ok {
		if sec *= raw; !math.IsInf(sec, 0) {
			s.Seconds = &sec
		}
	}
	return s
}

// autoWALBuffers is the effective size of wal_buffers = -1. The server resolves it at start and
// SHOW prints the result ("4MB"), so that is used; the formula is the fallback.
func autoWALBuffers(show string, sharedBuffers *int64) *int64 {
	if b, err := collector.ParseMemory(show); err == nil && b > 0 {
		return &b
	}
	if sharedBuffers == nil {
		return nil
	}
	b := min(max(*sharedBuffers/32, minAutoWALBuffers), maxAutoWALBuffers)
	return &b
}
