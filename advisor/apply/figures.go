package apply

import (
	"slices"
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
	// Sub are the values over the window's parts (or per event) that the interval and the
	// minimum detectable effect come from (judged figures only).
	Sub []float64 `json:"sub,omitempty"`
	// MDE is the minimum detectable effect from Sub, relative to Sub's mean (0.06: a change of
	// 6%; nil with too few values or a mean of 0): a change must move the figure by this much
	// for the verdict to see it (interval.go).
	MDE *float64 `json:"mde,omitempty"`
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

// measure computes a setting's figures over the snapshots of h taken at or after from: each
// over the whole window, and each judged one also over the window's parts (or per event: each
// checkpoint), the values its interval and its minimum detectable effect come from.
func measure(h *rules.History, setting string, from time.Time) *Figures {
	w := h.Since(from)
	sp, _ := specFor(setting)
	f := &Figures{From: from, MustImprove: sp.family == kernelFamily}
	if last, ok := w.Latest(); ok {
		f.To = last.Time
	}
	judged := figureNames(setting)
	parts := partsOf(w)
	for _, name := range append(slices.Clone(judged), reportedFigures(setting)...) {
		x := figureOf(w, name)
		x.Judged = slices.Contains(judged, name)
		x.Enough = x.Samples >= noiseOf(name).minSamples
		if x.Judged {
			x.Sub = subValues(w, parts, name)
			x.MDE = relativeMDE(x.Sub)
		}
		f.Figures = append(f.Figures, x)
	}
	if walBytes := w.Change(rules.WALBytes); walBytes.OK() {
		f.Figures = append(f.Figures, Figure{Name: FigureWALRate, Value: walBytes.Rate(), Unit: rules.UnitBytesPerSecond,
			Samples: float64(walBytes.Intervals), Enough: true})
	}
	return f
}

// figureOf computes one figure over the window w.
func figureOf(w *rules.History, name string) Figure {
	walBytes := w.Change(rules.WALBytes)
	mb := walBytes.Delta / (1 << 20)
	x := Figure{Name: name}
	switch name {
	case FigureFlushWaitShare:
		waits := w.WaitEvents()
		x.Unit, x.Samples = rules.UnitRatio, float64(waits.Samples)
		if waits.ActiveBackends > 0 {
			x.Value = waits.Share(collector.EventIOWALWrite, collector.EventIOWALSync, collector.EventLWLockWALWrite)
		} else {
			x.Samples = 0 // nobody was active: nothing to compare
		}
	case FigureIOSecondsPerMB:
		x.Unit = "seconds_per_mb"
		wt, st := w.Change(rules.WALWriteSeconds), w.Change(rules.WALSyncSeconds)
		if timingOn(w) && walBytes.OK() && wt.OK() && st.OK() && mb > 0 {
			x.Value, x.Samples = (wt.Delta+st.Delta)/mb, mb
		}
	case FigureWALBytesPerRecord:
		x.Unit = rules.UnitBytesPerRecord
		if v, ok := rules.MeasurePredicted(rules.PredictWALBytesPerRecord, w); ok && mb > 0 {
			x.Value, x.Samples = v, mb
		}
	case FigureBuffersFullPerMB:
		x.Unit = "per_mb"
		if full := w.Change(rules.WALBuffersFull); full.OK() && walBytes.OK() && mb > 0 {
			x.Value, x.Samples = full.Delta/mb, mb
		}
	case FigureCheckpointSync:
		x.Unit = rules.UnitSeconds
		var n, sync float64
		for _, e := range w.CheckpointEnds() {
			n += e.Checkpoints
			sync += e.SyncSeconds
		}
		if n > 0 {
			x.Value, x.Samples = sync/n, n
		}
	case FigureWritebackStall:
		st := rules.Stall(w, rules.DefaultThresholds())
		x.Unit, x.Value, x.Samples = rules.UnitSeconds, st.Seconds, float64(st.Intervals)
	case FigureDirtyPeak:
		x.Unit = rules.UnitBytes
		if peak, _, ok := w.Peak(rules.DirtyWriteback); ok {
			x.Value = peak
			for _, s := range w.Snapshots() {
				if s.Kernel != nil {
					x.Samples++
				}
			}
		}
	}
	return x
}

// subWindows is how many parts of a window a figure is measured over for its interval: twelve
// values a side give Welch's interval about 20 degrees of freedom, where its width is within a
// tenth of what infinitely many would give.
const subWindows = 12

// partsOf cuts w into up to subWindows consecutive parts of equal length, each holding at least
// two snapshots (a counter's change needs two); neighbours share the snapshot between them, so
// together the parts cover every interval of w once. A window of fewer than 13 snapshots has a
// part per interval.
func partsOf(w *rules.History) []*rules.History {
	snaps := w.Snapshots()
	n := min(subWindows, len(snaps)-1)
	if n < 1 {
		return nil
	}
	from, to := snaps[0].Time, snaps[len(snaps)-1].Time
	step := to.Sub(from) / time.Duration(n)
	var parts []*rules.History
	i := 0
	for k := range n {
		end := from.Add(time.Duration(k+1) * step)
		if k == n-1 {
			end = to
		}
		part := rules.NewHistory(len(snaps))
		j := i
		for ; j < len(snaps) && !snaps[j].Time.After(end); j++ {
			part.Add(snaps[j])
		}
		if part.Len() >= 2 {
			parts = append(parts, part)
			i = j - 1 // the last snapshot starts the next part
		}
	}
	return parts
}

// subValues are the values a judged figure's interval is computed from: per checkpoint for the
// checkpoints' sync phase (each is an event of its own), else the figure over each part of the
// window that had data for it.
func subValues(w *rules.History, parts []*rules.History, name string) []float64 {
	var out []float64
	if name == FigureCheckpointSync {
		for _, e := range w.CheckpointEnds() {
			if e.Checkpoints > 0 {
				out = append(out, e.SyncSeconds/e.Checkpoints)
			}
		}
		return out
	}
	if name == FigureWritebackStall {
		// Each stalled interval is judged against the whole window's flushes, then counted in
		// the part it falls in: stall seconds per part, zeros included.
		st := rules.Stall(w, rules.DefaultThresholds())
		if st.Intervals == 0 {
			return nil
		}
		stalled := st.Stalled()
		for _, p := range parts {
			first := p.Snapshots()[0]
			last, _ := p.Latest()
			sum := 0.0
			for _, iv := range stalled {
				if !iv.From.Before(first.Time) && !iv.To.After(last.Time) {
					sum += iv.Seconds
				}
			}
			// The share of the part's time stalled: parts differ in length by a snapshot.
			if secs := last.Time.Sub(first.Time).Seconds(); secs > 0 {
				out = append(out, sum/secs)
			}
		}
		return out
	}
	for _, p := range parts {
		if x := figureOf(p, name); x.Samples > 0 {
			out = append(out, x.Value)
		}
	}
	return out
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
