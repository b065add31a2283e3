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
)

func TestPromtoolCheckRecordingRules(t *testing.T) {
	runPromtool(t, "check", "rules", recordingFile)
}

func TestPromtoolTestRecordingRules(t *testing.T) {
	runPromtool(t, "test", "rules", recordingTestFile)
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
	var tf struct {
		Tests []struct {
			PromQLExprTest []struct {
				Expr string `yaml:"expr"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, recordingTestFile), &tf); err != nil {
		t.Fatalf("parse %s: %v", recordingTestFile, err)
	}
	tested := map[string]bool{}
	for _, c := range tf.Tests {
		for _, e := range c.PromQLExprTest {
			name, _, _ := strings.Cut(e.Expr, "{")
			tested[strings.TrimSpace(name)] = true
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
				t.Errorf("record %q has no promql_expr_test in %s", r.Record, recordingTestFile)
			}
			if !strings.Contains(r.Expr, "by (instance") {
				t.Errorf("record %q: expr %q does not first reduce to one value per host with max by (instance, ...)", r.Record, r.Expr)
			}
			checkMetrics(t, r.Record, r.Expr, documented)
		}
	}
	if n == 0 {
		t.Fatalf("%s: no rules", recordingFile)
	}
}
