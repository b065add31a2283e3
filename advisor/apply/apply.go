// Package apply is the advisor's apply mode: it changes the settings the rules recommend, one at
// a time and only where that is safe, journals every change before making it, measures whether
// the change helped and rolls back what made things worse.
//
// The flow of one change: a finding (rules.Finding) passes the guard (Judge: never fsync,
// synchronous_commit, full_page_writes, advice or never-auto findings, a wal_sync_method the
// probes did not find durable and available, values outside documented bounds), an intent is
// appended to the journal with the old value and the figures of the window before, the actuator
// (Postgres: ALTER SYSTEM and pg_reload_conf(); Kernel: /proc/sys/vm and a sysctl.d file) makes
// the change and confirms it, the outcome is journaled, and after the verification window the
// figures the change was meant to improve are compared with the ones before it. Worse beyond
// noise: the old value is restored and the recommendation rejected for a long while.
//
// The journal (JSON lines, each record fsynced) is the only state that outlives the process:
// what was applied, what is being verified, what was rejected and until when. docs/apply.md
// describes modes, privileges, the journal format, the figures and the thresholds.
package apply

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Mode is how far the apply mode goes.
type Mode string

// Modes.
const (
	// ModeOff changes nothing and journals nothing: the daemon is an advisor.
	ModeOff Mode = "off"
	// ModeDryRun journals and logs what it would change, and changes nothing.
	ModeDryRun Mode = "dry-run"
	// ModeOn changes settings, verifies them and rolls back what does not help.
	ModeOn Mode = "on"
)

// ParseMode parses "off", "dry-run" or "on".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOff, ModeDryRun, ModeOn:
		return m, nil
	}
	return "", fmt.Errorf("apply mode %q: want off, dry-run or on", s)
}

// Defaults of Config.
const (
	DefaultJournal        = "/var/lib/pgwal-advisor/apply.journal"
	DefaultSysctlFile     = "/etc/sysctl.d/90-pgwal-advisor.conf"
	DefaultVerifyWindow   = 5 * time.Minute
	DefaultCooldown       = 10 * time.Minute
	DefaultMaxPerDay      = 4
	DefaultRejectFor      = 7 * 24 * time.Hour
	DefaultConfirmTimeout = 30 * time.Second
	DefaultPollInterval   = time.Second
)

// Config configures a Manager.
type Config struct {
	Mode Mode
	// Settings are the settings the manager may change; nil means DefaultSettings(). Check
	// them with ParseSettings.
	Settings []string
	// Journal is the journal file (JSON lines); its directory must exist.
	Journal string
	// VerifyWindow is how long the figures are measured before and after a change.
	VerifyWindow time.Duration
	// Cooldown is the least time between the end of one change (verified, rolled back, failed)
	// and the next change. Zero is zero: no wait (the flags default to DefaultCooldown).
	Cooldown time.Duration
	// MaxPerDay caps the changes the daemon starts in any 24 hours. Zero is zero: the daemon
	// starts none (the flags default to DefaultMaxPerDay); an operator who sets 0 to stop
	// changes must not get the default.
	MaxPerDay int
	// RejectFor is how long a rolled-back recommendation is not proposed again, and how long
	// the daemon keeps its hands off a setting an operator changed.
	RejectFor time.Duration
	// PollInterval is how often Run reads the advisor's state; work is done only when a new
	// snapshot has arrived.
	PollInterval time.Duration
	// NoCrossover turns off crossover trials: a change the window after cannot judge is kept
	// unconfirmed (or, for a kernel knob, extended, then rolled back) as before/after says.
	NoCrossover bool
	// RestartWindow is when a route that can restart PostgreSQL (Patroni) may be asked to, for a
	// change waiting for a restart; the zero value is never.
	RestartWindow RestartWindow
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() (Config, error) {
	if c.Mode == "" {
		c.Mode = ModeOff
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return c, err
	}
	if c.Settings == nil {
		c.Settings = DefaultSettings()
	}
	settings, err := ParseSettings(c.Settings)
	if err != nil {
		return c, err
	}
	c.Settings = settings
	if c.Journal == "" {
		c.Journal = DefaultJournal
	}
	if c.VerifyWindow == 0 {
		c.VerifyWindow = DefaultVerifyWindow
	}
	if c.RejectFor == 0 {
		c.RejectFor = DefaultRejectFor
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.VerifyWindow < 0 || c.Cooldown < 0 || c.RejectFor < 0 || c.PollInterval < 0:
		return c, errors.New("apply: the verification window, cool-down, rejection period and poll interval must be positive durations")
	case c.MaxPerDay < 0:
		return c, fmt.Errorf("apply: at most %d changes a day: must not be negative", c.MaxPerDay)
	}
	return c, nil
}

// family says which figures judge a setting's change.
type family int

const (
	// walFamily settings act on WAL writes and flushes: judged by flush waits and WAL I/O time.
	walFamily family = iota + 1
	// checkpointFamily settings act on checkpoints and the kernel's write-back: judged by
	// checkpoint sync time and the Dirty+Writeback peak (and flush waits, which the write-back
	// slows at checkpoint ends).
	checkpointFamily
	// observeFamily settings change what is measured, not the write path: nothing to judge.
	observeFamily
	// kernelFamily are the vm.dirty_* knobs, recommended by writeback-stalls-wal: judged by the
	// same symptom (the WAL's write-back stall, flush waits, the pile), and kept only when it
	// got better: the lab measured lower values making the stall longer (docs/rules.md).
	kernelFamily
)

// kind is how a setting's value is written and compared.
type kind int

const (
	kindEnum kind = iota + 1
	kindBool
	kindMemory  // PostgreSQL memory units ("16MB"), compared in bytes
	kindSeconds // PostgreSQL time units ("5min"), compared in seconds
	kindNumber  // a plain number (checkpoint_completion_target, commit_delay)
	kindKernelBytes
)

// spec is what the apply mode knows of a setting: how its value reads, its documented bounds
// and which figures verify a change of it.
type spec struct {
	name   string
	kind   kind
	family family
	// min and max bound the value (bytes, seconds or the number); 0, 0 means no numeric bound.
	min, max float64
	// bounds says where min and max come from, for the refusal.
	bounds string
}

// neverApplied are changed by people only, whatever the flags: each trades durability for
// speed (or back), and that is a decision for whoever made it (rules/durability.go).
//
// The rest lower durability or hide corruption (PostgreSQL docs, runtime-config-wal and
// runtime-config-developer): no journal record may name them either.
func neverApplied() []string {
	return []string{collector.Fsync, collector.SynchronousCommit, collector.FullPageWrites,
		"wal_level", "data_sync_retry", "zero_damaged_pages", "ignore_checksum_failure",
		"ignore_invalid_pages", "ignore_system_indexes", "synchronous_standby_names", "wal_log_hints"}
}

// specs lists the settings the apply mode can change. Bounds are the documented ranges
// (PostgreSQL docs, runtime-config-wal and runtime-config-resource; kernel docs,
// admin-guide/sysctl/vm) narrowed to what is sane for a server: wal_buffers stops at 64MB, the
// most wal-buffers-small ever recommends (four WAL segments; docs/rules.md), so no rule and no
// journal can push it further.
func specs() []spec {
	const kB, MB, GB = 1 << 10, 1 << 20, 1 << 30
	return []spec{
		{name: collector.WALSyncMethod, kind: kindEnum, family: walFamily},
		{name: collector.WALBuffers, kind: kindMemory, family: walFamily, min: 64 * kB, max: 64 * MB, bounds: "64kB..64MB"},
		{name: collector.CheckpointCompletionTarget, kind: kindNumber, family: checkpointFamily, min: 0, max: 1, bounds: "0..1 (PostgreSQL docs)"},
		// The lower bound is two WAL segments, checked against the server's wal_segment_size.
		{name: collector.MaxWALSize, kind: kindMemory, family: checkpointFamily, min: 2 * 16 * MB, max: 1 << 40, bounds: "2 WAL segments..1TB"},
		{name: collector.MinWALSize, kind: kindMemory, family: checkpointFamily, min: 2 * 16 * MB, max: 1 << 40, bounds: "2 WAL segments..1TB"},
		{name: collector.CheckpointFlushAfter, kind: kindMemory, family: checkpointFamily, min: 0, max: 2 * MB, bounds: "0..2MB (PostgreSQL docs)"},
		{name: collector.BgwriterFlushAfter, kind: kindMemory, family: checkpointFamily, min: 0, max: 2 * MB, bounds: "0..2MB (PostgreSQL docs)"},
		{name: collector.CheckpointTimeout, kind: kindSeconds, family: checkpointFamily, min: 30, max: 86400, bounds: "30s..1d (PostgreSQL docs)"},
		{name: collector.WALWriterDelay, kind: kindSeconds, family: walFamily, min: 0.001, max: 10, bounds: "1ms..10s (PostgreSQL docs)"},
		{name: collector.WALWriterFlushAfter, kind: kindMemory, family: walFamily, min: 0, max: 1 * GB, bounds: "0..1GB"},
		{name: collector.CommitDelay, kind: kindNumber, family: walFamily, min: 0, max: 100000, bounds: "0..100000 microseconds (PostgreSQL docs)"},
		{name: collector.CommitSiblings, kind: kindNumber, family: walFamily, min: 0, max: 1000, bounds: "0..1000 (PostgreSQL docs)"},
		{name: collector.TrackWALIOTiming, kind: kindBool, family: observeFamily},
		// No durability change: only how full-page images are stored (figureNames judges it).
		{name: collector.WALCompression, kind: kindEnumOrBool, family: walFamily},
		// The kernel's own floor for dirty_bytes is two pages; 4MB and 8MB keep write-back from
		// starting on every few pages, which would make every write synchronous in effect.
		{name: KnobDirtyBackgroundBytes, kind: kindKernelBytes, family: kernelFamily, min: 4 * MB, max: 1 << 40, bounds: "4MB..1TB, and below the dirty threshold"},
		{name: KnobDirtyBytes, kind: kindKernelBytes, family: kernelFamily, min: 8 * MB, max: 1 << 40, bounds: "8MB..1TB, and above the background threshold"},
		// Both thresholds as one change (dirtypair.go): what writeback-stalls-wal recommends.
		{name: KnobDirtyThresholds, kind: kindKernelPair, family: kernelFamily, bounds: dirtyPairBounds},
	}
}

func specFor(name string) (spec, bool) {
	for _, s := range specs() {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

// DefaultSettings are the settings the apply mode may change unless --apply.settings says
// otherwise: the write-path settings the rules recommend, marked AppliedByDefault in
// collector.SettingTable.
func DefaultSettings() []string {
	var out []string
	for _, d := range collector.SettingTable() {
		if d.Apply == collector.AppliedByDefault {
			out = append(out, d.Name)
		}
	}
	return out
}

// ParseSettings checks a list of settings for --apply.settings: each must be one the apply mode
// knows how to bound and verify, and none may be one that is never applied.
func ParseSettings(list []string) ([]string, error) {
	out := make([]string, 0, len(list))
	for _, name := range list {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if slices.Contains(neverApplied(), name) {
			return nil, fmt.Errorf("apply settings: %s is never applied automatically (it trades durability for speed): remove it from --apply.settings", name)
		}
		if _, ok := specFor(name); !ok {
			known := make([]string, 0, len(specs()))
			for _, s := range specs() {
				known = append(known, s.name)
			}
			return nil, fmt.Errorf("apply settings: %s is not a setting the apply mode can bound and verify (known: %s)", name, strings.Join(known, ", "))
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}
