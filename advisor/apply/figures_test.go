package apply

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// fig is a judged figure whose parts (or events) were sub; its value is their mean.
func fig(name string, samples float64, sub ...float64) Figure {
	v := 0.0
	for _, x := range sub {
		v += x
	}
	if len(sub) > 0 {
		v /= float64(len(sub))
	}
	x := Figure{Name: name, Value: v, Samples: samples, Enough: samples >= noiseOf(name).minSamples, Judged: true, Sub: sub}
	x.MDE = relativeMDE(sub)
	return x
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after []Figure
		worse         bool
		decided       bool
		reason        string
	}{
		{"better", []Figure{fig(FigureFlushWaitShare, 100, 0.78, 0.8, 0.82, 0.8)}, []Figure{fig(FigureFlushWaitShare, 100, 0.1, 0.12, 0.08, 0.1)}, false, true, "better: wal_flush_wait_share 0.800 -> 0.100, -88% (95% interval"},
		{"worse", []Figure{fig(FigureFlushWaitShare, 100, 0.1, 0.12, 0.08, 0.1)}, []Figure{fig(FigureFlushWaitShare, 100, 0.78, 0.8, 0.82, 0.8)}, true, true, "worse: wal_flush_wait_share"},
		{"within its interval", []Figure{fig(FigureIOSecondsPerMB, 10, 0.09, 0.11, 0.10, 0.12, 0.08)}, []Figure{fig(FigureIOSecondsPerMB, 10, 0.115, 0.09, 0.13, 0.1, 0.12)}, false, true, "unconfirmed: no interval excludes no change"},
		{"15% worse and steady: the interval shows it", []Figure{fig(FigureIOSecondsPerMB, 10, 0.099, 0.1, 0.101, 0.1)}, []Figure{fig(FigureIOSecondsPerMB, 10, 0.114, 0.115, 0.116, 0.115)}, true, true, "worse: wal_io_seconds_per_mb"},
		{"outside its interval but within the floor", []Figure{fig(FigureFlushWaitShare, 100, 0.02, 0.021, 0.019)}, []Figure{fig(FigureFlushWaitShare, 100, 0.05, 0.051, 0.049)}, false, true, "unconfirmed"},
		{"too few samples", []Figure{fig(FigureFlushWaitShare, 5, 0.1, 0.1, 0.1)}, []Figure{fig(FigureFlushWaitShare, 100, 0.9, 0.9, 0.9)}, false, false, "not enough data"},
		{"too few parts for an interval", []Figure{fig(FigureFlushWaitShare, 100, 0.1, 0.1)}, []Figure{fig(FigureFlushWaitShare, 100, 0.9, 0.9, 0.9)}, false, false, "not enough data"},
		{"first figure decides: worse", []Figure{fig(FigureIOSecondsPerMB, 10, 0.01, 0.01, 0.01), fig(FigureFlushWaitShare, 100, 0.8, 0.8, 0.8)},
			[]Figure{fig(FigureIOSecondsPerMB, 10, 0.1, 0.1, 0.1), fig(FigureFlushWaitShare, 100, 0.1, 0.1, 0.1)}, true, true, "worse"},
		{"first figure decides: better", []Figure{fig(FigureIOSecondsPerMB, 10, 0.1, 0.1, 0.1), fig(FigureFlushWaitShare, 100, 0.1, 0.1, 0.1)},
			[]Figure{fig(FigureIOSecondsPerMB, 10, 0.01, 0.01, 0.01), fig(FigureFlushWaitShare, 100, 0.8, 0.8, 0.8)}, false, true, "the first figure decides"},
		{"first without data, second worse", []Figure{fig(FigureIOSecondsPerMB, 0), fig(FigureFlushWaitShare, 100, 0.1, 0.11, 0.09)},
			[]Figure{fig(FigureIOSecondsPerMB, 0), fig(FigureFlushWaitShare, 100, 0.5, 0.51, 0.49)}, true, true, "worse"},
		{"reported figures never decide", []Figure{{Name: FigureWALRate, Value: 100e6, Samples: 10, Enough: true}},
			[]Figure{{Name: FigureWALRate, Value: 1e6, Samples: 10, Enough: true}}, false, false, "not enough data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := compare(&Figures{Figures: tc.before}, &Figures{Figures: tc.after})
			if v.worse != tc.worse || v.decided != tc.decided || !strings.Contains(v.reason, tc.reason) {
				t.Errorf("compare = worse %v decided %v %q; want worse %v decided %v, reason containing %q", v.worse, v.decided, v.reason, tc.worse, tc.decided, tc.reason)
			}
			for _, c := range v.changes {
				if (c.Verdict == VerdictBetter || c.Verdict == VerdictWorse || c.Verdict == VerdictSame) && c.Effect == nil {
					t.Errorf("verdict %s on %s without its interval", c.Verdict, c.Name)
				}
			}
		})
	}
	// The vm.dirty_* knobs are kept only when they helped: unconfirmed or undecided rolls back.
	for _, tc := range []struct {
		name          string
		before, after []Figure
		worse         bool
		decided       bool
		reason        string
	}{
		{"stalls shorter", []Figure{fig(FigureWritebackStall, 10, 20, 18, 22, 20)}, []Figure{fig(FigureWritebackStall, 10, 0, 0, 0, 0)}, false, true, "better"},
		{"stalls within their interval", []Figure{fig(FigureWritebackStall, 10, 20, 10, 30, 20)}, []Figure{fig(FigureWritebackStall, 10, 18, 8, 28, 18)}, true, true, "did not help: unconfirmed"},
		{"stalls longer", []Figure{fig(FigureWritebackStall, 10, 10, 9, 11, 10)}, []Figure{fig(FigureWritebackStall, 10, 40, 38, 42, 40)}, true, true, "worse: writeback_stall_seconds"},
		{"undecided", []Figure{fig(FigureWritebackStall, 1, 20)}, []Figure{fig(FigureWritebackStall, 10, 0, 0, 0)}, true, false, "did not help: not enough data"},
	} {
		t.Run("must improve/"+tc.name, func(t *testing.T) {
			v := compare(&Figures{Figures: tc.before, MustImprove: true}, &Figures{Figures: tc.after, MustImprove: true})
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
