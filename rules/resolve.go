package rules

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// ConflictRuleID is the rule ID of the finding Resolve raises when rules want one setting moved
// in opposite directions.
const ConflictRuleID = "recommendations-conflict"

// Prediction is what a finding expects its change to win, in the one unit the rules that
// compete for a setting can share: seconds of backend waiting saved per second of wall time.
type Prediction struct {
	SavedSecondsPerSecond float64 `json:"saved_seconds_per_second"`
	// Basis says how the figure was reached, for a person judging it.
	Basis string `json:"basis"`
}

// Recommendation is what one evaluation recommends for one setting, after the rules that
// recommend something for it have been reconciled. Its JSON is the contract of
// /api/v1/recommendations and of `check --format json`'s "recommendations".
type Recommendation struct {
	Setting     string `json:"setting"`
	Current     string `json:"current"`
	Recommended string `json:"recommended"`
	Action      Action `json:"action"`
	// Severity is the highest severity of the findings behind the recommendation.
	Severity Severity `json:"severity"`
	// Rule decided the recommendation; Summary, Evidence and ExpectedEffect are its finding's.
	Rule           string      `json:"rule"`
	Summary        string      `json:"summary"`
	Evidence       []Evidence  `json:"evidence"`
	ExpectedEffect string      `json:"expected_effect"`
	Prediction     *Prediction `json:"prediction,omitempty"`
	Predicted      *Predicted  `json:"predicted,omitempty"`
	// Because lists every rule that recommends this value; Overruled the rules that recommended
	// another one, and why they lost.
	Because   []Support   `json:"because"`
	Overruled []Overruled `json:"overruled"`
	FirstSeen time.Time   `json:"first_seen"`
	LastSeen  time.Time   `json:"last_seen"`
}

// Support is a rule behind a recommendation.
type Support struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Summary  string   `json:"summary"`
}

// Overruled is a rule whose recommendation for the setting lost, with the reason.
type Overruled struct {
	Rule        string   `json:"rule"`
	Severity    Severity `json:"severity"`
	Recommended string   `json:"recommended"`
	Summary     string   `json:"summary"`
	Reason      string   `json:"reason"`
}

// Finding returns the recommendation as the finding the apply mode acts on: the deciding rule's
// finding with the recommendation's severity.
func (r Recommendation) Finding() Finding {
	return Finding{
		Rule: r.Rule, Severity: r.Severity, Setting: r.Setting, Current: r.Current, Recommended: r.Recommended,
		Action: r.Action, Summary: r.Summary, Evidence: r.Evidence, ExpectedEffect: r.ExpectedEffect,
		Prediction: r.Prediction, Predicted: r.Predicted, FirstSeen: r.FirstSeen, LastSeen: r.LastSeen,
	}
}

// Resolution is what Resolve makes of one evaluation's findings.
type Resolution struct {
	// Recommendations holds one entry per setting, ordered by setting.
	Recommendations []Recommendation
	// Conflicts holds a recommendations-conflict finding for each setting that rules want moved
	// in opposite directions; such a setting has no recommendation.
	Conflicts []Finding
}

// conflictRule documents the finding Resolve raises. It is not in All(): it judges the other
// rules' findings, not a snapshot history, so Run has nothing to evaluate for it.
func conflictRule() Rule {
	return Rule{
		ID:       ConflictRuleID,
		Title:    "Rules want the same setting moved in opposite directions",
		Severity: Warning,
		Rationale: "When one rule wants a setting raised and another wants it lowered, the evidence contradicts " +
			"itself: no order of precedence makes one of them right. Nothing is recommended (or applied) for " +
			"that setting until one of the findings clears.",
		Sources: []string{"docs/rules.md, \"One recommendation per setting\""},
	}
}

// Resolve turns the findings of one evaluation into one recommendation per setting, deciding
// among a setting's findings by the order docs/rules.md gives ("One recommendation per setting"):
// measured over facts, the larger predicted gain, the preferred wal_sync_method order, the smaller
// step, the rule ID. Findings without a setting or a value are advice and stay findings only;
// findings that move an ordered setting both ways give a recommendations-conflict finding instead;
// pending findings are not resolved. A rule missing from rules counts as measured.
func Resolve(rules []Rule, findings []Finding) Resolution {
	facts := map[string]bool{}
	for _, r := range rules {
		facts[r.ID] = r.Immediate
	}
	bySetting := map[string][]Finding{}
	for _, f := range findings {
		if f.Setting == "" || f.Recommended == "" || f.Rule == ConflictRuleID || f.State == StatePending {
			continue
		}
		bySetting[f.Setting] = append(bySetting[f.Setting], f)
	}
	var res Resolution
	for _, setting := range slices.Sorted(maps.Keys(bySetting)) {
		group := bySetting[setting]
		if c, ok := conflict(group); ok {
			res.Conflicts = append(res.Conflicts, c)
			continue
		}
		res.Recommendations = append(res.Recommendations, resolveSetting(facts, group))
	}
	return res
}

// resolveSetting decides among the findings of one setting that do not conflict.
func resolveSetting(facts map[string]bool, group []Finding) Recommendation {
	sorted := slices.Clone(group)
	slices.SortFunc(sorted, func(a, b Finding) int {
		if _, first := precedes(facts, a, b); first {
			return -1
		}
		if _, first := precedes(facts, b, a); first {
			return 1
		}
		return 0
	})
	d := sorted[0]
	if d.Evidence == nil {
		d.Evidence = []Evidence{}
	}
	r := Recommendation{
		Setting: d.Setting, Current: d.Current, Recommended: d.Recommended, Action: d.Action, Rule: d.Rule,
		Summary: d.Summary, Evidence: d.Evidence, ExpectedEffect: d.ExpectedEffect, Predicted: d.Predicted,
		Because: []Support{}, Overruled: []Overruled{}, FirstSeen: d.FirstSeen, LastSeen: d.LastSeen,
	}
	for _, f := range sorted {
		if !sameRecommendation(f.Recommended, d.Recommended) {
			why, _ := precedes(facts, d, f)
			r.Overruled = append(r.Overruled, Overruled{
				Rule: f.Rule, Severity: f.Severity, Recommended: f.Recommended, Summary: f.Summary,
				Reason: fmt.Sprintf("%s recommends %s=%s instead: %s", d.Rule, d.Setting, d.Recommended, why),
			})
			continue
		}
		r.Because = append(r.Because, Support{Rule: f.Rule, Severity: f.Severity, Summary: f.Summary})
		r.Severity = max(r.Severity, f.Severity)
		if g, ok := gain(f); ok && (r.Prediction == nil || g > r.Prediction.SavedSecondsPerSecond) {
			p := *f.Prediction
			r.Prediction = &p
		}
		if f.FirstSeen.Before(r.FirstSeen) {
			r.FirstSeen = f.FirstSeen
		}
		if f.LastSeen.After(r.LastSeen) {
			r.LastSeen = f.LastSeen
		}
	}
	return r
}

// precedes reports whether a's recommendation wins over b's, and by which step of the order.
// Each step compares one key, and a finding that lacks a key (no prediction, values that are
// no magnitudes) ranks after one that has it, so that the order is total and a sort gives the
// same answer whatever order the findings came in.
func precedes(facts map[string]bool, a, b Finding) (string, bool) {
	if facts[a.Rule] != facts[b.Rule] {
		return "measured evidence comes before a configuration fact", !facts[a.Rule]
	}
	if !facts[a.Rule] {
		ga, oka := gain(a)
		gb, okb := gain(b)
		switch {
		case oka && okb && ga != gb:
			return fmt.Sprintf("a larger predicted gain (%.3f s of waiting saved per second, against %.3f)", max(ga, gb), min(ga, gb)), ga > gb
		case oka != okb:
			return "a predicted gain, where the other finding predicts none", oka
		}
	}
	if ia, ib := methodRank(a.Recommended), methodRank(b.Recommended); ia != ib {
		return fmt.Sprintf("%s comes first in the preferred wal_sync_method order (%s)",
			probes.DurableMethods()[min(ia, ib)], strings.Join(probes.DurableMethods(), ", ")), ia < ib
	}
	sa, oka := step(a)
	sb, okb := step(b)
	switch {
	case oka && okb && sa != sb:
		return "the smaller step from the current value", sa < sb
	case oka != okb:
		return "a step from the current value that can be measured", oka
	}
	if a.Rule != b.Rule {
		return "nothing else tells them apart, and the rule ID comes first", a.Rule < b.Rule
	}
	return "nothing else tells them apart, and the value comes first", a.Recommended < b.Recommended
}

// gain is a finding's predicted gain, when it carries one.
func gain(f Finding) (float64, bool) {
	if f.Prediction == nil || math.IsNaN(f.Prediction.SavedSecondsPerSecond) {
		return 0, false
	}
	return f.Prediction.SavedSecondsPerSecond, true
}

// methodRank is a value's place in the preferred wal_sync_method order; values outside it rank
// after all of it, together.
func methodRank(v string) int {
	if i := slices.Index(probes.DurableMethods(), v); i >= 0 {
		return i
	}
	return len(probes.DurableMethods())
}

// step is how far a finding moves its setting, when both values are magnitudes.
func step(f Finding) (float64, bool) {
	cur, ok1 := magnitude(f.Current)
	rec, ok2 := magnitude(f.Recommended)
	if !ok1 || !ok2 {
		return 0, false
	}
	return math.Abs(rec - cur), true
}

// direction is +1 when a finding raises its setting, -1 when it lowers it, 0 when the values are
// no magnitudes (an enum such as wal_sync_method, "0 (ratio 10%)") or equal.
func direction(f Finding) int {
	cur, ok1 := magnitude(f.Current)
	rec, ok2 := magnitude(f.Recommended)
	if !ok1 || !ok2 {
		return 0
	}
	return cmp.Compare(rec, cur)
}

// magnitude reads a value as the rules write them: a plain number ("0.9", "67108864"), a
// PostgreSQL memory size ("16MB") or a time ("5min").
func magnitude(v string) (float64, bool) {
	if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && !math.IsNaN(n) && !math.IsInf(n, 0) {
		return n, true
	}
	if n, err := collector.ParseMemory(v); err == nil {
		return float64(n), true
	}
	if n, err := collector.ParseSeconds(v); err == nil {
		return n, true
	}
	return 0, false
}

// sameRecommendation compares two recommended values, so that "16MB" and "16384kB" agree.
func sameRecommendation(a, b string) bool {
	if a == b {
		return true
	}
	ma, ok1 := magnitude(a)
	mb, ok2 := magnitude(b)
	return ok1 && ok2 && ma == mb
}

// conflict returns the recommendations-conflict finding for a setting that findings move in
// opposite directions.
func conflict(group []Finding) (Finding, bool) {
	var up, down []Finding
	for _, f := range group {
		switch direction(f) {
		case 1:
			up = append(up, f)
		case -1:
			down = append(down, f)
		}
	}
	if len(up) == 0 || len(down) == 0 {
		return Finding{}, false
	}
	byRule := func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Recommended, b.Recommended))
	}
	slices.SortFunc(up, byRule)
	slices.SortFunc(down, byRule)
	describe := func(fs []Finding) string {
		parts := make([]string, len(fs))
		for i, f := range fs {
			parts[i] = fmt.Sprintf("%s recommends %s", f.Rule, f.Recommended)
		}
		return strings.Join(parts, ", ")
	}
	u := up[0]
	c := Finding{
		Rule:     ConflictRuleID,
		Severity: Warning,
		Setting:  u.Setting,
		Current:  u.Current,
		Action:   ActionAdvice,
		Summary: fmt.Sprintf("The rules want %s=%s moved both ways: up (%s) and down (%s). Nothing is recommended "+
			"or applied for %s until one of these findings clears; read both.", u.Setting, u.Current, describe(up), describe(down), u.Setting),
		Evidence: []Evidence{
			{Name: "rules_raising", Value: float64(len(up)), Unit: UnitCount},
			{Name: "rules_lowering", Value: float64(len(down)), Unit: UnitCount},
		},
		ExpectedEffect: "None by itself: it says why this setting has no recommendation.",
	}
	for i, f := range append(up, down...) {
		if i == 0 || f.FirstSeen.After(c.FirstSeen) {
			c.FirstSeen = f.FirstSeen // the conflict began when its last party appeared
		}
		if f.LastSeen.After(c.LastSeen) {
			c.LastSeen = f.LastSeen
		}
	}
	return c, true
}
