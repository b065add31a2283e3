package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

func isOpenMethod(m string) bool { return m == probes.OpenDatasync || m == probes.OpenSync }

// acceptedMethods is what the server accepts for wal_sync_method: its enumvals, or the
// Linux set (every durable method but fsync_writethrough) when the collector did not report
// them.
func acceptedMethods(s settings) []string {
	if v, ok := s[collector.WALSyncMethod]; ok && len(v.EnumVals) > 0 {
		return v.EnumVals
	}
	return slices.DeleteFunc(probes.DurableMethods(), func(m string) bool { return m == probes.FsyncWritethrough })
}

// bufferWrites summarizes buffer-full writes over a window.
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

// estimateBufferWrites fills in the buffer-full writes of WAL that pg_stat_wal has not
// counted yet: a backend's WAL counters reach pg_stat_wal only when its transaction ends
// (docs: monitoring-stats, pg_stat_wal), so one long INSERT shows nothing there while it runs
// (seed 001's 130 s statement). The insert LSN moves meanwhile. With small wal_buffers, a
// backend that fills the buffers writes them out itself, about once per wal_buffers of WAL:
// under an open_* method each write is a synchronous device write, under fdatasync or fsync a
// write into the page cache that still holds the backend. Measured on the 4 ms simulated disk
// (one 30M-row INSERT under fdatasync, a 32 s check into it, one run each): at 64kB the backend
// spent 67% of its samples in IO WALWrite and the WAL grew 1.05 GB; at 16MB, 3% and 1.76 GB.
// The estimate is only believed when the backends are seen doing it, in IO WALWrite for a good
// share of their active samples. It covers only the WAL pg_stat_wal has not counted (the insert
// LSN's advance beyond pg_stat_wal's bytes) and is added to the buffer-full writes it did count,
// so the transaction's writes are never counted twice when it commits, and other sessions'
// transactions that commit meanwhile (autovacuum, a few small writers beside the long
// statement) no longer hide the long one: the estimate used to stand only when pg_stat_wal
// counted no buffer-full write at all in the window, and one small commit ended it.
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
	// count, zero here, so commits that merely lag a snapshot behind are not blamed.
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
		"and wait events: a transaction still running)", humanBytes(b.Uncounted))
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

// sync-method-slow: PostgreSQL docs (runtime-config-wal, wal_sync_method; wal-reliability)
// leave the choice to the operator and point at pg_test_fsync, which measures but recommends
// nothing. Seed 000: open_sync 22 tps vs fsync 30 on the reporter's disk. The lab's 4 ms disk
// charges a sync the same whatever the method, and there the four measured alike at one client
// (docs/benchmarks.md, seed 000 table (203, 210)): where a device does not tell them apart, the
// probes do not either, and nothing is recommended. Seed 001: open_datasync pays a device sync
// for every buffer-full write.
// The comparison follows the server's write pattern - one 8kB write per flush for commits, two
// when the buffers fill - and a method is only recommended when it is significantly and
// substantially faster, the server accepts it, the probe measured it, and the probe did not
// flag it as not really syncing.
func syncMethodSlow() Rule {
	return Rule{
		ID:       "sync-method-slow",
		Title:    "Another wal_sync_method is significantly faster here",
		Severity: Warning,
		Settings: []string{collector.WALSyncMethod},
		Rationale: "Every commit waits for one WAL flush, and on some devices the methods differ widely " +
			"(seed 000: open_sync 22 vs fsync 30 tps on the reporter's disk; seed 001: open_datasync 130 s vs " +
			"fdatasync 5.5 s for one bulk insert), on others not at all. The probes measure each durable " +
			"method on the WAL's own file system in the pattern this server writes; a method is recommended " +
			"only when it is faster beyond noise and by at least 20%.",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-WAL-SYNC-METHOD",
			pgDocs + "wal-reliability.html",
			pgDocs + "pgtestfsync.html",
			"seed 000 (open_sync vs fsync)", "seed 001 (open_datasync vs fdatasync under bulk load)",
			"docs/benchmarks.md, seed 000 table (runs of one configuration differ by up to 12%)",
		},
		Eval: withDefaults(evalSyncMethodSlow),
	}
}

func evalSyncMethodSlow(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	s := settings(pg.Settings)
	if on, ok := s.on(collector.Fsync); ok && !on {
		return found() // nothing is synced: fsync-off says so
	}
	method, ok := s.value(collector.WALSyncMethod)
	if !ok {
		return notEnough("wal_sync_method is missing from pg_settings")
	}
	probe, missing := freshProbe(in)
	if probe == nil {
		return notEnough("%s", missing)
	}
	t := in.Config

	// The server's write pattern: bulk when a good share of its WAL writes are buffer-full
	// writes. Before 14 there is no pg_stat_wal and commits (one write per flush) are assumed.
	writesPerSync, share := 1, 0.0
	// Flushes per second, for the prediction: pg_stat_wal.wal_sync counts them, except under the
	// open_* methods, where PostgreSQL issues no separate sync and leaves it at zero (docs:
	// pg_stat_wal); then each flush is taken to be writesPerSync of the counted writes.
	var flushRate float64
	var flushSource string
	var w *History
	if pg.WAL != nil {
		w = sinceWindow(in, t.Window)
		if cold := coldStart(w, t); cold != "" {
			return notEnough("%s", cold)
		}
		// Writes pg_stat_wal has not counted yet (a transaction still running) are flushes too.
		var uncounted float64
		if b, ok := measureBufferWrites(w, s, method, probe, t); ok {
			share = b.Share
			if b.Share >= t.BulkBuffersFullShare && b.Rate >= t.BuffersFullMinRate {
				writesPerSync = 2
			}
			if b.Estimated {
				uncounted = b.Rate
			}
		}
		if c := w.Change(WALSyncs); c.OK() && c.Rate() > 0 {
			flushRate, flushSource = c.Rate(), "wal_sync"
		} else if c := w.Change(WALWrites); isOpenMethod(method) && c.OK() && c.Rate()+uncounted > 0 {
			flushRate, flushSource = (c.Rate()+uncounted)/float64(writesPerSync), fmt.Sprintf("wal_write / %d", writesPerSync)
			if uncounted > 0 {
				flushSource = fmt.Sprintf("(wal_write + buffer-full writes estimated from the insert LSN) / %d", writesPerSync)
			}
		}
	}
	cur, ok := probeResult(probe, method, writesPerSync)
	if !ok {
		return notEnough("the probe has no usable result for %s with %d write(s) per sync", method, writesPerSync)
	}

	type cand struct {
		m probes.MethodResult
		s speedup
	}
	var cands []cand
	for _, name := range acceptedMethods(s) {
		if name == method || !slices.Contains(probes.DurableMethods(), name) || flagged(probe, name) {
			continue
		}
		m, ok := probeResult(probe, name, writesPerSync)
		if !ok || !syncs(probe, name, t) {
			continue
		}
		sp := compare(cur, m, t)
		if !sp.better(t) {
			continue
		}
		if writesPerSync == 1 && isOpenMethod(name) && hurtsBulk(probe, method, name, t) {
			// Today's commits would be faster, the next bulk load much slower (seed 001).
			continue
		}
		cands = append(cands, cand{m, sp})
	}
	if len(cands) == 0 {
		return found()
	}
	best := cands[0]
	for _, c := range cands[1:] {
		if c.m.LatencyUS.Mean < best.m.LatencyUS.Mean {
			best = c
		}
	}
	// Among the candidates, prefer the safest default (fdatasync first) unless the fastest beats
	// it by the bar any recommendation must clear: significant, at least MinImprovement and
	// MinGain. Statistical significance alone is not enough: where fsync and fdatasync cost the
	// same, a 1-2% difference comes out "significant" in one probe and the opposite one in the
	// next (docs/rules.md, sync-method-slow), and the advice would flip between them.
	pick := best
	for _, name := range probes.DurableMethods() {
		i := slices.IndexFunc(cands, func(c cand) bool { return c.m.Name == name })
		if i >= 0 && !compare(cands[i].m, best.m, t).better(t) {
			pick = cands[i]
			break
		}
	}

	curSec, pickSec := usSeconds(cur.LatencyUS.Mean), usSeconds(pick.m.LatencyUS.Mean)
	// The gain Resolve weighs against other rules' for wal_sync_method: the time saved per flush
	// times this server's flushes per second (unknown before 14, without pg_stat_wal).
	var prediction *Prediction
	if flushRate > 0 {
		prediction = &Prediction{
			SavedSecondsPerSecond: (curSec - pickSec) * flushRate,
			Basis: fmt.Sprintf("%s saved per flush at %.0f WAL flushes per second (%s)",
				humanSeconds(curSec-pickSec), flushRate, flushSource),
		}
	}
	// The figure it predicts: backends' WAL waiting, less the time saved per flush; without a
	// flush rate (no pg_stat_wal), the flush itself as the probes measure it.
	predicted := &Predicted{
		Name: PredictFlushSeconds, Current: curSec, Value: pickSec, Unit: UnitSeconds,
		Basis: fmt.Sprintf("probe: one flush of this pattern (%d write(s)) takes %s with %s and %s with %s; "+
			"without pg_stat_wal the flushes per second are unknown", writesPerSync, humanSeconds(curSec), method, humanSeconds(pickSec), pick.m.Name),
	}
	if flushRate > 0 {
		predicted = predictWAL(w, (curSec-pickSec)*flushRate, curSec*flushRate,
			fmt.Sprintf("wal_sync_method %s -> %s (probe: %s -> %s per flush of %d write(s), at %.0f flushes per second from %s)",
				method, pick.m.Name, humanSeconds(curSec), humanSeconds(pickSec), writesPerSync, flushRate, flushSource))
	}
	pattern := "one 8kB write per flush (commits)"
	if writesPerSync == 2 {
		pattern = fmt.Sprintf("two 8kB writes per flush (%s of WAL writes are buffer-full writes)", pct(share))
	}
	return found(Finding{
		Severity:    Warning,
		Setting:     collector.WALSyncMethod,
		Current:     method,
		Recommended: pick.m.Name,
		Action:      ActionReload,
		Summary: fmt.Sprintf("For this server's pattern, %s, wal_sync_method=%s takes %s per flush on the WAL's "+
			"file system; %s takes %s (%s less, z=%.1f over %d and %d samples).", pattern, method,
			humanSeconds(curSec), pick.m.Name, humanSeconds(pickSec), pct(pick.s.Gain), pick.s.Z, cur.Samples, pick.m.Samples),
		Evidence: []Evidence{
			{Name: "writes_per_sync", Value: float64(writesPerSync), Unit: UnitCount},
			{Name: "buffers_full_share", Value: share, Unit: UnitRatio},
			{Name: "current_flush_seconds", Value: curSec, Unit: UnitSeconds},
			{Name: "current_flush_ci_low_seconds", Value: usSeconds(cur.LatencyUS.CILow), Unit: UnitSeconds},
			{Name: "current_flush_ci_high_seconds", Value: usSeconds(cur.LatencyUS.CIHigh), Unit: UnitSeconds},
			{Name: "current_samples", Value: float64(cur.Samples), Unit: UnitCount},
			{Name: "recommended_flush_seconds", Value: pickSec, Unit: UnitSeconds},
			{Name: "recommended_flush_ci_low_seconds", Value: usSeconds(pick.m.LatencyUS.CILow), Unit: UnitSeconds},
			{Name: "recommended_flush_ci_high_seconds", Value: usSeconds(pick.m.LatencyUS.CIHigh), Unit: UnitSeconds},
			{Name: "recommended_samples", Value: float64(pick.m.Samples), Unit: UnitCount},
			{Name: "improvement_ratio", Value: pick.s.Gain, Unit: UnitRatio},
			{Name: "z_score", Value: pick.s.Z},
		},
		ExpectedEffect: fmt.Sprintf("Each WAL flush of this pattern takes about %s instead of %s; commit "+
			"latency falls by about the difference.", humanSeconds(pickSec), humanSeconds(curSec)),
		Prediction: prediction,
		Predicted:  predicted,
	})
}

// flagged reports whether the probe's durability verdict singles out a method: a too_fast
// verdict names its evidence by method ("open_sync_p50_us").
func flagged(r *probes.Report, method string) bool {
	if r.Durability.Status != probes.VerdictTooFast {
		return false
	}
	for k := range r.Durability.Evidence {
		if strings.HasPrefix(k, method+"_") {
			return true
		}
	}
	return false
}

// syncs reports whether a method's sync costs measurably more than the unsynced write
// baseline. One that does not, did not reach the device (seed 000's "is open_sync really
// syncing?"), however fast it looks. Without a baseline, it is given the benefit of the doubt
// and write-cache-unsafe judges the device.
func syncs(r *probes.Report, method string, t Thresholds) bool {
	base, ok := probeResult(r, probes.Write, 1)
	if !ok {
		return true
	}
	m, ok := probeResult(r, method, 1)
	if !ok {
		return true
	}
	s := compare(m, base, t)
	return s.Significant && s.Gain >= t.MinImprovement
}

// hurtsBulk reports whether an open_* candidate is significantly and substantially slower
// than the current method once two writes precede a flush, as they do whenever the WAL
// buffers fill.
func hurtsBulk(r *probes.Report, current, candidate string, t Thresholds) bool {
	cur, ok1 := probeResult(r, current, 2)
	cand, ok2 := probeResult(r, candidate, 2)
	if !ok1 || !ok2 {
		return false
	}
	s := compare(cand, cur, t)
	return s.Significant && s.Gain >= t.MinImprovement
}

// open-sync-with-small-buffers: with open_datasync or open_sync every WAL write is a
// synchronous device write, including the ones a backend makes because the WAL buffers are
// full (docs: wal-configuration, wal_buffers and wal_sync_method; pg_stat_wal.wal_buffers_full).
// Seed 001: 130 s with open_datasync at 64kB vs 5.5 s with fdatasync; the lab's 2M-row INSERT on
// the 4 ms disk: docs/benchmarks.md, seed 001 table (131 s vs 5.49 s). fdatasync writes
// buffer-full pages into the page cache and syncs once per flush.
func openSyncWithSmallBuffers() Rule {
	return Rule{
		ID:       "open-sync-with-small-buffers",
		Title:    "open_* sync method with WAL buffers filling: every buffer-full write waits for the device",
		Severity: Warning,
		Settings: []string{collector.WALSyncMethod},
		Rationale: "With open_datasync or open_sync every WAL write is synchronous, including the writes " +
			"backends make because the WAL buffers are full; with fdatasync those are page-cache writes and " +
			"the device is synced once per flush. Seed 001's bulk insert took 130 s instead of 5.5 s (the lab's " +
			"2M-row INSERT on a 4 ms disk: docs/benchmarks.md, seed 001 table (131 s vs 5.49 s)).",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-WAL-SYNC-METHOD",
			pgDocs + "wal-configuration.html",
			pgDocs + "monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW",
			"seed 001", "docs/benchmarks.md, seed 001 table (131 s at 64kB open_datasync, 5.49 s with fdatasync)",
		},
		Eval: withDefaults(evalOpenSyncWithSmallBuffers),
	}
}

func evalOpenSyncWithSmallBuffers(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	s := settings(pg.Settings)
	method, ok := s.value(collector.WALSyncMethod)
	if !ok {
		return notEnough("wal_sync_method is missing from pg_settings")
	}
	if on, ok := s.on(collector.Fsync); (ok && !on) || !isOpenMethod(method) {
		return found()
	}
	if pg.WAL == nil {
		return notEnough("buffer-full writes need pg_stat_wal (PostgreSQL 14+)")
	}
	t := in.Config
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return notEnough("%s", cold)
	}
	probe, _ := freshProbe(in)
	b, ok := measureBufferWrites(w, s, method, probe, t)
	if !ok {
		return notEnough("no pg_stat_wal interval without a reset in the last %s", t.Window)
	}
	if b.Rate < t.BuffersFullMinRate || b.Share < t.BuffersFullMinShare {
		return found()
	}
	if b.PerWrite <= 0 {
		return notEnough("what a buffer-full write costs is unknown: turn track_wal_io_timing on or enable the probes")
	}
	cost := b.Rate * b.PerWrite
	if cost < t.BuffersFullCost {
		return found()
	}
	rec := probes.Fdatasync
	if !slices.Contains(acceptedMethods(s), rec) {
		rec = probes.Fsync
	}
	wb, _ := s.value(collector.WALBuffers)
	// What remains of each buffer-full write once it goes to the page cache: the probes' unsynced
	// write, or nothing where they did not measure it (then the prediction is a lower bound).
	plain, plainSource := 0.0, "an unsynced write taken as free (no probe)"
	if m, ok := probeResult(probe, probes.Write, 1); ok {
		plain, plainSource = usSeconds(m.LatencyUS.Mean), "the probe's unsynced write"
	}
	// Under open_* every WAL write is a device sync, not only the buffer-full ones the counters
	// (or the in-flight estimate) see: with small buffers a backend writes a page or a few per
	// write, many more writes than buffer-full events (seed 001 in flight: the wait events
	// showed about eight times the time the buffer-full estimate accounts for). So the prediction
	// scales all of the measured WAL write wait by what a write costs without the sync.
	keep := 0.0
	if b.PerWrite > 0 {
		keep = plain / b.PerWrite
	}
	predicted := predictWALKeep(w, keep, cost,
		fmt.Sprintf("wal_sync_method %s -> %s (every WAL write is a device sync at %s, %s; it becomes a page-cache write at %s, %s)",
			method, rec, humanSeconds(b.PerWrite), b.Source, humanSeconds(plain), plainSource))
	return found(Finding{
		Severity:    Warning,
		Setting:     collector.WALSyncMethod,
		Current:     method,
		Recommended: rec,
		Action:      ActionReload,
		Summary: fmt.Sprintf("wal_sync_method=%s makes every WAL write synchronous, and the WAL buffers "+
			"(wal_buffers=%s) fill %.0f times a second (%s of WAL writes): at %s per write (%s) backends spend "+
			"about %.2f s per second waiting for the device on buffer-full writes alone%s.",
			method, wb, b.Rate, pct(b.Share), humanSeconds(b.PerWrite), b.Source, cost, b.estimateNote()),
		Evidence: append([]Evidence{
			{Name: "buffers_full_rate", Value: b.Rate, Unit: UnitPerSecond},
			{Name: "buffers_full_share", Value: b.Share, Unit: UnitRatio},
			{Name: "write_seconds", Value: b.PerWrite, Unit: UnitSeconds},
			{Name: "buffers_full_cost", Value: cost, Unit: UnitRatio},
		}, b.estimateEvidence()...),
		ExpectedEffect: fmt.Sprintf("Buffer-full writes go to the page cache and the device is synced once per "+
			"flush: about %.2f s of synchronous writes per second go away (seed 001: 130 s -> 5.5 s at 64kB; "+
			"lab, 2M rows: docs/benchmarks.md, seed 001 table (131 s -> 5.49 s)).", cost),
		// At most this much: the buffer-full writes still cost a page-cache write each.
		Prediction: &Prediction{
			SavedSecondsPerSecond: cost,
			Basis: fmt.Sprintf("%.0f buffer-full writes per second at %s each (%s) stop waiting for the device",
				b.Rate, humanSeconds(b.PerWrite), b.Source),
		},
		Predicted: predicted,
	})
}
