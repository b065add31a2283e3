package neighbour

import (
	"math"
	"slices"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// Run is one measured run: its JSON is the bench report's neighbour_runs entries.
type Run struct {
	Seconds      int `json:"seconds"`
	Transactions int `json:"transactions"`
	// StallSeconds counts the stall seconds (StallLatency); LongestStall is the longest run
	// of consecutive ones; FirstStall is the first one's second (-1: none).
	StallSeconds int `json:"stall_seconds"`
	LongestStall int `json:"longest_stall_seconds"`
	FirstStall   int `json:"first_stall_second"`
	// Commit latency over the run, from the scheduled start, in milliseconds.
	P50LatencyMS float64 `json:"p50_latency_ms"`
	P99LatencyMS float64 `json:"p99_latency_ms"`
	MaxLatencyMS float64 `json:"max_latency_ms"`
	// WAL flushes (pg_stat_wal wal_sync / wal_sync_time, or pg_stat_io object 'wal' from 18):
	// how many and their mean time over the run, during the stall seconds and outside them.
	WALSyncs         int64   `json:"wal_syncs"`
	WALSyncMeanMS    float64 `json:"wal_sync_mean_ms"`
	WALSyncStallMS   float64 `json:"wal_sync_mean_ms_stall"`
	WALSyncOutsideMS float64 `json:"wal_sync_mean_ms_outside"`
	// A WAL flush stuck behind write-back shows as seconds in which no flush completed while
	// commits were scheduled (FlushlessSeconds), followed by one second that reports the
	// whole stuck flush: WALSyncMaxSecondMS, the most flush time reported in one second, is
	// about the longest flush. (The counters are cumulative; a mean over the flushes hides it,
	// the quick flushes around the stuck one outnumber it.)
	FlushlessSeconds   int     `json:"flushless_seconds"`
	WALSyncMaxSecondMS float64 `json:"wal_sync_max_second_ms"`
	// WaitStall and WaitOutside are the shares of the active client backends' samples
	// (pg_stat_activity every 250 ms) per wait event ("IO:WALSync", "LWLock:WALWrite", "CPU"
	// for none), during the stall seconds and outside them.
	WaitStall   map[string]float64 `json:"wait_share_stall,omitempty"`
	WaitOutside map[string]float64 `json:"wait_share_outside,omitempty"`
	// Peaks of Dirty and of Writeback in /proc/meminfo (the whole host).
	DirtyPeakBytes     int64 `json:"dirty_peak_bytes"`
	WritebackPeakBytes int64 `json:"writeback_peak_bytes"`
	// WriterSeconds is how long the bulk writer took to write its data into the page cache
	// (throttled by balance_dirty_pages); 0 when it did not finish within the run.
	WriterSeconds float64 `json:"writer_seconds"`
	// LogFsyncMaxMS is the slowest fsync of the log-like writer.
	LogFsyncMaxMS float64 `json:"log_fsync_max_ms"`
	// Per second of the run: commits completed, the p50/p99/max latency of the commits
	// scheduled in it (ms), Dirty and Writeback (bytes), WAL flushes and their time (ms).
	PerSecond Seconds `json:"per_second"`
}

// Seconds are a run's per-second series, one entry per second.
type Seconds struct {
	TPS          []float64 `json:"tps"`
	P50MS        []float64 `json:"p50_ms"`
	P99MS        []float64 `json:"p99_ms"`
	MaxMS        []float64 `json:"max_ms"`
	Stall        []bool    `json:"stall"`
	Dirty        []int64   `json:"dirty_bytes"`
	Writeback    []int64   `json:"writeback_bytes"`
	WALSyncs     []int64   `json:"wal_syncs"`
	WALSyncMS    []float64 `json:"wal_sync_ms"` // flush time reported in the second, summed
	sampledDirty int
}

// SampledDirty is how many seconds of the run had a meminfo reading (not kept in JSON).
func (s Seconds) SampledDirty() int { return s.sampledDirty }

// Figures computes a run's figures from its transactions (t0: the run's start, Unix seconds)
// and its per-second samples. The last second is cut short by pgbench's end and is left out of
// the stall count.
func Figures(txns []pgbench.Txn, samples []Sample, t0 float64, secs int) *Run {
	run := &Run{Seconds: secs, Transactions: len(txns), FirstStall: -1}
	latencyFigures(run, txns, t0)
	flushFigures(run, samples)
	return run
}

// latencyFigures fills in the commit latencies, per second and over the run, and the stall
// seconds they make.
func latencyFigures(run *Run, txns []pgbench.Txn, t0 float64) {
	secs := run.Seconds
	ps := &run.PerSecond
	sched := make([][]float64, secs)
	ps.TPS = make([]float64, secs)
	all := make([]float64, 0, len(txns))
	for _, t := range txns {
		lat := t.LatencyUS / 1000
		all = append(all, lat)
		if i := int(t.Done - t0); i >= 0 && i < secs {
			ps.TPS[i]++
		}
		if i := int(t.Done - t.LatencyUS/1e6 - t0); i >= 0 && i < secs {
			sched[i] = append(sched[i], lat)
		}
	}
	run.P50LatencyMS, run.P99LatencyMS, run.MaxLatencyMS = stats.Percentile(all, 50), stats.Percentile(all, 99), stats.Max(all)
	ps.P50MS, ps.P99MS, ps.MaxMS, ps.Stall = make([]float64, secs), make([]float64, secs), make([]float64, secs), make([]bool, secs)
	streak := 0
	for i := range secs {
		ps.P50MS[i], ps.P99MS[i], ps.MaxMS[i] = stats.Percentile(sched[i], 50), stats.Percentile(sched[i], 99), stats.Max(sched[i])
		if i == secs-1 {
			break
		}
		if ps.P99MS[i] > float64(StallLatency/time.Millisecond) || ps.TPS[i] < Rate/2 {
			ps.Stall[i] = true
			run.StallSeconds++
			streak++
			run.LongestStall = max(run.LongestStall, streak)
			if run.FirstStall < 0 {
				run.FirstStall = i
			}
		} else {
			streak = 0
		}
	}
}

// flushFigures fills in meminfo's and the WAL flushes' figures from the samples, split by the
// stall seconds latencyFigures marked. Samples come about every second; each second's reading
// is the one taken nearest its end, and a second's WAL flushes are the counters' difference
// from the second before.
func flushFigures(run *Run, samples []Sample) {
	secs := run.Seconds
	ps := &run.PerSecond
	ps.Dirty, ps.Writeback = make([]int64, secs), make([]int64, secs)
	ps.WALSyncs, ps.WALSyncMS = make([]int64, secs), make([]float64, secs)
	var prev *Sample
	var stallN, calmN int64
	var stallMS, calmMS float64
	for k := range samples {
		s := &samples[k]
		run.DirtyPeakBytes = max(run.DirtyPeakBytes, s.Dirty)
		run.WritebackPeakBytes = max(run.WritebackPeakBytes, s.Writeback)
		i := int(math.Round(s.At)) - 1
		if i >= 0 && i < secs {
			ps.Dirty[i], ps.Writeback[i] = s.Dirty, s.Writeback
			ps.sampledDirty++
		}
		if !s.WALOK {
			continue
		}
		if prev != nil && i >= 0 && i < secs {
			dn, dms := s.Syncs-prev.Syncs, s.SyncMS-prev.SyncMS
			if dn > 0 && dms >= 0 {
				ps.WALSyncs[i] += dn
				ps.WALSyncMS[i] += dms
				if ps.Stall[i] {
					stallN, stallMS = stallN+dn, stallMS+dms
				} else {
					calmN, calmMS = calmN+dn, calmMS+dms
				}
			}
		}
		prev = s
	}
	for i := range secs - 1 {
		run.WALSyncMaxSecondMS = max(run.WALSyncMaxSecondMS, ps.WALSyncMS[i])
		// Second 0 has no reading before it.
		if i > 0 && ps.WALSyncs[i] == 0 {
			run.FlushlessSeconds++
		}
	}
	run.WALSyncs = stallN + calmN
	if run.WALSyncs > 0 {
		run.WALSyncMeanMS = (stallMS + calmMS) / float64(run.WALSyncs)
	}
	if stallN > 0 {
		run.WALSyncStallMS = stallMS / float64(stallN)
	}
	if calmN > 0 {
		run.WALSyncOutsideMS = calmMS / float64(calmN)
	}
}

// Summary is a configuration's medians over its runs.
type Summary struct {
	StallSeconds, StallMin, StallMax     float64
	LongestStall                         float64
	P50MS, P99MS, MaxMS                  float64
	WALSyncMS, WALSyncStallMS, WALCalmMS float64
	DirtyPeak, WritebackPeak             float64
	WriterSeconds, LogFsyncMaxMS         float64
	FlushlessSeconds, WALMaxSecondMS     float64
	// Median is the run whose stall seconds are the median's (the lower middle for an even
	// count): its per-second series are the ones shown.
	Median *Run
}

// Summarize returns the medians of runs, nil for none.
func Summarize(runs []*Run) *Summary {
	if len(runs) == 0 {
		return nil
	}
	pick := func(f func(*Run) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return stats.Median(xs)
	}
	stalls := make([]float64, len(runs))
	for i, r := range runs {
		stalls[i] = float64(r.StallSeconds)
	}
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b *Run) int { return a.StallSeconds - b.StallSeconds })
	return &Summary{
		StallSeconds: stats.Median(stalls), StallMin: stats.Min(stalls), StallMax: stats.Max(stalls),
		LongestStall:     pick(func(r *Run) float64 { return float64(r.LongestStall) }),
		P50MS:            pick(func(r *Run) float64 { return r.P50LatencyMS }),
		P99MS:            pick(func(r *Run) float64 { return r.P99LatencyMS }),
		MaxMS:            pick(func(r *Run) float64 { return r.MaxLatencyMS }),
		WALSyncMS:        pick(func(r *Run) float64 { return r.WALSyncMeanMS }),
		WALSyncStallMS:   pick(func(r *Run) float64 { return r.WALSyncStallMS }),
		WALCalmMS:        pick(func(r *Run) float64 { return r.WALSyncOutsideMS }),
		DirtyPeak:        pick(func(r *Run) float64 { return float64(r.DirtyPeakBytes) }),
		WritebackPeak:    pick(func(r *Run) float64 { return float64(r.WritebackPeakBytes) }),
		WriterSeconds:    pick(func(r *Run) float64 { return r.WriterSeconds }),
		LogFsyncMaxMS:    pick(func(r *Run) float64 { return r.LogFsyncMaxMS }),
		FlushlessSeconds: pick(func(r *Run) float64 { return float64(r.FlushlessSeconds) }),
		WALMaxSecondMS:   pick(func(r *Run) float64 { return r.WALSyncMaxSecondMS }),
		Median:           sorted[(len(sorted)-1)/2],
	}
}
