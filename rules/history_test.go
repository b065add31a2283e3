package rules

import (
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// walSnap is a snapshot holding only pg_stat_wal counters.
func walSnap(sec int, start, reset time.Time, buffersFull, writes int64) collector.Snapshot {
	return collector.Snapshot{
		Time: t0().Add(time.Duration(sec) * time.Second),
		Postgres: &collector.Postgres{StartTime: start, WAL: &collector.WALStats{
			BuffersFull: buffersFull, Writes: writes, StatsReset: reset,
		}},
	}
}

func historyOf(snaps ...collector.Snapshot) *History {
	h := NewHistory(DefaultHistoryLen)
	for _, s := range snaps {
		h.Add(s)
	}
	return h
}

func TestHistoryChange(t *testing.T) {
	start := t0().Add(-time.Hour)
	restart := t0().Add(25 * time.Second)
	reset := t0().Add(-time.Hour)
	reset2 := t0().Add(35 * time.Second)
	noPG := collector.Snapshot{Time: t0().Add(30 * time.Second)}

	tests := []struct {
		name                string
		h                   *History
		wantDelta           float64
		wantSeconds         float64
		wantIntervals, skip int
	}{
		{
			name:      "steady",
			h:         historyOf(walSnap(0, start, reset, 100, 1000), walSnap(15, start, reset, 130, 1100), walSnap(30, start, reset, 160, 1200)),
			wantDelta: 60, wantSeconds: 30, wantIntervals: 2,
		},
		{
			name: "counter went down: interval skipped, never negative",
			h: historyOf(walSnap(0, start, reset, 100, 1000), walSnap(15, start, reset, 130, 1100),
				walSnap(30, start, reset, 5, 20), walSnap(45, start, reset, 35, 120)),
			wantDelta: 60, wantSeconds: 30, wantIntervals: 2, skip: 1,
		},
		{
			name: "stats_reset changed and the counter grew past its old value: skipped, never huge",
			h: historyOf(walSnap(0, start, reset, 100, 1000), walSnap(15, start, reset, 130, 1100),
				walSnap(45, start, reset2, 90000, 90000), walSnap(60, start, reset2, 90030, 90100)),
			wantDelta: 60, wantSeconds: 30, wantIntervals: 2, skip: 1,
		},
		{
			name: "server restarted (postmaster start time changed): skipped",
			h: historyOf(walSnap(0, start, reset, 100, 1000), walSnap(15, start, reset, 130, 1100),
				walSnap(30, restart, reset, 5000, 6000), walSnap(45, restart, reset, 5030, 6100)),
			wantDelta: 60, wantSeconds: 30, wantIntervals: 2, skip: 1,
		},
		{
			name: "a snapshot without PostgreSQL: both intervals around it skipped",
			h: historyOf(walSnap(0, start, reset, 100, 1000), walSnap(15, start, reset, 130, 1100), noPG,
				walSnap(45, start, reset, 190, 1300), walSnap(60, start, reset, 220, 1400)),
			wantDelta: 60, wantSeconds: 30, wantIntervals: 2, skip: 2,
		},
		{name: "one snapshot", h: historyOf(walSnap(0, start, reset, 100, 1000))},
		{name: "empty", h: NewHistory(10)},
		{name: "nil", h: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.h.Change(WALBuffersFull)
			if got.Delta != tt.wantDelta || got.Seconds != tt.wantSeconds || got.Intervals != tt.wantIntervals || got.Skipped != tt.skip {
				t.Errorf("Change = %+v, want delta %v over %vs in %d intervals, %d skipped", got, tt.wantDelta, tt.wantSeconds, tt.wantIntervals, tt.skip)
			}
			if got.Delta < 0 || got.Rate() > 10 {
				t.Errorf("rate %v out of range", got.Rate())
			}
			if all := tt.h.Between(WALBuffersFull, t0(), t0().Add(time.Hour)); all != got {
				t.Errorf("Between over everything = %+v, want %+v", all, got)
			}
			if want := tt.wantIntervals > 0; got.OK() != want {
				t.Errorf("OK() = %v, want %v", got.OK(), want)
			}
		})
	}
}

func TestHistoryBetween(t *testing.T) {
	h := historyOf(walSnap(0, t0(), t0(), 0, 0), walSnap(15, t0(), t0(), 10, 10), walSnap(30, t0(), t0(), 40, 40), walSnap(45, t0(), t0(), 100, 100))
	got := h.Between(WALBuffersFull, t0().Add(15*time.Second), t0().Add(45*time.Second))
	if got.Delta != 90 || got.Intervals != 2 {
		t.Errorf("Between(+15s, +45s) = %+v, want 90 over 2 intervals", got)
	}
	if got := h.Between(WALBuffersFull, t0().Add(16*time.Second), t0().Add(44*time.Second)); got.OK() {
		t.Errorf("no whole interval inside (+16s, +44s), got %+v", got)
	}
}

func TestHistoryDiskCounters(t *testing.T) {
	disk := func(sec int, dev string, bytes uint64) collector.Snapshot {
		return collector.Snapshot{Time: t0().Add(time.Duration(sec) * time.Second),
			WALStorage: &collector.Storage{Device: dev, IO: &collector.DiskIO{WriteBytes: bytes}}}
	}
	tests := []struct {
		name      string
		h         *History
		wantDelta float64
		wantMax   float64
	}{
		{name: "steady", h: historyOf(disk(0, "8:1", 0), disk(10, "8:1", 100), disk(20, "8:1", 400)), wantDelta: 400, wantMax: 30},
		{name: "reboot: counters restart", h: historyOf(disk(0, "8:1", 1000), disk(10, "8:1", 1100), disk(20, "8:1", 50)), wantDelta: 100, wantMax: 10},
		{name: "another device", h: historyOf(disk(0, "8:1", 1000), disk(10, "8:1", 1100), disk(20, "8:17", 90000)), wantDelta: 100, wantMax: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.Change(DiskWriteBytes).Delta; got != tt.wantDelta {
				t.Errorf("delta = %v, want %v", got, tt.wantDelta)
			}
			var top float64
			for _, iv := range tt.h.Intervals(DiskWriteBytes) {
				top = max(top, iv.Rate())
			}
			if top != tt.wantMax {
				t.Errorf("max rate = %v, want %v", top, tt.wantMax)
			}
		})
	}
}

func TestHistoryAddAndWindows(t *testing.T) {
	h := NewHistory(3)
	for i := range 5 {
		if !h.Add(collector.Snapshot{Time: t0().Add(time.Duration(i) * time.Minute)}) {
			t.Fatalf("Add %d refused", i)
		}
	}
	if h.Len() != 3 {
		t.Fatalf("Len = %d, want 3 (bounded)", h.Len())
	}
	if first := h.Snapshots()[0].Time; !first.Equal(t0().Add(2 * time.Minute)) {
		t.Errorf("oldest = %v, want the oldest beyond the limit dropped", first)
	}
	if h.Add(collector.Snapshot{Time: t0().Add(3 * time.Minute)}) {
		t.Error("Add of an older snapshot accepted")
	}
	if got := h.Span(); got != 2*time.Minute {
		t.Errorf("Span = %v, want 2m", got)
	}
	w := h.Since(t0().Add(3 * time.Minute))
	if w.Len() != 2 {
		t.Fatalf("Since: Len = %d, want 2", w.Len())
	}
	w.Add(collector.Snapshot{Time: t0().Add(10 * time.Minute)})
	if last, _ := h.Latest(); !last.Time.Equal(t0().Add(4 * time.Minute)) {
		t.Errorf("appending to a window changed its parent: latest %v", last.Time)
	}
	if (*History)(nil).Since(t0()).Len() != 0 {
		t.Error("Since on nil history not empty")
	}
}

func TestHistoryPeakAndCheckpoints(t *testing.T) {
	done := func(n int64) *int64 { return &n }
	snap := func(sec int, timed, req int64, doneN *int64, syncSec float64, dirty, wb int64) collector.Snapshot {
		return collector.Snapshot{
			Time: t0().Add(time.Duration(sec) * time.Second),
			Postgres: &collector.Postgres{StartTime: t0(), Checkpointer: &collector.CheckpointStats{
				Timed: timed, Requested: req, Done: doneN, SyncTimeSeconds: syncSec}},
			Kernel: &collector.Kernel{Meminfo: collector.Meminfo{DirtyBytes: dirty, WritebackBytes: wb}},
		}
	}
	t.Run("before 18: timed + requested", func(t *testing.T) {
		h := historyOf(snap(0, 10, 1, nil, 100, 5, 0), snap(15, 10, 1, nil, 100, 6, 0),
			snap(30, 11, 1, nil, 106.9, 90, 3), snap(45, 11, 1, nil, 106.9, 7, 0), snap(60, 11, 3, nil, 108, 8, 0))
		ends := h.CheckpointEnds()
		if len(ends) != 2 {
			t.Fatalf("got %d checkpoint ends, want 2: %+v", len(ends), ends)
		}
		if e := ends[0]; e.Checkpoints != 1 || e.Timed != 1 || e.SyncSeconds < 6.89 || e.DirtyWritebackMax != 93 || !e.HasKernel {
			t.Errorf("first end = %+v, want one timed checkpoint, 6.9 s sync, 93 bytes dirty+writeback", e)
		}
		if e := ends[1]; e.Checkpoints != 2 || e.Requested != 2 {
			t.Errorf("second end = %+v, want two requested checkpoints", e)
		}
		if v, at, ok := h.Peak(DirtyWriteback); !ok || v != 93 || !at.Equal(t0().Add(30*time.Second)) {
			t.Errorf("Peak = %v at %v (%v), want 93 at +30s", v, at, ok)
		}
	})
	t.Run("18: num_done, skipped timed checkpoints not counted", func(t *testing.T) {
		h := historyOf(snap(0, 10, 0, done(5), 1, 0, 0), snap(15, 11, 0, done(5), 1, 0, 0), snap(30, 12, 0, done(6), 1.5, 0, 0))
		ends := h.CheckpointEnds()
		if len(ends) != 1 || ends[0].Checkpoints != 1 {
			t.Errorf("ends = %+v, want one completed checkpoint at +30s", ends)
		}
	})
}

func TestHistoryWaitEvents(t *testing.T) {
	we := func(sec int, samples, active, walWrite int64) collector.Snapshot {
		return collector.Snapshot{Time: t0().Add(time.Duration(sec) * time.Second), Postgres: &collector.Postgres{
			WaitEvents: &collector.WaitEvents{Samples: samples, ActiveBackends: active,
				Counts: map[string]int64{collector.EventLWLockWALWrite: walWrite}}}}
	}
	// The first snapshot's samples were taken before the history begins: left out.
	h := historyOf(we(0, 100, 1000, 1000), we(15, 15, 60, 15), we(30, 15, 60, 45))
	w := h.WaitEvents()
	if w.Samples != 30 || w.MeanActive() != 4 {
		t.Errorf("samples %d, mean active %v; want 30, 4", w.Samples, w.MeanActive())
	}
	if got := w.Share(collector.EventLWLockWALWrite); got != 0.5 {
		t.Errorf("share = %v, want 0.5", got)
	}
	if got := (WaitTotals{}).Share(collector.EventLWLockWALWrite); got != 0 {
		t.Errorf("share of nothing = %v, want 0", got)
	}
}
