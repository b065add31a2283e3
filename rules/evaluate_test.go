package rules

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// fixedRule always reports the same findings, or not enough data when it has none to report
// and lacks is set.
func fixedRule(id string, immediate bool, lacks string, fs ...Finding) Rule {
	return Rule{ID: id, Title: id, Severity: Critical, Immediate: immediate, Eval: func(Input) Result {
		if lacks != "" {
			return notEnough("%s", lacks)
		}
		return found(fs...)
	}}
}

// evaluateRules: two measured rules that move wal_buffers in opposite directions (a conflict),
// a measured critical with a recommendation of its own, an info fact without a setting, and a
// rule that cannot judge.
func evaluateRules() []Rule {
	return []Rule{
		fixedRule("raises", false, "", Finding{Severity: Warning, Setting: collector.WALBuffers, Current: "4MB", Recommended: "16MB", Action: ActionRestart}),
		fixedRule("lowers", false, "", Finding{Severity: Warning, Setting: collector.WALBuffers, Current: "4MB", Recommended: "1MB", Action: ActionRestart}),
		fixedRule("critical", false, "", Finding{Severity: Critical, Setting: collector.MaxWALSize, Current: "1GB", Recommended: "4GB", Action: ActionReload}),
		fixedRule("fact", true, "", Finding{Severity: Info, Summary: "a fact"}),
		fixedRule("lacks", false, "need more"),
	}
}

// shown names findings as "rule/setting/state", in order.
func shown(fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Rule + "/" + f.Setting + "/" + string(f.State)
	}
	return out
}

// TestEvaluate: one evaluation runs the rules, the Tracker's noise control when there is one,
// the resolver, and marks and orders what it shows, as the daemon and check both need.
func TestEvaluate(t *testing.T) {
	cfg := DefaultThresholds()
	conflict := ConflictRuleID + "/" + collector.WALBuffers + "/firing"
	tests := []struct {
		name    string
		rules   []Rule
		tracker bool
		// evaluations at t0() and every RaiseAfter after it; the last one is checked.
		evaluations   int
		wantFiring    []string
		wantPending   []string
		wantRecs      []string // settings
		wantNotEnough []string // rule IDs
	}{
		{name: "once (check): every finding fires at once, the conflict too",
			rules: evaluateRules(), evaluations: 1,
			wantFiring: []string{"critical/max_wal_size/firing", "lowers/wal_buffers/firing",
				"raises/wal_buffers/firing", conflict, "fact//firing"},
			wantRecs: []string{collector.MaxWALSize}, wantNotEnough: []string{"lacks"}},
		{name: "tracked, first evaluation: measured findings pend and are not resolved",
			rules: evaluateRules(), tracker: true, evaluations: 1,
			wantFiring:  []string{"fact//firing"},
			wantPending: []string{"critical/max_wal_size/pending", "lowers/wal_buffers/pending", "raises/wal_buffers/pending"},
			wantRecs:    []string{}, wantNotEnough: []string{"lacks"}},
		{name: "tracked, after RaiseAfter: as once",
			rules: evaluateRules(), tracker: true, evaluations: 2,
			wantFiring: []string{"critical/max_wal_size/firing", "lowers/wal_buffers/firing",
				"raises/wal_buffers/firing", conflict, "fact//firing"},
			wantRecs: []string{collector.MaxWALSize}, wantNotEnough: []string{"lacks"}},
		{name: "nothing found: empty lists, not null",
			rules: []Rule{fixedRule("quiet", false, "")}, evaluations: 1,
			wantFiring: []string{}, wantRecs: []string{}, wantNotEnough: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr *Tracker
			if tt.tracker {
				tr = NewTracker(tt.rules)
			}
			var got Evaluation
			for i := range tt.evaluations {
				got = Evaluate(tt.rules, Input{Now: t0().Add(time.Duration(i) * cfg.RaiseAfter), Config: cfg}, tr)
			}
			if s := shown(got.Findings); !slices.Equal(s, tt.wantFiring) {
				t.Errorf("Findings = %v, want %v", s, tt.wantFiring)
			}
			if s := shown(got.Pending); !slices.Equal(s, tt.wantPending) && len(s)+len(tt.wantPending) > 0 {
				t.Errorf("Pending = %v, want %v", s, tt.wantPending)
			}
			var recs []string
			for _, r := range got.Recommendations {
				recs = append(recs, r.Setting)
			}
			if !slices.Equal(recs, tt.wantRecs) && len(recs)+len(tt.wantRecs) > 0 {
				t.Errorf("Recommendations for %v, want %v", recs, tt.wantRecs)
			}
			var lacking []string
			for id := range got.NotEnoughData {
				lacking = append(lacking, id)
			}
			if slices.Sort(lacking); !slices.Equal(lacking, tt.wantNotEnough) && len(lacking)+len(tt.wantNotEnough) > 0 {
				t.Errorf("NotEnoughData for %v, want %v", lacking, tt.wantNotEnough)
			}
			b, err := json.Marshal(struct {
				F []Finding         `json:"findings"`
				R []Recommendation  `json:"recommendations"`
				N map[string]string `json:"not_enough_data"`
			}{got.Findings, got.Recommendations, got.NotEnoughData})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "null") {
				t.Errorf("a list or map encodes as null: %s", b)
			}
		})
	}
}
