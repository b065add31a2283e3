package postgres

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

var fuzzVersions = []int{140000, 150000, 160000, 170000, 180000}

// addFixtures adds every testdata file whose name starts with view as a seed, for each version.
func addFixtures(f *testing.F, view string, add func(version uint8, row []byte)) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "pg*", view+"*.json"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for v := range fuzzVersions {
			add(uint8(v), b)
		}
	}
}

// checkCounts fails unless every counter and time is one a server can report: not negative and
// finite; and unless the reset time is UTC, as the rates' reset detection compares it.
func checkCounts(t *testing.T, what string, ints map[string]int64, floats map[string]float64, reset time.Time) {
	t.Helper()
	for name, v := range ints {
		if v < 0 {
			t.Fatalf("%s: %s = %d, negative", what, name, v)
		}
	}
	for name, v := range floats {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("%s: %s = %g", what, name, v)
		}
	}
	if !reset.IsZero() && reset.Location() != time.UTC {
		t.Fatalf("%s: stats_reset %v is not UTC", what, reset)
	}
}

// FuzzParseWAL feeds pg_stat_wal and pg_stat_io rows of every layout: the parser must not panic,
// must return only counters a server can have, and must read its own result back the same when
// it is written as the 14-17 row.
func FuzzParseWAL(f *testing.F) {
	io18, err := os.ReadFile(filepath.Join("testdata", "pg18", "pg_stat_io_wal.json"))
	if err != nil {
		f.Fatal(err)
	}
	addFixtures(f, "pg_stat_wal", func(v uint8, b []byte) { f.Add(v, b, io18) })
	f.Add(uint8(1), []byte(`{"wal_records":1,"wal_fpi":1,"wal_bytes":1e30,"wal_buffers_full":1,"wal_write":1,"wal_sync":1,"wal_write_time":0,"wal_sync_time":0}`), []byte(nil))
	f.Add(uint8(4), []byte(`{"wal_records":1,"wal_fpi":1,"wal_bytes":-1,"wal_buffers_full":1}`), []byte(`[{"object":"wal","context":"normal","writes":9223372036854775807},{"object":"wal","context":"normal","writes":1}]`))
	f.Fuzz(func(t *testing.T, v uint8, walJSON, ioJSON []byte) {
		version := fuzzVersions[int(v)%len(fuzzVersions)]
		s, err := parseWAL(version, walJSON, ioJSON)
		if err != nil {
			if s != nil {
				t.Fatalf("parseWAL() = %+v and error %v", s, err)
			}
			return
		}
		checkCounts(t, "parseWAL",
			map[string]int64{"records": s.Records, "fpi": s.FPI, "bytes": s.Bytes, "buffers_full": s.BuffersFull, "writes": s.Writes, "syncs": s.Syncs},
			map[string]float64{"write_time": s.WriteTimeSeconds, "sync_time": s.SyncTimeSeconds}, s.StatsReset)

		row := map[string]any{
			"wal_records": s.Records, "wal_fpi": s.FPI, "wal_bytes": s.Bytes, "wal_buffers_full": s.BuffersFull,
			"wal_write": s.Writes, "wal_sync": s.Syncs,
			"wal_write_time": s.WriteTimeSeconds * 1000, "wal_sync_time": s.SyncTimeSeconds * 1000,
		}
		if !s.StatsReset.IsZero() {
			row["stats_reset"] = s.StatsReset.Format(time.RFC3339Nano)
		}
		b, err := json.Marshal(row)
		if err != nil {
			t.Fatalf("marshal %+v: %v", row, err)
		}
		back, err := parseWAL(150000, b, nil)
		if err != nil {
			t.Fatalf("parseWAL(its own result %s) error = %v", b, err)
		}
		// Milliseconds to seconds and back may move the last bit.
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(a)) }
		if back.Records != s.Records || back.FPI != s.FPI || back.Bytes != s.Bytes || back.BuffersFull != s.BuffersFull ||
			back.Writes != s.Writes || back.Syncs != s.Syncs || !back.StatsReset.Equal(s.StatsReset) ||
			!near(back.WriteTimeSeconds, s.WriteTimeSeconds) || !near(back.SyncTimeSeconds, s.SyncTimeSeconds) {
			t.Fatalf("parseWAL round trip: %+v, then %+v", s, back)
		}
	})
}

// FuzzParseCheckpoints does the same for pg_stat_bgwriter (up to 16) and pg_stat_checkpointer.
func FuzzParseCheckpoints(f *testing.F) {
	addFixtures(f, "pg_stat_bgwriter", func(v uint8, b []byte) { f.Add(v, b) })
	addFixtures(f, "pg_stat_checkpointer", func(v uint8, b []byte) { f.Add(v, b) })
	f.Add(uint8(4), []byte(`{"num_timed":1,"num_requested":1,"num_done":-2,"write_time":0,"sync_time":0,"buffers_written":0}`))
	f.Fuzz(func(t *testing.T, v uint8, rowJSON []byte) {
		version := fuzzVersions[int(v)%len(fuzzVersions)]
		c, err := parseCheckpoints(version, rowJSON)
		if err != nil {
			if c != nil {
				t.Fatalf("parseCheckpoints() = %+v and error %v", c, err)
			}
			return
		}
		ints := map[string]int64{"timed": c.Timed, "requested": c.Requested, "buffers_written": c.BuffersWritten}
		if c.Done != nil {
			ints["done"] = *c.Done
		}
		if version >= walIOVersion && c.Done == nil {
			t.Fatalf("parseCheckpoints(%d) = no num_done", version)
		}
		checkCounts(t, "parseCheckpoints", ints,
			map[string]float64{"write_time": c.WriteTimeSeconds, "sync_time": c.SyncTimeSeconds}, c.StatsReset)
	})
}

// FuzzSettingFromRow feeds pg_settings rows: the normalized value is never a negative or
// wrapped size, never an infinite time, is exact where the product is, always encodes as JSON,
// and an automatic wal_buffers is within the server's bounds or what SHOW printed.
func FuzzSettingFromRow(f *testing.F) {
	rows := [][4]string{
		{"shared_buffers", "16384", "8kB", "128MB"}, {"max_wal_size", "1024", "MB", "1GB"},
		{"wal_buffers", "-1", "8kB", "4MB"}, {"wal_buffers", "-1", "8kB", "-1"}, {"wal_buffers", "512", "8kB", "4MB"},
		{"checkpoint_timeout", "300", "s", "5min"}, {"wal_writer_delay", "200", "ms", "200ms"},
		{"commit_delay", "2000", "", "2000"}, {"checkpoint_completion_target", "0.9", "", "0.9"},
		{"wal_sync_method", "fdatasync", "", "fdatasync"}, {"max_wal_size", "9223372036854775807", "MB", "x"},
		{"some_time", "1e306", "d", "x"}, {"some_size", "NaN", "kB", "x"}, {"some_size", "Inf", "8kB", "x"},
		{"some_size", "1.5", "0kB", "x"}, {"some_size", "3", "99999999999999999999kB", "x"},
	}
	for _, r := range rows {
		f.Add(r[0], r[1], r[2], r[3], "131072")
	}
	f.Fuzz(func(t *testing.T, name, setting, unit, show, sharedBuffers string) {
		sbUnit := "8kB"
		got := settingsFromRows([]settingRow{
			{Name: name, Setting: setting, Unit: &unit, Show: show},
			{Name: collector.SharedBuffers, Setting: sharedBuffers, Unit: &sbUnit, Show: "x"},
		})
		s := got[name]
		if name == collector.SharedBuffers {
			// The second row overwrote the first.
			return
		}
		if s.Value != show || s.Raw != setting || s.Unit != unit {
			t.Fatalf("setting %q: Value %q Raw %q Unit %q, want the row's", name, s.Value, s.Raw, s.Unit)
		}
		if u, ok := collector.UnitBytes(unit); ok && !(name == collector.WALBuffers && setting == walBuffersAuto) {
			if n, err := json.Number(setting).Int64(); err == nil && n >= 0 && n <= math.MaxInt64/u && (s.Bytes == nil || *s.Bytes != n*u) {
				t.Fatalf("setting %q = %q %q: %v bytes, want %d", name, setting, unit, deref(s.Bytes), n*u)
			}
		}
		if s.Bytes != nil {
			if *s.Bytes < 0 {
				t.Fatalf("setting %q = %q %q: %d bytes", name, setting, unit, *s.Bytes)
			}
			if name == collector.WALBuffers && setting == walBuffersAuto {
				if b, err := collector.ParseMemory(show); !(err == nil && b == *s.Bytes) && (*s.Bytes < minAutoWALBuffers || *s.Bytes > maxAutoWALBuffers) {
					t.Fatalf("wal_buffers -1 (SHOW %q) = %d bytes, outside the automatic bounds", show, *s.Bytes)
				}
			}
		}
		if s.Seconds != nil && (*s.Seconds < 0 || math.IsNaN(*s.Seconds) || math.IsInf(*s.Seconds, 0)) {
			t.Fatalf("setting %q = %q %q: %g s", name, setting, unit, *s.Seconds)
		}
		if _, err := json.Marshal(s); err != nil {
			t.Fatalf("setting %q = %q %q: does not encode: %v", name, setting, unit, err)
		}
	})
}

// FuzzWaitEvents feeds pg_stat_activity rows to the wait tally: a name maps to a WAL wait only
// when it is one a server reports (ASCII, any case, of its type), the waits never exceed the
// active backends, and no count goes negative.
func FuzzWaitEvents(f *testing.F) {
	for _, e := range [][2]string{
		{"IO", "WALWrite"}, {"IO", "WalSync"}, {"IO", "WalInitWrite"}, {"LWLock", "WALInsert"}, {"LWLock", "wal_insert"},
		{"LWLock", "WALBufMappingLock"}, {"LWLock", "WALWriteLoc\u212a"}, {"Client", "ClientRead"}, {"", ""},
	} {
		f.Add(e[0], e[1], int64(3), int64(2))
	}
	known := map[string]map[string]bool{
		"IO":     {"walwrite": true, "walsync": true, "walinitwrite": true, "walinitsync": true},
		"LWLock": {"walinsert": true, "wal_insert": true, "walwrite": true, "walwritelock": true, "walbufmapping": true, "walbufmappinglock": true},
	}
	f.Fuzz(func(t *testing.T, eventType, event string, n, idle int64) {
		key := waitEventKey(eventType, event)
		lower := strings.ToLower(event)
		wantKnown := known[eventType][lower] && utf8.ValidString(event) && len(lower) == len(event) && isASCII(event)
		if (key != "") != wantKnown {
			t.Fatalf("waitEventKey(%q, %q) = %q", eventType, event, key)
		}
		if key != "" && waitEventKey(eventType, strings.ToUpper(event)) != key {
			t.Fatalf("waitEventKey(%q, %q) depends on case", eventType, event)
		}
		// Backend counts are small; keep the sums clear of int64's end.
		n, idle = n%(1<<20), idle%(1<<20)
		var tally waitTally
		tally.add([]waitCount{{eventType: eventType, event: event, n: n}, {n: idle}, {eventType: eventType, event: event, n: n}})
		w, _, _ := tally.take()
		var waits int64
		for k, c := range w.Counts {
			if c < 0 {
				t.Fatalf("count %s = %d", k, c)
			}
			waits += c
		}
		if w.ActiveBackends < 0 || waits > w.ActiveBackends {
			t.Fatalf("%d waits among %d active backends", waits, w.ActiveBackends)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
