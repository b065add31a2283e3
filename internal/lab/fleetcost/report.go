package fleetcost

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// Report is a whole run; its JSON is the contract of `bench-fleet --format json`.
type Report struct {
	Started    time.Time     `json:"started"`
	Finished   time.Time     `json:"finished"`
	Prometheus string        `json:"prometheus"`
	CPUs       int           `json:"cpus"`
	Options    ReportOptions `json:"options"`
	// Host is what one scrape of the daemon brings.
	Host Host `json:"host"`
	// Runs are every measurement in the order taken; Sizes their summary per fleet size.
	Runs  []Measurement `json:"runs"`
	Sizes []Size        `json:"sizes"`
	// MemoryFit is Prometheus's resident memory as a line through every run's head series.
	MemoryFit *MemoryFit `json:"memory_fit,omitempty"`
}

// ReportOptions are the options a report was measured with, in seconds where they are times.
type ReportOptions struct {
	Hosts                     []int    `json:"hosts"`
	Rounds                    int      `json:"rounds"`
	ScrapeIntervalSeconds     float64  `json:"scrape_interval_seconds"`
	ScrapeTimeoutSeconds      float64  `json:"scrape_timeout_seconds"`
	EvaluationIntervalSeconds float64  `json:"evaluation_interval_seconds"`
	RuleIntervalSeconds       float64  `json:"rule_group_interval_seconds"` // 0: the files' own
	WarmupSeconds             float64  `json:"warmup_seconds"`
	WindowSeconds             float64  `json:"window_seconds"`
	RoleSize                  int      `json:"role_size"`
	LoadTPS                   int      `json:"load_tps"`
	RuleFiles                 []string `json:"rule_files"`
}

func reportOptions(o Options) ReportOptions {
	return ReportOptions{
		Hosts: o.Hosts, Rounds: o.Rounds,
		ScrapeIntervalSeconds: o.ScrapeInterval.Seconds(), ScrapeTimeoutSeconds: scrapeTimeout(o.ScrapeInterval).Seconds(),
		EvaluationIntervalSeconds: o.EvalInterval.Seconds(), RuleIntervalSeconds: o.RuleInterval.Seconds(),
		WarmupSeconds: o.Warmup.Seconds(), WindowSeconds: o.Window.Seconds(),
		RoleSize: o.RoleSize, LoadTPS: o.LoadTPS, RuleFiles: o.RuleFiles,
	}
}

// Host is one scrape of the daemon: its samples, and how many of them are the Go runtime's,
// the process's and the HTTP handler's (go_*, process_*, promhttp_*).
type Host struct {
	Samples        int `json:"samples"`
	RuntimeSamples int `json:"runtime_samples"`
	probed         bool
}

// Measurement is one fleet size on one fresh Prometheus.
type Measurement struct {
	Hosts     int `json:"hosts"`
	Round     int `json:"round"`
	TargetsUp int `json:"targets_up"`
	// ScrapedSamplesPerHost is the mean of scrape_samples_scraped over the targets.
	ScrapedSamplesPerHost float64 `json:"scraped_samples_per_host"`
	// HeadSeries is prometheus_tsdb_head_series at the end of the window: the scraped series,
	// the five Prometheus adds per target (up, scrape_*) and the recorded ones.
	HeadSeries    float64 `json:"head_series"`
	SeriesPerHost float64 `json:"head_series_per_host"`
	// RecordedSeries are the head's series of the recording rules (fleet:*).
	RecordedSeries float64 `json:"recorded_series"`
	// RSSBytes is Prometheus's process_resident_memory_bytes at the end of the window.
	RSSBytes float64 `json:"rss_bytes"`
	// SamplesPerSecond is the rate of prometheus_tsdb_head_samples_appended_total over the
	// window: scraped and recorded samples.
	SamplesPerSecond float64 `json:"samples_appended_per_second"`
	// ScrapeSecondsMedian is the median across targets of each one's mean scrape_duration_seconds
	// over the window; ScrapeSecondsMax the longest scrape of any.
	ScrapeSecondsMedian float64 `json:"scrape_seconds_median"`
	ScrapeSecondsMax    float64 `json:"scrape_seconds_max"`
	// RuleSeconds is the sum of every group's last evaluation time.
	RuleSeconds float64     `json:"rule_seconds"`
	RuleGroups  []RuleGroup `json:"rule_groups"`
	LoadBefore  string      `json:"load_average_before"`
	LoadAfter   string      `json:"load_average_after"`
}

// RuleGroup is a rule group's last evaluation (prometheus_rule_group_*).
type RuleGroup struct {
	File        string  `json:"file"`
	Name        string  `json:"name"`
	Rules       int     `json:"rules"`
	LastSeconds float64 `json:"last_duration_seconds"`
	LastSamples float64 `json:"last_evaluation_samples"`
	Evaluated   bool    `json:"evaluated"`
}

// Spread is the median and range of a figure over a size's rounds.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(xs []float64) Spread {
	return Spread{Median: stats.Median(xs), Min: stats.Min(xs), Max: stats.Max(xs)}
}

// Size summarises the rounds of one fleet size.
type Size struct {
	Hosts               int           `json:"hosts"`
	Runs                int           `json:"runs"`
	TargetsUpMin        int           `json:"targets_up_min"`
	HeadSeries          Spread        `json:"head_series"`
	SeriesPerHost       Spread        `json:"head_series_per_host"`
	RecordedSeries      Spread        `json:"recorded_series"`
	RSSBytes            Spread        `json:"rss_bytes"`
	SamplesPerSecond    Spread        `json:"samples_appended_per_second"`
	ScrapeSecondsMedian Spread        `json:"scrape_seconds_median"`
	ScrapeSecondsMax    Spread        `json:"scrape_seconds_max"`
	RuleSeconds         Spread        `json:"rule_seconds"`
	RuleGroups          []GroupSpread `json:"rule_groups"`
}

// GroupSpread is one rule group's evaluation time over a size's rounds.
type GroupSpread struct {
	File    string `json:"file"`
	Name    string `json:"name"`
	Rules   int    `json:"rules"`
	Seconds Spread `json:"last_duration_seconds"`
}

// MemoryFit is the least-squares line RSS = FixedBytes + BytesPerSeries * head series through
// every run: what a series costs, and what Prometheus costs before its first.
type MemoryFit struct {
	FixedBytes     float64 `json:"fixed_bytes"`
	BytesPerSeries float64 `json:"bytes_per_series"`
	Runs           int     `json:"runs"`
}

// summarise fills Sizes and MemoryFit from Runs.
func (r *Report) summarise() {
	r.Sizes = nil
	for _, n := range r.Options.Hosts {
		var runs []Measurement
		for _, m := range r.Runs {
			if m.Hosts == n {
				runs = append(runs, m)
			}
		}
		if len(runs) > 0 && !slices.ContainsFunc(r.Sizes, func(s Size) bool { return s.Hosts == n }) {
			r.Sizes = append(r.Sizes, sizeOf(n, runs))
		}
	}
	r.MemoryFit = fitMemory(r.Runs)
}

func sizeOf(n int, runs []Measurement) Size {
	s := Size{Hosts: n, Runs: len(runs), TargetsUpMin: n}
	of := func(f func(Measurement) float64) Spread {
		xs := make([]float64, len(runs))
		for i, m := range runs {
			xs[i] = f(m)
		}
		return spreadOf(xs)
	}
	s.HeadSeries = of(func(m Measurement) float64 { return m.HeadSeries })
	s.SeriesPerHost = of(func(m Measurement) float64 { return m.SeriesPerHost })
	s.RecordedSeries = of(func(m Measurement) float64 { return m.RecordedSeries })
	s.RSSBytes = of(func(m Measurement) float64 { return m.RSSBytes })
	s.SamplesPerSecond = of(func(m Measurement) float64 { return m.SamplesPerSecond })
	s.ScrapeSecondsMedian = of(func(m Measurement) float64 { return m.ScrapeSecondsMedian })
	s.ScrapeSecondsMax = of(func(m Measurement) float64 { return m.ScrapeSecondsMax })
	s.RuleSeconds = of(func(m Measurement) float64 { return m.RuleSeconds })
	for _, m := range runs {
		s.TargetsUpMin = min(s.TargetsUpMin, m.TargetsUp)
	}
	// Groups in the order of the first run; a group a run lacks counts as not measured there.
	for _, g := range runs[0].RuleGroups {
		var xs []float64
		for _, m := range runs {
			if i := slices.IndexFunc(m.RuleGroups, func(h RuleGroup) bool { return h.File == g.File && h.Name == g.Name }); i >= 0 {
				xs = append(xs, m.RuleGroups[i].LastSeconds)
			}
		}
		s.RuleGroups = append(s.RuleGroups, GroupSpread{File: g.File, Name: g.Name, Rules: g.Rules, Seconds: spreadOf(xs)})
	}
	return s
}

// fitMemory fits RSS against head series by least squares; nil when the runs do not span two
// sizes.
func fitMemory(runs []Measurement) *MemoryFit {
	n := float64(len(runs))
	var sx, sy, sxx, sxy float64
	for _, m := range runs {
		sx, sy = sx+m.HeadSeries, sy+m.RSSBytes
		sxx, sxy = sxx+m.HeadSeries*m.HeadSeries, sxy+m.HeadSeries*m.RSSBytes
	}
	den := n*sxx - sx*sx
	if len(runs) < 2 || den <= 0 {
		return nil
	}
	slope := (n*sxy - sx*sy) / den
	return &MemoryFit{BytesPerSeries: slope, FixedBytes: (sy - slope*sx) / n, Runs: len(runs)}
}

// WriteText prints the report for people: what was measured and how, the table per fleet size,
// the rule groups' times per size and the memory line.
func WriteText(w io.Writer, r *Report) {
	o := r.Options
	ruleInterval := "the files' own"
	if o.RuleIntervalSeconds > 0 {
		ruleInterval = seconds(o.RuleIntervalSeconds)
	}
	fmt.Fprintf(w, "\nMeasured %s to %s UTC on %d CPUs; %s.\n", r.Started.Format("2006-01-02 15:04"), r.Finished.Format("15:04"), r.CPUs, r.Prometheus)
	fmt.Fprintf(w, "One daemon beside a PostgreSQL cluster (pgbench at %d tps), %d samples a scrape (%d of them go_*, process_*, promhttp_*), served under N host identities in roles of %d.\n",
		o.LoadTPS, r.Host.Samples, r.Host.RuntimeSamples, o.RoleSize)
	fmt.Fprintf(w, "Scrape interval %s, timeout %s; evaluation interval %s, rule groups %s; a fresh Prometheus per run, read after %s and again %s later; rounds of %s, interleaved: %d.\n\n",
		seconds(o.ScrapeIntervalSeconds), seconds(o.ScrapeTimeoutSeconds), seconds(o.EvaluationIntervalSeconds), ruleInterval,
		seconds(o.WarmupSeconds), seconds(o.WindowSeconds), joinInts(o.Hosts), o.Rounds)

	fmt.Fprintln(w, "| hosts | head series | series per host | of them recorded (fleet:*) | Prometheus RSS | samples appended/s | scrape duration (median of targets) | longest scrape | rule evaluation (all groups) | targets up |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Sizes {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %d/%d |\n", s.Hosts,
			spread(s.HeadSeries, count), spread(s.SeriesPerHost, oneDecimal), spread(s.RecordedSeries, count), spread(s.RSSBytes, megabytes),
			spread(s.SamplesPerSecond, count), spread(s.ScrapeSecondsMedian, seconds), spread(s.ScrapeSecondsMax, seconds),
			spread(s.RuleSeconds, seconds), s.TargetsUpMin, s.Hosts)
	}
	fmt.Fprintln(w, "\nEach cell: the median of the rounds (their range).")
	writeGroups(w, r.Sizes)
	if f := r.MemoryFit; f != nil {
		fmt.Fprintf(w, "\nPrometheus RSS ~ %s + %.2f kB x head series (least squares over the %d runs).\n", megabytes(f.FixedBytes), f.BytesPerSeries/1e3, f.Runs)
	}
	loads := make([]string, 0, 2*len(r.Runs))
	for _, m := range r.Runs {
		loads = append(loads, m.LoadBefore, m.LoadAfter)
	}
	fmt.Fprintf(w, "Load average (1, 5, 15 min) before and after each run: %s.\n", strings.Join(loads, "; "))
}

// writeGroups prints each rule group's last evaluation time per fleet size.
func writeGroups(w io.Writer, sizes []Size) {
	if len(sizes) == 0 {
		return
	}
	fmt.Fprint(w, "\n| rule group | rules |")
	for _, s := range sizes {
		fmt.Fprintf(w, " %d hosts |", s.Hosts)
	}
	fmt.Fprint(w, "\n|---|---|"+strings.Repeat("---|", len(sizes))+"\n")
	for _, g := range sizes[0].RuleGroups {
		fmt.Fprintf(w, "| %s: %s | %d |", g.File, g.Name, g.Rules)
		for _, s := range sizes {
			i := slices.IndexFunc(s.RuleGroups, func(h GroupSpread) bool { return h.File == g.File && h.Name == g.Name })
			if i < 0 {
				fmt.Fprint(w, " - |")
				continue
			}
			fmt.Fprintf(w, " %s |", spread(s.RuleGroups[i].Seconds, seconds))
		}
		fmt.Fprintln(w)
	}
}

// spread writes "median (min-max)", or the one value when the rounds agree.
func spread(s Spread, format func(float64) string) string {
	if format(s.Min) == format(s.Max) {
		return format(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", format(s.Median), format(s.Min), format(s.Max))
}

// count writes a count with its thousands set apart by a space, as docs/fleet.md writes them.
func count(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}

func oneDecimal(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func megabytes(b float64) string { return strconv.FormatFloat(b/1e6, 'f', 0, 64) + " MB" }

// seconds writes a duration given in seconds: "850 µs", "12.3 ms", "1.25 s", "2m".
func seconds(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1e-3:
		return strconv.FormatFloat(v*1e6, 'f', 0, 64) + " µs"
	case v < 1:
		return strconv.FormatFloat(v*1e3, 'g', 3, 64) + " ms"
	case v >= 60 && v == float64(int(v)) && int(v)%60 == 0:
		return strconv.Itoa(int(v)/60) + " min"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64) + " s"
	}
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}
