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

// sync-method-slow: the PostgreSQL docs leave wal_sync_method to the operator and point at
// pg_test_fsync, which measures but recommends nothing. The probes compare the methods in this
// server's write pattern, and a method is recommended only when it is faster beyond noise and by
// enough to matter; where a device does not tell them apart, nothing is (docs/rules.md,
// sync-method-slow; docs/benchmarks.md, seed 000 table).
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
			"docs/rules.md, Probe comparisons", "docs/benchmarks.md, seed 000 table",
		},
		Eval: withDefaults(evalSyncMethodSlow),
	}
}

// syncMethodFacts is what sync-method-slow compares: the probes' results in this server's write
// pattern, and how often the server flushes.
type syncMethodFacts struct {
	fsyncOff bool     // nothing is synced: fsync-off speaks, this rule does not
	method   string   // wal_sync_method now
	accepted []string // what the server accepts for it
	probe    *probes.Report
	// writesPerSync is the server's write pattern: 2 when it loads in bulk (buffer-full writes are
	// at least BulkBuffersFullShare of its WAL writes, at BuffersFullMinRate), else 1 (commits,
	// and always before 14: no pg_stat_wal). bufferFullShare is that share, 0 when unmeasured.
	writesPerSync   int
	bufferFullShare float64
	current         probes.MethodResult // the configured method in that pattern
	// flushRate is WAL flushes per second and flushSource how they were counted; 0 when unknown.
	flushRate   float64
	flushSource string
	window      *History // nil without pg_stat_wal
}

// methodCandidate is a method the probes measured faster than the configured one.
type methodCandidate struct {
	m probes.MethodResult
	s speedup
}

func evalSyncMethodSlow(in Input) Result {
	f, lacking := syncMethodFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	pick, ok := decideSyncMethod(f, in.Config)
	if !ok {
		return found()
	}
	return found(syncMethodFinding(f, pick))
}

// decideSyncMethod picks the method to recommend, if any.
func decideSyncMethod(f syncMethodFacts, t Thresholds) (methodCandidate, bool) {
	if f.fsyncOff {
		return methodCandidate{}, false
	}
	cands := syncMethodCandidates(f, t)
	if len(cands) == 0 {
		return methodCandidate{}, false
	}
	return preferredMethod(cands, t), true
}

// syncMethodCandidates are the methods worth a change: accepted by the server, durable, measured
// by the probe and not flagged by its verdict, really syncing, and better than the current one by
// the bar every recommendation clears. On the commit pattern an open_* method must not lose the
// next bulk load (seed 001).
func syncMethodCandidates(f syncMethodFacts, t Thresholds) []methodCandidate {
	var cands []methodCandidate
	for _, name := range f.accepted {
		if name == f.method || !slices.Contains(probes.DurableMethods(), name) || flagged(f.probe, name) {
			continue
		}
		m, ok := probeResult(f.probe, name, f.writesPerSync)
		if !ok || !syncs(f.probe, name, t) {
			continue
		}
		sp := compare(f.current, m, t)
		if !sp.better(t) || f.writesPerSync == 1 && isOpenMethod(name) && hurtsBulk(f.probe, f.method, name, t) {
			continue
		}
		cands = append(cands, methodCandidate{m, sp})
	}
	return cands
}

// preferredMethod is the fastest candidate, unless it does not clear the bar against one that
// comes earlier in the preferred order (fdatasync first): significance alone flips the advice
// between methods that cost the same from one probe to the next (docs/rules.md, sync-method-slow).
func preferredMethod(cands []methodCandidate, t Thresholds) methodCandidate {
	best := cands[0]
	for _, c := range cands[1:] {
		if c.m.LatencyUS.Mean < best.m.LatencyUS.Mean {
			best = c
		}
	}
	for _, name := range probes.DurableMethods() {
		i := slices.IndexFunc(cands, func(c methodCandidate) bool { return c.m.Name == name })
		if i >= 0 && !compare(cands[i].m, best.m, t).better(t) {
			return cands[i]
		}
	}
	return best
}

// syncMethodFactsOf gathers the facts, or says what is missing to judge.
func syncMethodFactsOf(in Input) (syncMethodFacts, string) {
	var f syncMethodFacts
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	s := settings(pg.Settings)
	if on, ok := s.on(collector.Fsync); ok && !on {
		f.fsyncOff = true
		return f, ""
	}
	method, ok := s.value(collector.WALSyncMethod)
	if !ok {
		return f, "wal_sync_method is missing from pg_settings"
	}
	probe, missing := freshProbe(in)
	if probe == nil {
		return f, missing
	}
	f.method, f.accepted, f.probe, f.writesPerSync = method, acceptedMethods(s), probe, 1
	if pg.WAL != nil {
		t := in.Config
		w := sinceWindow(in, t.Window)
		if cold := coldStart(w, t); cold != "" {
			return f, cold
		}
		f.window = w
		// Writes pg_stat_wal has not counted yet (a transaction still running) are flushes too.
		var uncounted float64
		if b, ok := measureBufferWrites(w, s, method, probe, t); ok {
			f.bufferFullShare = b.Share
			if b.Share >= t.BulkBuffersFullShare && b.Rate >= t.BuffersFullMinRate {
				f.writesPerSync = 2
			}
			if b.Estimated {
				uncounted = b.Rate
			}
		}
		f.flushRate, f.flushSource = flushesPerSecond(w, method, f.writesPerSync, uncounted)
	}
	if f.current, ok = probeResult(probe, method, f.writesPerSync); !ok {
		return f, fmt.Sprintf("the probe has no usable result for %s with %d write(s) per sync", method, f.writesPerSync)
	}
	return f, ""
}

// flushesPerSecond counts WAL flushes: pg_stat_wal.wal_sync, except under the open_* methods,
// which sync in the write and leave it at zero (docs: pg_stat_wal); then each flush is
// writesPerSync of the writes, counted and uncounted (per second). 0 when unknown.
func flushesPerSecond(w *History, method string, writesPerSync int, uncounted float64) (float64, string) {
	if c := w.Change(WALSyncs); c.OK() && c.Rate() > 0 {
		return c.Rate(), "wal_sync"
	}
	c := w.Change(WALWrites)
	if !isOpenMethod(method) || !c.OK() || c.Rate()+uncounted <= 0 {
		return 0, ""
	}
	source := fmt.Sprintf("wal_write / %d", writesPerSync)
	if uncounted > 0 {
		source = fmt.Sprintf("(wal_write + buffer-full writes estimated from the insert LSN) / %d", writesPerSync)
	}
	return (c.Rate() + uncounted) / float64(writesPerSync), source
}

func syncMethodFinding(f syncMethodFacts, pick methodCandidate) Finding {
	cur := f.current
	curSec, pickSec := usSeconds(cur.LatencyUS.Mean), usSeconds(pick.m.LatencyUS.Mean)
	prediction, predicted := syncMethodPrediction(f, pick.m.Name, curSec, pickSec)
	pattern := "one 8kB write per flush (commits)"
	if f.writesPerSync == 2 {
		pattern = fmt.Sprintf("two 8kB writes per flush (%s of WAL writes are buffer-full writes)", pct(f.bufferFullShare))
	}
	return Finding{
		Severity:    Warning,
		Setting:     collector.WALSyncMethod,
		Current:     f.method,
		Recommended: pick.m.Name,
		Action:      ActionReload,
		Summary: fmt.Sprintf("For this server's pattern, %s, wal_sync_method=%s takes %s per flush on the WAL's "+
			"file system; %s takes %s (%s less, z=%.1f over %d and %d samples).", pattern, f.method,
			humanSeconds(curSec), pick.m.Name, humanSeconds(pickSec), pct(pick.s.Gain), pick.s.Z, cur.Samples, pick.m.Samples),
		Evidence: []Evidence{
			{Name: "writes_per_sync", Value: float64(f.writesPerSync), Unit: UnitCount},
			{Name: "buffers_full_share", Value: f.bufferFullShare, Unit: UnitRatio},
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
	}
}

// syncMethodPrediction is the gain Resolve weighs (the time saved per flush times the flushes
// per second; none without a flush rate) and the figure it predicts: the backends' WAL waiting
// less that gain, or without a flush rate the flush itself as the probes measure it.
func syncMethodPrediction(f syncMethodFacts, pick string, curSec, pickSec float64) (*Prediction, *Predicted) {
	if f.flushRate <= 0 {
		return nil, &Predicted{
			Name: PredictFlushSeconds, Current: curSec, Value: pickSec, Unit: UnitSeconds,
			Basis: fmt.Sprintf("probe: one flush of this pattern (%d write(s)) takes %s with %s and %s with %s; "+
				"without pg_stat_wal the flushes per second are unknown", f.writesPerSync, humanSeconds(curSec), f.method, humanSeconds(pickSec), pick),
		}
	}
	prediction := &Prediction{
		SavedSecondsPerSecond: (curSec - pickSec) * f.flushRate,
		Basis: fmt.Sprintf("%s saved per flush at %.0f WAL flushes per second (%s)",
			humanSeconds(curSec-pickSec), f.flushRate, f.flushSource),
	}
	return prediction, predictWAL(f.window, (curSec-pickSec)*f.flushRate, curSec*f.flushRate,
		fmt.Sprintf("wal_sync_method %s -> %s (probe: %s -> %s per flush of %d write(s), at %.0f flushes per second from %s)",
			f.method, pick, humanSeconds(curSec), humanSeconds(pickSec), f.writesPerSync, f.flushRate, f.flushSource))
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

// open-sync-with-small-buffers: under open_datasync or open_sync every WAL write is a
// synchronous device write, including those a backend makes because the WAL buffers are full;
// fdatasync writes them into the page cache and syncs once per flush (docs/rules.md,
// open-sync-with-small-buffers; docs/benchmarks.md, seed 001 table).
func openSyncWithSmallBuffers() Rule {
	return Rule{
		ID:       "open-sync-with-small-buffers",
		Title:    "open_* sync method with WAL buffers filling: every buffer-full write waits for the device",
		Severity: Warning,
		Settings: []string{collector.WALSyncMethod},
		Rationale: "With open_datasync or open_sync every WAL write is synchronous, including the writes " +
			"backends make because the WAL buffers are full; with fdatasync those are page-cache writes and " +
			"the device is synced once per flush. Seed 001's bulk insert took 130 s instead of 5.5 s (the lab's " +
			"2M-row INSERT on a 4 ms disk: docs/rules.md, open-sync-with-small-buffers).",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-WAL-SYNC-METHOD",
			pgDocs + "wal-configuration.html",
			pgDocs + "monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW",
			"seed 001", "docs/rules.md, open-sync-with-small-buffers", "docs/benchmarks.md, seed 001 table",
		},
		Eval: withDefaults(evalOpenSyncWithSmallBuffers),
	}
}

// openSyncFacts is what open-sync-with-small-buffers judges.
type openSyncFacts struct {
	method string
	// syncsEveryWrite: the method is open_* and fsync is on, so every WAL write waits for the
	// device. Nothing else is gathered when it is false.
	syncsEveryWrite bool
	walBuffers      string // as pg_settings shows it
	window          *History
	writes          bufferWrites
	cost            float64 // buffer-full write time per second of wall time (Rate x PerWrite)
	// recommended is fdatasync, or fsync where the server does not accept fdatasync.
	recommended string
	// plainWrite is what a buffer-full write costs once it goes to the page cache (the probes'
	// unsynced write; 0 where they did not measure it), plainSource says which.
	plainWrite  float64
	plainSource string
}

func evalOpenSyncWithSmallBuffers(in Input) Result {
	f, lacking := openSyncFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	switch decideOpenSync(f, in.Config) {
	case verdictUnknown:
		return notEnough("what a buffer-full write costs is unknown: turn track_wal_io_timing on or enable the probes")
	case verdictFire:
		return found(openSyncFinding(f))
	}
	return found()
}

// decideOpenSync: buffer-full writes under an open_* method that are frequent and cost enough.
func decideOpenSync(f openSyncFacts, t Thresholds) verdict {
	switch {
	case !f.syncsEveryWrite:
		return verdictQuiet
	case f.writes.Rate < t.BuffersFullMinRate || f.writes.Share < t.BuffersFullMinShare:
		return verdictQuiet
	case f.writes.PerWrite <= 0:
		return verdictUnknown
	case f.cost < t.BuffersFullCost:
		return verdictQuiet
	}
	return verdictFire
}

// openSyncFactsOf gathers the facts, or says what is missing to judge.
func openSyncFactsOf(in Input) (openSyncFacts, string) {
	var f openSyncFacts
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	s := settings(pg.Settings)
	method, ok := s.value(collector.WALSyncMethod)
	if !ok {
		return f, "wal_sync_method is missing from pg_settings"
	}
	f.method = method
	if on, ok := s.on(collector.Fsync); (ok && !on) || !isOpenMethod(method) {
		return f, ""
	}
	f.syncsEveryWrite = true
	if pg.WAL == nil {
		return f, "buffer-full writes need pg_stat_wal (PostgreSQL 14+)"
	}
	t := in.Config
	f.window = sinceWindow(in, t.Window)
	if cold := coldStart(f.window, t); cold != "" {
		return f, cold
	}
	probe, _ := freshProbe(in)
	if f.writes, ok = measureBufferWrites(f.window, s, method, probe, t); !ok {
		return f, fmt.Sprintf("no pg_stat_wal interval without a reset in the last %s", t.Window)
	}
	f.cost = f.writes.Rate * f.writes.PerWrite
	f.walBuffers, _ = s.value(collector.WALBuffers)
	f.recommended = probes.Fdatasync
	if !slices.Contains(acceptedMethods(s), f.recommended) {
		f.recommended = probes.Fsync
	}
	f.plainSource = "an unsynced write taken as free (no probe)"
	if m, ok := probeResult(probe, probes.Write, 1); ok {
		f.plainWrite, f.plainSource = usSeconds(m.LatencyUS.Mean), "the probe's unsynced write"
	}
	return f, ""
}

func openSyncFinding(f openSyncFacts) Finding {
	b := f.writes
	// Under open_* every WAL write is a device sync, not only the buffer-full ones the counters
	// see, so the prediction scales all of the measured WAL write wait by what a write costs
	// without the sync (docs/rules.md, Predicted effect).
	keep := 0.0
	if b.PerWrite > 0 {
		keep = f.plainWrite / b.PerWrite
	}
	predicted := predictWALKeep(f.window, keep, f.cost,
		fmt.Sprintf("wal_sync_method %s -> %s (every WAL write is a device sync at %s, %s; it becomes a page-cache write at %s, %s)",
			f.method, f.recommended, humanSeconds(b.PerWrite), b.Source, humanSeconds(f.plainWrite), f.plainSource))
	return Finding{
		Severity:    Warning,
		Setting:     collector.WALSyncMethod,
		Current:     f.method,
		Recommended: f.recommended,
		Action:      ActionReload,
		Summary: fmt.Sprintf("wal_sync_method=%s makes every WAL write synchronous, and the WAL buffers "+
			"(wal_buffers=%s) fill %.0f times a second (%s of WAL writes): at %s per write (%s) backends spend "+
			"about %.2f s per second waiting for the device on buffer-full writes alone%s.",
			f.method, f.walBuffers, b.Rate, pct(b.Share), humanSeconds(b.PerWrite), b.Source, f.cost, b.estimateNote()),
		Evidence: append([]Evidence{
			{Name: "buffers_full_rate", Value: b.Rate, Unit: UnitPerSecond},
			{Name: "buffers_full_share", Value: b.Share, Unit: UnitRatio},
			{Name: "write_seconds", Value: b.PerWrite, Unit: UnitSeconds},
			{Name: "buffers_full_cost", Value: f.cost, Unit: UnitRatio},
		}, b.estimateEvidence()...),
		ExpectedEffect: fmt.Sprintf("Buffer-full writes go to the page cache and the device is synced once per "+
			"flush: about %.2f s of synchronous writes per second go away (seed 001: 130 s -> 5.5 s at 64kB; "+
			"lab, 2M rows: docs/benchmarks.md, seed 001 table (131 s -> 5.49 s)).", f.cost),
		// At most this much: the buffer-full writes still cost a page-cache write each.
		Prediction: &Prediction{
			SavedSecondsPerSecond: f.cost,
			Basis: fmt.Sprintf("%.0f buffer-full writes per second at %s each (%s) stop waiting for the device",
				b.Rate, humanSeconds(b.PerWrite), b.Source),
		},
		Predicted: predicted,
	}
}
