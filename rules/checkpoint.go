package rules

import (
	"fmt"
	"strconv"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// checkpointFacts summarizes the checkpoints completed in a window.
type checkpointFacts struct {
	ends        []CheckpointEnd
	count       float64 // checkpoints completed
	syncMean    float64 // sync phase per checkpoint, seconds
	syncWorst   float64 // longest sync phase of one interval's checkpoints, seconds
	pile        float64 // Dirty + Writeback peak around checkpoint ends, bytes
	hasPile     bool
	walSyncRise float64 // WAL sync time per sync at checkpoint ends over elsewhere; 0 unknown
}

func checkpointsIn(w *History) checkpointFacts {
	var f checkpointFacts
	var syncSum, endSyncs, endSyncSecs float64
	for _, e := range w.CheckpointEnds() {
		f.ends = append(f.ends, e)
		f.count += e.Checkpoints
		syncSum += e.SyncSeconds
		f.syncWorst = max(f.syncWorst, e.SyncSeconds/max(e.Checkpoints, 1))
		if e.HasKernel {
			f.pile, f.hasPile = max(f.pile, e.DirtyWritebackMax), true
		}
		if e.HasWALSyncs {
			endSyncs += e.WALSyncs
			endSyncSecs += e.WALSyncSeconds
		}
	}
	if f.count > 0 {
		f.syncMean = syncSum / f.count
	}
	// WAL sync latency rising with the checkpoints' write-back: per-sync time in the intervals
	// holding a checkpoint end against the rest of the window (needs track_wal_io_timing).
	all, allSecs := w.Change(WALSyncs), w.Change(WALSyncSeconds)
	if restSyncs, restSecs := all.Delta-endSyncs, allSecs.Delta-endSyncSecs; endSyncs > 0 && restSyncs > 0 && restSecs > 0 && endSyncSecs > 0 {
		f.walSyncRise = (endSyncSecs / endSyncs) / (restSecs / restSyncs)
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
// and the background writer ask Linux to start write-back (sync_file_range) every 256kB and
// 512kB, so dirty pages never pile up for the checkpoint's final fsync (docs: runtime-config-wal
// checkpoint_flush_after, runtime-config-resource bgwriter_flush_after). Measured in the lab
// (docs/benchmarks.md, seed 003 table): with both at 0 the worst second fell to 142 tps and p5 to
// 169, checkpoint sync took 6.7 s and Dirty+Writeback peaked at 141 MiB; with the defaults 453 tps,
// 548, 0.1 s, 2 MiB. Lowering vm.dirty_* instead did less (worst second 232, one run), so this is
// checked before any vm.dirty_* advice.
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
			"seed 003", "docs/benchmarks.md, seed 003 table (worst second 142 -> 453 tps, p5 169 -> 548)",
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
			ExpectedEffect: "Write-back starts as pages are written, so checkpoint ends stop stalling (lab, seed 003: " +
				"worst second 26 -> 369 tps, p5 42 -> 511 tps, checkpoint sync 6.9 s -> under 0.1 s, Dirty peak 93MB -> 1MB).",
		})
	}
	return found(fs...)
}

// dirty-background-too-large: Linux starts background write-back only when dirty pages
// exceed vm.dirty_background_bytes (or _ratio of dirtyable memory), and throttles writers at
// vm.dirty_bytes (kernel doc admin-guide/sysctl/vm). Far above what the device writes in a
// second, the pile at a checkpoint's fsync takes many seconds to drain. But seed 003 and the
// lab found that lowering vm.dirty_* alone did not smooth checkpoints, so the rule needs the
// symptom - a pile at checkpoint ends with long checkpoint syncs or WAL syncs slowing down -
// and stays quiet while flush-after-disabled explains it. Sizing: about DirtySeconds of the
// WAL device's peak measured write rate, rounded down to a power of two; vm.dirty_bytes
// DirtyBytesFactor times that. For reference tuned's postgresql profile uses 64MB/512MB ("about
// the size of a RAID controller's write-back cache"), and the lab tried 64MB/256MB.
func dirtyBackgroundTooLarge() Rule {
	return Rule{
		ID:       "dirty-background-too-large",
		Title:    "The kernel lets more dirty data pile up than the storage writes in a second",
		Severity: Warning,
		Settings: []string{collector.KnobDirtyBackgroundBytes, collector.KnobDirtyBytes},
		Rationale: "Background write-back starts only at vm.dirty_background_* and by default that is 10% of " +
			"memory, many seconds of what a disk writes; the pile then drains in the checkpoint's fsync. " +
			"Because lowering vm.dirty_* alone did not help in seed 003 or in the lab, the rule needs the " +
			"symptom in the history and its advice must be verified after it is applied.",
		Sources: []string{
			"https://www.kernel.org/doc/html/latest/admin-guide/sysctl/vm.html#dirty-background-bytes",
			"https://github.com/redhat-performance/tuned/blob/master/profiles/postgresql/tuned.conf (64MB/512MB)",
			"seed 003 (dirty_background_ratio 10 -> 1 did not help)",
			"docs/benchmarks.md, seed 003 table (64MB/256MB: worst second 142 -> 232 tps with flush-after at 0, one run; restoring flush-after: 453)",
		},
		Eval: withDefaults(evalDirtyBackgroundTooLarge),
	}
}

func evalDirtyBackgroundTooLarge(in Input) Result {
	snap, ok := in.History.Latest()
	if !ok {
		return notEnough("no snapshot yet")
	}
	k := snap.Kernel
	if k == nil {
		return notEnough("no kernel facts in the latest snapshot")
	}
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	if len(flushAfterOff(snap, settings(pg.Settings))) > 0 {
		return found() // flush-after-disabled is the cause the lab isolated; fix that first
	}
	t := in.Config
	w := sinceWindow(in, t.CheckpointWindow)
	if cold := coldStart(w, t); cold != "" {
		return notEnough("%s", cold)
	}
	ivs := w.Intervals(DiskWriteBytes)
	if len(ivs) == 0 {
		return notEnough("no write counters for the WAL's block device (tmpfs, FUSE and overlay have none)")
	}
	var rate float64
	for _, iv := range ivs {
		rate = max(rate, iv.Rate())
	}
	if rate < 1<<20 {
		return notEnough("the WAL device wrote too little (%s/s at most) to size the kernel's thresholds from", humanBytes(rate))
	}
	second := rate * t.DirtySeconds
	bg := float64(k.DirtyBackgroundThresholdBytes)
	if bg < t.DirtyFarAbove*second {
		return found()
	}
	cp := checkpointsIn(w)
	if cp.count == 0 {
		return notEnough("no checkpoint completed in the last %s", t.CheckpointWindow)
	}
	slowSync := cp.syncMean >= t.CheckpointSyncSlow.Seconds()
	walRising := cp.walSyncRise >= t.WALSyncRise
	if !cp.hasPile || cp.pile < second || (!slowSync && !walRising) {
		return found()
	}

	recBG := floorPow2(max(int64(second)>>20, 1)) << 20
	recBG = min(max(recBG, t.DirtyBackgroundMin), t.DirtyBackgroundMax)
	recDirty := int64(float64(recBG) * t.DirtyBytesFactor)
	evidence := []Evidence{
		{Name: "device_write_rate", Value: rate, Unit: UnitBytesPerSecond},
		{Name: "dirty_background_threshold", Value: bg, Unit: UnitBytes},
		{Name: "dirty_threshold", Value: float64(k.DirtyThresholdBytes), Unit: UnitBytes},
		{Name: "checkpoint_dirty_writeback_peak_bytes", Value: cp.pile, Unit: UnitBytes},
		{Name: "checkpoint_sync_mean_seconds", Value: cp.syncMean, Unit: UnitSeconds},
	}
	if cp.walSyncRise > 0 {
		evidence = append(evidence, Evidence{Name: "wal_sync_rise", Value: cp.walSyncRise, Unit: UnitRatio})
	}
	harm := fmt.Sprintf("checkpoint syncs took %s on average", humanSeconds(cp.syncMean))
	if walRising {
		harm += fmt.Sprintf(" and WAL syncs took %.1f times as long at checkpoint ends", cp.walSyncRise)
	}
	summary := fmt.Sprintf("The kernel starts background write-back only at %s of dirty data, %.0f s of what "+
		"the WAL's device writes at its measured peak (%s/s). At checkpoint ends up to %s was dirty or under "+
		"write-back and %s. Starting write-back at about %s s of device writes (%s) keeps that pile small.",
		humanBytes(bg), bg/rate, humanBytes(rate), humanBytes(cp.pile), harm, strconv.FormatFloat(t.DirtySeconds, 'f', -1, 64), humanBytes(float64(recBG)))
	// The checkpoint's fsync writes what is dirty at the device's rate; with write-back starting
	// at recBG, about that much is left for it (the lab's caveat in the effect stands).
	predicted := &Predicted{
		Name: PredictCheckpointSync, Current: cp.syncMean, Value: min(cp.syncMean, float64(recBG)/rate), Unit: UnitSeconds,
		Basis: fmt.Sprintf("checkpoints' sync phase: %s on average now (%.0f checkpoints); the fsync writes the dirty pile at the "+
			"device's peak measured rate (%s/s), and with write-back starting at %s about that much is left for it",
			humanSeconds(cp.syncMean), cp.count, humanBytes(rate), humanBytes(float64(recBG))),
	}
	effect := "Smaller Dirty/Writeback peaks at checkpoint ends and shorter checkpoint syncs. Verify after " +
		"applying: in seed 003 and in the lab, lowering vm.dirty_* alone did not smooth checkpoints."
	fs := []Finding{{
		Severity:       Warning,
		Setting:        collector.KnobDirtyBackgroundBytes,
		Current:        knobValue(k.VM.DirtyBackgroundBytes, k.VM.DirtyBackgroundRatio),
		Recommended:    strconv.FormatInt(recBG, 10),
		Action:         ActionSysctl,
		Summary:        summary,
		Evidence:       evidence,
		ExpectedEffect: effect,
		Predicted:      predicted,
	}}
	if float64(k.DirtyThresholdBytes) > float64(recDirty) {
		fs = append(fs, Finding{
			Severity:    Warning,
			Setting:     collector.KnobDirtyBytes,
			Current:     knobValue(k.VM.DirtyBytes, k.VM.DirtyRatio),
			Recommended: strconv.FormatInt(recDirty, 10),
			Action:      ActionSysctl,
			Summary: fmt.Sprintf("Writers are throttled only at %s of dirty data; with background write-back "+
				"starting at %s, a limit of %.0f times that (%s) bounds the pile a checkpoint's fsync can meet.",
				humanBytes(float64(k.DirtyThresholdBytes)), humanBytes(float64(recBG)), t.DirtyBytesFactor, humanBytes(float64(recDirty))),
			Evidence:       evidence,
			ExpectedEffect: effect,
			Predicted:      predicted,
		})
	}
	return found(fs...)
}

// knobValue shows a vm.dirty_*_bytes knob; 0 means its ratio twin is in force.
func knobValue(bytes, ratio int64) string {
	if bytes > 0 {
		return strconv.FormatInt(bytes, 10)
	}
	return fmt.Sprintf("0 (ratio %d%%)", ratio)
}

// checkpoint-stalls: checkpoints requested by WAL volume rather than by checkpoint_timeout
// mean max_wal_size is too small for the write rate (docs: wal-configuration, "checkpoints
// are occurring too frequently"); checkpoint_completion_target below 0.9 crowds the writes
// into part of the interval (0.9 is the default since 14). The checkpoint is triggered once
// the WAL since the last one reaches max_wal_size / (1 + checkpoint_completion_target), which
// sizes the recommendation. A long sync phase with neither cause points at the kernel's
// write-back (flush-after-disabled, dirty-background-too-large) and is reported as info.
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
			"seed 003 (tps collapsing at each checkpoint)", "docs/benchmarks.md, seed 003 table (checkpoint sync 6.7 s)",
		},
		Eval: withDefaults(evalCheckpointStalls),
	}
}

func evalCheckpointStalls(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	if pg.Checkpointer == nil {
		return notEnough("no checkpoint statistics in the latest snapshot")
	}
	s := settings(pg.Settings)
	t := in.Config
	w := sinceWindow(in, t.CheckpointWindow)
	if cold := coldStart(w, t); cold != "" {
		return notEnough("%s", cold)
	}
	cp := checkpointsIn(w)
	if cp.count < float64(t.MinCheckpoints) {
		return notEnough("need %d completed checkpoints in the last %s, have %.0f", t.MinCheckpoints, t.CheckpointWindow, cp.count)
	}
	timed, requested := w.Change(CheckpointsTimed).Delta, w.Change(CheckpointsRequested).Delta
	cct, hasCCT := s.number(collector.CheckpointCompletionTarget)
	maxWAL, hasMax := s.bytes(collector.MaxWALSize)
	walRate := w.Change(WALBytes).Rate()

	evidence := []Evidence{
		{Name: "checkpoints", Value: cp.count, Unit: UnitCount},
		{Name: "checkpoints_timed", Value: timed, Unit: UnitCount},
		{Name: "checkpoints_requested", Value: requested, Unit: UnitCount},
		{Name: "checkpoint_sync_mean_seconds", Value: cp.syncMean, Unit: UnitSeconds},
		{Name: "checkpoint_sync_max_seconds", Value: cp.syncWorst, Unit: UnitSeconds},
	}
	if cp.hasPile {
		evidence = append(evidence, Evidence{Name: "checkpoint_dirty_writeback_peak_bytes", Value: cp.pile, Unit: UnitBytes})
	}
	if walRate > 0 {
		evidence = append(evidence, Evidence{Name: "wal_rate", Value: walRate, Unit: UnitBytesPerSecond})
	}

	// Requested checkpoints count as WAL-driven only when the WAL written per checkpoint is
	// near the trigger; otherwise they are manual CHECKPOINTs, base backups and the like.
	walDriven := requested > timed && requested >= 2
	if walDriven && walRate > 0 && hasMax && hasCCT {
		perCheckpoint := w.Change(WALBytes).Delta / cp.count
		walDriven = perCheckpoint >= 0.5*float64(maxWAL)/(1+cct)
	}
	stall := cp.syncMean >= t.CheckpointSyncSlow.Seconds()

	var fs []Finding
	if walDriven && hasMax {
		rec := 2 * maxWAL
		if timeout, ok := s.seconds(collector.CheckpointTimeout); ok && walRate > 0 && hasCCT {
			// Enough for checkpoint_timeout to come first, with a quarter to spare.
			need := int64(walRate * timeout * (1 + cct) * 1.25)
			rec = max(rec, ceilPow2(max(need>>20, 1))<<20)
		}
		capped := ""
		if snap, ok := in.History.Latest(); ok && snap.WALStorage != nil && snap.WALStorage.TotalBytes > 0 {
			// The WAL can reach max_wal_size and more: keep the growth within half the free space.
			if room := int64(snap.WALStorage.FreeBytes / 2); rec-maxWAL > room {
				rec = (maxWAL + room) >> 20 << 20
				capped = fmt.Sprintf(" (capped at half the %s free on the WAL's file system)", humanBytes(float64(snap.WALStorage.FreeBytes)))
			}
		}
		if rec > maxWAL {
			cur, _ := s.value(collector.MaxWALSize)
			// A checkpoint starts when checkpoint_timeout has passed or the WAL since the last one
			// reaches max_wal_size / (1 + checkpoint_completion_target), whichever comes first.
			rate := cp.count / w.Span().Seconds()
			after := walRate * (1 + cct) / float64(rec)
			timeoutNote := ""
			if timeout, ok := s.seconds(collector.CheckpointTimeout); ok && timeout > 0 {
				after = max(after, 1/timeout)
				timeoutNote = fmt.Sprintf(", or every checkpoint_timeout (%s) if that comes first", humanSeconds(timeout))
			}
			predicted := &Predicted{
				Name: PredictCheckpointRate, Current: rate, Value: min(rate, after), Unit: UnitPerSecond,
				Basis: fmt.Sprintf("%.0f checkpoints in %s now; at %s/s of WAL one starts every %s of WAL at max_wal_size=%s%s",
					cp.count, w.Span().Round(time.Second), humanBytes(walRate), humanBytes(float64(rec)/(1+cct)), collector.FormatMemory(rec), timeoutNote),
			}
			fs = append(fs, Finding{
				Severity:    Warning,
				Setting:     collector.MaxWALSize,
				Current:     cur,
				Recommended: collector.FormatMemory(rec),
				Action:      ActionReload,
				Summary: fmt.Sprintf("%.0f of %.0f checkpoints in the last %s were requested, not timed: at %s/s of WAL, "+
					"max_wal_size=%s forces a checkpoint before checkpoint_timeout%s.",
					requested, requested+timed, t.CheckpointWindow, humanBytes(walRate), cur, capped),
				Evidence: evidence,
				ExpectedEffect: "Checkpoints come on checkpoint_timeout: fewer full-page writes after each one and " +
					"writes spread over the whole interval. Crash recovery may take longer; the WAL uses more disk.",
				Predicted: predicted,
			})
		}
	}
	if hasCCT && cct < t.CompletionTarget && (stall || walDriven) {
		cur, _ := s.value(collector.CheckpointCompletionTarget)
		// The checkpointer paces its writes to end at checkpoint_completion_target of the
		// interval (docs: wal-configuration), so the write phase stretches by target / current.
		var predicted *Predicted
		if write, ok := MeasurePredicted(PredictCheckpointWrite, w); ok && cct > 0 {
			predicted = &Predicted{
				Name: PredictCheckpointWrite, Current: write, Value: write * t.CompletionTarget / cct, Unit: UnitSeconds,
				Basis: fmt.Sprintf("checkpoints' write phase: %s on average now; the checkpointer paces it to end at "+
					"checkpoint_completion_target of the interval, so %s -> %s stretches it %.2f times",
					humanSeconds(write), cur, strconv.FormatFloat(t.CompletionTarget, 'f', -1, 64), t.CompletionTarget/cct),
			}
		}
		fs = append(fs, Finding{
			Severity:    Warning,
			Setting:     collector.CheckpointCompletionTarget,
			Current:     cur,
			Recommended: strconv.FormatFloat(t.CompletionTarget, 'f', -1, 64),
			Action:      ActionReload,
			Summary: fmt.Sprintf("checkpoint_completion_target=%s crowds each checkpoint's writes into %s of the interval; "+
				"checkpoint syncs take %s on average.", cur, pct(cct), humanSeconds(cp.syncMean)),
			Evidence:       evidence,
			ExpectedEffect: "Checkpoint writes spread over 90% of the interval, so less is dirty at the final fsync.",
			Predicted:      predicted,
		})
	}
	snap, _ := in.History.Latest()
	if stall && len(fs) == 0 && len(flushAfterOff(snap, s)) == 0 {
		fs = append(fs, Finding{
			Severity:    Info,
			Setting:     "",
			Current:     humanSeconds(cp.syncMean) + " per checkpoint sync",
			Recommended: "see dirty-background-too-large; check the data device's write-back",
			Action:      ActionAdvice,
			Summary: fmt.Sprintf("Checkpoint syncs take %s on average (worst %s) although checkpoints are timed and "+
				"spread: the kernel holds a pile of dirty pages at each checkpoint's fsync.", humanSeconds(cp.syncMean), humanSeconds(cp.syncWorst)),
			Evidence:       evidence,
			ExpectedEffect: "Knowing where checkpoint stalls come from.",
		})
	}
	return found(fs...)
}
