package rules

import (
	"slices"
	"sort"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// StallFacts is what writeback-stalls-wal measured over its window; apply verifies a vm.dirty_*
// change by the same figures (Stall).
type StallFacts struct {
	// Seconds is the time the WAL's flushes stalled while Dirty+Writeback was large.
	Seconds float64
	// Intervals is how many intervals there were to judge; 0 means nothing could be judged.
	Intervals int
	// from and to bound the stalled intervals: the first one's start and the last one's end.
	from, to time.Time
	// stalled are the stalled intervals, in order.
	stalled []StalledInterval

	// WAL write+sync time per flush during the stall and outside it, in seconds, and the worst
	// stalled interval's; has* says it was measured (track_wal_io_timing).
	flushDuring, flushOutside, flushWorst float64
	hasFlushDuring, hasFlushOutside       bool
	// The share of active backends' samples waiting on WAL I/O, during the stall and outside.
	shareDuring, shareOutside       float64
	hasShareDuring, hasShareOutside bool
	waitSamples                     int64 // wait-event samples in the window
	// Dirty+Writeback at its peak, and Dirty and Writeback then, in bytes.
	pilePeak, dirtyPeak, writebackPeak float64
	hasPile                            bool
	// The WAL device's write rate during the stall and its peak, bytes per second; hasDev says
	// the device's counters were read.
	devRateDuring, devPeak float64
	hasDev                 bool
	// The WAL generated and what the host wrote over the window, bytes; walRate in bytes per second.
	walBytes, hostBytes, walRate float64
}

// Span is the first stalled interval's start and the last one's end; zero times when nothing
// stalled.
func (s StallFacts) Span() (from, to time.Time) { return s.from, s.to }

// StalledInterval is one interval of a history that stalled: its snapshots' times and its length.
type StalledInterval struct {
	From, To time.Time
	Seconds  float64
}

// Stalled returns the stalled intervals, in order: a verification sums them over the parts of its
// window, each judged against the whole window's baseline (a part that is all stall has no
// baseline of its own to show it).
func (s StallFacts) Stalled() []StalledInterval { return slices.Clone(s.stalled) }

// Stall measures the WAL's write-back stall over a history with thresholds t (the zero value
// means DefaultThresholds): the figure writeback-stalls-wal fires on and apply verifies by.
func Stall(h *History, t Thresholds) StallFacts {
	if t == (Thresholds{}) {
		t = DefaultThresholds()
	}
	timing := false
	if last, ok := h.Latest(); ok && last.Postgres != nil {
		timing, _ = settings(last.Postgres.Settings).on(collector.TrackWALIOTiming)
	}
	return stallFacts(h, t, timing)
}

// stallFacts splits the window's intervals into stalled ones and the rest and sums each side.
func stallFacts(h *History, t Thresholds, timing bool) StallFacts {
	ivs := intervalsOf(h, timing)
	base := baselineOf(ivs)
	f := StallFacts{Intervals: len(ivs)}
	var during, outside flushSums
	var host hostWrites
	var span, stallDev, stallDevSecs float64
	for _, iv := range ivs {
		host.add(iv)
		span += iv.secs
		f.walBytes += iv.walBytes
		f.waitSamples += iv.samples
		if !iv.stalled(base, t, timing) {
			outside.add(iv)
			continue
		}
		during.add(iv)
		f.Seconds += iv.secs
		f.stalled = append(f.stalled, StalledInterval{From: iv.from, To: iv.to, Seconds: iv.secs})
		if f.from.IsZero() {
			f.from = iv.from
		}
		f.to = iv.to
		if p, ok := iv.flushPer(); ok {
			f.flushWorst = max(f.flushWorst, p)
		}
		if iv.hasDev {
			stallDev, stallDevSecs = stallDev+iv.devBytes, stallDevSecs+iv.secs
		}
	}
	f.flushDuring, f.hasFlushDuring = during.perFlush()
	f.flushOutside, f.hasFlushOutside = outside.perFlush()
	f.shareDuring, f.hasShareDuring = during.waitShare()
	f.shareOutside, f.hasShareOutside = outside.waitShare()
	f.pilePeak, f.dirtyPeak, f.writebackPeak, f.hasPile = host.pilePeak, host.dirtyPeak, host.writebackPeak, host.hasPile
	f.devPeak, f.hasDev = host.devPeak, host.hasDev
	f.hostBytes = host.bytes()
	if stallDevSecs > 0 {
		f.devRateDuring = stallDev / stallDevSecs
	}
	if span > 0 {
		f.walRate = f.walBytes / span
	}
	return f
}

// stallInterval is one interval between consecutive snapshots, as the rule reads it.
type stallInterval struct {
	from, to      time.Time
	secs          float64
	flushes       float64 // WAL syncs, or writes under open_* (no syncs)
	ioSecs        float64 // WAL write + sync time (track_wal_io_timing)
	hasIO         bool
	active, waits int64 // active backends and those waiting on WAL I/O, summed over samples
	samples       int64
	pile          float64 // Dirty+Writeback, the larger of the two ends
	dirty, wb     float64 // at the end with the larger pile
	hasPile       bool
	devBytes      float64
	hasDev        bool
	walBytes      float64
}

func (iv stallInterval) flushPer() (float64, bool) {
	if !iv.hasIO || iv.flushes <= 0 {
		return 0, false
	}
	return iv.ioSecs / iv.flushes, true
}

func (iv stallInterval) share() (float64, bool) {
	if iv.active <= 0 {
		return 0, false
	}
	return float64(iv.waits) / float64(iv.active), true
}

// stallBaseline is a window's usual level, against which an interval's stall is judged: the
// lower quartile of the intervals' time per flush and wait share, and the median WAL rate.
type stallBaseline struct {
	perFlush     float64
	hasPerFlush  bool
	waitShare    float64
	hasWaitShare bool
	walRate      float64 // bytes per second; 0 when unknown
}

func baselineOf(ivs []stallInterval) stallBaseline {
	var pers, shares, walRates []float64
	for _, iv := range ivs {
		if p, ok := iv.flushPer(); ok {
			pers = append(pers, p)
		}
		if s, ok := iv.share(); ok {
			shares = append(shares, s)
		}
		if iv.secs > 0 {
			walRates = append(walRates, iv.walBytes/iv.secs)
		}
	}
	var b stallBaseline
	b.perFlush, b.hasPerFlush = lowQuartile(pers)
	b.waitShare, b.hasWaitShare = lowQuartile(shares)
	if len(walRates) > 0 {
		s := slices.Clone(walRates)
		sort.Float64s(s)
		b.walRate = s[len(s)/2]
	}
	return b
}

// lowQuartile is the 25th percentile: the usual level of a figure in a window of which a stall
// may take up to three quarters.
func lowQuartile(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[(len(s)-1)/4], true
}

// stalled reports whether the WAL's flushes stalled in the interval behind a large pile.
func (iv stallInterval) stalled(base stallBaseline, t Thresholds, timing bool) bool {
	return (iv.slowFlushes(base, t) || iv.waitsRose(base, t, timing)) && iv.largePile(t)
}

// slowFlushes: the time per flush is at least WritebackFlushSlow and WritebackFlushRise times
// the usual level; when the whole window stalls (the usual level itself is slow), the floor
// alone decides.
func (iv stallInterval) slowFlushes(base stallBaseline, t Thresholds) bool {
	slow := t.WritebackFlushSlow.Seconds()
	p, ok := iv.flushPer()
	return ok && p >= slow && (base.perFlush >= slow || (base.hasPerFlush && p >= t.WritebackFlushRise*base.perFlush))
}

// waitsRose is the fallback without track_wal_io_timing: the wait share rose well above its
// usual level while the WAL barely grew, as it does when commits stop. A flush-bound load waits
// as much outside a stall as in it, so neither a high share nor its jitter alone is a stall
// (docs/rules.md, writeback-stalls-wal).
func (iv stallInterval) waitsRose(base stallBaseline, t Thresholds, timing bool) bool {
	s, ok := iv.share()
	return ok && !timing && base.hasWaitShare && s >= t.WritebackWaitShare && s >= base.waitShare+t.WritebackWaitRise &&
		base.walRate > 0 && iv.walBytes/iv.secs <= base.walRate/2
}

// largePile: Dirty+Writeback is at least WritebackPileMin and, where the device's writes are
// known, at least WritebackPileSeconds of them.
func (iv stallInterval) largePile(t Thresholds) bool {
	large := iv.hasPile && iv.pile >= float64(t.WritebackPileMin)
	if large && iv.hasDev && iv.devBytes > 0 {
		large = iv.pile >= t.WritebackPileSeconds*iv.devBytes/iv.secs
	}
	return large
}

// flushSums adds up WAL flushes and waits over intervals.
type flushSums struct {
	ioSecs, flushes float64
	hasIO           bool
	waits, active   int64
}

func (s *flushSums) add(iv stallInterval) {
	if iv.hasIO {
		s.ioSecs, s.flushes, s.hasIO = s.ioSecs+iv.ioSecs, s.flushes+iv.flushes, true
	}
	s.waits, s.active = s.waits+iv.waits, s.active+iv.active
}

func (s flushSums) perFlush() (float64, bool) {
	if !s.hasIO || s.flushes <= 0 {
		return 0, false
	}
	return s.ioSecs / s.flushes, true
}

func (s flushSums) waitShare() (float64, bool) {
	if s.active <= 0 {
		return 0, false
	}
	return float64(s.waits) / float64(s.active), true
}

// hostWrites adds up what the host wrote over the window, as seen from the WAL's device and
// from the page cache.
type hostWrites struct {
	devBytes, devPeak                  float64 // written to the WAL's device; peak rate
	hasDev                             bool
	firstPile, lastPile                float64 // Dirty+Writeback at the window's ends
	pilePeak, dirtyPeak, writebackPeak float64
	hasPile                            bool
}

func (h *hostWrites) add(iv stallInterval) {
	if iv.hasDev {
		h.hasDev = true
		h.devBytes += iv.devBytes
		h.devPeak = max(h.devPeak, iv.devBytes/iv.secs)
	}
	if !iv.hasPile {
		return
	}
	if !h.hasPile {
		h.firstPile = iv.pile
	}
	h.lastPile = iv.pile
	if iv.pile > h.pilePeak || !h.hasPile {
		h.pilePeak, h.dirtyPeak, h.writebackPeak, h.hasPile = iv.pile, iv.dirty, iv.wb, true
	}
}

// bytes is what the host wrote: what reached the WAL's device, plus what piled up in the page
// cache and had not reached it by the window's end (a writer on another device shows only
// there). Without a block device the pile is all there is to compare the WAL's bytes with.
func (h hostWrites) bytes() float64 {
	b := h.devBytes
	if h.hasPile {
		b += max(0, h.lastPile-h.firstPile)
		if !h.hasDev {
			b = max(b, h.pilePeak)
		}
	}
	return b
}

// intervalsOf reads the history's intervals. An interval in which no WAL flush completed while
// backends waited on one is carried into the next: a flush that takes seconds reports its time
// only when it ends, so the span it blocked is judged as one (docs/rules.md, writeback-stalls-wal).
func intervalsOf(h *History, timing bool) []stallInterval {
	var out []stallInterval
	var carry *stallInterval
	for i := 1; i < h.Len(); i++ {
		iv, ok := stallIntervalAt(h, i, timing)
		if !ok {
			continue
		}
		if carry != nil {
			iv = carry.merge(iv)
			carry = nil
		}
		if iv.hasIO && iv.flushes == 0 && iv.ioSecs == 0 && iv.waits > 0 {
			c := iv
			carry = &c // backends wait on a flush that has not completed yet
			continue
		}
		out = append(out, iv)
	}
	if carry != nil {
		out = append(out, *carry)
	}
	return out
}

// stallIntervalAt reads the interval from snapshot i-1 to i; false when time did not advance.
func stallIntervalAt(h *History, i int, timing bool) (stallInterval, bool) {
	a, b := &h.snaps[i-1], &h.snaps[i]
	iv := stallInterval{from: a.Time, to: b.Time, secs: b.Time.Sub(a.Time).Seconds()}
	if iv.secs <= 0 {
		return iv, false
	}
	get := func(c Counter) (float64, bool) {
		x, ok := h.interval(c, i)
		return x.Delta, ok
	}
	syncs, okS := get(WALSyncs)
	writes, okW := get(WALWrites)
	if okS && okW {
		iv.flushes = syncs
		if syncs == 0 {
			iv.flushes = writes // open_* methods sync in the write and count no syncs
		}
		ws, ok1 := get(WALWriteSeconds)
		ss, ok2 := get(WALSyncSeconds)
		iv.ioSecs, iv.hasIO = ws+ss, timing && ok1 && ok2
	}
	if pg := b.Postgres; pg != nil && pg.WaitEvents != nil {
		we := pg.WaitEvents
		iv.samples, iv.active = we.Samples, we.ActiveBackends
		iv.waits = we.Counts[collector.EventIOWALSync] + we.Counts[collector.EventIOWALWrite] + we.Counts[collector.EventLWLockWALWrite]
	}
	for _, s := range []*collector.Snapshot{a, b} {
		if v, ok := DirtyWriteback.read(s); ok && (!iv.hasPile || v > iv.pile) {
			iv.pile, iv.hasPile = v, true
			iv.dirty, iv.wb = float64(s.Kernel.Meminfo.DirtyBytes), float64(s.Kernel.Meminfo.WritebackBytes)
		}
	}
	iv.devBytes, iv.hasDev = get(DiskWriteBytes)
	wal, _ := get(WALBytes)
	lsn, _ := get(WALInsertBytes)
	iv.walBytes = max(wal, lsn)
	return iv, true
}

// merge joins iv and the interval after it.
func (iv stallInterval) merge(next stallInterval) stallInterval {
	m := next
	m.from = iv.from
	m.secs += iv.secs
	m.flushes += iv.flushes
	m.ioSecs += iv.ioSecs
	m.hasIO = iv.hasIO && next.hasIO
	m.active += iv.active
	m.waits += iv.waits
	m.samples += iv.samples
	if iv.hasPile && (!next.hasPile || iv.pile > next.pile) {
		m.pile, m.dirty, m.wb, m.hasPile = iv.pile, iv.dirty, iv.wb, true
	}
	m.devBytes += iv.devBytes
	m.hasDev = iv.hasDev && next.hasDev
	m.walBytes += iv.walBytes
	return m
}
