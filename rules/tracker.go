package rules

import (
	"sort"
	"time"
)

// Tracker adds noise control to the rules: one evaluation sees a moment, the Tracker sees
// episodes. A measured warning or critical shows once it has held for RaiseAfter and clears once
// it has been gone for ClearAfter; info findings and configuration facts show at once; a rule that
// cannot judge neither confirms nor clears its findings (docs/rules.md, Noise control). It is pure
// and not safe for concurrent use: the advisor's loop owns it and publishes copies of its output.
type Tracker struct {
	rules  []Rule
	states map[trackKey]*trackState
}

type trackKey struct{ rule, setting string }

type trackState struct {
	finding   Finding
	firstSeen time.Time
	lastSeen  time.Time
	shown     bool
}

// NewTracker returns a tracker over rules (usually All()).
func NewTracker(rules []Rule) *Tracker {
	return &Tracker{rules: append([]Rule(nil), rules...), states: map[trackKey]*trackState{}}
}

// Evaluate runs the tracker's rules on in and returns the findings to show.
func (t *Tracker) Evaluate(in Input) []Finding {
	return t.Observe(in, Run(t.rules, in))
}

// Observe applies noise control to outcomes evaluated at in.Now (from Run) and returns the
// findings to show (firing), most severe first, then by rule and setting. A rule reports at
// most one finding per setting; a second one replaces the first.
func (t *Tracker) Observe(in Input, outcomes []Outcome) []Finding {
	firing, _ := t.ObservePending(in, outcomes)
	return firing
}

// raiseSlack: evaluation times jitter by a fraction of a second, so a finding due to fire
// RaiseAfter after its first evaluation fires on the evaluation that falls due then, not one
// interval later (docs/rules.md, Noise control).
const raiseSlack = time.Second

// ObservePending is Observe that also returns the pending findings: measured conditions that
// hold but have not yet lasted RaiseAfter, with PendingSince and FiresAt, in the same order.
// An operator watching a slow load sees them ripen instead of "all clear"; nothing acts on them.
func (t *Tracker) ObservePending(in Input, outcomes []Outcome) (firing, pending []Finding) {
	cfg := in.Config
	if cfg == (Thresholds{}) {
		cfg = DefaultThresholds()
	}
	now := in.Now
	immediate := map[string]bool{}
	for _, r := range t.rules {
		immediate[r.ID] = r.Immediate
	}

	seen := map[trackKey]bool{}
	judged := map[string]bool{}
	for _, o := range outcomes {
		judged[o.Rule] = o.NotEnoughData == ""
		for _, f := range o.Findings {
			f.Rule = o.Rule
			k := trackKey{o.Rule, f.Setting}
			st := t.states[k]
			if st == nil {
				st = &trackState{firstSeen: now}
				t.states[k] = st
			}
			st.finding, st.lastSeen = f, now
			seen[k] = true
		}
	}

	for k, st := range t.states {
		if seen[k] {
			if !st.shown && (immediate[k.rule] || st.finding.Severity <= Info || now.Sub(st.firstSeen) >= cfg.RaiseAfter-raiseSlack) {
				st.shown = true
			}
			continue
		}
		gone := now.Sub(st.lastSeen)
		switch {
		case judged[k.rule] && (!st.shown || immediate[k.rule] || gone >= cfg.ClearAfter):
			// Absent: a pending condition that breaks off starts over; a shown one clears
			// after the hysteresis span (facts at once).
			delete(t.states, k)
		case !judged[k.rule] && gone >= cfg.StaleAfter:
			delete(t.states, k)
		}
	}

	for _, st := range t.states {
		f := st.finding
		f.FirstSeen, f.LastSeen = st.firstSeen, st.lastSeen
		if st.shown {
			f.State = StateFiring
			firing = append(firing, f)
			continue
		}
		since, fires := st.firstSeen, st.firstSeen.Add(cfg.RaiseAfter)
		f.State, f.PendingSince, f.FiresAt = StatePending, &since, &fires
		pending = append(pending, f)
	}
	SortFindings(firing)
	SortFindings(pending)
	return firing, pending
}

// SortFindings orders findings most severe first, then by rule and setting.
func SortFindings(fs []Finding) {
	sort.Slice(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return a.Setting < b.Setting
	})
}
