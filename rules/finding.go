package rules

import (
	"fmt"
	"time"
)

// Severity orders findings: Info < Warning < Critical. The zero value is no severity at all.
type Severity int

// Severities. `pgwal-advisor check` exits 0 for none or Info, 1 for Warning, 2 for Critical.
const (
	Info Severity = iota + 1
	Warning
	Critical
)

// String returns "info", "warning" or "critical".
func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Critical:
		return "critical"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// MarshalText makes a severity a JSON string, as the check --format json contract wants.
func (s Severity) MarshalText() ([]byte, error) {
	switch s {
	case Info, Warning, Critical:
		return []byte(s.String()), nil
	}
	return nil, fmt.Errorf("marshal severity %d: not info, warning or critical", int(s))
}

// UnmarshalText parses "info", "warning" or "critical".
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSeverity parses "info", "warning" or "critical".
func ParseSeverity(name string) (Severity, error) {
	switch name {
	case "info":
		return Info, nil
	case "warning":
		return Warning, nil
	case "critical":
		return Critical, nil
	}
	return 0, fmt.Errorf("parse severity %q: want info, warning or critical", name)
}

// Action says how a recommendation is applied, and so whether the advisor may ever apply it by
// itself.
type Action string

// Action classes.
const (
	// ActionReload applies online: ALTER SYSTEM and pg_reload_conf().
	ActionReload Action = "reload"
	// ActionRestart needs a server restart to take effect.
	ActionRestart Action = "restart"
	// ActionSysctl is a kernel knob, applied by writing /proc/sys/vm.
	ActionSysctl Action = "sysctl"
	// ActionAdvice is for a human to decide and carry out (hardware, mounts, workload).
	ActionAdvice Action = "advice"
	// ActionNeverAuto lowers durability or cannot be verified, so it is never applied
	// automatically, whatever the configuration says.
	ActionNeverAuto Action = "never-auto"
)

// Units of Evidence values: base units, as the metrics use them.
const (
	UnitSeconds        = "seconds"
	UnitBytes          = "bytes"
	UnitBytesPerSecond = "bytes_per_second"
	UnitPerSecond      = "per_second"
	UnitRatio          = "ratio"
	// UnitSecondsPerMB is seconds per MB (2^20 bytes) of WAL: a cost per unit of work, as the
	// apply mode's verification figures are.
	UnitSecondsPerMB = "seconds_per_mb"
	UnitCount        = "count"
	// UnitBytesPerRecord is WAL bytes per WAL record: what a change to the WAL's size does to the
	// same changes of data.
	UnitBytesPerRecord = "bytes_per_record"
	// UnitBool is 1 for on/true and 0 for off/false.
	UnitBool = "bool"
)

// Evidence is one named figure behind a finding.
type Evidence struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Predicted is what a recommendation predicts for one measured figure: its name (an evidence
// name where one exists, e.g. "wal_write_wait_seconds_per_mb"), its value now, the value
// expected once the change is in force, and the unit. Basis says how the figure was reached.
type Predicted struct {
	Name    string  `json:"name"`
	Current float64 `json:"current"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Basis   string  `json:"basis"`
}

// Finding is one thing a rule found, with what to do about it. The JSON field names are the
// contract of `check --format json` and /api/v1/findings.
type Finding struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	// Setting is what the recommendation changes: a PostgreSQL setting ("wal_buffers"), a kernel
	// knob ("vm.dirty_background_bytes") or a property of the storage ("write_cache").
	Setting string `json:"setting"`
	// Current and Recommended are in the form the setting is written: "64kB" and "16MB" for
	// PostgreSQL memory settings, a byte count for vm.dirty_*_bytes.
	Current     string     `json:"current"`
	Recommended string     `json:"recommended"`
	Action      Action     `json:"action"`
	Summary     string     `json:"summary"`
	Evidence    []Evidence `json:"evidence"`
	// ExpectedEffect says what should change once the recommendation is applied; the apply
	// step verifies it.
	ExpectedEffect string `json:"expected_effect"`
	// Prediction, when the rule can tell, is what the change should win; Resolve weighs it when
	// rules disagree on a setting. Omitted from JSON when absent.
	Prediction *Prediction `json:"prediction,omitempty"`
	// Predicted is the figure the recommendation expects to move, measured now and predicted
	// after the change, in the units a person and the apply step's verification can check
	// (`.predicted` in check's JSON and /api/v1/findings). Every measured recommendation carries
	// one; facts-only findings may not.
	Predicted *Predicted `json:"predicted,omitempty"`
	// FirstSeen is when the condition was first seen in the current episode, LastSeen the last
	// evaluation that saw it. Run sets both to Input.Now; the Tracker keeps them across
	// evaluations.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// State is StateFiring for a finding that is shown (and acted on), StatePending for a
	// measured one that holds but has not yet lasted Thresholds.RaiseAfter. Only the Tracker
	// makes pending findings; check and the resolver's conflicts are firing.
	State State `json:"state,omitempty"`
	// PendingSince and FiresAt are set on pending findings only: when the condition was first
	// seen, and when it fires if it keeps holding (PendingSince + RaiseAfter).
	PendingSince *time.Time `json:"pending_since,omitempty"`
	FiresAt      *time.Time `json:"fires_at,omitempty"`
}

// State says whether a finding is shown and acted on, as a Prometheus alert is pending or firing.
type State string

// Finding states.
const (
	// StateFiring findings are shown, alerted on, resolved into recommendations and applied.
	StateFiring State = "firing"
	// StatePending findings are shown as such and never alerted on, resolved or applied.
	StatePending State = "pending"
)

// MarkFiring sets every finding's state to firing (for findings judged without the Tracker).
func MarkFiring(fs []Finding) {
	for i := range fs {
		fs[i].State = StateFiring
	}
}

// Result is what one evaluation of a rule returns: findings, or what it lacked to judge, or
// both (a rule may judge one setting and lack the data for another).
type Result struct {
	Findings []Finding
	// NotEnoughData is empty when the rule could judge; otherwise it says what is missing
	// ("need 30s of history, have 15s"). Findings not returned while it is set are unknown,
	// not absent, so the Tracker neither clears nor confirms them.
	NotEnoughData string
}

// notEnough is the Result of a rule that cannot judge yet.
func notEnough(format string, args ...any) Result {
	return Result{NotEnoughData: fmt.Sprintf(format, args...)}
}

// found is the Result of a rule that judged and found what it lists (possibly nothing).
func found(fs ...Finding) Result {
	return Result{Findings: fs}
}

// MaxSeverity is the highest severity among findings, 0 when there are none; `check` derives
// its exit code from it.
func MaxSeverity(fs []Finding) Severity {
	var top Severity
	for _, f := range fs {
		if f.Severity > top {
			top = f.Severity
		}
	}
	return top
}
