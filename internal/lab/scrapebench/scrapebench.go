// Package scrapebench measures what a scrape of /metrics costs, side by side: pgwal-advisor and
// Debian's prometheus-postgres-exporter watching one throwaway cluster, each loaded in turn by
// wrk (50 connections, 10 s by default) on loopback, in interleaved rounds so that drift in a
// shared machine's load hits both sides alike. It prints p50, p99 and requests/s per round and
// per side, and the machine's load average around each run; it does not judge them:
// `pgwal-lab bench-scrape`, which scripts/bench-scrape.sh runs after building the daemon and
// installing what is missing.
package scrapebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// Options say what to measure and how hard; pgwal-lab bench-scrape's flags set them.
type Options struct {
	// Bin is the pgwal-advisor binary; Compare another one (say, an older build) measured
	// beside it ("": none); Exporter Debian's postgres_exporter binary.
	Bin, Compare, Exporter string
	// Rounds are interleaved (each side once a round), each wrk run Duration long with
	// Connections connections and Threads threads.
	Rounds      int
	Duration    time.Duration
	Connections int
	Threads     int
	// Warmup is the time after all are ready before the first round (the daemon's first
	// probe burst runs at start).
	Warmup time.Duration
	// Gzip sends Accept-Encoding: gzip, as Prometheus does.
	Gzip bool
}

// side is one exporter under test.
type side struct {
	name, url, ready string
	runs             []result
}

// result is one wrk run.
type result struct {
	p50, p99           time.Duration
	rps                float64
	non2xx, errors     string
	loadBefore, loadAt string
}

// Run measures and prints each round and the summary table to out. Everything it starts (the
// cluster, the daemons, the exporter) is stopped when it returns.
func Run(ctx context.Context, o Options, out io.Writer) error {
	tools := []string{o.Bin, o.Exporter, "wrk"}
	if o.Compare != "" {
		tools = append(tools, o.Compare)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w (scripts/bench-scrape.sh builds the daemon and installs wrk and prometheus-postgres-exporter)", tool, err)
		}
	}
	c, err := lab.StartCluster(ctx, lab.ClusterOptions{})
	if err != nil {
		return err
	}
	defer c.Stop()
	probeDir, err := os.MkdirTemp("", "pgwal-scrapebench-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(probeDir)

	advisor, err := lab.StartDaemon(ctx, o.Bin, c, probeDir)
	if err != nil {
		return err
	}
	defer advisor.Stop()
	sides := []*side{{name: "pgwal-advisor", url: advisor.URL("/metrics"), ready: advisor.URL("/readyz")}}
	if o.Compare != "" {
		compare, err := lab.StartDaemon(ctx, o.Compare, c, probeDir)
		if err != nil {
			return err
		}
		defer compare.Stop()
		sides = append(sides, &side{name: "pgwal-advisor (--compare)", url: compare.URL("/metrics"), ready: compare.URL("/readyz")})
	}
	exporterAddr, err := lab.FreeAddr()
	if err != nil {
		return err
	}
	// postgres_exporter at Debian's defaults, over TCP on loopback.
	exporter := exec.CommandContext(ctx, o.Exporter, "--web.listen-address", exporterAddr, "--log.level", "warn")
	exporter.Env = append(os.Environ(), "DATA_SOURCE_NAME="+c.URL())
	stopExporter, err := start(ctx, exporter)
	if err != nil {
		return err
	}
	defer stopExporter()

	exporterURL := "http://" + exporterAddr + "/metrics"
	sides = append(sides,
		&side{name: "postgres_exporter " + exporterVersion(ctx, o.Exporter), url: exporterURL, ready: exporterURL},
		// The control: the same daemon's smallest answer. What it costs is the machine's and the
		// HTTP stack's share of every figure above it, with nothing of /metrics in it.
		&side{name: "control: pgwal-advisor /healthz", url: advisor.URL("/healthz"), ready: advisor.URL("/healthz")})
	for _, s := range sides {
		if err := lab.WaitHTTPOK(ctx, s.ready, 60*time.Second); err != nil {
			return err
		}
	}
	if err := lab.Sleep(ctx, o.Warmup); err != nil {
		return err
	}
	for _, s := range sides {
		size, series, err := scrapeSize(s.url)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: %s, %d bytes, %d samples\n", s.name, s.url, size, series)
	}
	header := ""
	if o.Gzip {
		header = ` -H "Accept-Encoding: gzip"`
	}
	fmt.Fprintf(out, "wrk -t%d -c%d -d%ds --latency --timeout 30s%s <url>, %d interleaved rounds; CPUs: %d\n", o.Threads, o.Connections, int(o.Duration.Seconds()), header, o.Rounds, numCPU())

	for round := range o.Rounds {
		// Rotate which side goes first, so that none always follows the same neighbour's load.
		order := append(slices.Clone(sides[round%len(sides):]), sides[:round%len(sides)]...)
		for _, s := range order {
			r, err := wrk(ctx, o, s.url)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			s.runs = append(s.runs, r)
			fmt.Fprintf(out, "round %d %-32s p50 %-9s p99 %-9s %8.0f req/s  non-2xx %s, socket errors %s; load %s -> %s\n",
				round+1, s.name, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), r.rps, r.non2xx, r.errors, r.loadBefore, r.loadAt)
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| side | p50 (median, range) | p99 (median, range) | requests/s (median, range) |")
	fmt.Fprintln(out, "|---|---|---|---|")
	for _, s := range sides {
		p50s, p99s, rps := make([]float64, 0, len(s.runs)), make([]float64, 0, len(s.runs)), make([]float64, 0, len(s.runs))
		for _, r := range s.runs {
			p50s, p99s, rps = append(p50s, r.p50.Seconds()), append(p99s, r.p99.Seconds()), append(rps, r.rps)
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s |\n", s.name, spread(p50s, ms), spread(p99s, ms), spread(rps, perSecond))
	}
	return nil
}

// start starts a command and returns how to stop it (SIGTERM, then wait).
func start(ctx context.Context, cmd *exec.Cmd) (func(), error) {
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}, nil
}

func exporterVersion(ctx context.Context, bin string) string {
	b, _ := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if m := regexp.MustCompile(`version (\S+)`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return "(version unknown)"
}

func wrk(ctx context.Context, o Options, url string) (result, error) {
	r := result{loadBefore: lab.LoadAverage()}
	args := []string{"-t" + strconv.Itoa(o.Threads), "-c" + strconv.Itoa(o.Connections),
		"-d" + strconv.Itoa(int(o.Duration.Seconds())) + "s", "--latency",
		// wrk's default timeout (2 s) would count postgres_exporter's slowest answers as errors
		// and cut its percentiles off at 2 s.
		"--timeout", "30s"}
	if o.Gzip {
		args = append(args, "-H", "Accept-Encoding: gzip")
	}
	b, err := exec.CommandContext(ctx, "wrk", append(args, url)...).CombinedOutput()
	r.loadAt = lab.LoadAverage()
	if err != nil {
		return r, fmt.Errorf("wrk: %w: %s", err, b)
	}
	s := string(b)
	var err50, err99 error
	r.p50, err50 = wrkDuration(s, "50%")
	r.p99, err99 = wrkDuration(s, "99%")
	if err := errors.Join(err50, err99); err != nil {
		return r, fmt.Errorf("%w in wrk's report:\n%s", err, s)
	}
	if m := regexp.MustCompile(`(?m)^Requests/sec:\s+(\S+)`).FindStringSubmatch(s); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	r.non2xx, r.errors = "0", "0"
	if m := regexp.MustCompile(`Non-2xx or 3xx responses:\s+(\d+)`).FindStringSubmatch(s); m != nil {
		r.non2xx = m[1]
	}
	if m := regexp.MustCompile(`Socket errors:\s+(.*)`).FindStringSubmatch(s); m != nil {
		r.errors = strings.TrimSpace(m[1])
	}
	return r, nil
}

// wrkDuration reads a percentile of wrk's latency distribution ("  99%   12.34ms").
func wrkDuration(report, pct string) (time.Duration, error) {
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(pct) + `\s+([0-9.]+)(us|ms|s|m)\b`).FindStringSubmatch(report)
	if m == nil {
		return 0, fmt.Errorf("no %s latency", pct)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute}[m[2]]
	return time.Duration(v * float64(unit)), nil
}

func spread(xs []float64, format func(float64) string) string {
	return fmt.Sprintf("%s (%s-%s)", format(stats.Median(xs)), format(stats.Min(xs)), format(stats.Max(xs)))
}

func ms(secs float64) string {
	if secs >= 1 {
		return strconv.FormatFloat(secs, 'f', 2, 64) + " s"
	}
	return strconv.FormatFloat(secs*1e3, 'f', 1, 64) + " ms"
}

func perSecond(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

func numCPU() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\nprocessor") + 1
}

// scrapeSize returns a scrape's size and its number of samples (lines that are not comments).
func scrapeSize(url string) (int, int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	samples := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			samples++
		}
	}
	return len(b), samples, nil
}
