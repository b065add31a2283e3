package deploy

import (
	"slices"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestRuleIDsMatchRules keeps ruleIDs, which the alert and runbook tests check against, equal
// to the advisor's rules: a new rule without a runbook section fails TestRunbook through it.
func TestRuleIDsMatchRules(t *testing.T) {
	var want []string
	for _, r := range rules.All() {
		want = append(want, r.ID)
	}
	want = append(want, rules.ConflictRuleID)
	got := slices.Clone(ruleIDs)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ruleIDs = %v, want the advisor's rule IDs %v (add the new rule to ruleIDs in deploy_test.go and give it a runbook section)", got, want)
	}
}
