package footprint

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// IdleOptions say how the idle footprint is measured side by side: every side watches the same
// cluster and is scraped once every Scrape (as Prometheus would, keeping its connection and
// asking for gzip) for Window, then its memory and CPU are read. Each of Rounds starts every
// side afresh, in an order that rotates, so that a process's luck (where its heap landed, what
// the machine was doing) shows as spread instead of as a difference between sides.
type IdleOptions struct {
	// Rounds is how many times every side is started and measured (0: no idle measurement).
	Rounds int
	// Window is how long each side runs, scraped, before it is measured; Scrape the time
	// between two scrapes of one side.
	Window, Scrape time.Duration
	// Compare are other pgwal-advisor builds measured beside Bin, each "label=path" or a path
	// (labelled by its file name).
	Compare []string
	// Exporter is Debian's postgres_exporter binary ("": not measured).
	Exporter string
}

// idleSide is one process under test and what each round measured of it.
type idleSide struct {
	name string
	// command builds the side's process, serving /metrics on addr.
	command func(ctx context.Context, addr string) *exec.Cmd
	runs    []memSample
}

// memSample is one round's reading of one side: /proc/<pid>/status's resident set (VmRSS, the
// sum of its anonymous, file-backed and shared-memory parts) and peak, and the CPU share of
// one core over the window.
type memSample struct {
	rss, anon, file, hwm float64
	cpu                  float64
}

// idleSides lists what Idle measures: Bin, the Compare builds, the exporter.
func idleSides(o Options, c *lab.Cluster, probeDir string) ([]*idleSide, error) {
	advisor := func(bin string) func(context.Context, string) *exec.Cmd {
		return func(ctx context.Context, addr string) *exec.Cmd {
			// At its defaults (--interval 15s, probing every 5 min) as deployed.
			return exec.CommandContext(ctx, bin, "run", "--dsn", c.DSN(), "--web.listen-address", addr,
				"--probe.dir", probeDir, "--log.level", "warn")
		}
	}
	sides := []*idleSide{{name: "pgwal-advisor", command: advisor(o.Bin)}}
	for _, spec := range o.Idle.Compare {
		name, bin, ok := strings.Cut(spec, "=")
		if !ok {
			name, bin = "pgwal-advisor ("+filepath.Base(spec)+")", spec
		}
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("--idle.compare %s: %w", spec, err)
		}
		sides = append(sides, &idleSide{name: name, command: advisor(bin)})
	}
	if o.Idle.Exporter != "" {
		if _, err := exec.LookPath(o.Idle.Exporter); err != nil {
			return nil, fmt.Errorf("%s: %w (apt-get install prometheus-postgres-exporter, or --idle.exporter '' to leave it out)", o.Idle.Exporter, err)
		}
		exporter := o.Idle.Exporter
		sides = append(sides, &idleSide{
			name: "postgres_exporter " + exporterVersion(exporter),
			command: func(ctx context.Context, addr string) *exec.Cmd {
				// At Debian's defaults, over TCP on loopback.
				cmd := exec.CommandContext(ctx, exporter, "--web.listen-address", addr, "--log.level", "warn")
				cmd.Env = append(os.Environ(), "DATA_SOURCE_NAME="+c.URL())
				return cmd
			},
		})
	}
	return sides, nil
}

// Idle measures every side's idle memory and CPU in o.Idle.Rounds interleaved rounds and
// prints each round and the table.
func Idle(ctx context.Context, o Options, c *lab.Cluster, probeDir string, out io.Writer) error {
	sides, err := idleSides(o, c, probeDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "idle footprint: %d rounds, each side started afresh, scraped every %v (gzip, one kept-alive connection) for %v, then measured\n",
		o.Idle.Rounds, o.Idle.Scrape, o.Idle.Window)
	for round := range o.Idle.Rounds {
		order := append(slices.Clone(sides[round%len(sides):]), sides[:round%len(sides)]...)
		samples, err := idleRound(ctx, o.Idle, order)
		if err != nil {
			return fmt.Errorf("idle round %d: %w", round+1, err)
		}
		for i, s := range order {
			s.runs = append(s.runs, samples[i])
			m := samples[i]
			fmt.Fprintf(out, "round %d %-34s VmRSS %5.1f MB (anon %5.1f, file %5.1f), peak %5.1f MB, CPU %.3f %%\n",
				round+1, s.name, m.rss/1e6, m.anon/1e6, m.file/1e6, m.hwm/1e6, m.cpu)
		}
	}
	fmt.Fprintln(out)
	printIdleTable(out, sides)
	return nil
}

// printIdleTable prints the median and range of each figure per side, in MB of 10^6 bytes.
func printIdleTable(out io.Writer, sides []*idleSide) {
	fmt.Fprintln(out, "| side | VmRSS MB | RssAnon MB | RssFile MB | VmHWM MB | CPU % of one core |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	for _, s := range sides {
		col := func(f func(memSample) float64, scale float64, prec int) string {
			xs := make([]float64, len(s.runs))
			for i, r := range s.runs {
				xs[i] = f(r) / scale
			}
			format := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
			return fmt.Sprintf("%s (%s-%s)", format(stats.Median(xs)), format(stats.Min(xs)), format(stats.Max(xs)))
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %s |\n", s.name,
			col(func(m memSample) float64 { return m.rss }, 1e6, 1),
			col(func(m memSample) float64 { return m.anon }, 1e6, 1),
			col(func(m memSample) float64 { return m.file }, 1e6, 1),
			col(func(m memSample) float64 { return m.hwm }, 1e6, 1),
			col(func(m memSample) float64 { return m.cpu }, 1, 2))
	}
}

// idleRound starts the sides in order, scrapes them all for the window and measures them;
// every process is stopped before it returns.
func idleRound(ctx context.Context, o IdleOptions, order []*idleSide) ([]memSample, error) {
	type running struct {
		pid         int
		url         string
		cpu0        float64
		scrapeError error
	}
	procs := make([]*running, len(order))
	for i, s := range order {
		addr, err := lab.FreeAddr()
		if err != nil {
			return nil, err
		}
		cmd := s.command(ctx, addr)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
		defer func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}()
		procs[i] = &running{pid: cmd.Process.Pid, url: "http://" + addr + "/metrics"}
	}
	for i, p := range procs {
		if err := lab.WaitHTTPOK(ctx, p.url, 60*time.Second); err != nil {
			return nil, fmt.Errorf("%s: %w", order[i].name, err)
		}
	}
	for _, p := range procs {
		var err error
		if p.cpu0, err = cpuSeconds(p.pid); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	scrapeCtx, stop := context.WithTimeout(ctx, o.Window)
	defer stop()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { p.scrapeError = scrapeEvery(scrapeCtx, p.url, o.Scrape) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	elapsed := time.Since(t0).Seconds()
	samples := make([]memSample, len(procs))
	for i, p := range procs {
		if p.scrapeError != nil {
			return nil, fmt.Errorf("%s: %w", order[i].name, p.scrapeError)
		}
		st, err := readStatus(p.pid)
		if err != nil {
			return nil, err
		}
		cpu1, err := cpuSeconds(p.pid)
		if err != nil {
			return nil, err
		}
		st.cpu = 100 * (cpu1 - p.cpu0) / elapsed
		samples[i] = st
	}
	return samples, nil
}

// scrapeEvery fetches url every interval until ctx ends, as Prometheus does: one client whose
// connection is kept alive, asking for gzip, reading the whole answer. A failed scrape ends it.
func scrapeEvery(ctx context.Context, url string, interval time.Duration) error {
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", url, resp.Status)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// readStatus reads the memory fields of /proc/<pid>/status, in bytes.
func readStatus(pid int) (memSample, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memSample{}, err
	}
	defer f.Close()
	return parseStatus(f)
}

// parseStatus reads VmRSS, RssAnon, RssFile and VmHWM (in kB) from a /proc/<pid>/status.
func parseStatus(r io.Reader) (memSample, error) {
	var m memSample
	fields := map[string]*float64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file, "VmHWM:": &m.hwm}
	seen := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[2] != "kB" || fields[f[0]] == nil {
			continue
		}
		kb, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return m, fmt.Errorf("parse %s in /proc/<pid>/status: %w", f[0], err)
		}
		*fields[f[0]] = kb * 1024
		seen++
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if seen < len(fields) {
		return m, fmt.Errorf("/proc/<pid>/status lacks one of VmRSS, RssAnon, RssFile, VmHWM")
	}
	return m, nil
}

func exporterVersion(bin string) string {
	b, _ := exec.Command(bin, "--version").CombinedOutput()
	if m := regexp.MustCompile(`version (\S+)`).FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return "(version unknown)"
}
