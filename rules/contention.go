package rules

import (
	"fmt"
	"math"
	"strconv"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// wal-lock-contention: when many backends commit at once they queue on the WALWrite lock and
// on the flush itself. commit_delay makes the flushing backend wait a little so that more
// commits share one flush; the docs (wal-configuration, pgtestfsync) say to start at half the
// single 8kB write flush time, and commit_siblings (default 5) keeps the delay off when few
// transactions are active. But the lab does not support it: docs/benchmarks.md, seed 002 table
// (4 ms simulated device), measured commit_delay=2000, commit_siblings=5 at 5788 vs 5827 tps at
// 64 clients and 6208 vs 7440 (-17%) at 100, one run each. A recommendation the lab contradicts
// goes, so the rule only informs: the contention is real and visible in the wait events, the
// figures are the operator's to weigh, and it never warns or alerts until a measured region
// shows a gain beyond the run-to-run spread.
func walLockContention() Rule {
	return Rule{
		ID:       "wal-lock-contention",
		Title:    "Many concurrent commits wait on WAL flushes",
		Severity: Info,
		Settings: []string{collector.CommitDelay, collector.CommitSiblings},
		Rationale: "With many concurrent committers, backends queue on the WALWrite lock and the flush. " +
			"commit_delay lets more commits share one flush; PostgreSQL's docs suggest half the single 8kB " +
			"flush time, which the probes measure on the WAL's own file system. The lab measured no gain from it " +
			"(docs/benchmarks.md, seed 002), so this is information, not a warning.",
		Sources: []string{
			pgDocs + "wal-configuration.html",
			pgDocs + "runtime-config-wal.html#GUC-COMMIT-DELAY",
			pgDocs + "pgtestfsync.html",
			pgDocs + "monitoring-stats.html#WAIT-EVENT-LWLOCK-TABLE",
			"seed 002 (1-100 concurrent clients)", "docs/benchmarks.md, seed 002 table (commit_delay=2000: 5788 vs 5827 tps at 64 clients, 6208 vs 7440 at 100)",
		},
		Eval: withDefaults(evalWALLockContention),
	}
}

func evalWALLockContention(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	s := settings(pg.Settings)
	if on, ok := s.on(collector.Fsync); ok && !on {
		return found()
	}
	delay, ok := s.seconds(collector.CommitDelay)
	if !ok {
		if d, okN := s.number(collector.CommitDelay); okN {
			delay, ok = d/1e6, true // microseconds when the unit is not reported
		}
	}
	if !ok {
		return notEnough("commit_delay is missing from pg_settings")
	}
	if delay > 0 {
		return found() // already grouping commits; its value is the operator's trade
	}
	t := in.Config
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return notEnough("%s", cold)
	}
	waits := w.WaitEvents()
	if waits.Samples < t.MinWaitSamples {
		return notEnough("need %d wait-event samples in the last %s, have %d", t.MinWaitSamples, t.Window, waits.Samples)
	}
	active := waits.MeanActive()
	share := waits.Share(collector.EventLWLockWALWrite, collector.EventIOWALSync, collector.EventIOWALWrite)
	if active < t.ContentionMinActive || share < t.ContentionInfoShare {
		return found()
	}

	// The single 8kB flush time: the probe's figure for the configured method, else this
	// server's own measured sync time per sync.
	var flush float64
	source := ""
	method, _ := s.value(collector.WALSyncMethod)
	if probe, _ := freshProbe(in); probe != nil {
		if m, ok := probeResult(probe, method, 1); ok {
			flush, source = usSeconds(m.LatencyUS.Mean), "probe, "+method
		}
	}
	if flush == 0 {
		if on, _ := s.on(collector.TrackWALIOTiming); on {
			syncs, secs := w.Change(WALSyncs), w.Change(WALSyncSeconds)
			if syncs.Delta > 0 && secs.Delta > 0 {
				flush, source = secs.Delta/syncs.Delta, "wal_sync_time"
			}
		}
	}
	if flush == 0 {
		return notEnough("the single 8kB flush time is unknown: enable the probes or turn track_wal_io_timing on")
	}

	sev := Info
	recUS := int64(math.Round(flush / 2 * 1e6))
	recUS = min(max(recUS, 1), 100000) // commit_delay's range is 0..100000 microseconds
	cur, _ := s.value(collector.CommitDelay)
	evidence := []Evidence{
		{Name: "mean_active_backends", Value: active, Unit: UnitCount},
		{Name: "wal_flush_wait_share", Value: share, Unit: UnitRatio},
		{Name: "flush_seconds", Value: flush, Unit: UnitSeconds},
		{Name: "wait_samples", Value: float64(waits.Samples), Unit: UnitCount},
	}
	effect := "Possibly more commits per WAL flush, at the price of up to commit_delay more latency per commit; " +
		"on the lab's 4 ms device it did not pay (docs/benchmarks.md, seed 002: 5788 vs 5827 tps at 64 " +
		"clients, 6208 vs 7440 at 100). Measure before and after."
	fs := []Finding{{
		Severity:    sev,
		Setting:     collector.CommitDelay,
		Current:     cur,
		Recommended: strconv.FormatInt(recUS, 10),
		Action:      ActionAdvice,
		Summary: fmt.Sprintf("On average %.0f backends are active and %s of their time goes to waiting on WAL "+
			"flushes (WALWrite lock, WAL write and sync I/O). A flush takes %s (%s); commit_delay at half that "+
			"lets concurrent commits share it.", active, pct(share), humanSeconds(flush), source),
		Evidence:       evidence,
		ExpectedEffect: effect,
	}}
	if siblings, ok := s.number(collector.CommitSiblings); ok && siblings >= active {
		cs, _ := s.value(collector.CommitSiblings)
		fs = append(fs, Finding{
			Severity:    sev,
			Setting:     collector.CommitSiblings,
			Current:     cs,
			Recommended: "5",
			Action:      ActionAdvice,
			Summary: fmt.Sprintf("commit_siblings=%s is at least the %.0f backends usually active, so commit_delay "+
				"would almost never apply.", cs, active),
			Evidence:       evidence,
			ExpectedEffect: effect,
		})
	}
	return found(fs...)
}
