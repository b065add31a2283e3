package rules

import (
	"fmt"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// bufferWrites summarizes buffer-full writes over a window: the facts wal-buffers-small,
// open-sync-with-small-buffers and sync-method-slow share.
type bufferWrites struct {
	Rate  float64 // buffer-full writes per second
	Share float64 // of all WAL writes
	// PerWrite is what one WAL write costs, in seconds, and Source where that figure came
	// from ("wal_write_time", "probe"); PerWrite is 0 when unknown.
	PerWrite float64
	Source   string
	// Bytes is the WAL generated over the window: the larger of pg_stat_wal's wal_bytes and
	// the insert LSN's advance, never their sum, since both count the same WAL once its
	// transaction has ended.
	Bytes float64
	// Estimated says Rate and Share are estimated from the insert LSN and the wait events,
	// because pg_stat_wal has not counted the writes of a transaction still running;
	// Uncounted is the WAL they were estimated from, the LSN's advance beyond wal_bytes'.
	Estimated bool
	Uncounted float64
}

// measureBufferWrites reads buffer-full writes and their cost from the window. The measured
// WAL write time per write (track_wal_io_timing) is preferred to the probes: it is this
// server's own cost. Without it, a buffer-full write costs a synchronous 8kB write under the
// open_* methods and a plain write otherwise.
func measureBufferWrites(w *History, s settings, method string, probe *probes.Report, t Thresholds) (bufferWrites, bool) {
	full, writes := w.Change(WALBuffersFull), w.Change(WALWrites)
	if !full.OK() || !writes.OK() {
		return bufferWrites{}, false
	}
	b := bufferWrites{Rate: full.Rate()}
	if writes.Delta > 0 {
		b.Share = min(full.Delta/writes.Delta, 1)
	}
	stat, lsn := w.Change(WALBytes), w.Change(WALInsertBytes)
	b.Bytes = max(stat.Delta, lsn.Delta)
	if lsn.OK() && lsn.Delta > stat.Delta {
		estimateBufferWrites(&b, w, s, stat, lsn, full, writes, t)
	}
	if on, _ := s.on(collector.TrackWALIOTiming); on {
		if wt := w.Change(WALWriteSeconds); wt.OK() && wt.Delta > 0 && writes.Delta > 0 {
			b.PerWrite, b.Source = wt.Delta/writes.Delta, "wal_write_time"
			return b, true
		}
	}
	name := probes.Write
	if isOpenMethod(method) {
		name = method
	}
	if m, ok := probeResult(probe, name, 1); ok {
		b.PerWrite, b.Source = usSeconds(m.LatencyUS.Mean), "probe"
	}
	return b, true
}

// estimateBufferWrites adds the buffer-full writes of WAL pg_stat_wal has not counted yet: a
// backend's counters reach it only when its transaction ends, while the insert LSN moves on. A
// backend that fills the buffers writes them out about once per wal_buffers of WAL; the estimate
// is believed only when the backends are seen waiting in IO WALWrite, and covers only the LSN's
// advance beyond wal_bytes, so nothing counts twice (docs/rules.md, wal-buffers-small).
func estimateBufferWrites(b *bufferWrites, w *History, s settings, stat, lsn, full, writes Change, t Thresholds) {
	size, ok := s.bytes(collector.WALBuffers)
	if !ok || size <= 0 || size >= t.WALBuffersMax || lsn.Seconds <= 0 {
		return
	}
	waits := w.WaitEvents()
	if waits.Samples < t.MinWaitSamples || waits.ActiveBackends <= 0 ||
		waits.Share(collector.EventIOWALWrite) < t.BuffersFullWaitShare {
		return
	}
	// Only the WAL pg_stat_wal has not seen: what it has seen came with its own buffer-full
	// count, so commits that merely lag a snapshot behind are not blamed.
	b.Uncounted = lsn.Delta - stat.Delta
	est := b.Uncounted / float64(size)
	counted := max(full.Delta, 0)
	b.Rate = (counted + est) / lsn.Seconds
	// The writes pg_stat_wal did count (the WAL writer's, other backends', the counted
	// buffer-full ones among them) are not the estimated ones.
	b.Share = min((counted+est)/(est+max(writes.Delta, 0)), 1)
	b.Estimated = true
}

// estimateNote is what a summary says of where its buffer-full writes came from.
func (b bufferWrites) estimateNote() string {
	if !b.Estimated {
		return ""
	}
	return fmt.Sprintf(" (estimated from the insert LSN, %s of WAL in the window that pg_stat_wal has not counted yet, "+
		"and wait events: a transaction still running)", collector.FormatBytes(b.Uncounted))
}

// estimateEvidence is the evidence that marks estimated buffer-full writes.
func (b bufferWrites) estimateEvidence() []Evidence {
	if !b.Estimated {
		return nil
	}
	return []Evidence{
		{Name: "buffers_full_estimated_from_lsn", Value: 1, Unit: UnitBool},
		{Name: "wal_bytes", Value: b.Bytes, Unit: UnitBytes},
		{Name: "wal_bytes_not_in_pg_stat_wal", Value: b.Uncounted, Unit: UnitBytes},
	}
}
