package apply

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// guardInput is what the guard looks at besides the finding.
type guardInput struct {
	allowed []string
	// snapshot is the latest snapshot (enumvals, the kernel's thresholds); probe the latest
	// probe report.
	snapshot *collector.Snapshot
	probe    *probes.Report
	// live is the setting's live value when it could be read (its enumvals are the server's).
	live *Value
	// segmentBytes is wal_segment_size (0: the default 16MB).
	segmentBytes int64
	ledger       *ledger
	now          time.Time
}

// judge decides whether a finding may be applied. It returns "" when it may, and otherwise
// exactly why not, for the operator: the refusal is shown by `apply`, logged and in Status.
func judge(f rules.Finding, in guardInput) string {
	if why := staticRefusal(f); why != "" {
		return why
	}
	sp, ok := specFor(f.Setting)
	if !ok {
		return fmt.Sprintf("the apply mode has no bounds or verification for %s", f.Setting)
	}
	if isKernel(sp.kind) != (f.Action == rules.ActionSysctl) {
		return fmt.Sprintf("action %s does not fit %s", f.Action, f.Setting)
	}
	if !slices.Contains(in.allowed, f.Setting) {
		return fmt.Sprintf("%s is not in --apply.settings (allowed: %s)", f.Setting, strings.Join(in.allowed, ", "))
	}
	target := strings.TrimSpace(f.Recommended)
	if target == "" {
		return "the finding recommends no value"
	}
	if why := checkBounds(sp, target, in); why != "" {
		return why
	}
	if sp.kind == kindKernelPair {
		p, err := parseDirtyPair(target)
		if err == nil {
			err = checkNewPair(p)
		}
		if err != nil {
			return err.Error()
		}
	}
	if f.Setting == collector.WALSyncMethod {
		if why := checkSyncMethod(target, in); why != "" {
			return why
		}
	}
	if sp.kind == kindEnum || sp.kind == kindBool {
		if why := checkAccepted(f.Setting, target, in); why != "" {
			return why
		}
	}
	if in.ledger != nil {
		if why, blocked := in.ledger.blocked(f.Setting, target, in.now); blocked {
			return why
		}
	}
	return ""
}

// staticRefusal is the part of the guard that looks at the finding alone: no setting, a setting
// that is never applied, an action class that is not for the advisor to carry out.
func staticRefusal(f rules.Finding) string {
	if f.Setting == "" {
		return "the finding names no setting to change"
	}
	if slices.Contains(neverApplied(), f.Setting) {
		return fmt.Sprintf("%s is never applied automatically: it trades durability for speed (or back), a decision for whoever set it", f.Setting)
	}
	switch f.Action {
	case rules.ActionAdvice:
		return "the recommendation is advice for a person to carry out (action advice), not a setting the advisor can change"
	case rules.ActionNeverAuto:
		return fmt.Sprintf("the rule marks %s never-auto: it lowers durability or cannot be verified", f.Setting)
	case rules.ActionReload, rules.ActionRestart, rules.ActionSysctl:
		return ""
	}
	return fmt.Sprintf("unknown action %q", f.Action)
}

// checkBounds refuses a value outside the setting's documented bounds.
func checkBounds(sp spec, target string, in guardInput) string {
	if sp.kind == kindBool {
		if _, ok := parseBool(target); !ok {
			return fmt.Sprintf("%s=%q is not a boolean", sp.name, target)
		}
		return ""
	}
	v, isNum, err := numeric(sp, target)
	if !isNum {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("%s=%q: %v", sp.name, target, err)
	}
	lo, hi := sp.min, sp.max
	if sp.name == collector.MaxWALSize || sp.name == collector.MinWALSize {
		seg := in.segmentBytes
		if seg <= 0 {
			seg = 16 << 20
		}
		// PostgreSQL docs: min_wal_size and max_wal_size must be at least twice wal_segment_size.
		lo = float64(2 * seg)
	}
	if v < lo || (hi > 0 && v > hi) {
		return fmt.Sprintf("%s=%s is outside the bounds the apply mode accepts (%s)", sp.name, target, sp.bounds)
	}
	if sp.kind != kindKernelBytes {
		return ""
	}
	var k *collector.Kernel
	if in.snapshot != nil {
		k = in.snapshot.Kernel
	}
	if k == nil {
		return fmt.Sprintf("%s: the latest snapshot has no kernel facts, so the value cannot be checked against the other threshold", sp.name)
	}
	// The kernel cuts a background threshold at or above the foreground one to half of it
	// (mm/page-writeback.c, domain_dirty_limits): such a value would not mean what it says.
	switch sp.name {
	case KnobDirtyBackgroundBytes:
		limit := k.DirtyThresholdBytes
		if k.VM.DirtyBytes > 0 {
			limit = k.VM.DirtyBytes
		}
		if int64(v) >= limit {
			return fmt.Sprintf("%s=%s is not below the dirty threshold (%s, vm.dirty_bytes or vm.dirty_ratio): the kernel would halve it", sp.name, target, collector.FormatMemory(limit))
		}
	case KnobDirtyBytes:
		bg := k.DirtyBackgroundThresholdBytes
		if k.VM.DirtyBackgroundBytes > 0 {
			bg = k.VM.DirtyBackgroundBytes
		}
		if int64(v) <= bg {
			return fmt.Sprintf("%s=%s is not above the background threshold (%s): apply vm.dirty_background_bytes first", sp.name, target, collector.FormatMemory(bg))
		}
	}
	return ""
}

// checkSyncMethod refuses a wal_sync_method that the latest probe report did not measure as
// available and syncing, or any change while the probes' durability verdict is too_fast.
func checkSyncMethod(target string, in guardInput) string {
	if !slices.Contains(probes.DurableMethods(), target) {
		return fmt.Sprintf("wal_sync_method=%s is not one of the syncing methods (%s)", target, strings.Join(probes.DurableMethods(), ", "))
	}
	p := in.probe
	if p == nil {
		return "no probe report: a wal_sync_method is changed only to one the probes measured on the WAL's file system (set --probe.dir)"
	}
	if p.Durability.Status == probes.VerdictTooFast {
		return fmt.Sprintf("the probes' durability verdict is too_fast (%s): no wal_sync_method is changed automatically while syncs may not reach stable storage", p.Durability.Reason)
	}
	m, ok := p.Method(target, 1)
	switch {
	case !ok:
		return fmt.Sprintf("the probes did not measure wal_sync_method=%s", target)
	case !m.Available:
		return fmt.Sprintf("the probes found wal_sync_method=%s not available here: %s", target, m.Error)
	case m.Samples == 0:
		return fmt.Sprintf("the probes have no samples of wal_sync_method=%s", target)
	}
	// A sync that costs about what an unsynced write costs did not reach the device (seed 000:
	// "is open_sync really syncing?"); probes.EqualCostRatio is the verdict's own bound.
	if w, ok := p.Method(probes.Write, 1); ok && w.Samples > 0 && w.LatencyUS.P50 > 0 &&
		m.LatencyUS.P50 < probes.EqualCostRatio*w.LatencyUS.P50 {
		return fmt.Sprintf("wal_sync_method=%s syncs in %.0f µs (p50), about what an unsynced write takes (%.0f µs): it may not reach the device", target, m.LatencyUS.P50, w.LatencyUS.P50)
	}
	return ""
}

// checkAccepted refuses an enum or boolean value the server does not accept.
func checkAccepted(setting, target string, in guardInput) string {
	var vals []string
	if in.live != nil {
		vals = in.live.EnumVals
	}
	if len(vals) == 0 && in.snapshot != nil && in.snapshot.Postgres != nil {
		vals = in.snapshot.Postgres.Settings[setting].EnumVals
	}
	sp, _ := specFor(setting)
	if sp.kind == kindEnum && len(vals) == 0 {
		return fmt.Sprintf("the values the server accepts for %s are unknown (pg_settings.enumvals)", setting)
	}
	if len(vals) > 0 && !slices.Contains(vals, target) {
		return fmt.Sprintf("the server does not accept %s=%s (it accepts %s)", setting, target, strings.Join(vals, ", "))
	}
	return ""
}
