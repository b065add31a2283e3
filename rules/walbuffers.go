package rules

import (
	"fmt"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// wal-buffers-small: when the WAL buffers are full a backend must write WAL out itself before
// it can insert more (docs: runtime-config-wal, wal_buffers; pg_stat_wal.wal_buffers_full).
// Bulk loads fill the buffers whatever their size (docs/benchmarks.md, seed 001: buffers_full large in every run),
// so the rule weighs what those writes cost, never their count alone: measured WAL write time
// (track_wal_io_timing), the probes' cost of one write under the configured method, and the
// share of active backends waiting on WAL buffer replacement (WALBufMapping) or on WAL writes
// attributable to buffer-full writes. docs/benchmarks.md, seed 001 table (400k rows): at 64kB -> 1MB -> 16MB
// the bulk insert took 27.2 -> 10.3 -> 0.73 s with open_datasync and 1.47 -> 1.28 -> 0.72 s with
// fdatasync (64MB: 0.67 s), which is why the recommendation jumps to at least 16MB - PostgreSQL's own automatic
// size on any shared_buffers of 512MB or more, one WAL segment - and doubles beyond, up to 64MB.
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
			"docs/benchmarks.md, seed 001 table",
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
	cv, _ := s.value(collector.WALBuffers)
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
			"backends (lab, seed 001 bulk insert at 64kB -> 16MB: 140 s -> 6.3 s with open_datasync, " +
			"2.55 s -> 1.71 s with fdatasync). Costs " + humanBytes(float64(next-cur)) + " more shared memory.",
	})
}
