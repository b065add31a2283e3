// Package footprint measures what pgwal-advisor costs the host it runs on (docs/http.md,
// "Footprint"): first its idle memory and CPU side by side with Debian's postgres_exporter (and
// other builds of the daemon) watching the same cluster at one scrape a second, in interleaved
// rounds (Idle); then the daemon's CPU share of one core and its RSS at the default interval,
// the latency of /metrics under 50 concurrent scrapers (wrk), and pgbench's tps with and
// without the daemon. It prints figures, it does not judge them: `pgwal-lab bench-footprint`,
// which scripts/bench-footprint.sh runs after building the daemon and installing what is
// missing.
//
// "Without the daemon" means the daemon stopped with SIGSTOP: it keeps its idle connection and
// its memory but does nothing, so the runs differ only in what the daemon does. Runs alternate
// (off, on, on, off, ...) so that drift in the machine's state hits both sides alike.
package footprint

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
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// userHZ is the unit of /proc/<pid>/stat's utime and stime: USER_HZ, 100 on every Linux
// architecture's user-space ABI.
const userHZ = 100

// Options say what to run and for how long; pgwal-lab bench-footprint's flags set them.
type Options struct {
	// Bin is the pgwal-advisor binary.
	Bin string
	// Warmup is the time after the daemon is ready before measuring (its first probe burst
	// runs at start); Steady the steady-state window for CPU and RSS.
	Warmup, Steady time.Duration
	// wrk's run against /metrics: its length, concurrent scrapers and threads.
	WrkDuration    time.Duration
	WrkConnections int
	WrkThreads     int
	// Pairs of pgbench runs with and without the daemon (0: none), each PgbenchTime long with
	// PgbenchClients clients, at pgbench scale Scale.
	Runs           int
	PgbenchTime    time.Duration
	PgbenchClients int
	Scale          int
	// Idle is the side-by-side idle measurement, run first; IdleOnly skips the rest.
	Idle     IdleOptions
	IdleOnly bool
}

// Run measures and prints the progress and the figures to out. Everything it starts (the
// cluster, the daemon) is stopped when it returns.
func Run(ctx context.Context, o Options, out io.Writer) error {
	tools := []string{o.Bin}
	if !o.IdleOnly {
		tools = append(tools, "wrk")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w (build with `go build -o bin/pgwal-advisor ./cmd/pgwal-advisor`; apt-get install wrk)", tool, err)
		}
	}
	fmt.Fprintln(out, "starting a throwaway cluster")
	c, err := lab.StartCluster(ctx, lab.ClusterOptions{})
	if err != nil {
		return err
	}
	defer c.Stop()
	// Beside the cluster, on the same file system: the probe measures the WAL's device, as
	// the default deployment does.
	probeDir, err := os.MkdirTemp("", "pgwal-footprint-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(probeDir)

	if o.Idle.Rounds > 0 {
		if err := Idle(ctx, o, c, probeDir, out); err != nil {
			return err
		}
	}
	if o.IdleOnly {
		return nil
	}
	fmt.Fprintf(out, "pgbench -i -s %d\n", o.Scale)
	if _, err := pgbench.Run(ctx, c, "-i", "-q", "-s", strconv.Itoa(o.Scale)); err != nil {
		return err
	}

	daemon, err := lab.StartDaemon(ctx, o.Bin, c, probeDir)
	if err != nil {
		return err
	}
	defer daemon.Stop()
	pid, addr, base := daemon.Pid(), daemon.Addr, daemon.URL("")
	if err := lab.WaitHTTPOK(ctx, base+"/readyz", 60*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(out, "daemon pid %d ready on %s (defaults: --interval 15s, --probe.interval 5m, --probe.burst 2s)\n", pid, addr)

	// pgbench -i leaves a few hundred MB dirty; their write-back would land in the windows
	// below and cost the machine CPU that has nothing to do with the daemon.
	if err := settle(ctx, c); err != nil {
		return err
	}
	// The first probe burst runs at start: measure it apart from the steady state.
	startCPU, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	if err := lab.Sleep(ctx, o.Warmup); err != nil {
		return err
	}
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	t0 := time.Now()
	fmt.Fprintf(out, "steady state for %v\n", o.Steady)
	if err := lab.Sleep(ctx, o.Steady); err != nil {
		return err
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	elapsed := time.Since(t0).Seconds()
	steady, err := readStatus(pid)
	if err != nil {
		return err
	}
	size, err := scrapeSize(base + "/metrics")
	if err != nil {
		return err
	}

	if err := settle(ctx, c); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrk -t%d -c%d -d%v --latency %s/metrics\n", o.WrkThreads, o.WrkConnections, o.WrkDuration, base)
	wrkOut, err := exec.CommandContext(ctx, "wrk", fmt.Sprintf("-t%d", o.WrkThreads), fmt.Sprintf("-c%d", o.WrkConnections),
		fmt.Sprintf("-d%ds", int(o.WrkDuration.Seconds())), "--latency", base+"/metrics").CombinedOutput()
	if err != nil {
		return fmt.Errorf("wrk: %w: %s", err, wrkOut)
	}
	p99, rps, non2xx := parseWrk(string(wrkOut))
	afterWrk, err := readStatus(pid)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrk: p99 %s, %.0f requests/s\n", p99, rps)
	if o.Runs == 0 {
		return nil
	}

	// A first run warms the caches and the tables; it is not counted.
	if _, err := runPgbench(ctx, c, o); err != nil {
		return err
	}
	var with, without []float64
	for i := 0; i < 2*o.Runs; i++ {
		// off, on, on, off, off, on, ...: each side gets early and late runs.
		on := i%4 == 1 || i%4 == 2
		sig, label := syscall.SIGSTOP, "without"
		if on {
			sig, label = syscall.SIGCONT, "with"
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("signal the daemon: %w", err)
		}
		tps, err := runPgbench(ctx, c, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "pgbench run %d %s the daemon: %.1f tps\n", i+1, label, tps)
		if on {
			with = append(with, tps)
		} else {
			without = append(without, tps)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)

	ratio := mean(with) / mean(without)
	fmt.Fprintln(out)
	fmt.Fprintln(out, "pgwal-advisor footprint")
	fmt.Fprintf(out, "  CPU, steady state (%.0f s):        %.3f %% of one core\n", elapsed, 100*(cpu1-cpu0)/elapsed)
	fmt.Fprintf(out, "  CPU, first %v (probe burst):      %.3f %% of one core\n", o.Warmup, 100*(cpu0-startCPU)/o.Warmup.Seconds())
	fmt.Fprintf(out, "  RSS, steady state:                 %.1f MB (anon %.1f, file %.1f; peak %.1f MB; %.1f MB after wrk)\n",
		steady.rss/1e6, steady.anon/1e6, steady.file/1e6, steady.hwm/1e6, afterWrk.hwm/1e6)
	fmt.Fprintf(out, "  /metrics:                          %d bytes\n", size)
	fmt.Fprintf(out, "  /metrics p99, %d scrapers:         %s (%.0f requests/s, non-2xx: %s)\n", o.WrkConnections, p99, rps, non2xx)
	// The i-th runs with and without the daemon are neighbours in time (off, on | on, off | ...):
	// their ratio cancels most of the drift.
	var paired []float64
	for i := range min(len(with), len(without)) {
		paired = append(paired, with[i]/without[i])
	}
	fmt.Fprintf(out, "  pgbench tps without / with:        %.1f / %.1f (ratio of means %.4f, %+.2f %%; of medians %.4f)\n",
		mean(without), mean(with), ratio, 100*(ratio-1), stats.Median(with)/stats.Median(without))
	fmt.Fprintf(out, "  pgbench paired ratios (with/without): %s, median %.4f\n", formatRatios(paired), stats.Median(paired))
	fmt.Fprintf(out, "  pgbench run-to-run spread:         without %.1f-%.1f, with %.1f-%.1f tps\n",
		slices.Min(without), slices.Max(without), slices.Min(with), slices.Max(with))
	fmt.Fprintf(out, "  probe duty cycle (documented):     2 s / 5 min = %.2f %% of the time\n", 100*2.0/300)
	return nil
}

// cpuSeconds reads utime + stime of a process from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis
	// start at field 3 (state). utime and stime are fields 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return (utime + stime) / userHZ, nil
}

func scrapeSize(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return len(b), err
}

// parseWrk finds the 99th percentile latency, the request rate and the non-2xx count in
// wrk --latency's report.
func parseWrk(s string) (p99 string, rps float64, non2xx string) {
	p99, non2xx = "?", "0"
	if m := regexp.MustCompile(`(?m)^\s+99%\s+(\S+)`).FindStringSubmatch(s); m != nil {
		p99 = m[1]
	}
	if m := regexp.MustCompile(`(?m)^Requests/sec:\s+(\S+)`).FindStringSubmatch(s); m != nil {
		rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := regexp.MustCompile(`(?m)Non-2xx or 3xx responses:\s+(\d+)`).FindStringSubmatch(s); m != nil {
		non2xx = m[1]
	}
	return p99, rps, non2xx
}

// settle checkpoints the cluster and writes out every dirty page of the machine, so that a
// measurement does not pay for the write-back of what ran before it.
func settle(ctx context.Context, c *lab.Cluster) error {
	if err := c.Exec(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	syscall.Sync()
	return nil
}

// runPgbench runs the default TPC-B-like workload after settling (so that no run inherits
// another's dirty pages) and returns its tps.
func runPgbench(ctx context.Context, c *lab.Cluster, o Options) (float64, error) {
	if err := settle(ctx, c); err != nil {
		return 0, err
	}
	clients := strconv.Itoa(o.PgbenchClients)
	out, err := pgbench.Run(ctx, c, "-n", "-c", clients, "-j", clients, "-T", strconv.Itoa(int(o.PgbenchTime.Seconds())))
	if err != nil {
		return 0, err
	}
	return pgbench.ParseTPS(out.Stdout)
}

func formatRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 3, 64)
	}
	return strings.Join(parts, " ")
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
