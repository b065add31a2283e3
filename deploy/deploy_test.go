package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

const (
	alertsFile      = "prometheus/alerts.yml"
	alertsTestFile  = "prometheus/tests/alerts_test.yml"
	scrapeFile      = "prometheus/scrape.yml"
	dashboardFile   = "grafana/pgwal-advisor.json"
	fleetDashboard  = "grafana/pgwal-advisor-fleet.json"
	runbookFile     = "../docs/runbook.md"
	metricsFile     = "../docs/metrics.md"
	runbookURLStart = "https://github.com/pgwal-advisor/pgwal-advisor/blob/main/docs/runbook.md#"
	listenPort      = "9817"
)

// ruleIDs are the advisor's rule IDs, a contract between the rules, the alerts and the docs:
// each needs a runbook section, and an alert may only select these (or, in the catch-all,
// exclude them). They are read from the rules, so a new rule without a runbook section fails
// TestRunbook.
func ruleIDs() []string {
	var ids []string
	for _, r := range rules.All() {
		ids = append(ids, r.ID)
	}
	return append(ids, rules.ConflictRuleID)
}

// externalMetrics are the metrics of other exporters that the alerts and the dashboard may use:
// Prometheus's own up, and what docs/metrics.md tells readers to join from node_exporter.
var externalMetrics = []string{"up", "node_memory_Dirty_bytes", "node_memory_Writeback_bytes"}

type ruleFile struct {
	Groups []struct {
		Name  string      `yaml:"name"`
		Rules []alertRule `yaml:"rules"`
	} `yaml:"groups"`
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(readFile(t, alertsFile), &f); err != nil {
		t.Fatalf("parse %s: %v", alertsFile, err)
	}
	var alerts []alertRule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s group %s: recording rule %q: this file holds alerts only", alertsFile, g.Name, r.Record)
				continue
			}
			alerts = append(alerts, r)
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s: no alerts", alertsFile)
	}
	return alerts
}

// ruleTests is a promtool unit test file, as far as the tests here read it.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		PromQLExprTest []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func loadRuleTests(t *testing.T, file string) ruleTests {
	t.Helper()
	var tf ruleTests
	if err := yaml.Unmarshal(readFile(t, file), &tf); err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	return tf
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// promtool returns the path of promtool. Without it the test skips, except in CI, where the
// suite must not pass by skipping.
func promtool(t *testing.T) string {
	t.Helper()
	return lab.RequireTool(t, "promtool", lab.PrometheusHint)
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.String())
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", alertsFile)
}

func TestPromtoolTestRules(t *testing.T) {
	runPromtool(t, "test", "rules", alertsTestFile)
}

// The example scrape configuration is a complete Prometheus configuration that loads
// alerts.yml, so promtool checks both together.
func TestPromtoolCheckConfig(t *testing.T) {
	runPromtool(t, "check", "config", scrapeFile)
}

func TestAlertRulesEmbedded(t *testing.T) {
	got := AlertRules()
	if want := readFile(t, alertsFile); !bytes.Equal(got, want) {
		t.Fatalf("AlertRules() differs from %s", alertsFile)
	}
	got[0] ^= 0xff
	if bytes.Equal(got, AlertRules()) {
		t.Error("AlertRules() returned the embedded slice itself; want a copy")
	}
}

var (
	alertNameRE = regexp.MustCompile(`^PgwalAdvisor[A-Z][A-Za-z0-9]*$`)
	// A template in a label value is allowed only to pass the finding's own severity through.
	severityTemplate = "{{ $labels.severity }}"
)

func TestAlertConventions(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range loadAlerts(t) {
		t.Run(a.Alert, func(t *testing.T) {
			if !alertNameRE.MatchString(a.Alert) {
				t.Errorf("name %q: want PascalCase with the prefix PgwalAdvisor", a.Alert)
			}
			if seen[a.Alert] {
				t.Errorf("name %q used twice", a.Alert)
			}
			seen[a.Alert] = true
			if d, err := time.ParseDuration(a.For); err != nil || d <= 0 {
				t.Errorf("for: %q: want a positive duration", a.For)
			}
			switch sev := a.Labels["severity"]; sev {
			case "critical", "warning", "info", severityTemplate:
			default:
				t.Errorf("labels.severity %q: want critical, warning, info or %q", sev, severityTemplate)
			}
			for _, k := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(a.Annotations[k]) == "" {
					t.Errorf("annotations.%s is missing", k)
				}
			}
			for _, label := range identifyingLabels(a) {
				if !strings.Contains(a.Annotations["summary"]+a.Annotations["description"], "$labels."+label) {
					t.Errorf("neither summary nor description names $labels.%s", label)
				}
			}
			if u := a.Annotations["runbook_url"]; !strings.HasPrefix(u, runbookURLStart) || strings.Contains(u, "{{") {
				t.Errorf("runbook_url %q: want %s<anchor>, no template", u, runbookURLStart)
			}
			// Alerts are per instance: an aggregation would merge the hosts of a fleet. The fleet's
			// alerts compare hosts through recorded series, never in their own expression.
			if regexp.MustCompile(`\b(sum|avg|min|max|count|topk|bottomk|quantile|group|stddev|stdvar|count_values)\b\s*(by|without)?\s*\(`).MatchString(a.Expr) {
				t.Errorf("expr %q aggregates; alerts must stay per instance", a.Expr)
			}
		})
	}
}

// identifyingLabels are the labels an alert's summary or description must name so that a
// reader knows what it is about: the instance for a host's alert; the role and the setting for
// drift, which is about a group of hosts; nothing for absent(), which has no series.
func identifyingLabels(a alertRule) []string {
	switch {
	case a.Alert == "PgwalAdvisorAdvisorAbsent":
		return nil
	case strings.Contains(a.Expr, "fleet:pgwal_advisor_setting_info:"):
		return []string{"role", "setting"}
	}
	return []string{"instance"}
}

// Every alert has a promtool case where it fires, with labels and annotations checked, and one
// where it stays quiet. The fleet's alerts are tested with recording.yml loaded, on what the
// recording rules make of the advisors' series.
func TestAlertsCoveredByUnitTests(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	for file, ruleFiles := range map[string][]string{
		alertsTestFile:     {"../alerts.yml"},
		fleetRulesTestFile: {"../recording.yml", "../alerts.yml"},
	} {
		tf := loadRuleTests(t, file)
		if !slices.Equal(tf.RuleFiles, ruleFiles) {
			t.Errorf("%s: rule_files = %v, want %v", file, tf.RuleFiles, ruleFiles)
		}
		for _, c := range tf.Tests {
			for _, r := range c.AlertRuleTest {
				if len(r.ExpAlerts) == 0 {
					quiet[r.Alertname] = true
					continue
				}
				checked := true
				for _, e := range r.ExpAlerts {
					if e.ExpLabels["severity"] == "" || e.ExpAnnotations["summary"] == "" ||
						e.ExpAnnotations["description"] == "" || e.ExpAnnotations["runbook_url"] == "" {
						checked = false
					}
				}
				if checked {
					fires[r.Alertname] = true
				}
			}
		}
	}
	for _, a := range loadAlerts(t) {
		if !fires[a.Alert] {
			t.Errorf("%s: no test case where it fires with severity, summary, description and runbook_url checked", a.Alert)
		}
		if !quiet[a.Alert] {
			t.Errorf("%s: no test case where it does not fire", a.Alert)
		}
	}
}

// A pending finding (docs/metrics.md) must never page: every alert on pgwal_advisor_finding
// excludes state="pending".
func TestFindingAlertsExcludePending(t *testing.T) {
	for _, a := range loadAlerts(t) {
		if strings.Contains(a.Expr, "pgwal_advisor_finding") && !pendingExcludedRE.MatchString(a.Expr) {
			t.Errorf("%s: expr %q selects pgwal_advisor_finding without state!=\"pending\" (or state=\"firing\")", a.Alert, a.Expr)
		}
	}
}

var pendingExcludedRE = regexp.MustCompile(`\bstate\s*(!=\s*"pending"|=\s*"firing")`)

// ruleMatcherRE finds rule="..." and rule=~"..." / rule!~"..." matchers in an expression.
var ruleMatcherRE = regexp.MustCompile(`\brule\s*(=~|!~|=|!=)\s*"([^"]*)"`)

// Alerts select findings by rule ID; a typo would make an alert that never fires while its
// promtool test, written with the same typo, passes.
func TestAlertRuleIDsKnown(t *testing.T) {
	for _, a := range loadAlerts(t) {
		for _, m := range ruleMatcherRE.FindAllStringSubmatch(a.Expr, -1) {
			for id := range strings.SplitSeq(m[2], "|") {
				if !slices.Contains(ruleIDs(), id) {
					t.Errorf("%s: expr selects rule %q, which is not a rule ID of the advisor %v", a.Alert, id, ruleIDs())
				}
			}
		}
	}
}

// The catch-all must exclude exactly the rules that have their own alert (and probe-disabled,
// which has one on pgwal_advisor_probe_enabled), or a finding alerts twice or never.
func TestCatchAllExcludesDedicatedAlerts(t *testing.T) {
	var excluded, dedicated []string
	for _, a := range loadAlerts(t) {
		for _, m := range ruleMatcherRE.FindAllStringSubmatch(a.Expr, -1) {
			switch m[1] {
			case "!~":
				excluded = append(excluded, strings.Split(m[2], "|")...)
			case "=":
				dedicated = append(dedicated, m[2])
			}
		}
	}
	dedicated = append(dedicated, "probe-disabled")
	slices.Sort(excluded)
	slices.Sort(dedicated)
	if !slices.Equal(excluded, dedicated) {
		t.Errorf("catch-all excludes %v; the dedicated alerts cover %v", excluded, dedicated)
	}
}

// anchorsOf returns the anchors GitHub gives the headings of a Markdown document: lowercased,
// punctuation other than '-' and '_' dropped, spaces turned into '-', repeats suffixed -1, -2.
func anchorsOf(md string) map[string]bool {
	anchors := map[string]bool{}
	count := map[string]int{}
	inFence := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(line[level:])) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := count[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		count[a]++
	}
	return anchors
}

func TestAnchorsOf(t *testing.T) {
	md := "# Runbook\n## Before you start: the tools\n```sh\n# not a heading\n```\n### fsync-off\n### `wal_buffers` (PG 18)\n### fsync-off\n"
	got := anchorsOf(md)
	for _, want := range []string{"runbook", "before-you-start-the-tools", "fsync-off", "wal_buffers-pg-18", "fsync-off-1"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment inside a code block became an anchor")
	}
}

func TestRunbook(t *testing.T) {
	md := string(readFile(t, runbookFile))
	anchors := anchorsOf(md)
	for _, a := range loadAlerts(t) {
		anchor := strings.TrimPrefix(a.Annotations["runbook_url"], runbookURLStart)
		if !anchors[anchor] {
			t.Errorf("%s: runbook_url anchor #%s is not a heading in %s", a.Alert, anchor, runbookFile)
		}
		if !strings.Contains(md, a.Alert) {
			t.Errorf("%s is not mentioned in %s", a.Alert, runbookFile)
		}
	}
	for _, id := range ruleIDs() {
		if !anchors[id] {
			t.Errorf("rule %s has no section (### %s) in %s", id, id, runbookFile)
		}
	}
	// In-page links must land too.
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(md, -1) {
		if !anchors[m[1]] {
			t.Errorf("link to #%s: no such heading in %s", m[1], runbookFile)
		}
	}
}

// documentedMetrics returns the metric names in the tables of docs/metrics.md, with the
// series names a summary or histogram adds.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	row := regexp.MustCompile("^\\| `(pgwal_advisor_[a-z0-9_]+)` \\| ([a-z]+) \\|")
	for line := range strings.SplitSeq(string(readFile(t, metricsFile)), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		names[m[1]] = true
		switch m[2] {
		case "summary":
			names[m[1]+"_sum"], names[m[1]+"_count"] = true, true
		case "histogram":
			names[m[1]+"_sum"], names[m[1]+"_count"], names[m[1]+"_bucket"] = true, true, true
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no metric table rows found", metricsFile)
	}
	return names
}

var (
	ownMetricRE  = regexp.MustCompile(`\bpgwal_advisor_[a-zA-Z0-9_]+`)
	fleetNameRE  = regexp.MustCompile(`\bfleet:[a-zA-Z0-9_:]+`)
	nodeMetricRE = regexp.MustCompile(`\bnode_[a-zA-Z0-9_]+`)
	upRE         = regexp.MustCompile(`\bup\{`)
)

// checkMetrics reports metric names in text that docs/metrics.md does not document.
func checkMetrics(t *testing.T, where, text string, documented map[string]bool) {
	t.Helper()
	// A fleet aggregate is checked against the recording rules, not docs/metrics.md.
	if names := fleetNameRE.FindAllString(text, -1); len(names) > 0 {
		recorded := recordedNames(t)
		for _, name := range names {
			if !recorded[name] {
				t.Errorf("%s uses %s, which %s does not record", where, name, recordingFile)
			}
		}
		text = fleetNameRE.ReplaceAllString(text, "")
	}
	for _, name := range ownMetricRE.FindAllString(text, -1) {
		if !documented[name] {
			t.Errorf("%s uses %s, which is not in %s", where, name, metricsFile)
		}
	}
	for _, name := range nodeMetricRE.FindAllString(text, -1) {
		if !slices.Contains(externalMetrics, name) {
			t.Errorf("%s uses %s: not one of the external metrics %v", where, name, externalMetrics)
		}
	}
}

func TestMetricsDocumented(t *testing.T) {
	documented := documentedMetrics(t)
	for _, a := range loadAlerts(t) {
		// Annotations count too: their templates query metrics.
		checkMetrics(t, a.Alert, a.Expr+"\n"+a.Annotations["description"], documented)
		if upRE.MatchString(a.Expr) && !strings.Contains(a.Expr, `up{job="pgwal-advisor"}`) {
			t.Errorf("%s: up must be selected by job=\"pgwal-advisor\" (the scrape job of scrape.yml)", a.Alert)
		}
	}
	for _, file := range []string{dashboardFile, fleetDashboard} {
		for _, p := range dashboardPanels(t, file) {
			for _, tg := range p.Targets {
				checkMetrics(t, fmt.Sprintf("%s panel %q", file, p.Title), tg.Expr, documented)
			}
		}
	}
}

// recordedNames are the series deploy/prometheus/recording.yml records.
func recordedNames(t *testing.T) map[string]bool {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(readFile(t, recordingFile), &f); err != nil {
		t.Fatalf("parse %s: %v", recordingFile, err)
	}
	names := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			names[r.Record] = true
		}
	}
	return names
}

type panel struct {
	Type       string `json:"type"`
	ID         int    `json:"id"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T, file string) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(readFile(t, file)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	if dec.More() {
		t.Fatalf("%s: data after the dashboard object", file)
	}
	return d
}

// dashboardPanels returns every panel, those inside collapsed rows included, rows excluded.
func dashboardPanels(t *testing.T, file string) []panel {
	t.Helper()
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(loadDashboard(t, file).Panels)
	return out
}

func TestDashboard(t *testing.T) {
	for _, file := range []string{dashboardFile, fleetDashboard} {
		t.Run(filepath.Base(file), func(t *testing.T) { checkDashboard(t, file, file == dashboardFile) })
	}
}

// checkDashboard checks one dashboard; perHost dashboards also select by the instance variable.
func checkDashboard(t *testing.T, file string, perHost bool) {
	d := loadDashboard(t, file)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both", d.Title, d.UID)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Name == "datasource" && v.Query != "prometheus" {
			t.Errorf("variable datasource: query %v, want prometheus", v.Query)
		}
	}
	if vars["datasource"] != "datasource" || perHost && vars["instance"] != "query" {
		t.Errorf("variables %v: want datasource (type datasource) and, per host, instance (type query)", vars)
	}
	ids := map[int]bool{}
	panels := dashboardPanels(t, file)
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource must be the ${datasource} variable", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
				t.Errorf("panel %q: a target without expr or refId", p.Title)
			}
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q, query %s: datasource must be the ${datasource} variable", p.Title, tg.RefID)
			}
			// Every query follows the instance selector, so one dashboard serves a fleet.
			if perHost && strings.Contains(tg.Expr, "pgwal_advisor_") && !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q, query %s: not filtered by instance=~\"$instance\": %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
}

// The dashboard's queries are PromQL that promtool parses: written into a rules file (with
// Grafana's variables replaced) and checked like the alerts.
func TestDashboardQueriesParse(t *testing.T) {
	tool := promtool(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	r := strings.NewReplacer("$__rate_interval", "1m", "$instance", ".*")
	for i, file := range []string{dashboardFile, fleetDashboard} {
		for _, p := range dashboardPanels(t, file) {
			for _, tg := range p.Targets {
				rules = append(rules, rule{Record: fmt.Sprintf("dashboard:d%d_panel_%d:%s", i, p.ID, strings.ToLower(tg.RefID)), Expr: r.Replace(tg.Expr)})
			}
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), tool, "check", "rules", path)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules (the dashboard's queries): %v\n%s", err, b)
	}
}

// The YAML manifests parse (every document of a multi-document file).
func TestManifestsParse(t *testing.T) {
	for _, name := range []string{"kubernetes/sidecar.yaml", scrapeFile} {
		dec := yaml.NewDecoder(bytes.NewReader(readFile(t, name)))
		n := 0
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("%s document %d: %v", name, n+1, err)
				}
				break
			}
			n++
		}
		if n == 0 {
			t.Errorf("%s: no YAML documents", name)
		}
	}
}

var listenRE = regexp.MustCompile(`--web\.listen-address[= ]"?([^\s"\\]+)`)

// The documented port is 9817 (clear of node_exporter's 9100 and postgres_exporter's 9187):
// every example uses it, and the systemd unit keeps the loopback default.
func TestListenAddress(t *testing.T) {
	found := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range listenRE.FindAllStringSubmatch(string(b), -1) {
			found++
			if !strings.HasSuffix(m[1], ":"+listenPort) {
				t.Errorf("%s: --web.listen-address %s: want port %s", path, m[1], listenPort)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Error("no --web.listen-address in deploy/")
	}
	unit := string(readFile(t, "systemd/pgwal-advisor.service"))
	if !strings.Contains(unit, "--web.listen-address=127.0.0.1:"+listenPort) {
		t.Errorf("systemd unit: want --web.listen-address=127.0.0.1:%s (loopback by default)", listenPort)
	}
}
