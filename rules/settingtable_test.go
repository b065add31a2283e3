package rules

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// TestRuleSettingsInTable guards CONTRIBUTING.md's setting recipe from the rules' side: every
// setting a rule may recommend is an entry of collector.SettingTable that is not merely
// Observed, so that apply either has its bounds or knows it is advice only.
func TestRuleSettingsInTable(t *testing.T) {
	for _, r := range append(All(), conflictRule()) {
		for _, s := range r.Settings {
			d, ok := collector.LookupSetting(s)
			switch {
			case !ok:
				t.Errorf("rule %s recommends %s, which collector.SettingTable (collector/settings.go) does not list", r.ID, s)
			case d.Apply == collector.Observed:
				t.Errorf("rule %s recommends %s, which collector.SettingTable marks Observed: mark it AdviceOnly or Applicable", r.ID, s)
			}
		}
	}
}
