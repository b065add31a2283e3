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
// and the background writer ask Linux to start write-back (sync_file_range) every 256kB and
// 512kB, so dirty pages never pile up for the checkpoint's final fsync (docs: runtime-config-wal
// checkpoint_flush_after, runtime-config-resource bgwriter_flush_after). Measured in the lab
// (docs/benchmarks.md, seed 003 table): with both at 0 the worst second fell to 118 tps and p5 to
// 152, checkpoint sync took 6.8 s and Dirty+Writeback peaked at 141 MiB; with the defaults 552 tps,
// 571, 0.1 s, 2.4 MiB. Lowering vm.dirty_* instead did less (worst second 133, p5 388, one run), so
// this is checked before any vm.dirty_* advice.
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
			"seed 003", "docs/benchmarks.md, seed 003 table (worst second 118 -> 552 tps, p5 152 -> 571)",
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
// write-back (flush-after-disabled, writeback-stalls-wal) and is reported as info.
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
			"seed 003 (tps collapsing at each checkpoint)", "docs/benchmarks.md, seed 003 table (checkpoint sync 6.8 s)",
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
			Recommended: "see writeback-stalls-wal; check the data device's write-back",
			Action:      ActionAdvice,
			Summary: fmt.Sprintf("Checkpoint syncs take %s on average (worst %s) although checkpoints are timed and "+
				"spread: the kernel holds a pile of dirty pages at each checkpoint's fsync.", humanSeconds(cp.syncMean), humanSeconds(cp.syncWorst)),
			Evidence:       evidence,
			ExpectedEffect: "Knowing where checkpoint stalls come from.",
		})
	}
	return found(fs...)
}
