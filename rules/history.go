package rules

import (
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// DefaultHistoryLen keeps two hours at the default 15 s interval: enough for CheckpointWindow
// (1 h) with room to spare, at well under a megabyte.
const DefaultHistoryLen = 480

// History is a bounded series of snapshots, oldest first. The advisor appends to it and rules
// read it. It is not safe for concurrent use: evaluate on the goroutine that appends, or hand
// the rules a copy.
type History struct {
	snaps []collector.Snapshot
	limit int
}

// NewHistory returns an empty history that keeps at most limit snapshots (at least 2: a rate
// needs two).
func NewHistory(limit int) *History {
	limit = max(limit, 2)
	return &History{snaps: make([]collector.Snapshot, 0, limit), limit: limit}
}

// Add appends a snapshot and drops the oldest beyond the limit. A snapshot not newer than the
// latest is refused (false): intervals must move forward for rates to mean anything.
func (h *History) Add(s collector.Snapshot) bool {
	if n := len(h.snaps); n > 0 && !s.Time.After(h.snaps[n-1].Time) {
		return false
	}
	if len(h.snaps) == h.limit {
		copy(h.snaps, h.snaps[1:])
		h.snaps = h.snaps[:len(h.snaps)-1]
	}
	h.snaps = append(h.snaps, s)
	return true
}

// Len is the number of snapshots held.
func (h *History) Len() int {
	if h == nil {
		return 0
	}
	return len(h.snaps)
}

// Snapshots returns a copy of the snapshots, oldest first.
func (h *History) Snapshots() []collector.Snapshot {
	if h == nil {
		return nil
	}
	return append([]collector.Snapshot(nil), h.snaps...)
}

// Latest returns the newest snapshot.
func (h *History) Latest() (collector.Snapshot, bool) {
	if h.Len() == 0 {
		return collector.Snapshot{}, false
	}
	return h.snaps[len(h.snaps)-1], true
}

// Span is the time between the oldest and the newest snapshot.
func (h *History) Span() time.Duration {
	if h.Len() < 2 {
		return 0
	}
	return h.snaps[len(h.snaps)-1].Time.Sub(h.snaps[0].Time)
}

// Since returns a new history (a copy, so appending to either never disturbs the other) of the
// snapshots taken at or after t.
func (h *History) Since(t time.Time) *History {
	if h == nil {
		return NewHistory(2)
	}
	i := 0
	for i < len(h.snaps) && h.snaps[i].Time.Before(t) {
		i++
	}
	snaps := append([]collector.Snapshot(nil), h.snaps[i:]...)
	return &History{snaps: snaps, limit: max(len(snaps), 2)}
}

// Interval is the change of a counter between two consecutive snapshots.
type Interval struct {
	From, To time.Time
	Delta    float64
}

// Seconds is the interval's length.
func (iv Interval) Seconds() float64 { return iv.To.Sub(iv.From).Seconds() }

// Rate is Delta per second.
func (iv Interval) Rate() float64 {
	if s := iv.Seconds(); s > 0 {
		return iv.Delta / s
	}
	return 0
}

// interval returns the change of c from snapshot i-1 to snapshot i, and false when that
// interval must be skipped: a snapshot lacks the counter, the counter was reset (its epoch
// changed or it went down), or time did not advance. Skipping is what keeps a reset from
// producing a negative or a huge rate.
func (h *History) interval(c Counter, i int) (Interval, bool) {
	a, b := &h.snaps[i-1], &h.snaps[i]
	va, ea, oka := c.read(a)
	vb, eb, okb := c.read(b)
	if !oka || !okb || !ea.equal(eb) || vb < va || !b.Time.After(a.Time) {
		return Interval{}, false
	}
	return Interval{From: a.Time, To: b.Time, Delta: vb - va}, true
}

// Intervals returns the counter's change over each consecutive pair of snapshots, leaving
// out the pairs across a reset or a missing reading.
func (h *History) Intervals(c Counter) []Interval {
	var out []Interval
	for i := 1; i < h.Len(); i++ {
		if iv, ok := h.interval(c, i); ok {
			out = append(out, iv)
		}
	}
	return out
}

// Change is a counter's total change over a history, summed over the intervals that count.
type Change struct {
	Delta float64
	// Seconds is the time covered by the intervals that counted.
	Seconds float64
	// Intervals counted; Skipped left out for a reset or a missing reading.
	Intervals, Skipped int
}

// Rate is Delta per second of covered time; 0 when nothing was covered.
func (c Change) Rate() float64 {
	if c.Seconds <= 0 {
		return 0
	}
	return c.Delta / c.Seconds
}

// OK reports whether at least one interval counted.
func (c Change) OK() bool { return c.Intervals > 0 }

// Change sums the counter's change over the history.
func (h *History) Change(c Counter) Change {
	var ch Change
	for i := 1; i < h.Len(); i++ {
		iv, ok := h.interval(c, i)
		if !ok {
			ch.Skipped++
			continue
		}
		ch.Delta += iv.Delta
		ch.Seconds += iv.Seconds()
		ch.Intervals++
	}
	return ch
}

// Between sums the counter's change over the intervals that lie within [from, to].
func (h *History) Between(c Counter, from, to time.Time) Change {
	var ch Change
	for i := 1; i < h.Len(); i++ {
		if h.snaps[i-1].Time.Before(from) || h.snaps[i].Time.After(to) {
			continue
		}
		iv, ok := h.interval(c, i)
		if !ok {
			ch.Skipped++
			continue
		}
		ch.Delta += iv.Delta
		ch.Seconds += iv.Seconds()
		ch.Intervals++
	}
	return ch
}

// Gauge names one instantaneous reading of a snapshot.
type Gauge int

// Gauges the rules read, in bytes.
const (
	Dirty Gauge = iota + 1
	Writeback
	// DirtyWriteback is Dirty + Writeback: what the kernel still has to write.
	DirtyWriteback
)

func (g Gauge) read(s *collector.Snapshot) (float64, bool) {
	if s.Kernel == nil {
		return 0, false
	}
	m := s.Kernel.Meminfo
	switch g {
	case Dirty:
		return float64(m.DirtyBytes), true
	case Writeback:
		return float64(m.WritebackBytes), true
	case DirtyWriteback:
		return float64(m.DirtyBytes + m.WritebackBytes), true
	}
	return 0, false
}

// Peak returns the gauge's highest reading and when it was taken.
func (h *History) Peak(g Gauge) (float64, time.Time, bool) {
	return h.peak(g, 0, h.Len())
}

// peak is Peak over snapshots [from, to).
func (h *History) peak(g Gauge, from, to int) (float64, time.Time, bool) {
	var (
		best float64
		at   time.Time
		ok   bool
	)
	for i := max(from, 0); i < min(to, h.Len()); i++ {
		if v, has := g.read(&h.snaps[i]); has && (!ok || v > best) {
			best, at, ok = v, h.snaps[i].Time, true
		}
	}
	return best, at, ok
}

// CheckpointEnd is an interval between two snapshots in which at least one checkpoint
// completed (its counters advanced), with what it cost and what the kernel held around it.
type CheckpointEnd struct {
	From, To time.Time
	// Checkpoints completed in the interval: num_done where the server has it (18+), else
	// timed + requested, which since 17 also counts skipped timed checkpoints.
	Checkpoints       float64
	Timed, Requested  float64
	WriteSeconds      float64
	SyncSeconds       float64
	BuffersWritten    float64
	WALSyncs          float64
	WALSyncSeconds    float64
	HasWALSyncs       bool
	DirtyWritebackMax float64
	// HasKernel is false when no snapshot around the end had the kernel's meminfo.
	HasKernel bool
}

// CheckpointEnds finds the intervals in which checkpoints completed. The checkpointer
// reports its counters once a checkpoint is done, so the interval where they advance holds
// the checkpoint's end. Dirty/Writeback are read from the snapshot before the interval to the
// one after, where the end's pile of dirty pages shows.
func (h *History) CheckpointEnds() []CheckpointEnd {
	var out []CheckpointEnd
	for i := 1; i < h.Len(); i++ {
		var e CheckpointEnd
		get := func(c Counter) (float64, bool) {
			iv, ok := h.interval(c, i)
			return iv.Delta, ok
		}
		timed, okT := get(CheckpointsTimed)
		req, okR := get(CheckpointsRequested)
		if !okT || !okR {
			continue
		}
		e.Timed, e.Requested = timed, req
		e.Checkpoints = timed + req
		if done, ok := get(CheckpointsDone); ok {
			e.Checkpoints = done
		}
		e.WriteSeconds, _ = get(CheckpointWriteSeconds)
		e.SyncSeconds, _ = get(CheckpointSyncSeconds)
		e.BuffersWritten, _ = get(CheckpointBuffersWritten)
		if e.Checkpoints <= 0 && e.SyncSeconds <= 0 && e.WriteSeconds <= 0 {
			continue
		}
		e.From, e.To = h.snaps[i-1].Time, h.snaps[i].Time
		syncs, okS := get(WALSyncs)
		syncSecs, okSS := get(WALSyncSeconds)
		if okS && okSS {
			e.WALSyncs, e.WALSyncSeconds, e.HasWALSyncs = syncs, syncSecs, true
		}
		e.DirtyWritebackMax, _, e.HasKernel = h.peak(DirtyWriteback, i-1, i+2)
		out = append(out, e)
	}
	return out
}

// WaitTotals sums the WAL wait-event samples of a history.
type WaitTotals struct {
	// Samples is how many times pg_stat_activity was read; ActiveBackends sums the active
	// client backends over those samples; Counts sums the backends waiting on each event.
	Samples        int64
	ActiveBackends int64
	Counts         map[string]int64
}

// MeanActive is the mean number of active client backends per sample.
func (w WaitTotals) MeanActive() float64 {
	if w.Samples <= 0 {
		return 0
	}
	return float64(w.ActiveBackends) / float64(w.Samples)
}

// Share is the share of active backends' samples spent waiting on any of events.
func (w WaitTotals) Share(events ...string) float64 {
	if w.ActiveBackends <= 0 {
		return 0
	}
	var n int64
	for _, e := range events {
		n += w.Counts[e]
	}
	return float64(n) / float64(w.ActiveBackends)
}

// WaitEvents sums the wait-event samples of every snapshot but the first, whose samples were
// taken before the history begins.
func (h *History) WaitEvents() WaitTotals {
	w := WaitTotals{Counts: map[string]int64{}}
	for i := 1; i < h.Len(); i++ {
		pg := h.snaps[i].Postgres
		if pg == nil || pg.WaitEvents == nil {
			continue
		}
		w.Samples += pg.WaitEvents.Samples
		w.ActiveBackends += pg.WaitEvents.ActiveBackends
		for k, v := range pg.WaitEvents.Counts {
			w.Counts[k] += v
		}
	}
	return w
}
