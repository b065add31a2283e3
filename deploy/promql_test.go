package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// promqlAggregations are PromQL's aggregation operators: names that take a parenthesised
// argument list, possibly after `by (...)` or `without (...)`, so never a series.
var promqlAggregations = []string{
	"sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk", "bottomk",
	"quantile", "count_values", "limitk", "limit_ratio",
}

// promqlKeywords are PromQL's keywords. The first six take a label list in parentheses.
var promqlKeywords = []string{
	"by", "without", "on", "ignoring", "group_left", "group_right",
	"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
}

// seriesNames returns the metric names a PromQL expression selects, in order of appearance.
// It reads the expression as PromQL's lexer would, closely enough for the project's queries:
// strings, label matchers ({...}), ranges ([...]), comments, Grafana variables ($name) and the
// label lists after by, without, on, ignoring, group_left and group_right name no series; nor
// does a name followed by '(' (a function) or an aggregation operator. What is left in
// selector position is a series name. The module has no PromQL parser (go.mod), and adding
// Prometheus itself for a test is too heavy; promtool parses the same expressions
// (TestDashboardQueriesParse).
func seriesNames(expr string) []string {
	var names []string
	r := []rune(expr)
	i := 0
	for i < len(r) {
		c := r[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(r, i)
		case c == '{':
			i = skipBlock(r, i, '{', '}')
		case c == '[':
			i = skipBlock(r, i, '[', ']')
		case c == '#':
			for i < len(r) && r[i] != '\n' {
				i++
			}
		case c == '$':
			i++
			for i < len(r) && isIdentRune(r[i]) {
				i++
			}
		case unicode.IsDigit(c) || c == '.':
			for i < len(r) && (isIdentRune(r[i]) || r[i] == '.') {
				i++
			}
		case isIdentRune(c):
			start := i
			for i < len(r) && isIdentRune(r[i]) {
				i++
			}
			word := string(r[start:i])
			next := i
			for next < len(r) && unicode.IsSpace(r[next]) {
				next++
			}
			paren := next < len(r) && r[next] == '('
			switch k := slices.Index(promqlKeywords, word); {
			case k >= 0 && k < 6 && paren:
				i = skipBlock(r, next, '(', ')')
			case k >= 0, paren, slices.Contains(promqlAggregations, word):
			default:
				names = append(names, word)
			}
		default:
			i++
		}
	}
	return names
}

func isIdentRune(c rune) bool {
	return c == '_' || c == ':' || c < unicode.MaxASCII && (unicode.IsLetter(c) || unicode.IsDigit(c))
}

// skipString returns the index after the string literal that starts at i.
func skipString(r []rune, i int) int {
	quote := r[i]
	for i++; i < len(r); i++ {
		switch {
		case r[i] == '\\' && quote != '`':
			i++
		case r[i] == quote:
			return i + 1
		}
	}
	return i
}

// skipBlock returns the index after the block that opens at i, strings inside included.
func skipBlock(r []rune, i int, open, close rune) int {
	depth := 0
	for i < len(r) {
		switch r[i] {
		case '"', '\'', '`':
			i = skipString(r, i)
			continue
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return i
}

func TestSeriesNames(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`up{job="pgwal-advisor"} == 0`, []string{"up"}},
		{`sum by (rule) (pgwal_advisor_finding{state!="pending"})`, []string{"pgwal_advisor_finding"}},
		{`count(max by (instance) (pgwal_advisor_up == 0)) or vector(0)`, []string{"pgwal_advisor_up"}},
		{`rate(pgwal_advisor_wal_bytes_total{instance=~"$instance"}[$__rate_interval]) / ignoring (event) group_left rate(x_total[5m])`,
			[]string{"pgwal_advisor_wal_bytes_total", "x_total"}},
		{`a / on (rotational, nvme) group_left (nvme) fleet:b:c and on (role) d >= 3`, []string{"a", "fleet:b:c", "d"}},
		{`label_replace(node_memory_Dirty_bytes, "host", "$1", "instance", "(.*):[0-9]+")`, []string{"node_memory_Dirty_bytes"}},
		{"quantile(0.5, m offset 5m) * 1e6 # not_a_series\n+ n", []string{"m", "n"}},
		{`sort_desc(topk(3, pgwal_advisr_up))`, []string{"pgwal_advisr_up"}},
		{`max without (quantile) (s{a="}{[("}) > bool 1`, []string{"s"}},
		{`time() - p`, []string{"p"}},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			if got := seriesNames(tc.expr); !slices.Equal(got, tc.want) {
				t.Errorf("seriesNames(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
}

// TestQueriesSelectKnownSeries checks that every series the dashboards, the alerts and the
// recording rules query is one that something produces: the daemon (docs/metrics.md), the
// recording rules, or the external metrics the docs name. A typo in a name makes an empty
// panel or an alert that never fires, and parses as well as the right name does.
func TestQueriesSelectKnownSeries(t *testing.T) {
	known := documentedMetrics(t)
	for name := range recordedNames(t) {
		known[name] = true
	}
	for _, name := range externalMetrics {
		known[name] = true
	}
	checked := 0
	check := func(where, expr string) {
		for _, name := range seriesNames(expr) {
			checked++
			if !known[name] {
				t.Errorf("%s selects %s: neither the daemon (%s), %s nor the external metrics %v produce it",
					where, name, metricsFile, recordingFile, externalMetrics)
			}
		}
	}
	for _, file := range []string{dashboardFile, fleetDashboard} {
		for _, p := range dashboardPanels(t, file) {
			for _, tg := range p.Targets {
				check(fmt.Sprintf("%s panel %q query %s", file, p.Title, tg.RefID), tg.Expr)
			}
		}
		for _, v := range loadDashboard(t, file).Templating.List {
			if q, ok := v.Query.(map[string]any); ok {
				// Grafana's label_values(series, label): the first argument is the series.
				s, _ := q["query"].(string)
				s = strings.TrimSuffix(strings.TrimPrefix(s, "label_values("), ")")
				series, _, _ := strings.Cut(s, ",")
				check(fmt.Sprintf("%s variable %s", file, v.Name), series)
			}
		}
	}
	for _, file := range []string{alertsFile, recordingFile} {
		var f ruleFile
		if err := yaml.Unmarshal(readFile(t, file), &f); err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				check(fmt.Sprintf("%s rule %s%s", file, r.Alert, r.Record), r.Expr)
			}
		}
	}
	if checked < 100 {
		t.Errorf("found %d series names in the dashboards and rules; the reading of PromQL lost some", checked)
	}
}
