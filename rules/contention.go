package rules

import (
	"fmt"
	"strconv"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// wal-lock-contention: when many backends commit at once they queue on the WALWrite lock and on
// the flush itself; commit_delay lets more commits share one flush (docs: wal-configuration). The
// lab's commit grid measured a gain beyond the spread in one region only, so the rule warns only
// inside commitDelayRegions, with the measured gain as its prediction, and elsewhere informs
// (docs/rules.md, wal-lock-contention; docs/benchmarks.md, commit grouping table).
func walLockContention() Rule {
	return Rule{
		ID:       "wal-lock-contention",
		Title:    "Many concurrent commits wait on WAL flushes",
		Severity: Warning,
		Settings: []string{collector.CommitDelay, collector.CommitSiblings},
		Rationale: "With many concurrent committers, backends queue on the WALWrite lock and the flush. " +
			"commit_delay lets more commits share one flush, at the price of latency. The lab's commit grid " +
			"measured a gain beyond the spread only at about 16 concurrent committers on a 1 ms device with " +
			"commit_delay=500 us, a loss there with 2000 us, and nothing beyond the spread elsewhere, so the " +
			"rule recommends it only there and informs elsewhere (docs/rules.md, wal-lock-contention).",
		Sources: []string{
			pgDocs + "wal-configuration.html",
			pgDocs + "runtime-config-wal.html#GUC-COMMIT-DELAY",
			pgDocs + "pgtestfsync.html",
			pgDocs + "monitoring-stats.html#WAIT-EVENT-LWLOCK-TABLE",
			"seed 002 (1-100 concurrent clients)",
			"docs/rules.md, wal-lock-contention", "docs/benchmarks.md, commit grouping table",
		},
		Eval: withDefaults(evalWALLockContention),
	}
}

// commitDelayRegion is where the lab measured commit_delay gaining beyond the run-to-run spread
// (docs/benchmarks.md, commit grouping tables): mean active backends and the single 8kB flush
// time it covers, the setting measured, and the gain in commits per second.
type commitDelayRegion struct {
	minActive, maxActive float64
	minFlush, maxFlush   float64 // seconds
	delayUS, siblings    int
	gain                 float64
	measured             string
}

// commitDelayRegions: the grid's one gain beyond the spread, 16 clients on the 1 ms device. The
// row covers ContentionMinActive up to 32, halfway on a log scale between the 16 measured to gain
// and the 64 measured not to (a choice, not a measurement), and flush times around 1 ms.
func commitDelayRegions() []commitDelayRegion {
	return []commitDelayRegion{
		{minActive: 8, maxActive: 32, minFlush: 0.0005, maxFlush: 0.002, delayUS: 500, siblings: 5, gain: 0.12,
			measured: "16 clients on the 1 ms device: 5144 vs 4595 tps"},
	}
}

func findCommitDelayRegion(active, flush float64) (commitDelayRegion, bool) {
	for _, r := range commitDelayRegions() {
		if active >= r.minActive && active <= r.maxActive && flush >= r.minFlush && flush < r.maxFlush {
			return r, true
		}
	}
	return commitDelayRegion{}, false
}

// contentionFacts is what wal-lock-contention judges over Window.
type contentionFacts struct {
	fsyncOff bool    // nothing is flushed: nothing to share
	delay    float64 // commit_delay, seconds; above 0 commits are grouped already
	window   *History
	// The wait-event samples: how many, the mean active backends, and the share of their
	// samples waiting on WAL flushes (WALWrite lock, WAL write and sync I/O).
	waitSamples int64
	active      float64
	share       float64
	// flush is the single 8kB flush time in seconds (0: unknown), flushSource where it came
	// from: the probe for the configured method, else this server's wal_sync_time per sync.
	flush       float64
	flushSource string
	// The settings as pg_settings shows them; siblings is commit_siblings, when hasSiblings.
	delayText, siblingsText string
	siblings                float64
	hasSiblings             bool
}

// contentionDecision is the verdict, the region the facts fall in (verdictFire), and whether
// commit_siblings must change to what the region measured.
type contentionDecision struct {
	verdict  verdict
	region   commitDelayRegion
	siblings bool
}

func evalWALLockContention(in Input) Result {
	f, lacking := contentionFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	d := decideContention(f, in.Config)
	switch d.verdict {
	case verdictUnknown:
		return notEnough("the single 8kB flush time is unknown: enable the probes or turn track_wal_io_timing on")
	case verdictAdvise:
		return found(contentionInfo(f))
	case verdictFire:
		return found(contentionFindings(f, d)...)
	}
	return found()
}

func decideContention(f contentionFacts, t Thresholds) contentionDecision {
	switch {
	case f.fsyncOff || f.delay > 0:
		return contentionDecision{} // already grouping commits; its value is the operator's trade
	case f.active < t.ContentionMinActive || f.share < t.ContentionInfoShare:
		return contentionDecision{}
	case f.flush == 0:
		return contentionDecision{verdict: verdictUnknown}
	}
	region, ok := findCommitDelayRegion(f.active, f.flush)
	if !ok {
		// Outside what the lab measured to gain: the contention is real, nothing is recommended.
		return contentionDecision{verdict: verdictAdvise}
	}
	return contentionDecision{verdict: verdictFire, region: region,
		siblings: f.hasSiblings && (f.siblings >= f.active || int(f.siblings) != region.siblings)}
}

// contentionFactsOf gathers the facts, or says what is missing to judge.
func contentionFactsOf(in Input) (contentionFacts, string) {
	var f contentionFacts
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	s := settings(pg.Settings)
	if on, ok := s.on(collector.Fsync); ok && !on {
		f.fsyncOff = true
		return f, ""
	}
	delay, ok := s.seconds(collector.CommitDelay)
	if !ok {
		if d, okN := s.number(collector.CommitDelay); okN {
			delay, ok = d/1e6, true // microseconds when the unit is not reported
		}
	}
	if !ok {
		return f, "commit_delay is missing from pg_settings"
	}
	if f.delay = delay; delay > 0 {
		return f, ""
	}
	t := in.Config
	f.window = sinceWindow(in, t.Window)
	if cold := coldStart(f.window, t); cold != "" {
		return f, cold
	}
	waits := f.window.WaitEvents()
	if waits.Samples < t.MinWaitSamples {
		return f, fmt.Sprintf("need %d wait-event samples in the last %s, have %d", t.MinWaitSamples, t.Window, waits.Samples)
	}
	f.waitSamples, f.active = waits.Samples, waits.MeanActive()
	f.share = waits.Share(collector.EventLWLockWALWrite, collector.EventIOWALSync, collector.EventIOWALWrite)
	f.flush, f.flushSource = singleFlush(in, f.window, s)
	f.delayText, f.siblingsText = s[collector.CommitDelay].Value, s[collector.CommitSiblings].Value
	f.siblings, f.hasSiblings = s.number(collector.CommitSiblings)
	return f, ""
}

// singleFlush is the single 8kB flush time: the probe's figure for the configured method, else
// this server's own measured sync time per sync; 0 when neither is known.
func singleFlush(in Input, w *History, s settings) (float64, string) {
	method, _ := s.value(collector.WALSyncMethod)
	if probe, _ := freshProbe(in); probe != nil {
		if m, ok := probeResult(probe, method, 1); ok {
			return usSeconds(m.LatencyUS.Mean), "probe, " + method
		}
	}
	if on, _ := s.on(collector.TrackWALIOTiming); on {
		syncs, secs := w.Change(WALSyncs), w.Change(WALSyncSeconds)
		if syncs.Delta > 0 && secs.Delta > 0 {
			return secs.Delta / syncs.Delta, "wal_sync_time"
		}
	}
	return 0, ""
}

func contentionEvidence(f contentionFacts) []Evidence {
	return []Evidence{
		{Name: "mean_active_backends", Value: f.active, Unit: UnitCount},
		{Name: "wal_flush_wait_share", Value: f.share, Unit: UnitRatio},
		{Name: "flush_seconds", Value: f.flush, Unit: UnitSeconds},
		{Name: "wait_samples", Value: float64(f.waitSamples), Unit: UnitCount},
	}
}

// contentionInfo reports contention outside the region the lab measured a gain in.
func contentionInfo(f contentionFacts) Finding {
	return Finding{
		Severity: Info,
		Action:   ActionAdvice,
		Summary: fmt.Sprintf("On average %.0f backends are active and %s of their time goes to waiting on WAL "+
			"flushes (WALWrite lock, WAL write and sync I/O); a flush takes %s (%s). commit_delay is not "+
			"recommended here: the lab measured a gain beyond the spread only at about 16 concurrent committers on a "+
			"1 ms device (docs/benchmarks.md, commit grouping table).", f.active, pct(f.share), humanSeconds(f.flush), f.flushSource),
		Evidence: contentionEvidence(f),
		ExpectedEffect: "None recommended. The lab's figures: at 64-200 clients and on the 4 ms device every commit_delay " +
			"point tried stayed within the run-to-run spread (-19% to +23%), and 2000 us lost 29% at 16 clients on the 1 ms device.",
	}
}

// contentionFindings recommend the region's commit_delay, and its commit_siblings where they differ.
func contentionFindings(f contentionFacts, d contentionDecision) []Finding {
	region, ev := d.region, contentionEvidence(f)
	var predicted *Predicted
	if rate := f.window.Change(WALRecords); rate.OK() && rate.Seconds > 0 {
		predicted = &Predicted{Name: PredictWALRecordRate, Current: rate.Rate(), Value: rate.Rate() * (1 + region.gain), Unit: UnitPerSecond,
			Basis: fmt.Sprintf("WAL records per second, which a fixed commit mix writes in proportion to its commits, rise by the "+
				"gain the lab measured in this region (%s, +%.0f%%; docs/benchmarks.md, commit grouping table)", region.measured, 100*region.gain)}
	}
	effect := fmt.Sprintf("About %.0f%% more commits per second, at the price of up to %d us more latency per commit "+
		"(the lab: %s; docs/benchmarks.md, commit grouping table). Measure before and after.", 100*region.gain, region.delayUS, region.measured)
	fs := []Finding{{
		Severity:    Warning,
		Setting:     collector.CommitDelay,
		Current:     f.delayText,
		Recommended: strconv.Itoa(region.delayUS),
		Action:      ActionAdvice,
		Summary: fmt.Sprintf("On average %.0f backends are active and %s of their time goes to waiting on WAL "+
			"flushes (WALWrite lock, WAL write and sync I/O); a flush takes %s (%s). This is where the lab measured "+
			"commit_delay=%d us with commit_siblings=%d letting concurrent commits share a flush: +%.0f%% commits.",
			f.active, pct(f.share), humanSeconds(f.flush), f.flushSource, region.delayUS, region.siblings, 100*region.gain),
		Evidence:       ev,
		ExpectedEffect: effect,
		Predicted:      predicted,
	}}
	if d.siblings {
		fs = append(fs, Finding{
			Severity:    Warning,
			Setting:     collector.CommitSiblings,
			Current:     f.siblingsText,
			Recommended: strconv.Itoa(region.siblings),
			Action:      ActionAdvice,
			Summary: fmt.Sprintf("commit_siblings=%s: the lab's gain was measured with %d (with %s and %.0f backends usually "+
				"active, commit_delay would apply at other times than it measured).", f.siblingsText, region.siblings, f.siblingsText, f.active),
			Evidence:       ev,
			ExpectedEffect: effect,
			Predicted:      predicted,
		})
	}
	return fs
}
