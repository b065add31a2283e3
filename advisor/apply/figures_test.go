package apply

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func fig(name string, v, samples float64) Figure {
	return Figure{Name: name, Value: v, Samples: samples, Enough: samples >= noiseOf(name).minSamples, Judged: true}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after []Figure
		worse         bool
		decided       bool
		reason        string
	}{
		{"better", []Figure{fig(FigureFlushWaitShare, 0.8, 100)}, []Figure{fig(FigureFlushWaitShare, 0.1, 100)}, false, true, "better"},
		{"worse", []Figure{fig(FigureFlushWaitShare, 0.1, 100)}, []Figure{fig(FigureFlushWaitShare, 0.8, 100)}, true, true, "worse beyond noise"},
		{"within 20%", []Figure{fig(FigureIOSecondsPerMB, 0.100, 10)}, []Figure{fig(FigureIOSecondsPerMB, 0.115, 10)}, false, true, "no figure moved"},
		{"above 20% but within the floor", []Figure{fig(FigureFlushWaitShare, 0.02, 100)}, []Figure{fig(FigureFlushWaitShare, 0.05, 100)}, false, true, "no figure moved"},
		{"too few samples", []Figure{fig(FigureFlushWaitShare, 0.1, 5)}, []Figure{fig(FigureFlushWaitShare, 0.9, 100)}, false, false, "not enough data"},
		{"first figure decides: worse", []Figure{fig(FigureIOSecondsPerMB, 0.01, 10), fig(FigureFlushWaitShare, 0.8, 100)},
			[]Figure{fig(FigureIOSecondsPerMB, 0.1, 10), fig(FigureFlushWaitShare, 0.1, 100)}, true, true, "worse beyond noise"},
		{"first figure decides: better", []Figure{fig(FigureIOSecondsPerMB, 0.1, 10), fig(FigureFlushWaitShare, 0.1, 100)},
			[]Figure{fig(FigureIOSecondsPerMB, 0.01, 10), fig(FigureFlushWaitShare, 0.8, 100)}, false, true, "the first figure decides"},
		{"first without data, second worse", []Figure{fig(FigureIOSecondsPerMB, 0, 0), fig(FigureFlushWaitShare, 0.1, 100)},
			[]Figure{fig(FigureIOSecondsPerMB, 0, 0), fig(FigureFlushWaitShare, 0.5, 100)}, true, true, "worse"},
		{"reported figures never decide", []Figure{{Name: FigureWALRate, Value: 100e6, Samples: 10, Enough: true}},
			[]Figure{{Name: FigureWALRate, Value: 1e6, Samples: 10, Enough: true}}, false, false, "not enough data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := compare(&Figures{Figures: tc.before}, &Figures{Figures: tc.after}, DefaultRegression)
			if v.worse != tc.worse || v.decided != tc.decided || !strings.Contains(v.reason, tc.reason) {
				t.Errorf("compare = worse %v decided %v %q; want worse %v decided %v, reason containing %q", v.worse, v.decided, v.reason, tc.worse, tc.decided, tc.reason)
			}
		})
	}
	// The vm.dirty_* knobs are kept only when they helped: unchanged or undecided rolls back.
	for _, tc := range []struct {
		name          string
		before, after []Figure
		worse         bool
		decided       bool
		reason        string
	}{
		{"stall shorter", []Figure{fig(FigureWritebackStall, 20, 10)}, []Figure{fig(FigureWritebackStall, 0, 10)}, false, true, "better"},
		{"stall unchanged", []Figure{fig(FigureWritebackStall, 20, 10)}, []Figure{fig(FigureWritebackStall, 18, 10)}, true, true, "did not help: no figure moved"},
		{"stall longer", []Figure{fig(FigureWritebackStall, 10, 10)}, []Figure{fig(FigureWritebackStall, 40, 10)}, true, true, "worse beyond noise"},
		{"undecided", []Figure{fig(FigureWritebackStall, 20, 1)}, []Figure{fig(FigureWritebackStall, 0, 10)}, true, false, "did not help: not enough data"},
	} {
		t.Run("must improve/"+tc.name, func(t *testing.T) {
			v := compare(&Figures{Figures: tc.before, MustImprove: true}, &Figures{Figures: tc.after, MustImprove: true}, DefaultRegression)
			if v.worse != tc.worse || v.decided != tc.decided || !strings.Contains(v.reason, tc.reason) {
				t.Errorf("compare = worse %v decided %v %q; want worse %v decided %v, reason containing %q", v.worse, v.decided, v.reason, tc.worse, tc.decided, tc.reason)
			}
		})
	}
}

// TestMeasure checks the figures against counters with known rates.
func TestMeasure(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	h := rules.NewHistory(100)
	var wal collector.WALStats
	var cp collector.CheckpointStats
	for i := range 11 {
		if i > 0 {
			wal.Bytes += 4 << 20
			wal.WriteTimeSeconds += 0.01
			wal.SyncTimeSeconds += 0.03
			wal.BuffersFull += 20
		}
		if i == 5 {
			cp.Timed++
			cp.SyncTimeSeconds += 2
		}
		w, c := wal, cp
		h.Add(collector.Snapshot{
			Time: t0.Add(time.Duration(i) * time.Second),
			Postgres: &collector.Postgres{
				Settings: map[string]collector.Setting{collector.TrackWALIOTiming: {Value: "on"}},
				WAL:      &w, Checkpointer: &c,
				WaitEvents: &collector.WaitEvents{Samples: 5, ActiveBackends: 10, Counts: map[string]int64{collector.EventIOWALSync: 3, collector.EventLWLockWALWrite: 1}},
			},
			Kernel: &collector.Kernel{Meminfo: collector.Meminfo{DirtyBytes: int64(i) << 20, WritebackBytes: 1 << 20}},
		})
	}
	want := map[string]float64{
		FigureIOSecondsPerMB:   0.01,
		FigureFlushWaitShare:   0.4,
		FigureBuffersFullPerMB: 5,
		FigureWALRate:          4 << 20,
	}
	f := measure(h, collector.WALBuffers, t0)
	for name, w := range want {
		got, ok := f.get(name)
		if !ok || math.Abs(got.Value-w) > 1e-9*math.Max(1, w) || !got.Enough {
			t.Errorf("%s = %+v, want %v with enough data", name, got, w)
		}
	}
	f = measure(h, KnobDirtyBackgroundBytes, t0)
	if got, ok := f.get(FigureWritebackStall); !ok || got.Value != 0 || !got.Enough || !got.Judged || !f.MustImprove {
		t.Errorf("kernel knob: stall = %+v (present %v), must improve %v; want a judged 0 s stall with enough data, must improve", got, ok, f.MustImprove)
	}
	if got, _ := f.get(FigureDirtyPeak); got.Value != 11<<20 {
		t.Errorf("dirty peak = %+v, want 11MB", got)
	}
	f = measure(h, collector.CheckpointFlushAfter, t0)
	if f.MustImprove {
		t.Errorf("checkpoint_flush_after must improve: only the vm.dirty_* knobs must")
	}
	if got, _ := f.get(FigureCheckpointSync); got.Value != 2 || got.Samples != 1 {
		t.Errorf("checkpoint sync = %+v, want 2 s over 1 checkpoint", got)
	}
	if got, _ := f.get(FigureDirtyPeak); got.Value != 11<<20 {
		t.Errorf("dirty peak = %+v, want 11MB", got)
	}
	// Without track_wal_io_timing there is no I/O time to compare.
	h2 := rules.NewHistory(100)
	for _, s := range h.Snapshots() {
		s.Postgres = &collector.Postgres{WAL: s.Postgres.WAL, Settings: map[string]collector.Setting{collector.TrackWALIOTiming: {Value: "off"}}}
		h2.Add(s)
	}
	if got, _ := measure(h2, collector.WALSyncMethod, t0).get(FigureIOSecondsPerMB); got.Enough {
		t.Errorf("I/O time per MB with timing off = %+v, want not enough data", got)
	}
}
