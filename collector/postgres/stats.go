package postgres

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Version boundaries of the statistics views (server_version_num).
const (
	// pg_stat_wal appeared in 14.
	minWALStatsVersion = 140000
	// 17 moved the checkpoint counters from pg_stat_bgwriter to the new pg_stat_checkpointer.
	checkpointerVersion = 170000
	// 18 dropped wal_write, wal_sync and their times from pg_stat_wal; pg_stat_io (object 'wal')
	// has them, per backend type and context.
	walIOVersion = 180000
)

// The statistics queries return each view's row as to_jsonb prints it: the query only names the
// view, so it cannot fall out of step with the parser, and the test fixtures in testdata/ are
// literally what a server of each version returns. Version differences live in the parsers.

// walStatsQuery returns the query for the cumulative WAL counters, or "" below 14.
func walStatsQuery(versionNum int) string {
	switch {
	case versionNum < minWALStatsVersion:
		return ""
	case versionNum < walIOVersion:
		return "SELECT pg_catalog.to_jsonb(w), NULL::pg_catalog.jsonb FROM pg_catalog.pg_stat_wal w"
	default:
		return "SELECT pg_catalog.to_jsonb(w), (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(i)), '[]'::pg_catalog.jsonb) " +
			"FROM pg_catalog.pg_stat_io i WHERE i.object OPERATOR(pg_catalog.=) 'wal'::pg_catalog.text) FROM pg_catalog.pg_stat_wal w"
	}
}

// checkpointQuery returns the query for the checkpoint counters, or "" below 14 (where the
// collector reads settings only).
func checkpointQuery(versionNum int) string {
	switch {
	case versionNum < minWALStatsVersion:
		return ""
	case versionNum < checkpointerVersion:
		return "SELECT pg_catalog.to_jsonb(b) FROM pg_catalog.pg_stat_bgwriter b"
	default:
		return "SELECT pg_catalog.to_jsonb(c) FROM pg_catalog.pg_stat_checkpointer c"
	}
}

// walViewRow is a pg_stat_wal row. Pointers tell a missing column from a zero.
type walViewRow struct {
	Records     *int64       `json:"wal_records"`
	FPI         *int64       `json:"wal_fpi"`
	Bytes       *json.Number `json:"wal_bytes"` // numeric
	BuffersFull *int64       `json:"wal_buffers_full"`
	// 14-17 only.
	Write       *int64   `json:"wal_write"`
	Sync        *int64   `json:"wal_sync"`
	WriteTimeMS *float64 `json:"wal_write_time"`
	SyncTimeMS  *float64 `json:"wal_sync_time"`
	StatsReset  *string  `json:"stats_reset"`
}

// ioViewRow is a pg_stat_io row (18+). Columns that do not apply to a backend type, object and
// context are NULL and read as zero.
type ioViewRow struct {
	BackendType string  `json:"backend_type"`
	Object      string  `json:"object"`
	Context     string  `json:"context"`
	Writes      int64   `json:"writes"`
	WriteTimeMS float64 `json:"write_time"`
	Fsyncs      int64   `json:"fsyncs"`
	FsyncTimeMS float64 `json:"fsync_time"`
	StatsReset  *string `json:"stats_reset"`
}

// parseWAL converts pg_stat_wal's row (and, from 18, pg_stat_io's rows for object 'wal') to
// WALStats.
func parseWAL(versionNum int, walJSON, ioJSON []byte) (*collector.WALStats, error) {
	s, err := parseWALView(versionNum, walJSON)
	if err != nil || versionNum < walIOVersion {
		return s, err
	}
	if err := addWALIO(s, ioJSON); err != nil {
		return nil, err
	}
	return s, nil
}

// parseWALView converts pg_stat_wal's row to WALStats: every counter below 18, the counters
// other than writes and syncs from 18.
func parseWALView(versionNum int, walJSON []byte) (*collector.WALStats, error) {
	var w walViewRow
	if err := json.Unmarshal(walJSON, &w); err != nil {
		return nil, fmt.Errorf("decode pg_stat_wal row: %w", err)
	}
	required := map[string]bool{
		"wal_records": w.Records != nil, "wal_fpi": w.FPI != nil, "wal_bytes": w.Bytes != nil,
		"wal_buffers_full": w.BuffersFull != nil,
	}
	if versionNum < walIOVersion {
		required["wal_write"] = w.Write != nil
		required["wal_sync"] = w.Sync != nil
		required["wal_write_time"] = w.WriteTimeMS != nil
		required["wal_sync_time"] = w.SyncTimeMS != nil
	}
	if err := checkColumns("pg_stat_wal", versionNum, required); err != nil {
		return nil, err
	}
	walBytes, err := parseNumeric(*w.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_wal.wal_bytes: %w", err)
	}
	counts := map[string]float64{
		"wal_records": float64(*w.Records), "wal_fpi": float64(*w.FPI), "wal_bytes": float64(walBytes),
		"wal_buffers_full": float64(*w.BuffersFull),
	}
	if versionNum < walIOVersion {
		counts["wal_write"], counts["wal_sync"] = float64(*w.Write), float64(*w.Sync)
		counts["wal_write_time"], counts["wal_sync_time"] = *w.WriteTimeMS, *w.SyncTimeMS
	}
	if err := checkNotNegative("pg_stat_wal", counts); err != nil {
		return nil, err
	}
	reset, err := parseTimestamp(w.StatsReset)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_wal.stats_reset: %w", err)
	}
	s := &collector.WALStats{
		Records:     *w.Records,
		FPI:         *w.FPI,
		Bytes:       walBytes,
		BuffersFull: *w.BuffersFull,
		StatsReset:  reset,
	}
	if versionNum < walIOVersion {
		s.Writes = *w.Write
		s.Syncs = *w.Sync
		s.WriteTimeSeconds = *w.WriteTimeMS / 1000
		s.SyncTimeSeconds = *w.SyncTimeMS / 1000
	}
	return s, nil
}

// addWALIO adds pg_stat_io's WAL writes and syncs (18+) to s.
func addWALIO(s *collector.WALStats, ioJSON []byte) error {
	var rows []ioViewRow
	if err := json.Unmarshal(ioJSON, &rows); err != nil {
		return fmt.Errorf("decode pg_stat_io rows: %w", err)
	}
	var writeMS, syncMS float64
	for _, r := range rows {
		// Context 'init' counts the zero-filling of new WAL segments, which 14-17's wal_write and
		// wal_sync never counted; 'normal' is XLogWrite and issue_xlog_fsync, exactly what they
		// counted (PostgreSQL 18 docs, pg_stat_io). Summing 'normal' over all backend types keeps
		// the counters comparable across the version boundary.
		if r.Object != "wal" || r.Context != "normal" {
			continue
		}
		if err := checkNotNegative("pg_stat_io", map[string]float64{
			"writes": float64(r.Writes), "fsyncs": float64(r.Fsyncs), "write_time": r.WriteTimeMS, "fsync_time": r.FsyncTimeMS,
		}); err != nil {
			return err
		}
		var ok1, ok2 bool
		if s.Writes, ok1 = addCount(s.Writes, r.Writes); !ok1 {
			return errors.New("pg_stat_io: the writes of object 'wal' add up to more than an int64 holds")
		}
		if s.Syncs, ok2 = addCount(s.Syncs, r.Fsyncs); !ok2 {
			return errors.New("pg_stat_io: the fsyncs of object 'wal' add up to more than an int64 holds")
		}
		writeMS += r.WriteTimeMS
		syncMS += r.FsyncTimeMS
		// The counters now come from two statistics kinds that are reset separately
		// (pg_stat_reset_shared('wal') and ('io')): the later reset bounds them both.
		t, err := parseTimestamp(r.StatsReset)
		if err != nil {
			return fmt.Errorf("pg_stat_io.stats_reset: %w", err)
		}
		if t.After(s.StatsReset) {
			s.StatsReset = t
		}
	}
	s.WriteTimeSeconds, s.SyncTimeSeconds = writeMS/1000, syncMS/1000
	return nil
}

// bgwriterViewRow is pg_stat_bgwriter's checkpoint part (up to 16).
type bgwriterViewRow struct {
	CheckpointsTimed    *int64   `json:"checkpoints_timed"`
	CheckpointsReq      *int64   `json:"checkpoints_req"`
	CheckpointWriteTime *float64 `json:"checkpoint_write_time"`
	CheckpointSyncTime  *float64 `json:"checkpoint_sync_time"`
	BuffersCheckpoint   *int64   `json:"buffers_checkpoint"`
	StatsReset          *string  `json:"stats_reset"`
}

// checkpointerViewRow is a pg_stat_checkpointer row (17+; num_done from 18).
type checkpointerViewRow struct {
	NumTimed       *int64   `json:"num_timed"`
	NumRequested   *int64   `json:"num_requested"`
	NumDone        *int64   `json:"num_done"`
	WriteTime      *float64 `json:"write_time"`
	SyncTime       *float64 `json:"sync_time"`
	BuffersWritten *int64   `json:"buffers_written"`
	StatsReset     *string  `json:"stats_reset"`
}

// parseCheckpoints converts the row of checkpointQuery(versionNum) to CheckpointStats. Times
// are milliseconds in both views.
func parseCheckpoints(versionNum int, rowJSON []byte) (*collector.CheckpointStats, error) {
	if versionNum < checkpointerVersion {
		var b bgwriterViewRow
		if err := json.Unmarshal(rowJSON, &b); err != nil {
			return nil, fmt.Errorf("decode pg_stat_bgwriter row: %w", err)
		}
		if err := checkColumns("pg_stat_bgwriter", versionNum, map[string]bool{
			"checkpoints_timed": b.CheckpointsTimed != nil, "checkpoints_req": b.CheckpointsReq != nil,
			"checkpoint_write_time": b.CheckpointWriteTime != nil, "checkpoint_sync_time": b.CheckpointSyncTime != nil,
			"buffers_checkpoint": b.BuffersCheckpoint != nil,
		}); err != nil {
			return nil, err
		}
		if err := checkNotNegative("pg_stat_bgwriter", map[string]float64{
			"checkpoints_timed": float64(*b.CheckpointsTimed), "checkpoints_req": float64(*b.CheckpointsReq),
			"checkpoint_write_time": *b.CheckpointWriteTime, "checkpoint_sync_time": *b.CheckpointSyncTime,
			"buffers_checkpoint": float64(*b.BuffersCheckpoint),
		}); err != nil {
			return nil, err
		}
		reset, err := parseTimestamp(b.StatsReset)
		if err != nil {
			return nil, fmt.Errorf("pg_stat_bgwriter.stats_reset: %w", err)
		}
		return &collector.CheckpointStats{
			Timed:            *b.CheckpointsTimed,
			Requested:        *b.CheckpointsReq,
			WriteTimeSeconds: *b.CheckpointWriteTime / 1000,
			SyncTimeSeconds:  *b.CheckpointSyncTime / 1000,
			BuffersWritten:   *b.BuffersCheckpoint,
			StatsReset:       reset,
		}, nil
	}

	var c checkpointerViewRow
	if err := json.Unmarshal(rowJSON, &c); err != nil {
		return nil, fmt.Errorf("decode pg_stat_checkpointer row: %w", err)
	}
	required := map[string]bool{
		"num_timed": c.NumTimed != nil, "num_requested": c.NumRequested != nil,
		"write_time": c.WriteTime != nil, "sync_time": c.SyncTime != nil,
		"buffers_written": c.BuffersWritten != nil,
	}
	if versionNum >= walIOVersion {
		required["num_done"] = c.NumDone != nil
	}
	if err := checkColumns("pg_stat_checkpointer", versionNum, required); err != nil {
		return nil, err
	}
	counts := map[string]float64{
		"num_timed": float64(*c.NumTimed), "num_requested": float64(*c.NumRequested),
		"write_time": *c.WriteTime, "sync_time": *c.SyncTime, "buffers_written": float64(*c.BuffersWritten),
	}
	if c.NumDone != nil {
		counts["num_done"] = float64(*c.NumDone)
	}
	if err := checkNotNegative("pg_stat_checkpointer", counts); err != nil {
		return nil, err
	}
	reset, err := parseTimestamp(c.StatsReset)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_checkpointer.stats_reset: %w", err)
	}
	return &collector.CheckpointStats{
		Timed:            *c.NumTimed,
		Requested:        *c.NumRequested,
		Done:             c.NumDone,
		WriteTimeSeconds: *c.WriteTime / 1000,
		SyncTimeSeconds:  *c.SyncTime / 1000,
		BuffersWritten:   *c.BuffersWritten,
		StatsReset:       reset,
	}, nil
}

// checkColumns reports the columns a view lacks. A missing column would otherwise read as a
// zero counter, which the rules would take for a fact.
func checkColumns(view string, versionNum int, present map[string]bool) error {
	var missing []string
	for name, ok := range present {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	// Sorted so that the message is stable.
	slices.Sort(missing)
	return fmt.Errorf("%s has no column %s on server version %d: this collector does not know that version's layout",
		view, strings.Join(missing, ", "), versionNum)
}

// checkNotNegative reports the columns of a view row that are negative. The statistics views
// count up from their last reset, so a negative counter or time is a broken row, not a fact, and
// the rates computed from it would be nonsense.
func checkNotNegative(view string, values map[string]float64) error {
	var negative []string
	for name, v := range values {
		if v < 0 {
			negative = append(negative, name)
		}
	}
	if len(negative) == 0 {
		return nil
	}
	slices.Sort(negative)
	return fmt.Errorf("%s.%s is negative: a statistics counter cannot be", view, strings.Join(negative, ", "))
}

// addCount is a + b, and false when that does not fit in an int64.
func addCount(a, b int64) (int64, bool) {
	if b > 0 && a > math.MaxInt64-b || b < 0 && a < math.MinInt64-b {
		return 0, false
	}
	return a + b, true
}

// parseNumeric reads a numeric counter such as wal_bytes. numeric has no upper bound; a value
// past int64 is refused rather than converted, which would give an arbitrary number.
func parseNumeric(n json.Number) (int64, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("not a number: %q", string(n))
	}
	// -2^63 and 2^63 are exact in float64; the first fits in an int64, the second does not.
	if err != nil || f >= 1<<63 || f < -(1<<63) {
		return 0, fmt.Errorf("%.40s is out of range", string(n))
	}
	return int64(f), nil
}

// parseTimestamp reads a timestamptz as to_jsonb prints it (ISO 8601; the collector's session
// runs in UTC). NULL, e.g. stats never reset on old versions, is the zero time.
func parseTimestamp(s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse timestamp %q: %w", *s, err)
	}
	return t.UTC(), nil
}

// parseLSN parses a pg_lsn as PostgreSQL prints it ("16/B374D848": the high and low 32 bits in
// hex) into a byte position. The text comes from the server and is checked as untrusted input.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok || hi == "" || lo == "" || len(hi) > 8 || len(lo) > 8 {
		return 0, fmt.Errorf("parse lsn %q: want two hex numbers of up to 32 bits, as in 16/B374D848", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse lsn %q: %w", s, err)
	}
	return h<<32 | l, nil
}
