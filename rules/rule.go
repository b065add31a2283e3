package rules

import (
	"fmt"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// Rule is one recommendation: what it looks at, what it may propose and why. Its metadata is
// what docs/rules.md, the landing page and the alert rules show.
type Rule struct {
	// ID is stable kebab-case; alert rules and docs refer to it.
	ID    string
	Title string
	// Severity is the highest severity the rule can report.
	Severity Severity
	// Settings are the settings and knobs the rule may recommend.
	Settings []string
	// Rationale says why the rule exists, in a sentence or three.
	Rationale string
	// Sources are where the rationale comes from: PostgreSQL or kernel documentation, seed
	// documents, the lab's measurements.
	Sources []string
	// Immediate marks rules whose findings are configuration facts read at one instant
	// (pg_settings, mount options). A fact does not flap, so the Tracker shows it at once and
	// clears it as soon as it is gone instead of waiting out the spans meant for measurements.
	Immediate bool
	// Eval judges one Input. It must be pure: no I/O, no clock, no shared state.
	Eval func(in Input) Result
}

// Input is everything a rule may look at.
type Input struct {
	// History holds the snapshots, oldest first; nil or short means a cold start.
	History *History
	// Probe is the latest sync-latency probe report; nil when probing is off or has not run.
	Probe *probes.Report
	// ProbeDisabled, when not empty, says why the advisor does not probe (and what to set).
	ProbeDisabled string
	// Now is the evaluation time; rules never read the clock.
	Now time.Time
	// Config holds the thresholds; the zero value means DefaultThresholds().
	Config Thresholds
}

// withDefaults lets a rule's Eval be called directly with a zero Config, as Run allows.
func withDefaults(eval func(Input) Result) func(Input) Result {
	return func(in Input) Result {
		if in.Config == (Thresholds{}) {
			in.Config = DefaultThresholds()
		}
		return eval(in)
	}
}

// verdict is what a rule's decide step concludes from its facts and the thresholds alone.
type verdict int

const (
	// verdictQuiet: judged, nothing to report.
	verdictQuiet verdict = iota
	// verdictUnknown: a fact the decision needs is unknown, so the rule has not enough data.
	verdictUnknown
	// verdictFire: the condition holds; the finding recommends the remedy.
	verdictFire
	// verdictAdvise: the condition holds, but the remedy lies outside what the advisor measured
	// or allows; an info finding says so and recommends nothing.
	verdictAdvise
)

func (v verdict) String() string {
	switch v {
	case verdictQuiet:
		return "quiet"
	case verdictUnknown:
		return "unknown"
	case verdictFire:
		return "fire"
	case verdictAdvise:
		return "advise"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Outcome is one rule's Result from one evaluation.
type Outcome struct {
	Rule string
	Result
}

// Run evaluates rules once, without noise control: `check`, whose window is itself the span of
// evidence, can print its findings directly. It fills in each finding's Rule, sets FirstSeen
// and LastSeen to in.Now and makes a nil Evidence empty.
func Run(rules []Rule, in Input) []Outcome {
	if in.Config == (Thresholds{}) {
		in.Config = DefaultThresholds()
	}
	out := make([]Outcome, 0, len(rules))
	for _, r := range rules {
		res := r.Eval(in)
		for i := range res.Findings {
			f := &res.Findings[i]
			f.Rule = r.ID
			f.FirstSeen, f.LastSeen = in.Now, in.Now
			// The JSON contract promises a list: a rule that cites no figure gives [], not null.
			if f.Evidence == nil {
				f.Evidence = []Evidence{}
			}
		}
		out = append(out, Outcome{Rule: r.ID, Result: res})
	}
	return out
}

// Findings flattens outcomes into their findings, in rule order.
func Findings(outcomes []Outcome) []Finding {
	var fs []Finding
	for _, o := range outcomes {
		fs = append(fs, o.Findings...)
	}
	return fs
}

// All returns the rule set in a fixed order: durability first, then performance. It is a
// function, not a package variable, so that no caller can change the set another one sees.
func All() []Rule {
	return []Rule{
		fsyncOff(),
		walOnVolatileStorage(),
		writeCacheUnsafe(),
		durabilityTradedOff(),
		syncMethodSlow(),
		openSyncWithSmallBuffers(),
		walBuffersSmall(),
		flushAfterDisabled(),
		writebackStallsWAL(ProvenDirtyRows()),
		checkpointStalls(),
		walLockContention(),
		fullPageImages(),
		trackWALIOTimingOff(),
		probeDisabled(),
		haOverride(),
		haStandbyDiffers(),
	}
}

// Thresholds are the figures the rules and the Tracker compare against. Every field is named
// for what it bounds; DefaultThresholds documents the defaults and where they come from.
type Thresholds struct {
	// RaiseAfter is how long a measured warning or critical condition must hold before the
	// Tracker shows it. Info findings and configuration facts show at once.
	RaiseAfter time.Duration
	// ClearAfter is how long a shown measured finding must be absent before it clears.
	ClearAfter time.Duration
	// StaleAfter drops a shown finding that no evaluation could confirm or deny (not enough
	// data) for this long since it was last seen.
	StaleAfter time.Duration

	// Window is the span of history over which rates are computed.
	Window time.Duration
	// MinSpan is the least history a rate-based rule needs; less is a cold start.
	MinSpan time.Duration
	// CheckpointWindow is the span over which checkpoints are counted and compared.
	CheckpointWindow time.Duration

	// ProbeMaxAge ignores a probe report that finished longer ago than this.
	ProbeMaxAge time.Duration
	// ProbeMinSamples is the least samples per method for a comparison.
	ProbeMinSamples int
	// ProbeZ is the one-sided z score a difference of means must reach to be significant.
	ProbeZ float64
	// MinImprovement is the least relative gain (1 - candidate/current mean) worth a change.
	MinImprovement float64
	// MinGain is the least absolute gain per flush worth a change of wal_sync_method.
	MinGain time.Duration

	// BulkBuffersFullShare is the share of WAL writes that are buffer-full writes above which
	// the server's write pattern is "bulk" (the open_* methods pay per write).
	BulkBuffersFullShare float64
	// BuffersFullMinRate and BuffersFullMinShare gate the buffer rules: below them buffer-full
	// writes are too rare to matter whatever they cost.
	BuffersFullMinRate  float64
	BuffersFullMinShare float64
	// BuffersFullCost is the time spent in buffer-full writes, in seconds per second of wall
	// time (summed over backends), above which they are a cost worth removing.
	BuffersFullCost float64
	// BuffersFullWaitShare is the share of active backends' samples spent waiting on WAL buffer
	// replacement (attributed as documented) above which the buffers are a cost.
	BuffersFullWaitShare float64
	// WALBuffersFloor is the least wal_buffers recommended; WALBuffersMax the most.
	WALBuffersFloor int64
	WALBuffersMax   int64

	// MinCheckpoints is the least completed checkpoints in CheckpointWindow to judge them.
	MinCheckpoints int
	// CheckpointSyncSlow is the mean sync phase per checkpoint above which checkpoints stall.
	CheckpointSyncSlow time.Duration
	// CompletionTarget is the checkpoint_completion_target recommended (and the least accepted).
	CompletionTarget float64
	// WritebackPileMin is the least Dirty+Writeback that counts as a pile a WAL flush can wait
	// behind; WritebackPileSeconds the least it must be in seconds of the WAL device's write
	// rate in the same interval (where the device is known).
	WritebackPileMin     int64
	WritebackPileSeconds float64
	// WritebackFlushSlow is the least WAL I/O time per flush that counts as a stall, and
	// WritebackFlushRise how many times its window's usual (lower quartile) level it must be.
	WritebackFlushSlow time.Duration
	WritebackFlushRise float64
	// WritebackWaitShare is the least share of active backends' samples waiting on WAL I/O
	// that counts as a stall, and WritebackWaitRise how far above the usual share it must be.
	WritebackWaitShare float64
	WritebackWaitRise  float64
	// WritebackWALShare is the largest share of the host's writes the WAL may make for the
	// pile to be another writer's.
	WritebackWALShare float64
	// WritebackStallMin is the least stall (summed over the window) worth a finding.
	WritebackStallMin time.Duration

	// MinWaitSamples is the least pg_stat_activity samples to judge wait events.
	MinWaitSamples int64
	// ContentionMinActive is the least mean active backends for "many concurrent committers".
	ContentionMinActive float64
	// ContentionInfoShare is the share of active backends' samples waiting on WAL flushes for
	// an (info) finding.
	ContentionInfoShare float64

	// FPIShareMin is the share of the WAL's bytes that are full-page images from which an
	// estimate without a reading of the WAL is acted on and checkpoints are spaced (with a
	// reading, FPISavingMin is the floor); FPIMinWALRate the least WAL per second for images to
	// matter.
	FPIShareMin   float64
	FPIMinWALRate int64
	// FPIRecordBytes is the size of a WAL record without its image, taken off the WAL's bytes per
	// record to estimate the images' bytes.
	FPIRecordBytes int64
	// FPISavingMin is the least share of the WAL's bytes a compression method must remove, as
	// measured on the server's own images, to be recommended; FPIIdleCPUShare the most of the
	// host's idle CPUs compressing may take at the window's image rate, at the CPU time measured
	// here (docs/benchmarks.md, "Compression grid"). FPIReadingMaxAge is the oldest reading of
	// the images the rule judges by.
	FPISavingMin     float64
	FPIIdleCPUShare  float64
	FPIReadingMaxAge time.Duration
	// FPIWriteCostMin is the least WAL write cost (share of active backends' samples waiting on
	// the WAL's writes) for a warning.
	FPIWriteCostMin float64
	// FPIDeviceShareMin is the least share of its device's written bytes the WAL must be for
	// fewer WAL bytes to relieve what its flushes wait behind; below it another writer's bytes
	// are the device's load (docs/rules.md, full-page-images; docs/benchmarks.md, default hosts).
	FPIDeviceShareMin float64
	// FPISpacingTimeout is the longest checkpoint_timeout full-page-images recommends.
	FPISpacingTimeout time.Duration
}

// DefaultThresholds returns the documented defaults (docs/rules.md explains each).
func DefaultThresholds() Thresholds {
	return Thresholds{
		RaiseAfter: 2 * time.Minute,
		ClearAfter: 5 * time.Minute,
		StaleAfter: 15 * time.Minute,

		Window:           5 * time.Minute,
		MinSpan:          30 * time.Second,
		CheckpointWindow: time.Hour,

		ProbeMaxAge:     time.Hour,
		ProbeMinSamples: 10,
		// A significant and a substantial gain: neither alone keeps a method change from
		// following the run-to-run spread (docs/rules.md, Probe comparisons).
		ProbeZ:         1.96,
		MinImprovement: 0.20,
		MinGain:        100 * time.Microsecond,

		BulkBuffersFullShare: 0.10,
		BuffersFullMinRate:   1,
		BuffersFullMinShare:  0.05,
		BuffersFullCost:      0.05,
		BuffersFullWaitShare: 0.10,
		WALBuffersFloor:      16 << 20,
		WALBuffersMax:        64 << 20,

		MinCheckpoints:     2,
		CheckpointSyncSlow: time.Second,
		CompletionTarget:   0.9,

		// Chosen, not yet measured on a grid (docs/rules.md, writeback-stalls-wal, "Why the
		// thresholds").
		WritebackPileMin:     64 << 20,
		WritebackPileSeconds: 2,
		WritebackFlushSlow:   50 * time.Millisecond,
		WritebackFlushRise:   4,
		WritebackWaitShare:   0.5,
		WritebackWaitRise:    0.25,
		WritebackWALShare:    0.25,
		WritebackStallMin:    5 * time.Second,

		MinWaitSamples:      20,
		ContentionMinActive: 8,
		ContentionInfoShare: 0.3,

		// The record size the largest the lab measured (docs/benchmarks.md, full page images
		// table); the share, CPU and cost bounds chosen, not yet measured on a grid
		// (docs/rules.md, full-page-images).
		FPIShareMin:       0.5,
		FPIMinWALRate:     1 << 20,
		FPIRecordBytes:    72,
		FPISavingMin:      0.25,
		FPIIdleCPUShare:   0.5,
		FPIReadingMaxAge:  30 * time.Minute,
		FPIWriteCostMin:   0.1,
		FPIDeviceShareMin: 0.3,
		FPISpacingTimeout: 15 * time.Minute,
	}
}
