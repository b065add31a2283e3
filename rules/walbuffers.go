package rules

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// wal-buffers-small: when the WAL buffers are full a backend writes WAL out itself before it can
// insert more. Bulk loads fill buffers of any size, so the rule weighs what those writes cost,
// never their count, and steps one doubling at a time on evidence measured at today's size
// (docs/rules.md, wal-buffers-small; docs/benchmarks.md, seed 001 table).
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
			"docs/rules.md, wal-buffers-small", "docs/benchmarks.md, seed 001 table",
		},
		Eval: withDefaults(evalWALBuffersSmall),
	}
}

// walBuffersShare: beyond one WAL segment wal_buffers stays at most shared_buffers /
// walBuffersShare, since the buffers are shared memory on top of it. A bound chosen, not measured
// (docs/rules.md, wal-buffers-small, "The shared_buffers bound beyond 16MB").
const walBuffersShare = 4

// walBuffersDoublingKeep is the part of the buffer-full writes' wait one doubling of wal_buffers
// beyond a WAL segment leaves, as the lab measured it: less falls than the halving the writes'
// count predicts (docs/benchmarks.md, wal_buffers calibration table; docs/rules.md, Predicted effect).
const walBuffersDoublingKeep = 0.77

// walBufferFacts is what wal-buffers-small judges, all of it measured at the current size.
type walBufferFacts struct {
	size     int64  // wal_buffers now, bytes
	sizeText string // wal_buffers as pg_settings shows it
	// run is the window cut to the snapshots since the server started with size.
	run    *History
	writes bufferWrites
	// cost is the buffer-full writes' time per second of wall time, summed over backends
	// (writes.Rate x writes.PerWrite); 0 when a write's cost is unknown.
	cost float64
	// hasWaits says enough wait-event samples were taken to judge; waitShare is then the share
	// of active backends' samples spent on buffer-full writes, waitSamples how many there were
	// and activeMean the mean active backends.
	hasWaits    bool
	waitShare   float64
	waitSamples int64
	activeMean  float64
	// sharedBuffers is shared_buffers in bytes, when known; sharedBuffersText as shown.
	sharedBuffers     int64
	hasSharedBuffers  bool
	sharedBuffersText string
	pendingRestart    bool // a change of wal_buffers already waits for a restart
}

func evalWALBuffersSmall(in Input) Result {
	f, lacking := walBufferFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	v, next := decideWALBuffers(f, in.Config)
	switch v {
	case verdictUnknown:
		return notEnough("what buffer-full writes cost is unknown: turn track_wal_io_timing on, enable the probes, or sample wait events")
	case verdictFire:
		return found(walBuffersFinding(f, next, in.Config.WALBuffersFloor))
	case verdictAdvise:
		return found(walBuffersAdvice(f, next))
	}
	return found()
}

// decideWALBuffers weighs the buffer-full writes' cost against the thresholds and sizes the next
// step: twice the current size, at least WALBuffersFloor, at most WALBuffersMax. A step beyond a
// quarter of shared_buffers is advice only.
func decideWALBuffers(f walBufferFacts, t Thresholds) (verdict, int64) {
	next := min(max(2*f.size, t.WALBuffersFloor), t.WALBuffersMax)
	rare := f.writes.Rate < t.BuffersFullMinRate || f.writes.Share < t.BuffersFullMinShare
	cheap := f.cost < t.BuffersFullCost && f.waitShare < t.BuffersFullWaitShare
	switch {
	case f.size >= t.WALBuffersMax:
		return verdictQuiet, 0 // nothing more to win from the buffers; other rules look at the device
	case rare:
		return verdictQuiet, 0 // a few buffer-full writes a minute cost nothing worth a restart
	case f.writes.PerWrite <= 0 && !f.hasWaits:
		return verdictUnknown, 0
	case cheap || next <= f.size:
		return verdictQuiet, 0
	case next > t.WALBuffersFloor && (!f.hasSharedBuffers || f.sharedBuffers/walBuffersShare < next):
		return verdictAdvise, next
	}
	return verdictFire, next
}

// walBufferFactsOf gathers the facts, or says what is missing to judge. At WALBuffersMax there
// is no step to weigh, so nothing past the size is gathered.
func walBufferFactsOf(in Input) (walBufferFacts, string) {
	var f walBufferFacts
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	if pg.WAL == nil {
		return f, "buffer-full writes need pg_stat_wal (PostgreSQL 14+)"
	}
	s := settings(pg.Settings)
	size, ok := s.bytes(collector.WALBuffers)
	if !ok {
		return f, "wal_buffers is missing from pg_settings"
	}
	t := in.Config
	f.size, f.sizeText = size, s[collector.WALBuffers].Value
	if size >= t.WALBuffersMax {
		return f, ""
	}
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return f, cold
	}
	// Only what was measured at today's size counts: a window that reaches back before the
	// restart that brought it in would blame it for the old size's writes.
	f.run = sinceStart(w, collector.WALBuffers)
	if span := f.run.Span(); span < t.MinSpan {
		return f, fmt.Sprintf("wal_buffers=%s has run for %s since the server started with it; need %s at this size",
			f.sizeText, span.Round(time.Second), t.MinSpan)
	}
	method, _ := s.value(collector.WALSyncMethod)
	probe, _ := freshProbe(in)
	if f.writes, ok = measureBufferWrites(f.run, s, method, probe, t); !ok {
		return f, fmt.Sprintf("no pg_stat_wal interval without a reset in the last %s", t.Window)
	}
	f.cost = f.writes.Rate * f.writes.PerWrite
	// WALBufMapping is waiting to replace a buffer page, which only happens when the buffers are
	// full; WAL write waits are shared with commits, so only their buffer-full share counts.
	waits := f.run.WaitEvents()
	if f.hasWaits = waits.Samples >= t.MinWaitSamples && waits.ActiveBackends > 0; f.hasWaits {
		f.waitShare = waits.Share(collector.EventLWLockWALBufMap) +
			waits.Share(collector.EventIOWALWrite, collector.EventLWLockWALWrite)*f.writes.Share
	}
	f.waitSamples, f.activeMean = waits.Samples, waits.MeanActive()
	f.sharedBuffers, f.hasSharedBuffers = s.bytes(collector.SharedBuffers)
	f.sharedBuffersText = "unknown"
	if f.hasSharedBuffers {
		f.sharedBuffersText = s[collector.SharedBuffers].Value
	}
	f.pendingRestart = s[collector.WALBuffers].PendingRestart
	return f, ""
}

// walBuffersEvidence is the evidence both findings cite, and the clause that says what the
// buffer-full writes cost.
func walBuffersEvidence(f walBufferFacts) ([]Evidence, string) {
	b := f.writes
	ev := []Evidence{
		{Name: "wal_buffers_bytes", Value: float64(f.size), Unit: UnitBytes},
		{Name: "wal_buffers_run_seconds", Value: f.run.Span().Seconds(), Unit: UnitSeconds},
		{Name: "buffers_full_rate", Value: b.Rate, Unit: UnitPerSecond},
		{Name: "buffers_full_share", Value: b.Share, Unit: UnitRatio},
	}
	ev = append(ev, b.estimateEvidence()...)
	var why []string
	if b.PerWrite > 0 {
		ev = append(ev,
			Evidence{Name: "write_seconds", Value: b.PerWrite, Unit: UnitSeconds},
			Evidence{Name: "buffers_full_cost", Value: f.cost, Unit: UnitRatio})
		why = append(why, fmt.Sprintf("at %s per write (%s) that is about %.2f s of backend time per second", humanSeconds(b.PerWrite), b.Source, f.cost))
	}
	if f.hasWaits {
		ev = append(ev,
			Evidence{Name: "buffer_wait_share", Value: f.waitShare, Unit: UnitRatio},
			Evidence{Name: "wait_samples", Value: float64(f.waitSamples), Unit: UnitCount})
		why = append(why, fmt.Sprintf("%s of active backends' time goes to waiting on WAL buffer writes", pct(f.waitShare)))
	}
	return ev, strings.Join(why, ", and ")
}

// walBuffersAdvice says why wal_buffers is not raised to next: it would be more than the share
// of shared_buffers the advisor gives the WAL buffers.
func walBuffersAdvice(f walBufferFacts, next int64) Finding {
	ev, why := walBuffersEvidence(f)
	if f.hasSharedBuffers {
		ev = append(ev, Evidence{Name: "shared_buffers_bytes", Value: float64(f.sharedBuffers), Unit: UnitBytes})
	}
	b := f.writes
	return Finding{
		Severity:    Info,
		Current:     "wal_buffers=" + f.sizeText + ", shared_buffers=" + f.sharedBuffersText,
		Recommended: fmt.Sprintf("wal_buffers=%s only with shared_buffers of at least %s", collector.FormatMemory(next), collector.FormatMemory(walBuffersShare*next)),
		Action:      ActionAdvice,
		Summary: fmt.Sprintf("At wal_buffers=%s, measured over %s at that size (since the server started with it), the WAL buffers still "+
			"fill %.0f times a second, %s of WAL writes%s; %s. The next step, %s, is more than a quarter of shared_buffers "+
			"(%s), the most the advisor gives the WAL buffers, so nothing is recommended for wal_buffers.",
			f.sizeText, f.run.Span().Round(time.Second), b.Rate, pct(b.Share), b.estimateNote(), why, collector.FormatMemory(next), f.sharedBuffersText),
		Evidence: ev,
		ExpectedEffect: "None by itself: it says why wal_buffers is not raised further. With shared_buffers of at least " +
			collector.FormatMemory(walBuffersShare*next) + " the rule would recommend " + collector.FormatMemory(next) + ".",
	}
}

// walBuffersFinding recommends next. segment is one WAL segment (WALBuffersFloor): from there on
// a doubling keeps walBuffersDoublingKeep of the wait, not half.
func walBuffersFinding(f walBufferFacts, next, segment int64) Finding {
	ev, why := walBuffersEvidence(f)
	if next > segment {
		ev = append(ev, Evidence{Name: "shared_buffers_bytes", Value: float64(f.sharedBuffers), Unit: UnitBytes})
	}
	pending := ""
	if f.pendingRestart {
		pending = " (a change of wal_buffers is already waiting for a restart)"
	}
	b := f.writes
	return Finding{
		Severity:    Warning,
		Setting:     collector.WALBuffers,
		Current:     f.sizeText,
		Recommended: collector.FormatMemory(next),
		Action:      ActionRestart,
		Summary: fmt.Sprintf("The WAL buffers (wal_buffers=%s) fill %.0f times a second, %s of WAL writes%s; %s%s.",
			f.sizeText, b.Rate, pct(b.Share), b.estimateNote(), why, pending),
		Evidence: ev,
		ExpectedEffect: "Fewer, larger WAL writes, more of them done by the WAL writer instead of the " +
			"backends (lab, seed 001's 2M-row INSERT at 64kB -> 16MB -> 64MB: docs/benchmarks.md, seed 001 table " +
			"(131 -> 3.41 -> 2.81 s with open_datasync, 5.49 -> 3.31 -> 2.85 s with fdatasync)). Costs " + collector.FormatBytes(float64(next-f.size)) + " more shared memory.",
		Predicted: walBuffersPrediction(f, next, segment),
	}
}

// walBuffersPrediction: one buffer-full write per wal_buffers of WAL, so up to one WAL segment
// their cost shrinks by size/next; beyond it by walBuffersDoublingKeep per doubling. The rest of
// the measured WAL write wait stays (docs/rules.md, Predicted effect).
func walBuffersPrediction(f walBufferFacts, next, segment int64) *Predicted {
	b := f.writes
	writesKeep := float64(f.size) / float64(next)
	keep, measuredNote := writesKeep, ""
	if f.size >= segment {
		keep = math.Pow(walBuffersDoublingKeep, math.Log2(float64(next)/float64(f.size)))
		measuredNote = fmt.Sprintf("; beyond one WAL segment their cost shrinks by %.2f (%.2f per doubling, as the lab measured)", keep, walBuffersDoublingKeep)
	}
	var saved, model float64
	var how string
	if b.PerWrite > 0 {
		saved, model = f.cost*(1-keep), f.cost
		how = fmt.Sprintf("wal_buffers %s -> %s (one buffer-full write per wal_buffers of WAL: %.3g/s -> %.3g/s at %s each, %s%s)",
			f.sizeText, collector.FormatMemory(next), b.Rate, b.Rate*writesKeep, humanSeconds(b.PerWrite), b.Source, measuredNote)
	} else {
		saved, model = f.waitShare*f.activeMean*(1-keep), f.waitShare*f.activeMean
		how = fmt.Sprintf("wal_buffers %s -> %s (one buffer-full write per wal_buffers of WAL: the %s of active time spent on buffer-full writes shrinks to %s%s)",
			f.sizeText, collector.FormatMemory(next), pct(f.waitShare), pct(f.waitShare*keep), measuredNote)
	}
	// A bulk load writes because the buffers are full, so the measured wait is mostly these
	// writes: its buffer-full share shrinks by keep. Where nothing is measured, the model's cost.
	share := min(max(b.Share, 0), 1)
	p := predictWALKeep(f.run, (1-share)+share*keep, model, how)
	if p.Name != PredictWALWait && p.Name != PredictWALIO || strings.HasPrefix(p.Basis, "modelled") {
		p = predictWAL(f.run, saved, model, how)
	}
	return p
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
