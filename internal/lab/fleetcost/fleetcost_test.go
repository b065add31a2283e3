package fleetcost

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// ruleFilePaths are the project's rule files, from this package's directory.
var ruleFilePaths = []string{"../../../deploy/prometheus/recording.yml", "../../../deploy/prometheus/alerts.yml"}

// promConfig is the part of prometheus.yml the scenario writes.
type promConfig struct {
	Global        map[string]string `yaml:"global"`
	RuleFiles     []string          `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
		RelabelConfigs []struct {
			SourceLabels []string `yaml:"source_labels"`
			TargetLabel  string   `yaml:"target_label"`
			Replacement  string   `yaml:"replacement"`
		} `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

// TestPrometheusConfig: every identity is a target of its own in job pgwal-advisor, the roles
// group RoleSize of them (the last one what is left), and the relabelling keeps the target's
// name as the instance and sends the scrape to the daemon.
func TestPrometheusConfig(t *testing.T) {
	text := prometheusConfig(fleetConfig{
		Hosts: 7, RoleSize: 3, Daemon: "127.0.0.1:40001",
		ScrapeInterval: 30 * time.Second, ScrapeTimeout: 10 * time.Second, EvalInterval: time.Minute,
		RuleFiles: []string{"/tmp/x/recording.yml", "/tmp/x/alerts.yml"},
	})
	var c promConfig
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, text)
	}
	wantGlobal := map[string]string{"scrape_interval": "30s", "scrape_timeout": "10s", "evaluation_interval": "1m"}
	for k, v := range wantGlobal {
		if c.Global[k] != v {
			t.Errorf("global.%s = %q, want %q", k, c.Global[k], v)
		}
	}
	if len(c.RuleFiles) != 2 || c.RuleFiles[0] != "/tmp/x/recording.yml" {
		t.Errorf("rule_files = %q", c.RuleFiles)
	}
	if len(c.ScrapeConfigs) != 1 || c.ScrapeConfigs[0].JobName != "pgwal-advisor" {
		t.Fatalf("scrape_configs: want one job pgwal-advisor, got %+v", c.ScrapeConfigs)
	}
	job := c.ScrapeConfigs[0]
	var targets []string
	roleSizes := map[string]int{}
	for _, sc := range job.StaticConfigs {
		targets = append(targets, sc.Targets...)
		roleSizes[sc.Labels["role"]] += len(sc.Targets)
	}
	if got := len(slices.Compact(slices.Sorted(slices.Values(targets)))); got != 7 || len(targets) != 7 {
		t.Errorf("targets %q: want 7 distinct", targets)
	}
	if want := map[string]int{"role0000": 3, "role0001": 3, "role0002": 1}; !mapsEqual(roleSizes, want) {
		t.Errorf("hosts per role %v, want %v", roleSizes, want)
	}
	r := job.RelabelConfigs
	if len(r) != 2 || !slices.Equal(r[0].SourceLabels, []string{"__address__"}) || r[0].TargetLabel != "instance" ||
		r[1].TargetLabel != "__address__" || r[1].Replacement != "127.0.0.1:40001" {
		t.Errorf("relabel_configs %+v: want __address__ -> instance, then __address__ = the daemon", r)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestPrometheusConfigChecks has promtool check the configuration the scenario writes, with the
// project's rule files at the quick form's pace: what Prometheus would refuse at start.
func TestPrometheusConfigChecks(t *testing.T) {
	promtool := lab.RequireTool(t, "promtool", lab.PrometheusHint)
	dir := t.TempDir()
	rules, err := readRuleFiles(ruleFilePaths)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := writeRuleFiles(dir, rules, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "prometheus.yml")
	text := prometheusConfig(fleetConfig{Hosts: 20, RoleSize: 3, Daemon: "127.0.0.1:40001",
		ScrapeInterval: time.Second, ScrapeTimeout: scrapeTimeout(time.Second), EvalInterval: time.Second, RuleFiles: paths})
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", config).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s\n%s", err, out, text)
	}
}

// TestWriteRuleFiles: the files are copied as they are, or with every group's own interval set
// to the quick pace; nothing else changes.
func TestWriteRuleFiles(t *testing.T) {
	src := []ruleFile{{name: "r.yml", content: []byte("groups:\n  - name: a\n    interval: 1m\n    rules:\n      - record: x\n        expr: vector(1)\n  - name: b\n    interval: 5m\n    rules: []\n")}}
	for _, tc := range []struct {
		interval time.Duration
		want     string
	}{
		{0, string(src[0].content)},
		{2 * time.Second, strings.NewReplacer("interval: 1m", "interval: 2s", "interval: 5m", "interval: 2s").Replace(string(src[0].content))},
	} {
		dir := t.TempDir()
		paths, err := writeRuleFiles(dir, src, tc.interval)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("interval %v: got\n%s\nwant\n%s", tc.interval, got, tc.want)
		}
	}
	if _, err := readRuleFiles([]string{"a/r.yml", "b/r.yml"}); err == nil {
		t.Errorf("readRuleFiles of missing files: no error")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"defaults", func(*Options) {}, ""},
		{"quick", func(o *Options) { o.Quick = true }, ""},
		{"no sizes", func(o *Options) { o.Hosts = nil }, "--hosts"},
		{"zero hosts", func(o *Options) { o.Hosts = []int{100, 0} }, "--hosts 0"},
		{"no rounds", func(o *Options) { o.Rounds = 0 }, "--rounds 0"},
		{"short warm-up", func(o *Options) { o.Warmup = time.Minute }, "--warmup 1m0s"},
		{"short window", func(o *Options) { o.Window = time.Second }, "--window 1s"},
		{"fast scrapes", func(o *Options) { o.ScrapeInterval = 100 * time.Millisecond }, "--scrape-interval"},
		{"no roles", func(o *Options) { o.RoleSize = 0 }, "--role-size 0"},
		{"negative load", func(o *Options) { o.LoadTPS = -1 }, "--load.tps -1"},
		{"no rules", func(o *Options) { o.RuleFiles = nil }, "--rules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Defaults()
			tc.change(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestSummarise: per size, the median and range of its rounds, the fewest targets up, each rule
// group's times; and the memory line through every run.
func TestSummarise(t *testing.T) {
	run := func(hosts, round int, series, ruleSeconds float64, up int) Measurement {
		return Measurement{Hosts: hosts, Round: round, TargetsUp: up, HeadSeries: series, SeriesPerHost: series / float64(hosts),
			RSSBytes: 50e6 + 4000*series, RuleSeconds: ruleSeconds,
			RuleGroups: []RuleGroup{{File: "recording.yml", Name: "fleet", Rules: 3, LastSeconds: ruleSeconds, Evaluated: true}}}
	}
	r := &Report{Options: ReportOptions{Hosts: []int{100, 500}}, Runs: []Measurement{
		run(100, 1, 21000, 0.010, 100), run(500, 1, 105000, 0.050, 500),
		run(100, 2, 21100, 0.012, 99), run(500, 2, 104000, 0.040, 500),
	}}
	r.summarise()
	if len(r.Sizes) != 2 || r.Sizes[0].Hosts != 100 || r.Sizes[1].Hosts != 500 {
		t.Fatalf("sizes %+v: want 100 then 500", r.Sizes)
	}
	s := r.Sizes[0]
	if s.Runs != 2 || s.TargetsUpMin != 99 {
		t.Errorf("100 hosts: runs %d, targets up at least %d; want 2, 99", s.Runs, s.TargetsUpMin)
	}
	if want := (Spread{Median: 21050, Min: 21000, Max: 21100}); s.HeadSeries != want {
		t.Errorf("100 hosts: head series %+v, want %+v", s.HeadSeries, want)
	}
	if g := r.Sizes[1].RuleGroups; len(g) != 1 || g[0].Seconds != (Spread{Median: 0.045, Min: 0.040, Max: 0.050}) || g[0].Rules != 3 {
		t.Errorf("500 hosts: rule groups %+v", g)
	}
	f := r.MemoryFit
	if f == nil || f.Runs != 4 || abs(f.BytesPerSeries-4000) > 1e-6 || abs(f.FixedBytes-50e6) > 1e-3 {
		t.Errorf("memory fit %+v, want 50e6 + 4000 x series over 4 runs", f)
	}
	if fitMemory(r.Runs[:1]) != nil {
		t.Errorf("a memory line through one run")
	}

	var out bytes.Buffer
	WriteText(&out, r)
	for _, want := range []string{"| 100 | 21 050 (21 000-21 100) |", "| 500 |", "99/100", "| recording.yml: fleet | 3 | 11 ms (10 ms-12 ms) | 45 ms (40 ms-50 ms) |", "50 MB + 4.00 kB x head series"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, out.String())
		}
	}
}

func abs(x float64) float64 { return max(x, -x) }

func TestFormats(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{count(999), "999"}, {count(1000), "1 000"}, {count(432123), "432 123"}, {count(1234567), "1 234 567"},
		{seconds(0), "0"}, {seconds(0.00085), "850 µs"}, {seconds(0.0123), "12.3 ms"}, {seconds(1.25), "1.25 s"},
		{seconds(30), "30 s"}, {seconds(120), "2 min"},
		{promDuration(30 * time.Second), "30s"}, {promDuration(time.Minute), "1m"}, {promDuration(1500 * time.Millisecond), "1500ms"},
		{spread(Spread{Median: 5, Min: 5, Max: 5}, count), "5"}, {spread(Spread{Median: 5, Min: 4, Max: 6}, count), "5 (4-6)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestQuick runs the quick form end to end on real processes: a cluster with its load, the
// daemon, and a Prometheus per fleet size loading the project's rules. It checks that every
// figure was taken and that nothing is left behind (no directory, no process), not how large
// the figures are.
func TestQuick(t *testing.T) {
	prometheus := lab.RequireTool(t, "prometheus", lab.PrometheusHint)
	lab.RequireServer(t)
	bin := filepath.Join(t.TempDir(), "pgwal-advisor")
	if out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/pgwal-advisor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	// Everything the scenario makes goes under tmp, which must be empty when it returns.
	tmp := lab.SharedTempDir(t, "")
	t.Setenv("TMPDIR", tmp)

	o := Defaults()
	o.Bin, o.Prometheus, o.RuleFiles, o.Quick = bin, prometheus, ruleFilePaths, true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, o, &progress)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	WriteText(&out, rep)
	t.Log(progress.String() + out.String())

	if rep.Host.Samples == 0 || rep.Host.RuntimeSamples == 0 || rep.Host.RuntimeSamples >= rep.Host.Samples {
		t.Errorf("one host: %+v", rep.Host)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Hosts != 10 || rep.Runs[1].Hosts != 50 {
		t.Fatalf("runs %+v: want 10 hosts, then 50", rep.Runs)
	}
	for _, m := range rep.Runs {
		if m.TargetsUp != m.Hosts {
			t.Errorf("%d hosts: %d targets up", m.Hosts, m.TargetsUp)
		}
		// Every identity brings a host's series, and Prometheus adds up and scrape_* to each.
		if m.HeadSeries < float64(m.Hosts)*(m.ScrapedSamplesPerHost+5) || m.ScrapedSamplesPerHost < float64(rep.Host.Samples)/2 {
			t.Errorf("%d hosts: %.0f head series, %.0f samples a scrape (one host: %d)", m.Hosts, m.HeadSeries, m.ScrapedSamplesPerHost, rep.Host.Samples)
		}
		if m.RecordedSeries == 0 || m.RSSBytes == 0 || m.SamplesPerSecond == 0 || m.ScrapeSecondsMedian == 0 || m.ScrapeSecondsMax < m.ScrapeSecondsMedian {
			t.Errorf("%d hosts: a figure was not taken: %+v", m.Hosts, m)
		}
		var groups []string
		for _, g := range m.RuleGroups {
			groups = append(groups, g.File+": "+g.Name)
		}
		for _, want := range []string{"recording.yml: pgwal-advisor-fleet", "recording.yml: pgwal-advisor-fleet-outliers",
			"recording.yml: pgwal-advisor-fleet-drift", "alerts.yml: pgwal-advisor-findings"} {
			if !slices.Contains(groups, want) {
				t.Errorf("%d hosts: rule groups %q lack %s", m.Hosts, groups, want)
			}
		}
	}
	if len(rep.Sizes) != 2 || rep.MemoryFit == nil {
		t.Errorf("summary: sizes %+v, memory fit %+v", rep.Sizes, rep.MemoryFit)
	}
	for _, want := range []string{"| 10 |", "| 50 |", "recording.yml: pgwal-advisor-fleet-drift"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the text report lacks %q", want)
		}
	}

	left, _ := os.ReadDir(tmp)
	for _, e := range left {
		t.Errorf("left behind: %s", filepath.Join(tmp, e.Name()))
	}
	if pids := processesUnder(t, tmp); len(pids) > 0 {
		t.Errorf("processes still running with %s on their command line: %v", tmp, pids)
	}
}

// processesUnder lists the processes whose command line names dir (a Prometheus's
// --config.file, a postgres's data directory).
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []string
	for _, f := range cmdlines {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(dir)) {
			pids = append(pids, filepath.Base(filepath.Dir(f))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return pids
}
