package advisor

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func TestRatesBetween(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	start := t0.Add(-time.Hour)
	snap := func(at time.Time, bytes, full, writes int64, writeSec float64, lsn uint64) collector.Snapshot {
		return collector.Snapshot{Time: at, Postgres: &collector.Postgres{
			StartTime:    start,
			WAL:          &collector.WALStats{Bytes: bytes, BuffersFull: full, Writes: writes, WriteTimeSeconds: writeSec},
			WALInsertLSN: &lsn,
		}}
	}
	prev := snap(t0, 1000, 10, 100, 1, 1<<20)
	cur := snap(t0.Add(10*time.Second), 11000, 110, 600, 3.5, 3<<20)
	r := RatesBetween(prev, cur)
	if r.Seconds != 10 {
		t.Errorf("seconds = %v, want 10", r.Seconds)
	}
	for name, want := range map[string]float64{"wal_bytes": 1000, "wal_buffers_full": 10, "wal_write": 50, "wal_insert_lsn_bytes": 209715.2} {
		if got := r.PerSecond[name]; got != want {
			t.Errorf("%s = %v/s, want %v", name, got, want)
		}
	}
	if r.WALWriteSecondsPerWrite != 0.005 {
		t.Errorf("write cost = %v s, want 0.005", r.WALWriteSecondsPerWrite)
	}
	// Every counter the rules read is either a rate or said to be missing: a counter added to
	// the table cannot vanish from collect's output.
	for _, c := range rules.Counters() {
		if _, ok := r.PerSecond[c.String()]; !ok && !slices.Contains(r.Skipped, c.String()) {
			t.Errorf("counter %s is neither a rate nor skipped", c)
		}
	}
	// No checkpointer and no disk in these snapshots: skipped, not zero.
	for _, name := range []string{"checkpoints_timed", "disk_write_bytes"} {
		if _, ok := r.PerSecond[name]; ok || !slices.Contains(r.Skipped, name) {
			t.Errorf("%s: want skipped, got rates %v skipped %v", name, r.PerSecond, r.Skipped)
		}
	}

	// A restart between the snapshots resets the WAL counters: skipped, never negative.
	restarted := snap(t0.Add(10*time.Second), 10, 0, 1, 0, 3<<20)
	restarted.Postgres.StartTime = t0.Add(5 * time.Second)
	r = RatesBetween(prev, restarted)
	if _, ok := r.PerSecond["wal_bytes"]; ok || !slices.Contains(r.Skipped, "wal_bytes") {
		t.Errorf("after a restart wal_bytes = %v, skipped %v: want skipped", r.PerSecond["wal_bytes"], r.Skipped)
	}

	var out bytes.Buffer
	if err := WriteRatesTable(&out, RatesBetween(prev, cur)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Rates over 10.0 s", "wal_bytes", "1000.00/s", "WAL write / sync cost", "5000 us / 0 us", "(reset or missing)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
