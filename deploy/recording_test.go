package deploy

import (
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	recordingFile     = "prometheus/recording.yml"
	recordingTestFile = "prometheus/tests/recording_test.yml"
	// fleetRulesTestFile tests the outlier and drift rules with alerts.yml loaded beside them.
	fleetRulesTestFile = "prometheus/tests/fleet_rules_test.yml"
)

func TestPromtoolCheckRecordingRules(t *testing.T) {
	runPromtool(t, "check", "rules", recordingFile)
}

func TestPromtoolTestRecordingRules(t *testing.T) {
	runPromtool(t, "test", "rules", recordingTestFile)
}

func TestPromtoolTestFleetRules(t *testing.T) {
	runPromtool(t, "test", "rules", fleetRulesTestFile)
}

// recordNameRE is Prometheus's naming convention for recording rules, level:metric:operations,
// with the level fixed to fleet and the metric one of the advisor's.
var recordNameRE = regexp.MustCompile(`^fleet:pgwal_advisor_[a-z0-9_]+:[a-z0-9_]+$`)

// TestRecordingRules checks that the fleet rules are recording rules only, named by the
// convention, over documented metrics, and each checked by a promtool case.
func TestRecordingRules(t *testing.T) {
	var f ruleFile
	if err := yaml.Unmarshal(readFile(t, recordingFile), &f); err != nil {
		t.Fatalf("parse %s: %v", recordingFile, err)
	}
	tested := map[string]bool{}
	for _, file := range []string{recordingTestFile, fleetRulesTestFile} {
		for _, c := range loadRuleTests(t, file).Tests {
			for _, e := range c.PromQLExprTest {
				for _, name := range fleetNameRE.FindAllString(e.Expr, -1) {
					tested[name] = true
				}
			}
		}
	}
	documented := documentedMetrics(t)
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert != "" {
				t.Errorf("%s group %s: alert %q: this file holds recording rules only (alerts go in %s)", recordingFile, g.Name, r.Alert, alertsFile)
				continue
			}
			if !recordNameRE.MatchString(r.Record) {
				t.Errorf("record %q: want fleet:pgwal_advisor_<metric>:<operations>", r.Record)
			}
			if !tested[r.Record] {
				t.Errorf("record %q has no promql_expr_test in %s or %s", r.Record, recordingTestFile, fleetRulesTestFile)
			}
			// A rule over the advisors' own series reduces them to one value per host first; a
			// rule over recorded series reads what such a rule reduced.
			if ownMetricRE.MatchString(fleetNameRE.ReplaceAllString(r.Expr, "")) && !strings.Contains(r.Expr, "by (instance") {
				t.Errorf("record %q: expr %q does not first reduce to one value per host with max by (instance, ...)", r.Record, r.Expr)
			}
			checkMetrics(t, r.Record, r.Expr, documented)
		}
	}
	if n == 0 {
		t.Fatalf("%s: no rules", recordingFile)
	}
}
