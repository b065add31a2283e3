package rules

import (
	"fmt"
	"strconv"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// checkpointFacts summarizes the checkpoints completed in a window.
type checkpointFacts struct {
	ends      []CheckpointEnd
	count     float64 // checkpoints completed
	syncMean  float64 // sync phase per checkpoint, seconds
	syncWorst float64 // longest sync phase of one interval's checkpoints, seconds
	pile      float64 // Dirty + Writeback peak around checkpoint ends, bytes
	hasPile   bool
}

func checkpointsIn(w *History) checkpointFacts {
	var f checkpointFacts
	var syncSum float64
	for _, e := range w.CheckpointEnds() {
		f.ends = append(f.ends, e)
		f.count += e.Checkpoints
		syncSum += e.SyncSeconds
		f.syncWorst = max(f.syncWorst, e.SyncSeconds/max(e.Checkpoints, 1))
		if e.HasKernel {
			f.pile, f.hasPile = max(f.pile, e.DirtyWritebackMax), true
		}
	}
	if f.count > 0 {
		f.syncMean = syncSum / f.count
	}
	return f
}

// flushAfterOff returns the *_flush_after settings that are 0 on Linux. Linux is recognized
// by the kernel part of the snapshot; without it, a 0 that is not the platform's default
// (source other than "default") was set by someone, and is reported too.
func flushAfterOff(snap collector.Snapshot, s settings) []string {
	var off []string
	for _, name := range []string{collector.CheckpointFlushAfter, collector.BgwriterFlushAfter} {
		v, ok := s.bytes(name)
		if !ok || v != 0 {
			continue
		}
		if snap.Kernel != nil || s[name].Source != "default" {
			off = append(off, name)
		}
	}
	return off
}

// flush-after-disabled: checkpoint_flush_after and bgwriter_flush_after make the checkpointer
// and the background writer ask Linux to start write-back as they go, so dirty pages never pile
// up for the checkpoint's fsync. The lab reproduced seed 003's collapse only with them at 0, and
// restoring them did more than lowering vm.dirty_*, so this comes before any vm.dirty_* advice
// (docs/rules.md, flush-after-disabled; docs/benchmarks.md, seed 003 table).
func flushAfterDisabled() Rule {
	return Rule{
		ID:       "flush-after-disabled",
		Title:    "Checkpoint and background-writer write-back hints are disabled",
		Severity: Warning,
		Settings: []string{collector.CheckpointFlushAfter, collector.BgwriterFlushAfter},
		Rationale: "With checkpoint_flush_after or bgwriter_flush_after at 0, PostgreSQL no longer asks Linux " +
			"to start writing its pages back as it goes, so dirty pages pile up in the page cache until the " +
			"checkpoint's fsync, which then stalls everything. The lab reproduced seed 003's collapse only " +
			"with them at 0, and restoring them fixed it where lowering vm.dirty_* did not.",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-CHECKPOINT-FLUSH-AFTER",
			pgDocs + "runtime-config-resource.html#GUC-BGWRITER-FLUSH-AFTER",
			"seed 003", "docs/rules.md, flush-after-disabled", "docs/benchmarks.md, seed 003 table",
		},
		Immediate: true,
		Eval:      withDefaults(evalFlushAfterDisabled),
	}
}

func evalFlushAfterDisabled(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	s := settings(pg.Settings)
	if _, ok := s[collector.CheckpointFlushAfter]; !ok {
		if _, ok := s[collector.BgwriterFlushAfter]; !ok {
			return notEnough("checkpoint_flush_after and bgwriter_flush_after are missing from pg_settings")
		}
	}
	snap, _ := in.History.Latest()
	off := flushAfterOff(snap, s)
	if len(off) == 0 {
		return found()
	}
	// Symptoms, where the history has them, go into the evidence; the finding does not wait
	// for them: the setting is the cause the lab isolated.
	var symptoms []Evidence
	cp := checkpointsIn(sinceWindow(in, in.Config.CheckpointWindow))
	if cp.count > 0 {
		symptoms = append(symptoms,
			Evidence{Name: "checkpoint_sync_mean_seconds", Value: cp.syncMean, Unit: UnitSeconds},
			Evidence{Name: "checkpoints", Value: cp.count, Unit: UnitCount})
		if cp.hasPile {
			symptoms = append(symptoms, Evidence{Name: "checkpoint_dirty_writeback_peak_bytes", Value: cp.pile, Unit: UnitBytes})
		}
	}
	var fs []Finding
	for _, name := range off {
		rec, who := "256kB", "the checkpointer"
		if name == collector.BgwriterFlushAfter {
			rec, who = "512kB", "the background writer"
		}
		cur, _ := s.value(name)
		fs = append(fs, Finding{
			Severity:    Warning,
			Setting:     name,
			Current:     cur,
			Recommended: rec,
			Action:      ActionReload,
			Summary: fmt.Sprintf("%s=%s: pages written by %s stay dirty in the page cache until the checkpoint's "+
				"fsync, which must then write them all at once while commits wait.", name, cur, who),
			Evidence: append([]Evidence{{Name: name + "_bytes", Value: 0, Unit: UnitBytes}}, symptoms...),
			ExpectedEffect: "Write-back starts as pages are written, so checkpoint ends stop stalling (lab: docs/benchmarks.md, seed 003 table " +
				"(worst second 118 -> 552 tps, p5 152 -> 571 tps, checkpoint sync 6.8 s -> 0.1 s, Dirty+Writeback peak 140.6 -> 2.4 MiB)).",
		})
	}
	return found(fs...)
}

// checkpoint-stalls: checkpoints requested by WAL volume rather than by checkpoint_timeout mean
// max_wal_size is too small for the write rate (docs: wal-configuration, "checkpoints are
// occurring too frequently"); a checkpoint_completion_target below 0.9 crowds the writes. A long
// sync phase with neither cause points at the kernel's write-back (docs/rules.md, checkpoint-stalls).
func checkpointStalls() Rule {
	return Rule{
		ID:       "checkpoint-stalls",
		Title:    "Checkpoints stall or come too often",
		Severity: Warning,
		Settings: []string{collector.MaxWALSize, collector.CheckpointCompletionTarget},
		Rationale: "Checkpoints forced by WAL volume instead of checkpoint_timeout write the same pages " +
			"more often and in bursts; a low checkpoint_completion_target crowds the writes; a long sync " +
			"phase means the kernel held a pile of dirty pages. Each cause gets its own recommendation.",
		Sources: []string{
			pgDocs + "wal-configuration.html",
			pgDocs + "runtime-config-wal.html#GUC-MAX-WAL-SIZE",
			pgDocs + "runtime-config-wal.html#GUC-CHECKPOINT-COMPLETION-TARGET",
			"seed 003 (tps collapsing at each checkpoint)", "docs/benchmarks.md, seed 003 table",
		},
		Eval: withDefaults(evalCheckpointStalls),
	}
}

// checkpointStallFacts is what checkpoint-stalls judges over CheckpointWindow.
type checkpointStallFacts struct {
	window           *History
	cp               checkpointFacts
	timed, requested float64 // checkpoints, by what started them
	walRate          float64 // WAL bytes per second
	walPerCheckpoint float64 // WAL bytes per completed checkpoint
	// The settings, each with whether it could be read (the values are as read even when not)
	// and as pg_settings shows it.
	maxWAL     int64 // max_wal_size, bytes
	hasMaxWAL  bool
	maxWALText string
	cct        float64 // checkpoint_completion_target
	hasCCT     bool
	cctText    string
	timeout    float64 // checkpoint_timeout, seconds
	hasTimeout bool
	// walFree is the WAL file system's free space in bytes, when hasWALFree.
	walFree    uint64
	hasWALFree bool
	// flushAfterOff: a *_flush_after setting is 0, which flush-after-disabled reports.
	flushAfterOff bool
}

// checkpointDecision names the causes the facts show and what each calls for.
type checkpointDecision struct {
	walDriven bool // requested checkpoints forced by WAL volume
	stall     bool // the mean sync phase is at least CheckpointSyncSlow
	// raiseMaxWAL recommends maxWAL (capped: limited by the WAL's free space).
	raiseMaxWAL bool
	maxWAL      int64
	capped      bool
	// raiseCompletionTarget recommends CompletionTarget.
	raiseCompletionTarget bool
	// unexplained: the syncs are long with neither cause, and flush-after is on (info).
	unexplained bool
}

func evalCheckpointStalls(in Input) Result {
	f, lacking := checkpointStallFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	t := in.Config
	d := decideCheckpoints(f, t)
	ev := checkpointEvidence(f)
	var fs []Finding
	if d.raiseMaxWAL {
		fs = append(fs, maxWALFinding(f, d, t, ev))
	}
	if d.raiseCompletionTarget {
		fs = append(fs, completionTargetFinding(f, t, ev))
	}
	if d.unexplained {
		fs = append(fs, Finding{
			Severity:    Info,
			Setting:     "",
			Current:     humanSeconds(f.cp.syncMean) + " per checkpoint sync",
			Recommended: "see writeback-stalls-wal; check the data device's write-back",
			Action:      ActionAdvice,
			Summary: fmt.Sprintf("Checkpoint syncs take %s on average (worst %s) although checkpoints are timed and "+
				"spread: the kernel holds a pile of dirty pages at each checkpoint's fsync.", humanSeconds(f.cp.syncMean), humanSeconds(f.cp.syncWorst)),
			Evidence:       ev,
			ExpectedEffect: "Knowing where checkpoint stalls come from.",
		})
	}
	return found(fs...)
}

func decideCheckpoints(f checkpointStallFacts, t Thresholds) checkpointDecision {
	var d checkpointDecision
	// Requested checkpoints count as WAL-driven only when the WAL written per checkpoint is
	// near the trigger; otherwise they are manual CHECKPOINTs, base backups and the like.
	d.walDriven = f.requested > f.timed && f.requested >= 2
	if d.walDriven && f.walRate > 0 && f.hasMaxWAL && f.hasCCT {
		d.walDriven = f.walPerCheckpoint >= 0.5*float64(f.maxWAL)/(1+f.cct)
	}
	d.stall = f.cp.syncMean >= t.CheckpointSyncSlow.Seconds()
	if d.walDriven && f.hasMaxWAL {
		d.maxWAL, d.capped = maxWALFor(f)
		d.raiseMaxWAL = d.maxWAL > f.maxWAL
	}
	d.raiseCompletionTarget = f.hasCCT && f.cct < t.CompletionTarget && (d.stall || d.walDriven)
	d.unexplained = d.stall && !d.raiseMaxWAL && !d.raiseCompletionTarget && !f.flushAfterOff
	return d
}

// maxWALFor sizes max_wal_size for checkpoint_timeout to come first with a quarter to spare,
// rounded up to a power of two and at least twice today's, its growth capped at half the WAL
// file system's free space: the WAL can reach max_wal_size and more (docs/rules.md, checkpoint-stalls).
func maxWALFor(f checkpointStallFacts) (int64, bool) {
	rec := 2 * f.maxWAL
	if f.hasTimeout && f.walRate > 0 && f.hasCCT {
		need := int64(f.walRate * f.timeout * (1 + f.cct) * 1.25)
		rec = max(rec, ceilPow2(max(need>>20, 1))<<20)
	}
	if room := int64(f.walFree / 2); f.hasWALFree && rec-f.maxWAL > room {
		return (f.maxWAL + room) >> 20 << 20, true
	}
	return rec, false
}

// checkpointStallFactsOf gathers the facts, or says what is missing to judge.
func checkpointStallFactsOf(in Input) (checkpointStallFacts, string) {
	var f checkpointStallFacts
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	if pg.Checkpointer == nil {
		return f, "no checkpoint statistics in the latest snapshot"
	}
	t := in.Config
	w := sinceWindow(in, t.CheckpointWindow)
	if cold := coldStart(w, t); cold != "" {
		return f, cold
	}
	f.window, f.cp = w, checkpointsIn(w)
	if f.cp.count < float64(t.MinCheckpoints) {
		return f, fmt.Sprintf("need %d completed checkpoints in the last %s, have %.0f", t.MinCheckpoints, t.CheckpointWindow, f.cp.count)
	}
	s := settings(pg.Settings)
	f.timed, f.requested = w.Change(CheckpointsTimed).Delta, w.Change(CheckpointsRequested).Delta
	wal := w.Change(WALBytes)
	f.walRate, f.walPerCheckpoint = wal.Rate(), wal.Delta/f.cp.count
	f.maxWAL, f.hasMaxWAL = s.bytes(collector.MaxWALSize)
	f.cct, f.hasCCT = s.number(collector.CheckpointCompletionTarget)
	f.maxWALText, f.cctText = s[collector.MaxWALSize].Value, s[collector.CheckpointCompletionTarget].Value
	f.timeout, f.hasTimeout = s.seconds(collector.CheckpointTimeout)
	snap, _ := in.History.Latest()
	if st := snap.WALStorage; st != nil && st.TotalBytes > 0 {
		f.walFree, f.hasWALFree = st.FreeBytes, true
	}
	f.flushAfterOff = len(flushAfterOff(snap, s)) > 0
	return f, ""
}

func checkpointEvidence(f checkpointStallFacts) []Evidence {
	ev := []Evidence{
		{Name: "checkpoints", Value: f.cp.count, Unit: UnitCount},
		{Name: "checkpoints_timed", Value: f.timed, Unit: UnitCount},
		{Name: "checkpoints_requested", Value: f.requested, Unit: UnitCount},
		{Name: "checkpoint_sync_mean_seconds", Value: f.cp.syncMean, Unit: UnitSeconds},
		{Name: "checkpoint_sync_max_seconds", Value: f.cp.syncWorst, Unit: UnitSeconds},
	}
	if f.cp.hasPile {
		ev = append(ev, Evidence{Name: "checkpoint_dirty_writeback_peak_bytes", Value: f.cp.pile, Unit: UnitBytes})
	}
	if f.walRate > 0 {
		ev = append(ev, Evidence{Name: "wal_rate", Value: f.walRate, Unit: UnitBytesPerSecond})
	}
	return ev
}

func maxWALFinding(f checkpointStallFacts, d checkpointDecision, t Thresholds, ev []Evidence) Finding {
	cur := f.maxWALText
	capped := ""
	if d.capped {
		capped = fmt.Sprintf(" (capped at half the %s free on the WAL's file system)", collector.FormatBytes(float64(f.walFree)))
	}
	return Finding{
		Severity:    Warning,
		Setting:     collector.MaxWALSize,
		Current:     cur,
		Recommended: collector.FormatMemory(d.maxWAL),
		Action:      ActionReload,
		Summary: fmt.Sprintf("%.0f of %.0f checkpoints in the last %s were requested, not timed: at %s/s of WAL, "+
			"max_wal_size=%s forces a checkpoint before checkpoint_timeout%s.",
			f.requested, f.requested+f.timed, t.CheckpointWindow, collector.FormatBytes(f.walRate), cur, capped),
		Evidence: ev,
		ExpectedEffect: "Checkpoints come on checkpoint_timeout: fewer full-page writes after each one and " +
			"writes spread over the whole interval. Crash recovery may take longer; the WAL uses more disk.",
		Predicted: checkpointRatePrediction(f, d.maxWAL),
	}
}

// checkpointRatePrediction: a checkpoint starts when checkpoint_timeout has passed or the WAL
// since the last one reaches max_wal_size / (1 + checkpoint_completion_target), whichever comes
// first (docs: wal-configuration).
func checkpointRatePrediction(f checkpointStallFacts, rec int64) *Predicted {
	rate := f.cp.count / f.window.Span().Seconds()
	after := f.walRate * (1 + f.cct) / float64(rec)
	timeoutNote := ""
	if f.hasTimeout && f.timeout > 0 {
		after = max(after, 1/f.timeout)
		timeoutNote = fmt.Sprintf(", or every checkpoint_timeout (%s) if that comes first", humanSeconds(f.timeout))
	}
	return &Predicted{
		Name: PredictCheckpointRate, Current: rate, Value: min(rate, after), Unit: UnitPerSecond,
		Basis: fmt.Sprintf("%.0f checkpoints in %s now; at %s/s of WAL one starts every %s of WAL at max_wal_size=%s%s",
			f.cp.count, f.window.Span().Round(time.Second), collector.FormatBytes(f.walRate), collector.FormatBytes(float64(rec)/(1+f.cct)), collector.FormatMemory(rec), timeoutNote),
	}
}

func completionTargetFinding(f checkpointStallFacts, t Thresholds, ev []Evidence) Finding {
	cur := f.cctText
	target := strconv.FormatFloat(t.CompletionTarget, 'f', -1, 64)
	// The checkpointer paces its writes to end at checkpoint_completion_target of the
	// interval (docs: wal-configuration), so the write phase stretches by target / current.
	var predicted *Predicted
	if write, ok := MeasurePredicted(PredictCheckpointWrite, f.window); ok && f.cct > 0 {
		predicted = &Predicted{
			Name: PredictCheckpointWrite, Current: write, Value: write * t.CompletionTarget / f.cct, Unit: UnitSeconds,
			Basis: fmt.Sprintf("checkpoints' write phase: %s on average now; the checkpointer paces it to end at "+
				"checkpoint_completion_target of the interval, so %s -> %s stretches it %.2f times",
				humanSeconds(write), cur, target, t.CompletionTarget/f.cct),
		}
	}
	return Finding{
		Severity:    Warning,
		Setting:     collector.CheckpointCompletionTarget,
		Current:     cur,
		Recommended: target,
		Action:      ActionReload,
		Summary: fmt.Sprintf("checkpoint_completion_target=%s crowds each checkpoint's writes into %s of the interval; "+
			"checkpoint syncs take %s on average.", cur, pct(f.cct), humanSeconds(f.cp.syncMean)),
		Evidence:       ev,
		ExpectedEffect: "Checkpoint writes spread over 90% of the interval, so less is dirty at the final fsync.",
		Predicted:      predicted,
	}
}
