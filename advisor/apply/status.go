package apply

import (
	"maps"
	"slices"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Status is what the apply mode is doing, for the metrics and the API.
type Status struct {
	Mode     Mode     `json:"mode"`
	Settings []string `json:"settings"`
	// Reason says why nothing at all is applied now (mode off or dry-run); "" in mode on.
	Reason string `json:"reason,omitempty"`
	// AdvisorOnly maps the allowed settings the manager may not change to why (a missing
	// privilege, a read-only /proc/sys).
	AdvisorOnly map[string]string `json:"advisor_only,omitempty"`
	// Waiting says why no new change may start now (verification, cool-down, the cap).
	Waiting string `json:"waiting,omitempty"`
	// Changes are the journal's changes, newest first.
	Changes []ChangeStatus `json:"changes"`
	// Refused are the current findings the manager does not apply, and why.
	Refused []Refusal `json:"refused,omitempty"`
	// Holds are the running rejections (a value rolled back for making things worse) and
	// hands-off periods (a setting someone else changed).
	Holds []Hold `json:"holds,omitempty"`
	// Elsewhere are the journal's changes made on another server than the one --dsn reaches:
	// left alone, neither judged nor abandoned nor rolled back here.
	Elsewhere []string `json:"elsewhere,omitempty"`
	// Cluster are the advisor's changes in the cluster's configuration (Patroni's DCS), as the
	// member --dsn reaches runs them: a standby's daemon says here what it would run after a
	// failover.
	Cluster []ClusterChangeStatus `json:"cluster,omitempty"`
	// Outcomes counts the journal's outcome records by outcome.
	Outcomes       map[Outcome]int `json:"outcomes"`
	ChangesLast24h int             `json:"changes_last_24h"`
	LastChange     time.Time       `json:"last_change,omitempty"`
	JournalError   string          `json:"journal_error,omitempty"`
	Updated        time.Time       `json:"updated"`
}

// ChangeStatus is one change and where it stands.
type ChangeStatus struct {
	ID      int    `json:"id"`
	Setting string `json:"setting"`
	Old     string `json:"old"`
	New     string `json:"new"`
	Rule    string `json:"rule,omitempty"`
	Origin  string `json:"origin,omitempty"`
	// State is the latest outcome, "verifying" while an applied change is being verified, or
	// "unresolved" for an intent without an outcome.
	State  string     `json:"state"`
	Since  time.Time  `json:"since"`
	Reason string     `json:"reason,omitempty"`
	Until  *time.Time `json:"until,omitempty"`
	// Predicted is what the change's finding predicted; Prediction, once the change was
	// verified or rolled back, that prediction against what was measured after it.
	Predicted  *rules.Predicted       `json:"predicted,omitempty"`
	Prediction *rules.PredictionCheck `json:"prediction,omitempty"`
	// Verdict is the figures' comparison that verified or rolled back the change, each judged
	// figure with its interval and the MDE before (docs/apply.md, "Intervals, not point figures").
	Verdict []FigureChange `json:"verdict,omitempty"`
}

// States of a change besides its outcomes.
const (
	StateVerifying  = "verifying"
	StateUnresolved = "unresolved"
	// StateUnconfirmed is a verified change whose figures showed no gain: kept, and said so.
	StateUnconfirmed = "unconfirmed"
)

// Refusal is a finding the manager does not apply.
type Refusal struct {
	Rule        string `json:"rule"`
	Setting     string `json:"setting"`
	Recommended string `json:"recommended"`
	Reason      string `json:"reason"`
}

// Hold is a running rejection or hands-off period.
type Hold struct {
	Setting string `json:"setting"`
	// Value is the rejected value; empty for a hands-off period, which covers any value.
	Value  string    `json:"value,omitempty"`
	Kind   Outcome   `json:"kind"` // rejected or abandoned
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// Status returns the latest status; safe for concurrent use.
func (m *Manager) Status() Status {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := m.status
	st.Settings = slices.Clone(st.Settings)
	st.Changes = slices.Clone(st.Changes)
	st.Refused = slices.Clone(st.Refused)
	st.Holds = slices.Clone(st.Holds)
	st.Elsewhere = slices.Clone(st.Elsewhere)
	st.Cluster = slices.Clone(st.Cluster)
	return st
}

func (m *Manager) publish(l *ledger, props []Proposal, waiting string) {
	now := m.now()
	st := Status{
		Mode: m.cfg.Mode, Settings: slices.Clone(m.cfg.Settings), Reason: modeReason(m.cfg.Mode),
		Waiting: waiting, Outcomes: map[Outcome]int{}, Updated: now,
	}
	if len(m.advisorOnly) > 0 {
		st.AdvisorOnly = map[string]string{}
		for k, v := range m.advisorOnly {
			st.AdvisorOnly[k] = v
		}
	}
	st.Changes = changeStatuses(l)
	st.Cluster = slices.Clone(m.cluster)
	for _, id := range slices.Sorted(maps.Keys(m.elsewhere)) {
		st.Elsewhere = append(st.Elsewhere, m.elsewhere[id])
	}
	for o, n := range l.counts {
		st.Outcomes[o] = n
	}
	for _, c := range l.changes {
		if c.Intent.Origin == OriginDaemon && now.Sub(c.Intent.Time) < 24*time.Hour {
			st.ChangesLast24h++
		}
		if c.Intent.Time.After(st.LastChange) {
			st.LastChange = c.Intent.Time
		}
		if r, ok := c.outcome(Rejected); ok && r.Until != nil && now.Before(*r.Until) {
			st.Holds = append(st.Holds, Hold{Setting: c.Intent.Setting, Value: c.Intent.New, Kind: Rejected, Until: *r.Until, Reason: r.Reason})
		}
		if r, ok := c.outcome(Abandoned); ok && r.Until != nil && now.Before(*r.Until) {
			st.Holds = append(st.Holds, Hold{Setting: c.Intent.Setting, Kind: Abandoned, Until: *r.Until, Reason: r.Reason})
		}
	}
	for _, p := range props {
		if p.Wait != "" && st.Waiting == "" {
			st.Waiting = p.Finding.Setting + ": " + p.Wait
		}
		if p.Refused != "" {
			st.Refused = append(st.Refused, Refusal{Rule: p.Finding.Rule, Setting: p.Finding.Setting, Recommended: p.Finding.Recommended, Reason: p.Refused})
		}
	}
	m.mu.Lock()
	st.JournalError = m.status.JournalError
	m.status = st
	m.mu.Unlock()
}

// changeStatuses lists the ledger's changes, newest first.
func changeStatuses(l *ledger) []ChangeStatus {
	out := make([]ChangeStatus, 0, len(l.changes))
	for i := len(l.changes) - 1; i >= 0; i-- {
		c := l.changes[i]
		last := c.lastRecord()
		cs := ChangeStatus{ID: c.ID(), Setting: c.Intent.Setting, New: c.Intent.New, Rule: c.Intent.Rule, Origin: c.Intent.Origin,
			State: string(c.Last()), Since: last.Time, Reason: last.Reason, Until: last.Until}
		if c.Intent.Old != nil {
			cs.Old = c.Intent.Old.Value
		}
		cs.Predicted = c.Intent.Predicted
		for _, o := range []Outcome{RolledBack, Verified} {
			r, ok := c.outcome(o)
			if !ok {
				continue
			}
			if r.PredictionCheck != nil {
				cs.Prediction = r.PredictionCheck
			}
			if len(r.Comparison) > 0 {
				cs.Verdict = r.Comparison
			}
		}
		switch {
		case c.Last() == "":
			cs.State = StateUnresolved
		case c.Last() == Applied && c.Intent.Before != nil && c.Intent.Origin == OriginDaemon:
			cs.State = StateVerifying
		case c.Last() == Verified && last.Unconfirmed:
			cs.State = StateUnconfirmed
		case c.Last() == Rejected:
			// The rollback before it says what happened; the rejection when it ends.
			if rb, ok := c.outcome(RolledBack); ok {
				cs.Reason = rb.Reason
			}
		}
		out = append(out, cs)
	}
	return out
}
