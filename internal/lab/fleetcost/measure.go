package fleetcost

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// measure runs one fleet size on a fresh Prometheus: start it, let it scrape and evaluate for
// the warm-up, read its metrics, wait the window, read them again and ask its API about the
// scrapes of the window. The Prometheus and its directory are gone when it returns.
func measure(ctx context.Context, o Options, rules []ruleFile, daemon string, hosts int) (Measurement, error) {
	m := Measurement{Hosts: hosts, LoadBefore: lab.LoadAverage()}
	dir, err := os.MkdirTemp("", "pgwal-fleetcost-prometheus-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(dir)
	ruleFiles, err := writeRuleFiles(dir, rules, o.RuleInterval)
	if err != nil {
		return m, err
	}
	config := prometheusConfig(fleetConfig{
		Hosts: hosts, RoleSize: o.RoleSize, Daemon: daemon,
		ScrapeInterval: o.ScrapeInterval, ScrapeTimeout: scrapeTimeout(o.ScrapeInterval), EvalInterval: o.EvalInterval,
		RuleFiles: ruleFiles,
	})
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		return m, err
	}
	p, err := startPrometheus(ctx, o.Prometheus, dir)
	if err != nil {
		return m, err
	}
	defer p.stop()

	if err := lab.Sleep(ctx, o.Warmup); err != nil {
		return m, err
	}
	before, err := readSelf(ctx, p.url)
	if err != nil {
		return m, err
	}
	if err := lab.Sleep(ctx, o.Window); err != nil {
		return m, err
	}
	after, err := readSelf(ctx, p.url)
	if err != nil {
		return m, err
	}
	m.LoadAfter = lab.LoadAverage()
	m.HeadSeries = after.headSeries
	m.SeriesPerHost = after.headSeries / float64(hosts)
	m.RSSBytes = after.rss
	m.SamplesPerSecond = (after.appended - before.appended) / after.at.Sub(before.at).Seconds()
	m.RuleGroups = after.groups
	for _, g := range m.RuleGroups {
		m.RuleSeconds += g.LastSeconds
		if !g.Evaluated {
			return m, fmt.Errorf("rule group %s has not been evaluated in the %v of warm-up: lengthen --warmup", g.Name, o.Warmup)
		}
	}
	if len(m.RuleGroups) == 0 {
		return m, fmt.Errorf("prometheus loaded no rule group from %s", strings.Join(ruleFiles, ", "))
	}
	return m, readScrapes(ctx, p.url, o.Window, &m)
}

// readScrapes asks Prometheus how many targets are up, how many samples a scrape brought, how
// many series the recording rules keep, and how long the window's scrapes took: the median across targets of each target's mean, and the
// longest scrape of any.
func readScrapes(ctx context.Context, base string, window time.Duration, m *Measurement) error {
	w := promDuration(window)
	var up float64
	queries := []struct {
		expr string
		into *float64
	}{
		{`count(up{job="pgwal-advisor"} == 1)`, &up},
		{`avg(scrape_samples_scraped{job="pgwal-advisor"})`, &m.ScrapedSamplesPerHost},
		{`count({__name__=~"fleet:.+"})`, &m.RecordedSeries},
		{`quantile(0.5, avg_over_time(scrape_duration_seconds{job="pgwal-advisor"}[` + w + `]))`, &m.ScrapeSecondsMedian},
		{`max(max_over_time(scrape_duration_seconds{job="pgwal-advisor"}[` + w + `]))`, &m.ScrapeSecondsMax},
	}
	for _, q := range queries {
		v, err := queryScalar(ctx, base, q.expr)
		if err != nil {
			return err
		}
		*q.into = v
	}
	m.TargetsUp = int(up)
	return nil
}

// queryScalar evaluates an instant query that yields one sample (0 when it yields none).
func queryScalar(ctx context.Context, base, expr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("query prometheus: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("query prometheus for %s: %w", expr, err)
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query prometheus for %s: %s", expr, body.Error)
	}
	if len(body.Data.Result) == 0 {
		return 0, nil
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("query prometheus for %s: value %q: %w", expr, s, err)
	}
	return v, nil
}

// selfReading is what Prometheus's own /metrics said at one moment.
type selfReading struct {
	at                        time.Time
	headSeries, rss, appended float64
	groups                    []RuleGroup
}

// readSelf reads Prometheus's own /metrics: its head series, its resident memory, the samples
// its head has appended so far and each rule group's last evaluation.
func readSelf(ctx context.Context, base string) (selfReading, error) {
	r := selfReading{at: time.Now()}
	fams, err := fetchFamilies(ctx, base+"/metrics")
	if err != nil {
		return r, err
	}
	var missing []string
	for name, into := range map[string]*float64{
		"prometheus_tsdb_head_series":                 &r.headSeries,
		"process_resident_memory_bytes":               &r.rss,
		"prometheus_tsdb_head_samples_appended_total": &r.appended,
	} {
		f, ok := fams[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		*into = sum(f)
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return r, fmt.Errorf("prometheus's /metrics lacks %s", strings.Join(missing, ", "))
	}
	r.groups = ruleGroups(fams)
	return r, nil
}

// ruleGroups reads each group's last evaluation from Prometheus's rule manager metrics, whose
// rule_group label is "<file>;<group>".
func ruleGroups(fams map[string]*dto.MetricFamily) []RuleGroup {
	byLabel := map[string]*RuleGroup{}
	group := func(m *dto.Metric) *RuleGroup {
		for _, l := range m.GetLabel() {
			if l.GetName() != "rule_group" {
				continue
			}
			file, name, _ := strings.Cut(l.GetValue(), ";")
			g := byLabel[l.GetValue()]
			if g == nil {
				g = &RuleGroup{Name: name, File: filepath.Base(file)}
				byLabel[l.GetValue()] = g
			}
			return g
		}
		return nil
	}
	for name, set := range map[string]func(*RuleGroup, float64){
		"prometheus_rule_group_rules":                             func(g *RuleGroup, v float64) { g.Rules = int(v) },
		"prometheus_rule_group_last_duration_seconds":             func(g *RuleGroup, v float64) { g.LastSeconds = v },
		"prometheus_rule_group_last_evaluation_samples":           func(g *RuleGroup, v float64) { g.LastSamples = v },
		"prometheus_rule_group_last_evaluation_timestamp_seconds": func(g *RuleGroup, v float64) { g.Evaluated = v > 0 },
	} {
		for _, m := range fams[name].GetMetric() {
			if g := group(m); g != nil {
				set(g, m.GetGauge().GetValue())
			}
		}
	}
	groups := make([]RuleGroup, 0, len(byLabel))
	for _, g := range byLabel {
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(a, b RuleGroup) int { return strings.Compare(a.File+";"+a.Name, b.File+";"+b.Name) })
	return groups
}

// fetchFamilies reads an exposition in the text format.
func fetchFamilies(ctx context.Context, u string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read %s: %s", u, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", u, err)
	}
	return fams, nil
}

// sum adds up a family's samples (a counter or gauge, over all its label sets).
func sum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			s += m.GetCounter().GetValue()
		case m.Gauge != nil:
			s += m.GetGauge().GetValue()
		case m.Untyped != nil:
			s += m.GetUntyped().GetValue()
		}
	}
	return s
}

// awaitProbedHost waits until the daemon's /metrics has the sync probe's figures (the first
// burst runs at start), so that every identity has the series of a probing host, and counts
// what one scrape brings.
func awaitProbedHost(ctx context.Context, metrics string) (Host, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		h, err := countHost(ctx, metrics)
		if err == nil && h.probed {
			return h, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("no pgwal_advisor_probe_sync_latency_seconds after 2 minutes")
			}
			return h, fmt.Errorf("the daemon's %s: %w", metrics, err)
		}
		if err := lab.Sleep(ctx, time.Second); err != nil {
			return h, err
		}
	}
}

// countHost counts the samples of one scrape of the daemon, and those of the Go runtime and
// the HTTP handler that docs/fleet.md says may be dropped at scrape time.
func countHost(ctx context.Context, metrics string) (Host, error) {
	fams, err := fetchFamilies(ctx, metrics)
	if err != nil {
		return Host{}, err
	}
	var h Host
	for name, f := range fams {
		n := samples(f)
		h.Samples += n
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			h.RuntimeSamples += n
		}
		h.probed = h.probed || name == "pgwal_advisor_probe_sync_latency_seconds"
	}
	return h, nil
}

// samples counts the lines a family takes in the text exposition: one per counter, gauge or
// untyped sample; a summary's quantiles, _sum and _count; a histogram's buckets (+Inf
// included), _sum and _count.
func samples(f *dto.MetricFamily) int {
	n := 0
	for _, m := range f.GetMetric() {
		switch {
		case m.Summary != nil:
			n += len(m.GetSummary().GetQuantile()) + 2
		case m.Histogram != nil:
			n += len(m.GetHistogram().GetBucket()) + 2
			if !hasInf(m.GetHistogram()) {
				n++
			}
		default:
			n++
		}
	}
	return n
}

func hasInf(h *dto.Histogram) bool {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() > 1e308 {
			return true
		}
	}
	return false
}
