package rules

import (
	"fmt"
	"math"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Names of the figures recommendations predict (Predicted.Name). MeasurePredicted reads each
// one from a history, so the value a rule calls current, the value apply's verification
// measures after the change and the value a benchmark compares are the same measurement.
const (
	// PredictWALWait is the backend time spent waiting on the WAL's write path (walWaitEvents),
	// from the wait-event samples, per MB of WAL generated: per MB, so that a load that speeds
	// up once a bottleneck is gone does not hide what each MB costs (docs/rules.md, Predicted effect).
	PredictWALWait = "wal_write_wait_seconds_per_mb"
	// PredictWALIO is WAL write plus sync time (pg_stat_wal, track_wal_io_timing) per MB of WAL:
	// the figure when wait events are not sampled.
	PredictWALIO = "wal_io_seconds_per_mb"
	// PredictWALIORate is WAL write plus sync time per second of wall time: the figure, always
	// modelled, when no WAL was measured to put the others per MB.
	PredictWALIORate = "wal_io_seconds_per_second"
	// PredictFlushSeconds is what one WAL flush of the server's pattern costs, as the probes
	// measure it: the figure of sync-method-slow where pg_stat_wal does not count flushes
	// (PostgreSQL 13). No history measures it; the next probe report does.
	PredictFlushSeconds = "wal_flush_seconds"
	// PredictCheckpointSync is the mean sync phase of the checkpoints that completed.
	PredictCheckpointSync = "checkpoint_sync_mean_seconds"
	// PredictCheckpointWrite is the mean write phase of the checkpoints that completed.
	PredictCheckpointWrite = "checkpoint_write_mean_seconds"
	// PredictCheckpointRate is completed checkpoints per second.
	PredictCheckpointRate = "checkpoints_per_second"
	// PredictWALRecordRate is WAL records per second: for a fixed mix of transactions it moves
	// with their commits (wal-lock-contention).
	PredictWALRecordRate = "wal_records_per_second"
	// PredictWALBytesPerRecord is WAL bytes per WAL record: the load's changes make the records,
	// wal_compression and the checkpoints' spacing how many bytes they take (full-page-images).
	PredictWALBytesPerRecord = "wal_bytes_per_record"
	// PredictWritebackStall is the seconds the WAL's flushes stalled behind the kernel's
	// write-back (Stall, writeback-stalls-wal).
	PredictWritebackStall = "writeback_stall_seconds"
)

// walWaitEvents are the wait events PredictWALWait counts.
func walWaitEvents() []string {
	return []string{collector.EventIOWALWrite, collector.EventIOWALSync, collector.EventLWLockWALWrite, collector.EventLWLockWALBufMap}
}

// MeasurePredicted measures a predicted figure over a history (all of it: pass the part after
// a change to check a prediction). ok is false when the history cannot tell: too few wait
// samples or nobody active, track_wal_io_timing off, no checkpoint, a figure no history
// measures. The minimum of wait samples is DefaultThresholds' MinWaitSamples.
func MeasurePredicted(name string, h *History) (float64, bool) {
	if h == nil {
		return 0, false
	}
	switch name {
	case PredictWALWait:
		waits := h.WaitEvents()
		mb, _ := walMB(h)
		if waits.Samples < DefaultThresholds().MinWaitSamples || waits.ActiveBackends <= 0 || mb <= 0 {
			return 0, false
		}
		return walWaitSeconds(h) / mb, true
	case PredictWALIO:
		secs, ok := walIOSeconds(h)
		mb, _ := walMB(h)
		if !ok || mb <= 0 {
			return 0, false
		}
		return secs / mb, true
	case PredictWALIORate:
		secs, ok := walIOSeconds(h)
		if !ok || h.Span() <= 0 {
			return 0, false
		}
		return secs / h.Span().Seconds(), true
	case PredictCheckpointSync, PredictCheckpointWrite:
		var n, secs float64
		for _, e := range h.CheckpointEnds() {
			n += e.Checkpoints
			if name == PredictCheckpointSync {
				secs += e.SyncSeconds
			} else {
				secs += e.WriteSeconds
			}
		}
		if n <= 0 {
			return 0, false
		}
		return secs / n, true
	case PredictWALRecordRate:
		c := h.Change(WALRecords)
		if !c.OK() || c.Seconds <= 0 {
			return 0, false
		}
		return c.Rate(), true
	case PredictWALBytesPerRecord:
		bytes, records := h.Change(WALBytes), h.Change(WALRecords)
		if !bytes.OK() || !records.OK() || records.Delta <= 0 {
			return 0, false
		}
		return bytes.Delta / records.Delta, true
	case PredictCheckpointRate:
		timed, req := h.Change(CheckpointsTimed), h.Change(CheckpointsRequested)
		if !timed.OK() || !req.OK() || timed.Seconds <= 0 {
			return 0, false
		}
		n := timed.Delta + req.Delta
		if done := h.Change(CheckpointsDone); done.OK() && done.Intervals == timed.Intervals {
			n = done.Delta // 17+ counts skipped timed checkpoints in timed; num_done (18) does not
		}
		return n / timed.Seconds, true
	case PredictWritebackStall:
		st := Stall(h, DefaultThresholds())
		if st.Intervals == 0 {
			return 0, false
		}
		return st.Seconds, true
	}
	return 0, false
}

// walMB is the WAL generated over the history in MB, and the seconds it covers: the larger
// of pg_stat_wal's wal_bytes and the insert LSN's advance, never their sum (both count a
// transaction's WAL once it has ended; only the LSN sees it before).
func walMB(h *History) (mb, seconds float64) {
	stat, lsn := h.Change(WALBytes), h.Change(WALInsertBytes)
	if lsn.Delta > stat.Delta {
		return lsn.Delta / (1 << 20), lsn.Seconds
	}
	return stat.Delta / (1 << 20), stat.Seconds
}

// walWaitSeconds is the backend time spent on walWaitEvents over the history: for each
// snapshot's interval, the waiting backends per pg_stat_activity read times its length.
func walWaitSeconds(h *History) float64 {
	var secs float64
	for i := 1; i < h.Len(); i++ {
		pg := h.snaps[i].Postgres
		if pg == nil || pg.WaitEvents == nil || pg.WaitEvents.Samples <= 0 {
			continue
		}
		var n int64
		for _, e := range walWaitEvents() {
			n += pg.WaitEvents.Counts[e]
		}
		secs += float64(n) / float64(pg.WaitEvents.Samples) * h.snaps[i].Time.Sub(h.snaps[i-1].Time).Seconds()
	}
	return secs
}

// walIOSeconds is WAL write plus sync time over the history, when track_wal_io_timing was on
// in every snapshot (the times stand still without it).
func walIOSeconds(h *History) (float64, bool) {
	snaps := h.Snapshots()
	if len(snaps) < 2 {
		return 0, false
	}
	for _, s := range snaps {
		if s.Postgres == nil {
			continue
		}
		if on, ok := settings(s.Postgres.Settings).on(collector.TrackWALIOTiming); !ok || !on {
			return 0, false
		}
	}
	wt, st := h.Change(WALWriteSeconds), h.Change(WALSyncSeconds)
	if !wt.OK() || !st.OK() {
		return 0, false
	}
	return wt.Delta + st.Delta, true
}

// predictWAL is the Predicted of a recommendation that saves backends time on the WAL's write
// path: saved is the backend seconds per second of wall time the change removes (summed over
// backends), model what the rule reckons they spend there now on the same footing, and how says
// how saved was reached. Both are put per MB of the WAL the window generated, which the change
// does not alter (it is the load's), and the current figure is measured where the history can:
// the wait events first, else WAL I/O time; only without either is it the model's.
func predictWAL(w *History, saved, model float64, how string) *Predicted {
	saved = max(saved, 0)
	mb, secs := walMB(w)
	if mb <= 0 || secs <= 0 {
		return &Predicted{
			Name: PredictWALIORate, Current: model, Value: max(model-saved, 0), Unit: UnitRatio,
			Basis: fmt.Sprintf("modelled, not measured (no WAL measured in the window to put it per MB): about %.3f s per second "+
				"now; %s saves %.3f s per second%s", model, how, saved, clampNote(model, saved)),
		}
	}
	rate := mb / secs
	per := saved / rate
	if cur, ok := MeasurePredicted(PredictWALWait, w); ok {
		waits := w.WaitEvents()
		return &Predicted{
			Name: PredictWALWait, Current: cur, Value: max(cur-per, 0), Unit: UnitSecondsPerMB,
			Basis: fmt.Sprintf("wait events: backends wait %s per MB of WAL on WAL writes, syncs and buffers (%d samples, "+
				"%.1f active on average, %.2f MB/s of WAL); %s saves %.3f s per second, %s per MB%s",
				humanSeconds(cur), waits.Samples, waits.MeanActive(), rate, how, saved, humanSeconds(per), clampNote(cur, per)),
		}
	}
	if cur, ok := MeasurePredicted(PredictWALIO, w); ok {
		return &Predicted{
			Name: PredictWALIO, Current: cur, Value: max(cur-per, 0), Unit: UnitSecondsPerMB,
			Basis: fmt.Sprintf("pg_stat_wal: WAL write and sync time is %s per MB (track_wal_io_timing, %.2f MB/s of WAL); "+
				"%s saves %.3f s per second, %s per MB%s", humanSeconds(cur), rate, how, saved, humanSeconds(per), clampNote(cur, per)),
		}
	}
	cur := model / rate
	return &Predicted{
		Name: PredictWALIO, Current: cur, Value: max(cur-per, 0), Unit: UnitSecondsPerMB,
		Basis: fmt.Sprintf("modelled, not measured (no wait-event samples, track_wal_io_timing off): about %s per MB of WAL "+
			"now (%.3f s per second at %.2f MB/s); %s saves %.3f s per second, %s per MB%s",
			humanSeconds(cur), model, rate, how, saved, humanSeconds(per), clampNote(cur, per)),
	}
}

// predictWALKeep is the Predicted of a change that scales every WAL write wait by keep (0..1)
// rather than removing a part of it: open_* -> fdatasync turns every synchronous WAL write
// into a page-cache write. The current figure is measured as predictWAL measures it; the
// prediction is that figure times keep. model is the rule's own reckoning (backend seconds
// per second), used only when nothing is measured.
func predictWALKeep(w *History, keep, model float64, how string) *Predicted {
	keep = min(max(keep, 0), 1)
	p := predictWAL(w, model*(1-keep), model, how)
	if p.Name == PredictWALWait || p.Name == PredictWALIO {
		if cur, ok := MeasurePredicted(p.Name, w); ok {
			p.Current, p.Value = cur, cur*keep
			p.Basis = fmt.Sprintf("%s: every WAL write wait is scaled by %.3g, so %s per MB of WAL becomes %s per MB", how, keep,
				humanSeconds(cur), humanSeconds(cur*keep))
		}
	}
	return p
}

// clampNote says when a predicted saving exceeds what is measured now, so that the prediction
// stops at zero.
func clampNote(cur, saved float64) string {
	if saved > cur {
		return " (more than is measured now: predicted to fall to zero)"
	}
	return ""
}

// PredictionCheck compares what a recommendation predicted with what was measured once the
// change was in force. Its JSON is part of apply's journal and status.
type PredictionCheck struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Current is the figure before the change, as the rule measured it; Predicted what it
	// predicted; Measured what the history after the change shows.
	Current   float64 `json:"current"`
	Predicted float64 `json:"predicted"`
	Measured  float64 `json:"measured"`
	// Error is (Measured - Predicted) / max(|Predicted|, |Current - Predicted|): 0 when the
	// prediction was exact, +0.3 when the figure ended 30% of the prediction's scale above it.
	// The scale is the larger of the predicted value and the predicted change, so that neither
	// a prediction of (almost) zero nor one of (almost) no change makes a small miss look huge.
	Error float64 `json:"error"`
}

// CheckPrediction is the prediction error of p given the measured value of its figure
// (MeasurePredicted over the history after the change). ok is false when the prediction has no
// scale (current and predicted both zero) or a figure is not a finite number.
func CheckPrediction(p Predicted, measured float64) (PredictionCheck, bool) {
	for _, v := range []float64{p.Current, p.Value, measured} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return PredictionCheck{}, false
		}
	}
	scale := max(math.Abs(p.Value), math.Abs(p.Current-p.Value))
	if scale == 0 {
		return PredictionCheck{}, false
	}
	return PredictionCheck{
		Name: p.Name, Unit: p.Unit, Current: p.Current, Predicted: p.Value, Measured: measured,
		Error: (measured - p.Value) / scale,
	}, true
}

// String is one line for logs and the journal's reasons.
func (c PredictionCheck) String() string {
	return fmt.Sprintf("%s: %.4g before, predicted %.4g, measured %.4g (error %+.0f%%)", c.Name, c.Current, c.Predicted, c.Measured, c.Error*100)
}
