package apply

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Names of the verification figures. Every judged figure is "lower is better".
const (
	// FigureFlushWaitShare is the share of active backends' wait-event samples spent waiting
	// for WAL to reach the device: IO WALWrite and WALSync, and LWLock WALWrite (a backend
	// queued behind another's flush waits for the same device). It is per active-backend
	// sample, so it does not move with the load's size the way a rate does.
	FigureFlushWaitShare = "wal_flush_wait_share"
	// FigureIOSecondsPerMB is WAL write plus sync time per MB of WAL (track_wal_io_timing):
	// what the device costs for the same amount of WAL, whatever the load's size.
	FigureIOSecondsPerMB = "wal_io_seconds_per_mb"
	// FigureBuffersFullPerMB is buffer-full writes per MB of WAL (wal_buffers).
	FigureBuffersFullPerMB = "wal_buffers_full_per_mb"
	// FigureCheckpointSync is the mean sync phase of the checkpoints that ended in the window.
	FigureCheckpointSync = "checkpoint_sync_mean_seconds"
	// FigureDirtyPeak is the highest Dirty+Writeback of the window.
	FigureDirtyPeak = "dirty_writeback_peak_bytes"
	// FigureWritebackStall is how long the WAL's flushes stalled behind write-back in the
	// window, as writeback-stalls-wal measures it (rules.Stall).
	FigureWritebackStall = "writeback_stall_seconds"
	// FigureWALBytesPerRecord is WAL bytes per WAL record: what wal_compression is for. The
	// records are the load's changes, so the figure does not move with the load's speed.
	FigureWALBytesPerRecord = rules.PredictWALBytesPerRecord
	// FigureWALRate is WAL written per second: the commit throughput where it is visible. It
	// depends on the load as much as on the settings, so it is reported and not judged.
	FigureWALRate = "wal_bytes_per_second"
)

// Figure is one measured figure over a window.
type Figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Samples is how much data is behind it (wait samples, MB of WAL, checkpoints, snapshots).
	Samples float64 `json:"samples"`
	// Enough is true when Samples reach the figure's minimum; only then is it compared.
	Enough bool `json:"enough"`
	// Judged figures decide a verification; the others are reported.
	Judged bool `json:"judged"`
}

// Figures are the figures of one window.
type Figures struct {
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Figures []Figure  `json:"figures"`
	// MustImprove is set for settings a change of which is kept only when a judged figure got
	// better (the vm.dirty_* knobs): "no worse" is not enough.
	MustImprove bool `json:"must_improve,omitempty"`
}

func (f *Figures) get(name string) (Figure, bool) {
	if f == nil {
		return Figure{}, false
	}
	for _, x := range f.Figures {
		if x.Name == name {
			return x, true
		}
	}
	return Figure{}, false
}

// noise is what a figure must move by, beyond the relative threshold, to count: differences
// below it are within what the lab saw between identical runs or below what matters.
type noise struct {
	floor      float64 // absolute
	minSamples float64
}

func noiseOf(name string) noise {
	switch name {
	case FigureFlushWaitShare:
		// 20 samples is rules.Thresholds.MinWaitSamples; five points of share is one backend in
		// twenty.
		return noise{floor: 0.05, minSamples: 20}
	case FigureIOSecondsPerMB:
		return noise{floor: 0.002, minSamples: 1}
	case FigureBuffersFullPerMB:
		return noise{floor: 2, minSamples: 1}
	case FigureCheckpointSync:
		return noise{floor: 0.25, minSamples: 1}
	case FigureDirtyPeak:
		return noise{floor: 16 << 20, minSamples: 3}
	case FigureWritebackStall:
		// rules.Thresholds.WritebackStallMin: a stall shorter than that is not a finding either.
		return noise{floor: 5, minSamples: 3}
	case FigureWALBytesPerRecord:
		// Samples are MB of WAL; 16 bytes is about a quarter of a record without its image.
		return noise{floor: 16, minSamples: 1}
	}
	return noise{minSamples: 1}
}

// figureNames lists the figures that judge a setting's change, most telling first: when
// figures disagree, the first one with enough data on both sides decides.
func figureNames(setting string) []string {
	sp, _ := specFor(setting)
	switch sp.family {
	case walFamily:
		if setting == collector.WALCompression {
			// Compression writes fewer bytes per flush: the time per MB of WAL rises while each
			// commit waits less, so the commits' wait decides, then the bytes per record.
			return []string{FigureFlushWaitShare, FigureWALBytesPerRecord}
		}
		names := []string{FigureIOSecondsPerMB, FigureFlushWaitShare}
		if setting == collector.WALBuffers {
			names = append(names, FigureBuffersFullPerMB)
		}
		return names
	case checkpointFamily:
		return []string{FigureCheckpointSync, FigureDirtyPeak, FigureFlushWaitShare}
	case kernelFamily:
		// Not the pile: it is the means, not the symptom. Restoring the kernel's ratios raises
		// it by design (the lab's neighbour restore: 470MB -> 2.6GB with a shorter stall), and a
		// lower threshold shrinks it while the stall grows (docs/benchmarks.md, neighbour table).
		return []string{FigureWritebackStall, FigureFlushWaitShare}
	}
	return nil
}

// reportedFigures are measured beside the judged ones and shown, not judged.
func reportedFigures(setting string) []string {
	if sp, _ := specFor(setting); sp.family == kernelFamily {
		return []string{FigureDirtyPeak}
	}
	return nil
}

// measure computes a setting's figures over the snapshots of h taken at or after from.
func measure(h *rules.History, setting string, from time.Time) *Figures {
	w := h.Since(from)
	sp, _ := specFor(setting)
	f := &Figures{From: from, MustImprove: sp.family == kernelFamily}
	if last, ok := w.Latest(); ok {
		f.To = last.Time
	}
	judged := figureNames(setting)
	add := func(x Figure) {
		for _, n := range judged {
			x.Judged = x.Judged || n == x.Name
		}
		x.Enough = x.Samples >= noiseOf(x.Name).minSamples
		f.Figures = append(f.Figures, x)
	}
	walBytes := w.Change(rules.WALBytes)
	mb := walBytes.Delta / (1 << 20)
	for _, name := range append(slices.Clone(judged), reportedFigures(setting)...) {
		switch name {
		case FigureFlushWaitShare:
			waits := w.WaitEvents()
			x := Figure{Name: name, Unit: rules.UnitRatio, Samples: float64(waits.Samples)}
			if waits.ActiveBackends > 0 {
				x.Value = waits.Share(collector.EventIOWALWrite, collector.EventIOWALSync, collector.EventLWLockWALWrite)
			} else {
				x.Samples = 0 // nobody was active: nothing to compare
			}
			add(x)
		case FigureIOSecondsPerMB:
			x := Figure{Name: name, Unit: "seconds_per_mb"}
			wt, st := w.Change(rules.WALWriteSeconds), w.Change(rules.WALSyncSeconds)
			if timingOn(w) && walBytes.OK() && wt.OK() && st.OK() && mb > 0 {
				x.Value, x.Samples = (wt.Delta+st.Delta)/mb, mb
			}
			add(x)
		case FigureWALBytesPerRecord:
			x := Figure{Name: name, Unit: rules.UnitBytesPerRecord}
			if v, ok := rules.MeasurePredicted(rules.PredictWALBytesPerRecord, w); ok && mb > 0 {
				x.Value, x.Samples = v, mb
			}
			add(x)
		case FigureBuffersFullPerMB:
			x := Figure{Name: name, Unit: "per_mb"}
			if full := w.Change(rules.WALBuffersFull); full.OK() && walBytes.OK() && mb > 0 {
				x.Value, x.Samples = full.Delta/mb, mb
			}
			add(x)
		case FigureCheckpointSync:
			x := Figure{Name: name, Unit: rules.UnitSeconds}
			var n, sync float64
			for _, e := range w.CheckpointEnds() {
				n += e.Checkpoints
				sync += e.SyncSeconds
			}
			if n > 0 {
				x.Value, x.Samples = sync/n, n
			}
			add(x)
		case FigureWritebackStall:
			st := rules.Stall(w, rules.DefaultThresholds())
			add(Figure{Name: name, Unit: rules.UnitSeconds, Value: st.Seconds, Samples: float64(st.Intervals)})
		case FigureDirtyPeak:
			x := Figure{Name: name, Unit: rules.UnitBytes}
			if peak, _, ok := w.Peak(rules.DirtyWriteback); ok {
				x.Value = peak
				for _, s := range w.Snapshots() {
					if s.Kernel != nil {
						x.Samples++
					}
				}
			}
			add(x)
		}
	}
	if walBytes.OK() {
		add(Figure{Name: FigureWALRate, Value: walBytes.Rate(), Unit: rules.UnitBytesPerSecond, Samples: float64(walBytes.Intervals)})
	}
	return f
}

// timingOn reports whether track_wal_io_timing was on throughout the window: WAL write and
// sync times are zero without it.
func timingOn(w *rules.History) bool {
	snaps := w.Snapshots()
	if len(snaps) < 2 {
		return false
	}
	for _, s := range snaps {
		if s.Postgres == nil {
			continue
		}
		v, ok := s.Postgres.Settings[collector.TrackWALIOTiming]
		if !ok {
			return false
		}
		if on, _ := parseBool(v.Value); !on {
			return false
		}
	}
	return true
}

// FigureChange compares one figure before and after a change.
type FigureChange struct {
	Name   string  `json:"name"`
	Before float64 `json:"before"`
	After  float64 `json:"after"`
	Unit   string  `json:"unit"`
	// Verdict is "better", "worse", "same" (within noise) or "not enough data".
	Verdict string `json:"verdict"`
}

// Verdicts of a FigureChange.
const (
	VerdictBetter   = "better"
	VerdictWorse    = "worse"
	VerdictSame     = "same"
	VerdictNoData   = "not enough data"
	verdictReported = "reported"
)

// verification is the result of comparing the figures before and after a change.
type verification struct {
	changes []FigureChange
	// worse is true when the change is to be rolled back; decided says whether any judged
	// figure had enough data on both sides.
	worse, decided bool
	// reason is one line for the journal and the log.
	reason string
}

// compare judges a change: a figure is worse when it rose by more than rel of its value before
// and by more than its noise floor, better when it fell by as much. The change is worse when a
// judged figure is worse and none is better; when they disagree, the first judged figure with
// enough data decides (figureNames orders them).
func compare(before, after *Figures, rel float64) verification {
	var v verification
	var first string
	var anyWorse, anyBetter bool
	var worseNames, betterNames []string
	for _, a := range after.Figures {
		b, ok := before.get(a.Name)
		fc := FigureChange{Name: a.Name, Before: b.Value, After: a.Value, Unit: a.Unit}
		switch {
		case !a.Judged:
			fc.Verdict = verdictReported
		case !ok || !a.Enough || !b.Enough:
			fc.Verdict = VerdictNoData
		default:
			n := noiseOf(a.Name)
			diff := a.Value - b.Value
			switch {
			case diff > rel*b.Value && diff > n.floor:
				fc.Verdict = VerdictWorse
				anyWorse = true
				worseNames = append(worseNames, describe(fc))
			case -diff > rel*b.Value && -diff > n.floor:
				fc.Verdict = VerdictBetter
				anyBetter = true
				betterNames = append(betterNames, describe(fc))
			default:
				fc.Verdict = VerdictSame
			}
			v.decided = true
			if first == "" {
				first = fc.Verdict
			}
		}
		v.changes = append(v.changes, fc)
	}
	switch {
	case !v.decided:
		v.reason = "not enough data on both sides of the change to judge it"
	case anyWorse && (!anyBetter || first == VerdictWorse):
		v.worse = true
		v.reason = "worse beyond noise: " + strings.Join(worseNames, ", ")
		if anyBetter {
			v.reason += "; better: " + strings.Join(betterNames, ", ")
		}
	case anyBetter:
		v.reason = "better: " + strings.Join(betterNames, ", ")
		if anyWorse {
			v.reason += "; worse: " + strings.Join(worseNames, ", ") + " (the first figure decides)"
		}
	default:
		v.reason = "no figure moved beyond noise"
	}
	if after.MustImprove && !v.worse && !anyBetter {
		// Kept only when it helped: undecided (after the extended windows) or unchanged is
		// rolled back like worse.
		v.worse = true
		v.reason = "did not help: " + v.reason
	}
	return v
}

func describe(fc FigureChange) string {
	return fmt.Sprintf("%s %s -> %s", fc.Name, fmtFigure(fc.Before, fc.Unit), fmtFigure(fc.After, fc.Unit))
}

func fmtFigure(v float64, unit string) string {
	switch unit {
	case rules.UnitBytes:
		return fmt.Sprintf("%.0fMB", v/(1<<20))
	case rules.UnitSeconds:
		return fmt.Sprintf("%.3fs", v)
	case "seconds_per_mb":
		return fmt.Sprintf("%.4fs/MB", v)
	}
	if math.Abs(v) < 10 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
