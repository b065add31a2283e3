package rules

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// pgDocs is the root of the PostgreSQL documentation the sources cite.
const pgDocs = "https://www.postgresql.org/docs/current/"

// fsync-off: "turning off fsync ... can result in unrecoverable data corruption in the event of a
// power failure or system crash" (docs: runtime-config-wal, fsync). Seed 000 asked how to get its
// speed safely; seed 004 shows the same loss from a lying drive (docs/rules.md, fsync-off).
func fsyncOff() Rule {
	return Rule{
		ID:       "fsync-off",
		Title:    "fsync is off: a crash can corrupt the cluster",
		Severity: Critical,
		Settings: []string{collector.Fsync},
		Rationale: "With fsync=off PostgreSQL never forces WAL or data files to stable storage: an " +
			"operating-system crash or power loss can leave the cluster corrupted beyond what WAL replay " +
			"repairs, not merely missing recent commits. What it saves is one flush per commit, which the " +
			"probes measure; the safe ways to buy that speed are sync-method-slow and wal-lock-contention.",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-FSYNC",
			pgDocs + "wal-reliability.html",
			"seed 000 (fsync off 75 tps vs 22-30 tps on)", "seed 004 (power-cut corruption)",
		},
		Immediate: true,
		Eval:      withDefaults(evalFsyncOff),
	}
}

func evalFsyncOff(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	s := settings(pg.Settings)
	on, ok := s.on(collector.Fsync)
	if !ok {
		return notEnough("fsync is missing from pg_settings")
	}
	if on {
		return found()
	}
	f := Finding{
		Severity:    Critical,
		Setting:     collector.Fsync,
		Current:     "off",
		Recommended: "on",
		// The advisor leaves fsync to people whichever way it moves: turning it on slows every
		// commit and repairs nothing a crash already corrupted (docs/rules.md, fsync-off).
		Action: ActionNeverAuto,
		Summary: "fsync is off: PostgreSQL never flushes WAL or data files to stable storage, so an " +
			"operating-system crash or power loss can corrupt the cluster beyond repair by WAL replay.",
		Evidence: []Evidence{{Name: "fsync", Value: 0, Unit: UnitBool}},
		ExpectedEffect: "Commits wait for their WAL flush again. Writes made while fsync was off are " +
			"only safe once flushed: run sync (or initdb --sync-only) after turning it on.",
	}
	if probe, _ := freshProbe(in); probe != nil {
		method, _ := s.value(collector.WALSyncMethod)
		if m, ok := probeResult(probe, method, 1); ok {
			sec := usSeconds(m.LatencyUS.Mean)
			f.Evidence = append(f.Evidence, Evidence{Name: "flush_seconds", Value: sec, Unit: UnitSeconds})
			f.ExpectedEffect = fmt.Sprintf("Each commit waits for one WAL flush again: about %s with %s "+
				"measured here. Writes made while fsync was off are only safe once flushed: run sync (or "+
				"initdb --sync-only) after turning it on.", humanSeconds(sec), method)
		}
	}
	return found(f)
}

// wal-on-volatile-storage: WAL on tmpfs or ramfs (kernel doc filesystems/tmpfs) is lost on power
// loss or reboot, and with it every commit since the last checkpoint; nobarrier (kernel doc
// admin-guide/ext4) lets fsync return before the drive's cache is flushed. Seed 002 put the WAL on
// tmpfs for speed (docs/rules.md, wal-on-volatile-storage; docs/benchmarks.md, seed 002 table).
func walOnVolatileStorage() Rule {
	return Rule{
		ID:       "wal-on-volatile-storage",
		Title:    "The WAL is on storage that does not survive a power cut",
		Severity: Critical,
		Settings: []string{collector.HostWALFileSystem, collector.HostMountOptions},
		Rationale: "WAL on tmpfs or ramfs vanishes on power loss or reboot: committed transactions are " +
			"lost and the data files cannot be made consistent. A nobarrier mount lets fsync return before " +
			"the drive's write cache reaches stable media.",
		Sources: []string{
			"https://www.kernel.org/doc/html/latest/filesystems/tmpfs.html",
			"https://www.kernel.org/doc/html/latest/admin-guide/ext4.html (barrier, nobarrier)",
			"https://www.kernel.org/doc/html/latest/block/writeback_cache_control.html",
			pgDocs + "wal-reliability.html",
			"seed 002 (WAL on tmpfs)", "docs/rules.md, wal-on-volatile-storage", "docs/benchmarks.md, seed 002 table",
		},
		Immediate: true,
		Eval:      withDefaults(evalWALOnVolatileStorage),
	}
}

func evalWALOnVolatileStorage(in Input) Result {
	snap, ok := in.History.Latest()
	if !ok {
		return notEnough("no snapshot yet")
	}
	st := snap.WALStorage
	if st == nil {
		return notEnough("%s", "no WAL storage facts in the latest snapshot"+partFailed(snap, collector.PartWALStorage))
	}
	var fs []Finding
	if st.Volatile || st.FSType == "tmpfs" || st.FSType == "ramfs" {
		fs = append(fs, Finding{
			Severity:    Critical,
			Setting:     collector.HostWALFileSystem,
			Current:     st.FSType,
			Recommended: "a persistent file system on a durable device",
			Action:      ActionAdvice,
			Summary: fmt.Sprintf("The WAL directory %s is on %s (mounted at %s), which lives in memory: a "+
				"power cut or reboot loses the WAL, every commit since the last checkpoint, and the means "+
				"to make the data files consistent.", st.Path, st.FSType, st.MountPoint),
			Evidence: []Evidence{{Name: "wal_volatile", Value: 1, Unit: UnitBool}},
			ExpectedEffect: "Commits become durable; commit throughput falls to what the device's flush " +
				"allows (lab: docs/benchmarks.md, seed 002 table (224 tps on a 4 ms device vs 8316 on tmpfs at one client); group " +
				"commit recovers much of it with many clients).",
		})
	}
	if opt := noBarrierOption(st); opt != "" {
		sev := Warning
		reason := "the file system no longer flushes the drive's write cache, so fsync can return before the WAL reaches stable media"
		if writeThroughOnly(st) {
			// Every disk reports a write-through cache: cache flushes are no-ops there, so the
			// option costs nothing today - but it will when the disk or its setting changes.
			sev = Info
			reason = "harmless while every disk under it reports a write-through cache, unsafe if that changes"
		}
		fs = append(fs, Finding{
			Severity:    sev,
			Setting:     collector.HostMountOptions,
			Current:     opt,
			Recommended: "barrier (remove " + opt + ")",
			Action:      ActionAdvice,
			Summary:     fmt.Sprintf("The WAL's file system %s is mounted with %s: %s.", st.MountPoint, opt, reason),
			Evidence: []Evidence{
				{Name: "nobarrier", Value: 1, Unit: UnitBool},
				{Name: "write_cache_write_back", Value: boolValue(st.WriteCache == "write back"), Unit: UnitBool},
			},
			ExpectedEffect: "fsync waits until the drive has the WAL on stable media.",
		})
	}
	return found(fs...)
}

func noBarrierOption(st *collector.Storage) string {
	for _, o := range st.MountOptions {
		if o == "nobarrier" || o == "barrier=0" {
			return o
		}
	}
	if st.NoBarrier {
		return "nobarrier"
	}
	return ""
}

func writeThroughOnly(st *collector.Storage) bool {
	if len(st.Disks) == 0 {
		return st.WriteCache == "write through"
	}
	for _, d := range st.Disks {
		if d.WriteCache != "write through" {
			return false
		}
	}
	return true
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// write-cache-unsafe: a rotating disk cannot persist a write in well under a millisecond, so a
// sync that fast was acknowledged by a volatile cache (seed 004). On a non-rotational device a
// lying cache and power-loss protection look alike from latency alone: a warning there
// (docs/rules.md, write-cache-unsafe).
func writeCacheUnsafe() Rule {
	return Rule{
		ID:       "write-cache-unsafe",
		Title:    "Syncs complete faster than the device can persist them",
		Severity: Critical,
		Settings: []string{collector.HostWriteCache},
		Rationale: "When a sync returns faster than the device can physically persist data, a volatile " +
			"write cache acknowledged it, and a power cut loses commits PostgreSQL reported as durable - " +
			"seed 004 corrupted the database at every power pull with the drives' write cache on.",
		Sources: []string{
			pgDocs + "wal-reliability.html",
			"https://www.kernel.org/doc/html/latest/block/queue-sysfs.html (write_cache)",
			"https://www.kernel.org/doc/html/latest/block/writeback_cache_control.html",
			"seed 004 (corruption with hdparm -W1, none with -W0)", "seed 000 (is open_sync really syncing?)",
		},
		Eval: withDefaults(evalWriteCacheUnsafe),
	}
}

// writeCacheFacts is what write-cache-unsafe judges: the probes' durability verdict and the
// device's facts, from the verdict or, where it lacks them, the collector.
type writeCacheFacts struct {
	verdict    probes.Verdict
	rotational *bool  // nil when unknown
	writeCache string // "write back", "write through" or "" when unknown
}

func evalWriteCacheUnsafe(in Input) Result {
	probe, missing := freshProbe(in)
	if probe == nil {
		return notEnough("%s", missing)
	}
	f := writeCacheFacts{verdict: probe.Durability, rotational: probe.Durability.Facts.Rotational, writeCache: probe.Durability.Facts.WriteCache}
	if snap, ok := in.History.Latest(); ok && snap.WALStorage != nil {
		if f.rotational == nil {
			f.rotational = snap.WALStorage.Rotational
		}
		if f.writeCache == "" {
			f.writeCache = snap.WALStorage.WriteCache
		}
	}
	switch decideWriteCache(f) {
	case verdictFire:
		return found(writeCacheFinding(f))
	case verdictAdvise:
		return found(writeCacheUnknown(f))
	}
	return found()
}

// decideWriteCache: syncs too fast to be persisted fire; a verdict that cannot tell is worth
// knowing only where the device caches writes.
func decideWriteCache(f writeCacheFacts) verdict {
	switch {
	case f.verdict.Status == probes.VerdictTooFast:
		return verdictFire
	case f.verdict.Status == probes.VerdictUnknown && f.writeCache == "write back":
		return verdictAdvise
	}
	return verdictQuiet
}

// writeCacheEvidence is the verdict's figures, and rotational when it came from the collector
// instead (the verdict cites it when its facts knew it): cited once.
func writeCacheEvidence(f writeCacheFacts) []Evidence {
	ev := verdictEvidence(f.verdict)
	if _, cited := f.verdict.Evidence["rotational"]; !cited && f.rotational != nil {
		ev = append(ev, Evidence{Name: "rotational", Value: boolValue(*f.rotational), Unit: UnitBool})
	}
	return ev
}

func (f writeCacheFacts) current() string {
	if f.writeCache == "" {
		return "unknown"
	}
	return f.writeCache
}

func writeCacheFinding(f writeCacheFacts) Finding {
	sev := Warning
	what := "A non-rotational device may have power-loss protection that makes this safe; confirm " +
		"with its vendor, or turn its write cache off."
	if f.rotational != nil && *f.rotational {
		sev = Critical
		what = "A rotating disk cannot persist a write this fast: its volatile write cache acknowledged " +
			"it, and a power cut loses commits."
	}
	return Finding{
		Severity:    sev,
		Setting:     collector.HostWriteCache,
		Current:     f.current(),
		Recommended: "write through, or a cache with power-loss protection",
		Action:      ActionAdvice,
		Summary:     strings.TrimSpace("Syncs complete faster than the device can persist them. " + f.verdict.Reason + " " + what),
		Evidence:    writeCacheEvidence(f),
		ExpectedEffect: "Commits survive a power cut (seed 004: no corruption in three power pulls with the " +
			"write cache off, corruption every time with it on); each flush then costs what the media takes.",
	}
}

func writeCacheUnknown(f writeCacheFacts) Finding {
	return Finding{
		Severity:    Info,
		Setting:     collector.HostWriteCache,
		Current:     f.current(),
		Recommended: "confirm power-loss protection",
		Action:      ActionAdvice,
		Summary: strings.TrimSpace("The WAL's device caches writes and its sync latency cannot tell whether " +
			"that cache survives a power cut. " + f.verdict.Reason),
		Evidence:       writeCacheEvidence(f),
		ExpectedEffect: "Knowing whether a power cut can lose acknowledged commits.",
	}
}

// verdictUnit is the unit of a verdict figure that is not in microseconds (probes.Judge names
// them).
func verdictUnit(name string) string {
	switch name {
	case "rotational", "write_cache_write_back", "fua", "volatile", "virtual":
		return UnitBool
	case "sync_write_ratio":
		return UnitRatio
	}
	return ""
}

// verdictEvidence turns the verdict's figures into evidence in base units: the probes name
// microsecond figures with a _us suffix.
func verdictEvidence(v probes.Verdict) []Evidence {
	keys := make([]string, 0, len(v.Evidence))
	for k := range v.Evidence {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Evidence, 0, len(keys))
	for _, k := range keys {
		val := v.Evidence[k]
		if name, ok := strings.CutSuffix(k, "_us"); ok {
			out = append(out, Evidence{Name: name + "_seconds", Value: usSeconds(val), Unit: UnitSeconds})
			continue
		}
		out = append(out, Evidence{Name: k, Value: val, Unit: verdictUnit(k)})
	}
	return out
}

// durability-traded-off: synchronous_commit=off loses the last commits on a crash but never
// corrupts (docs: wal-async-commit, "up to three times wal_writer_delay"); full_page_writes=off
// risks torn pages that WAL replay cannot repair unless the storage writes pages atomically
// (docs: runtime-config-wal, full_page_writes). Both are legitimate choices, so they are info,
// and never applied automatically.
func durabilityTradedOff() Rule {
	return Rule{
		ID:       "durability-traded-off",
		Title:    "Durability is traded for speed",
		Severity: Info,
		Settings: []string{collector.SynchronousCommit, collector.FullPageWrites},
		Rationale: "synchronous_commit=off and full_page_writes=off are deliberate trades of durability " +
			"for speed. They are worth knowing about, and what is at risk should be said plainly; the " +
			"advisor never turns them back on by itself, since the trade may be intended.",
		Sources: []string{
			pgDocs + "wal-async-commit.html",
			pgDocs + "runtime-config-wal.html#GUC-SYNCHRONOUS-COMMIT",
			pgDocs + "runtime-config-wal.html#GUC-FULL-PAGE-WRITES",
			"seed 001 (synchronous_commit=off users pay for slow buffer-full writes too)",
		},
		Immediate: true,
		Eval:      withDefaults(evalDurabilityTradedOff),
	}
}

func evalDurabilityTradedOff(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	s := settings(pg.Settings)
	var fs []Finding
	if v, ok := s.value(collector.SynchronousCommit); ok && strings.EqualFold(v, "off") {
		window := "three times wal_writer_delay"
		if d, ok := s.seconds(collector.WALWriterDelay); ok {
			window = fmt.Sprintf("%s (three times wal_writer_delay)", humanSeconds(3*d))
		}
		fs = append(fs, Finding{
			Severity:    Info,
			Setting:     collector.SynchronousCommit,
			Current:     v,
			Recommended: "on",
			Action:      ActionNeverAuto,
			Summary: "synchronous_commit=off: a commit returns before its WAL is flushed. A crash loses " +
				"the transactions of up to the last " + window + "; the database stays consistent.",
			Evidence:       []Evidence{{Name: "synchronous_commit", Value: 0, Unit: UnitBool}},
			ExpectedEffect: "Committed transactions survive a crash; each commit waits for its WAL flush.",
		})
	}
	if on, ok := s.on(collector.FullPageWrites); ok && !on {
		fs = append(fs, Finding{
			Severity:    Info,
			Setting:     collector.FullPageWrites,
			Current:     "off",
			Recommended: "on",
			Action:      ActionNeverAuto,
			Summary: "full_page_writes=off: a crash during a page write can leave a torn 8kB page that WAL " +
				"replay cannot repair. Safe only where the storage writes whole pages atomically.",
			Evidence:       []Evidence{{Name: "full_page_writes", Value: 0, Unit: UnitBool}},
			ExpectedEffect: "Torn pages are repaired from WAL after a crash; more WAL is written after each checkpoint.",
		})
	}
	return found(fs...)
}

// track-wal-io-timing-off: without it pg_stat_wal's write and sync times stay 0 (docs:
// runtime-config-statistics, track_wal_io_timing), so the buffer rules weigh buffer-full
// writes by probes and wait-event samples only. The cost is a clock read per WAL write and
// sync, which pg_test_timing measures.
func trackWALIOTimingOff() Rule {
	return Rule{
		ID:       "track-wal-io-timing-off",
		Title:    "WAL I/O timing is not collected",
		Severity: Info,
		Settings: []string{collector.TrackWALIOTiming},
		Rationale: "With track_wal_io_timing off, pg_stat_wal's write and sync times stay zero and the " +
			"rules must estimate what buffer-full writes and flushes cost from probes and wait-event " +
			"samples. Turning it on costs one clock read per WAL write and sync.",
		Sources: []string{
			pgDocs + "runtime-config-statistics.html#GUC-TRACK-WAL-IO-TIMING",
			pgDocs + "pgtesttiming.html",
			pgDocs + "monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW",
		},
		Immediate: true,
		Eval:      withDefaults(evalTrackWALIOTimingOff),
	}
}

func evalTrackWALIOTimingOff(in Input) Result {
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	on, ok := settings(pg.Settings).on(collector.TrackWALIOTiming)
	if !ok || on {
		// Before 14 there is no such setting and nothing to advise.
		return found()
	}
	return found(Finding{
		Severity:    Info,
		Setting:     collector.TrackWALIOTiming,
		Current:     "off",
		Recommended: "on",
		Action:      ActionReload,
		Summary: "track_wal_io_timing is off: pg_stat_wal's write and sync times stay zero, so what " +
			"buffer-full writes and flushes cost is estimated from probes and wait events instead of measured. " +
			"The price is one clock read per WAL write and sync, which pg_test_timing measures on this " +
			"machine (typically tens of nanoseconds with a TSC clock source).",
		Evidence:       []Evidence{{Name: "track_wal_io_timing", Value: 0, Unit: UnitBool}},
		ExpectedEffect: "wal_write_time and wal_sync_time are measured, and the WAL rules weigh measured costs.",
	})
}

// probeDisabled reports that the sync probes do not run, so the rules that compare methods or
// judge the write cache (sync-method-slow, write-cache-unsafe, wal-lock-contention's commit_delay)
// cannot speak. The probes must write on the WAL's own file system to measure what the WAL pays;
// the advisor refuses any other directory rather than measure the wrong device.
func probeDisabled() Rule {
	return Rule{
		ID:       "probe-disabled",
		Title:    "Sync probes are off",
		Severity: Info,
		Settings: []string{collector.HostProbeDir},
		Rationale: "Without probes on the WAL's file system the advisor cannot compare wal_sync_method " +
			"choices or tell whether the write cache acknowledges syncs it has not persisted.",
		Sources:   []string{"seed 000", "seed 004", pgDocs + "pgtestfsync.html"},
		Immediate: true,
		Eval:      withDefaults(evalProbeDisabled),
	}
}

func evalProbeDisabled(in Input) Result {
	if in.ProbeDisabled == "" {
		return found()
	}
	return found(Finding{
		Severity: Info,
		Setting:  collector.HostProbeDir,
		Action:   ActionAdvice,
		Summary:  "Sync probes are off: " + in.ProbeDisabled,
		ExpectedEffect: "With --probe.dir on the WAL's file system, sync-method-slow and write-cache-unsafe " +
			"can judge from measured sync latency.",
	})
}
