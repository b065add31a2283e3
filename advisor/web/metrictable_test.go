package web

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestCountersExported guards CONTRIBUTING.md's counter recipe: every counter the rules read
// is exported by exactly one metric of metricTable, or is listed in unexportedCounters with a
// reason - not both, and not neither.
func TestCountersExported(t *testing.T) {
	exported := map[rules.Counter]string{}
	for _, d := range metricTable() {
		if d.counter == 0 {
			continue
		}
		if prev, dup := exported[d.counter]; dup {
			t.Errorf("counter %s is exported twice: %s and %s", d.counter, prev, d.name)
		}
		exported[d.counter] = d.name
	}
	exempt := unexportedCounters()
	for _, c := range rules.Counters() {
		name, ok := exported[c]
		reason, isExempt := exempt[c]
		switch {
		case ok && isExempt:
			t.Errorf("counter %s is exported as %s and also listed in unexportedCounters: drop one", c, name)
		case !ok && !isExempt:
			t.Errorf("counter %s has no metric: add a counterMetric entry to metricTable (advisor/web/metrictable.go) or list it in unexportedCounters with the reason", c)
		case isExempt && reason == "":
			t.Errorf("counter %s is listed in unexportedCounters without a reason", c)
		}
	}
}

// TestMetricTableNames keeps metric names unique and the table's entries complete.
func TestMetricTableNames(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range metricTable() {
		if d.name == "" || d.help == "" || d.read == nil {
			t.Errorf("metric %q: an entry needs a name, a help text and a read function", d.name)
		}
		if seen[d.name] {
			t.Errorf("metric %s is listed twice", d.name)
		}
		seen[d.name] = true
	}
}
