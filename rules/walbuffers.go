package rules

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// wal-buffers-small: when the WAL buffers are full a backend must write WAL out itself before
// it can insert more (docs: runtime-config-wal, wal_buffers; pg_stat_wal.wal_buffers_full).
// Bulk loads fill the buffers whatever their size (docs/benchmarks.md, seed 001: buffers_full large in every run),
// so the rule weighs what those writes cost, never their count alone: measured WAL write time
// (track_wal_io_timing), the probes' cost of one write under the configured method, and the
// share of active backends waiting on WAL buffer replacement (WALBufMapping) or on WAL writes
// attributable to buffer-full writes. At 64kB -> 1MB -> 16MB seed 001's 2M-row INSERT took
// 131 -> 51.2 -> 3.41 s with open_datasync and 5.49 -> 5.62 -> 3.31 s with fdatasync, and at
// 64MB 2.81 and 2.85 s (docs/benchmarks.md, seed 001 table (131, 51.2, 3.41, 5.49, 5.62, 3.31,
// 2.81, 2.85)), which is why the recommendation jumps to at least 16MB -
// PostgreSQL's own automatic size on any shared_buffers of 512MB or more, one WAL segment - and
// doubles beyond, up to 64MB.
//
// Beyond 16MB the rule steps one doubling at a time (32MB, then 64MB, never more), and only on
// evidence gathered at the current size: wal_buffers takes a restart, so the window is cut to
// the snapshots since the server last started with today's value, and a step waits until that
// run alone spans MinSpan. PostgreSQL's automatic size (wal_buffers=-1) is 1/32 of
// shared_buffers, capped at one WAL segment (docs: runtime-config-wal, wal_buffers), and the docs
// warn that the buffers are written out at every commit, so very large values are unlikely to
// help. The lab does not keep that proportion above the cap: with shared_buffers=256MB (1/32 is
// 8MB) seed 001's 2M-row INSERT took 2.64-2.97 s at 64MB against 3.39-3.46 s at 16MB
// (open_datasync, 95% intervals of five runs; docs/benchmarks.md, seed 001 table), because
// beyond a segment the buffers hold what a bulk load writes between two WAL writer rounds, which
// shared_buffers does not bound. What the rule keeps is a memory bound it chose, not measured:
// wal_buffers at most a quarter of shared_buffers (walBuffersShare), since they are shared
// memory on top of it; with less shared_buffers it says so as advice and recommends nothing.
// walBuffersShare: beyond 16MB, wal_buffers stays at most shared_buffers/walBuffersShare.
const walBuffersShare = 4

// walBuffersDoublingKeep is the part of the buffer-full writes' wait left after one doubling of
// wal_buffers beyond a WAL segment, as measured: seed 001's 2M-row INSERT under fdatasync, its
// wait per MB of WAL over 16MB -> 32MB -> 64MB in two runs kept 0.675 and 0.670, then 0.835 and
// 0.919 of the size before; 0.77 is their geometric mean (docs/benchmarks.md, wal_buffers
// calibration table (0.00538, 0.00363, 0.00243; 0.00446, 0.00373, 0.00343)). The model of one
// write per wal_buffers of WAL predicted 0.5, and missed by 29-33% in the first run. Larger
// buffers cut the writes a backend does itself, but each is larger and the WAL writer's rounds
// take part of the rest, so the wait does not halve; how much it falls varies from run to run:
// three later runs, not fitted, kept 0.746 and 0.848, 0.760 and 1.094, 0.956 and 0.460
// (docs/benchmarks.md, wal_buffers calibration table (0.746, 0.848, 0.760, 1.094, 0.956,
// 0.460)): a geometric mean of 0.78, but single 35 s windows scatter around it, so one step's
// error stayed within 30% in four of the six.
const walBuffersDoublingKeep = 0.77

func walBuffersSmall() Rule {
	return Rule{
		ID:       "wal-buffers-small",
		Title:    "Writes of full WAL buffers cost measurable time",
		Severity: Warning,
		Settings: []string{collector.WALBuffers},
		Rationale: "When the WAL buffers are full, backends write WAL out themselves, in small pieces, before " +
			"they can go on. Bulk loads fill buffers of any size, so the rule acts on what those writes cost " +
			"(measured write time, the probes' per-write cost, WAL buffer wait events), not on their count.",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-WAL-BUFFERS",
			pgDocs + "wal-configuration.html",
			pgDocs + "monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW",
			pgDocs + "monitoring-stats.html#WAIT-EVENT-LWLOCK-TABLE",
			"seed 001 (64kB -> 16MB: 130 s -> 4.6 s)", "seed 003 (64kB -> 1MB raised pgbench tps)",
			"docs/benchmarks.md, seed 001 table (3.41 s at 16MB, 2.81 s at 64MB, open_datasync)",
		},
		Eval: withDefaults(evalWALBuffersSmall),
	}
}

func evalWALBuffersSmall(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	if pg.WAL == nil {
		return notEnough("buffer-full writes need pg_stat_wal (PostgreSQL 14+)")
	}
	s := settings(pg.Settings)
	cur, ok := s.bytes(collector.WALBuffers)
	if !ok {
		return notEnough("wal_buffers is missing from pg_settings")
	}
	t := in.Config
	if cur >= t.WALBuffersMax {
		return found() // nothing more to win from the buffers; other rules look at the device
	}
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return notEnough("%s", cold)
	}
	cv, _ := s.value(collector.WALBuffers)
	// Only what was measured at today's size counts: a window that reaches back before the
	// restart that brought it in would blame it for the old size's writes.
	run := sinceStart(w, collector.WALBuffers)
	if span := run.Span(); span < t.MinSpan {
		return notEnough("wal_buffers=%s has run for %s since the server started with it; need %s at this size",
			cv, span.Round(time.Second), t.MinSpan)
	}
	w = run
	method, _ := s.value(collector.WALSyncMethod)
	probe, _ := freshProbe(in)
	b, ok := measureBufferWrites(w, s, method, probe, t)
	if !ok {
		return notEnough("no pg_stat_wal interval without a reset in the last %s", t.Window)
	}
	if b.Rate < t.BuffersFullMinRate || b.Share < t.BuffersFullMinShare {
		return found() // a few buffer-full writes a minute cost nothing worth a restart
	}

	// Wait events: WALBufMapping is waiting to replace a buffer page, which only happens when
	// the buffers are full; WAL write waits are shared with commits, so only the buffer-full
	// share of them is counted.
	waits := w.WaitEvents()
	waitShare, hasWaits := 0.0, waits.Samples >= t.MinWaitSamples && waits.ActiveBackends > 0
	if hasWaits {
		waitShare = waits.Share(collector.EventLWLockWALBufMap) +
			waits.Share(collector.EventIOWALWrite, collector.EventLWLockWALWrite)*b.Share
	}
	if b.PerWrite <= 0 && !hasWaits {
		return notEnough("what buffer-full writes cost is unknown: turn track_wal_io_timing on, enable the probes, or sample wait events")
	}
	cost := b.Rate * b.PerWrite
	if cost < t.BuffersFullCost && waitShare < t.BuffersFullWaitShare {
		return found()
	}

	next := min(max(2*cur, t.WALBuffersFloor), t.WALBuffersMax)
	if next <= cur {
		return found()
	}
	evidence := []Evidence{
		{Name: "wal_buffers_bytes", Value: float64(cur), Unit: UnitBytes},
		{Name: "wal_buffers_run_seconds", Value: w.Span().Seconds(), Unit: UnitSeconds},
		{Name: "buffers_full_rate", Value: b.Rate, Unit: UnitPerSecond},
		{Name: "buffers_full_share", Value: b.Share, Unit: UnitRatio},
	}
	evidence = append(evidence, b.estimateEvidence()...)
	var why string
	if b.PerWrite > 0 {
		evidence = append(evidence,
			Evidence{Name: "write_seconds", Value: b.PerWrite, Unit: UnitSeconds},
			Evidence{Name: "buffers_full_cost", Value: cost, Unit: UnitRatio})
		why = fmt.Sprintf("at %s per write (%s) that is about %.2f s of backend time per second", humanSeconds(b.PerWrite), b.Source, cost)
	}
	if hasWaits {
		evidence = append(evidence,
			Evidence{Name: "buffer_wait_share", Value: waitShare, Unit: UnitRatio},
			Evidence{Name: "wait_samples", Value: float64(waits.Samples), Unit: UnitCount})
		if why != "" {
			why += ", and "
		}
		why += fmt.Sprintf("%s of active backends' time goes to waiting on WAL buffer writes", pct(waitShare))
	}
	// Beyond PostgreSQL's automatic maximum the step must keep the automatic proportion of
	// shared_buffers (see the rule's comment).
	if next > t.WALBuffersFloor {
		sb, hasSB := s.bytes(collector.SharedBuffers)
		if !hasSB || sb/walBuffersShare < next {
			sbv, _ := s.value(collector.SharedBuffers)
			if hasSB {
				evidence = append(evidence, Evidence{Name: "shared_buffers_bytes", Value: float64(sb), Unit: UnitBytes})
			} else {
				sbv = "unknown"
			}
			return found(Finding{
				Severity:    Info,
				Current:     "wal_buffers=" + cv + ", shared_buffers=" + sbv,
				Recommended: fmt.Sprintf("wal_buffers=%s only with shared_buffers of at least %s", collector.FormatMemory(next), collector.FormatMemory(walBuffersShare*next)),
				Action:      ActionAdvice,
				Summary: fmt.Sprintf("At wal_buffers=%s, measured over %s at that size (since the server started with it), the WAL buffers still "+
					"fill %.0f times a second, %s of WAL writes%s; %s. The next step, %s, is more than a quarter of shared_buffers "+
					"(%s), the most the advisor gives the WAL buffers, so nothing is recommended for wal_buffers.",
					cv, w.Span().Round(time.Second), b.Rate, pct(b.Share), b.estimateNote(), why, collector.FormatMemory(next), sbv),
				Evidence: evidence,
				ExpectedEffect: "None by itself: it says why wal_buffers is not raised further. With shared_buffers of at least " +
					collector.FormatMemory(walBuffersShare*next) + " the rule would recommend " + collector.FormatMemory(next) + ".",
			})
		}
		evidence = append(evidence, Evidence{Name: "shared_buffers_bytes", Value: float64(sb), Unit: UnitBytes})
	}
	// The prediction: one buffer-full write per wal_buffers of WAL (the in-flight estimate's
	// model), so the buffer-full writes, and what they cost, shrink by cur/next. That holds up
	// to one WAL segment, where every buffer-full write under open_* is a device sync; beyond it
	// the lab measured each doubling taking less than half the wait off (walBuffersDoublingKeep).
	writesKeep := float64(cur) / float64(next)
	keep, measuredNote := writesKeep, ""
	if cur >= t.WALBuffersFloor {
		keep = math.Pow(walBuffersDoublingKeep, math.Log2(float64(next)/float64(cur)))
		measuredNote = fmt.Sprintf("; beyond one WAL segment their cost shrinks by %.2f (%.2f per doubling, as the lab measured)", keep, walBuffersDoublingKeep)
	}
	var saved, model float64
	var how string
	if b.PerWrite > 0 {
		saved, model = cost*(1-keep), cost
		how = fmt.Sprintf("wal_buffers %s -> %s (one buffer-full write per wal_buffers of WAL: %.3g/s -> %.3g/s at %s each, %s%s)",
			cv, collector.FormatMemory(next), b.Rate, b.Rate*writesKeep, humanSeconds(b.PerWrite), b.Source, measuredNote)
	} else {
		active := waits.MeanActive()
		saved, model = waitShare*active*(1-keep), waitShare*active
		how = fmt.Sprintf("wal_buffers %s -> %s (one buffer-full write per wal_buffers of WAL: the %s of active time spent on buffer-full writes shrinks to %s%s)",
			cv, collector.FormatMemory(next), pct(waitShare), pct(waitShare*keep), measuredNote)
	}
	// Measured, the backends' WAL write wait is mostly these writes (a bulk load writes because
	// the buffers are full): the buffer-full share of it shrinks by keep, the rest stays.
	// Counting only the modelled cost (an earlier version) predicted a tenth of what seed 001's
	// 16MB -> 32MB step measured.
	share := min(max(b.Share, 0), 1)
	predicted := predictWALKeep(w, (1-share)+share*keep, model, how)
	if p := predicted; p.Name != PredictWALWait && p.Name != PredictWALIO || strings.HasPrefix(p.Basis, "modelled") {
		predicted = predictWAL(w, saved, model, how)
	}
	pending := ""
	if s[collector.WALBuffers].PendingRestart {
		pending = " (a change of wal_buffers is already waiting for a restart)"
	}
	return found(Finding{
		Severity:    Warning,
		Setting:     collector.WALBuffers,
		Current:     cv,
		Recommended: collector.FormatMemory(next),
		Action:      ActionRestart,
		Summary: fmt.Sprintf("The WAL buffers (wal_buffers=%s) fill %.0f times a second, %s of WAL writes%s; %s%s.",
			cv, b.Rate, pct(b.Share), b.estimateNote(), why, pending),
		Evidence: evidence,
		ExpectedEffect: "Fewer, larger WAL writes, more of them done by the WAL writer instead of the " +
			"backends (lab, seed 001's 2M-row INSERT at 64kB -> 16MB -> 64MB: docs/benchmarks.md, seed 001 table " +
			"(131 -> 3.41 -> 2.81 s with open_datasync, 5.49 -> 3.31 -> 2.85 s with fdatasync)). Costs " + humanBytes(float64(next-cur)) + " more shared memory.",
		Predicted: predicted,
	})
}

// sinceStart is the newest run of w's snapshots taken since the server last started with
// setting at its current value: what a setting that takes a restart was measured at. The run
// ends, going back, at a snapshot from another server start (pg_postmaster_start_time) or with
// another value. Snapshots without PostgreSQL inside the run stay in: their counters are skipped
// anyway.
func sinceStart(w *History, setting string) *History {
	snaps := w.snaps
	last := len(snaps) - 1
	for last >= 0 && snaps[last].Postgres == nil {
		last--
	}
	if last < 0 {
		return w
	}
	ref := snaps[last].Postgres
	first := last
	for i := last - 1; i >= 0; i-- {
		pg := snaps[i].Postgres
		if pg == nil {
			continue
		}
		if !pg.StartTime.Equal(ref.StartTime) || pg.Settings[setting].Value != ref.Settings[setting].Value {
			break
		}
		first = i
	}
	return w.Since(snaps[first].Time)
}
