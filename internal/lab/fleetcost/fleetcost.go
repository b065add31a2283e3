// Package fleetcost measures what a fleet of pgwal-advisor hosts costs the Prometheus that
// scrapes it (docs/fleet.md, "What a fleet costs Prometheus"): one real daemon beside a
// throwaway cluster is served under N host identities to a real Prometheus that loads the
// project's recording and alert rules, and after a warm-up the scenario reads Prometheus's head
// series, its resident memory, the samples it appends per second, each rule group's evaluation
// time and the scrapes' duration. Each N runs on a fresh Prometheus, the sizes interleaved
// (100, 500, 2000, 100, ...) so that drift in a shared machine's load hits every size alike. It
// prints figures, it does not judge them: `pgwal-lab bench-fleet` (make bench-fleet).
//
// The identities come from target relabelling: N static targets, each its own `instance` and
// `role`, all rewritten to the one daemon's address. Every identity is then a real scrape of a
// real daemon - the same series as a host, values that move as a host's do (counters, the
// probe's summary, the Go runtime) - so Prometheus compresses, indexes and evaluates what it
// would on a fleet. A replaying server serving one captured body would hand it frozen values:
// chunks that compress to nothing and counters whose rate() is 0, so the rate-based rules would
// select nothing, and both memory and rule time would come out low.
package fleetcost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
)

// Options say what to measure; pgwal-lab bench-fleet's flags set them.
type Options struct {
	// Bin is the pgwal-advisor binary; Prometheus the prometheus binary.
	Bin, Prometheus string
	// RuleFiles are loaded into every Prometheus (deploy/prometheus/recording.yml and alerts.yml).
	RuleFiles []string
	// Hosts are the fleet sizes, measured in this order once per round, Rounds times.
	Hosts  []int
	Rounds int
	// ScrapeInterval is the fleet's scrape interval (docs/fleet.md: 30 s); Prometheus's global
	// evaluation_interval is EvalInterval (1 min there). The rule groups' own `interval:` is
	// left as the files set it, unless RuleInterval is set (the quick form's short pace).
	ScrapeInterval, EvalInterval, RuleInterval time.Duration
	// Warmup is the time from Prometheus's start to the first reading: several scrape
	// intervals and rule evaluations. Window is the time between the two readings that the
	// samples appended per second and the scrape durations are taken over.
	Warmup, Window time.Duration
	// RoleSize is how many hosts share a role label (a primary and its replicas).
	RoleSize int
	// LoadTPS is the rate of pgbench transactions on the cluster, so that the daemon's WAL
	// counters move and the write-wait rules have hosts to compare (0: an idle cluster).
	LoadTPS int
	// Quick is the smoke test's form: N = 10 and 50, one round, seconds instead of minutes.
	Quick bool
}

// Defaults are the documented fleet set-up (docs/fleet.md, "Scrape settings") and a run of
// about 20 minutes: 2 rounds of 100, 500 and 2000 hosts, each 2 min of warm-up and a 1 min
// window on a fresh Prometheus.
func Defaults() Options {
	return Options{
		Bin:            "bin/pgwal-advisor",
		Prometheus:     "prometheus",
		RuleFiles:      []string{"deploy/prometheus/recording.yml", "deploy/prometheus/alerts.yml"},
		Hosts:          []int{100, 500, 2000},
		Rounds:         2,
		ScrapeInterval: 30 * time.Second,
		EvalInterval:   time.Minute,
		Warmup:         2 * time.Minute,
		Window:         time.Minute,
		RoleSize:       3,
		LoadTPS:        50,
	}
}

// quick shrinks o to the smoke test's sizes and pace: the groups evaluate every second, so a
// few seconds see every rule run.
func (o Options) quick() Options {
	o.Hosts, o.Rounds = []int{10, 50}, 1
	o.ScrapeInterval, o.EvalInterval, o.RuleInterval = time.Second, time.Second, time.Second
	o.Warmup, o.Window = 6*time.Second, 3*time.Second
	return o
}

// Validate says what is wrong with o, flag by flag (with Quick, with the quick form's sizes).
func (o Options) Validate() error {
	if o.Quick {
		o = o.quick()
	}
	var errs []error
	if len(o.Hosts) == 0 {
		errs = append(errs, errors.New("--hosts: want at least one fleet size"))
	}
	for _, n := range o.Hosts {
		if n < 1 || n > 100_000 {
			errs = append(errs, fmt.Errorf("--hosts %d: want 1 to 100000", n))
		}
	}
	if o.Rounds < 1 {
		errs = append(errs, fmt.Errorf("--rounds %d: want 1 or more", o.Rounds))
	}
	if o.ScrapeInterval < time.Second {
		errs = append(errs, fmt.Errorf("--scrape-interval %v: want 1s or more", o.ScrapeInterval))
	}
	if o.EvalInterval < time.Second {
		errs = append(errs, fmt.Errorf("--evaluation-interval %v: want 1s or more", o.EvalInterval))
	}
	if o.Warmup < 3*o.ScrapeInterval {
		errs = append(errs, fmt.Errorf("--warmup %v: want 3 scrape intervals (%v) or more, so that every target has been scraped and its series are in the head", o.Warmup, 3*o.ScrapeInterval))
	}
	if o.Window < o.ScrapeInterval {
		errs = append(errs, fmt.Errorf("--window %v: want a scrape interval (%v) or more", o.Window, o.ScrapeInterval))
	}
	if o.RoleSize < 1 {
		errs = append(errs, fmt.Errorf("--role-size %d: want 1 or more", o.RoleSize))
	}
	if o.LoadTPS < 0 {
		errs = append(errs, fmt.Errorf("--load.tps %d: want 0 (idle) or more", o.LoadTPS))
	}
	if len(o.RuleFiles) == 0 {
		errs = append(errs, errors.New("--rules: want the recording and alert rule files"))
	}
	return errors.Join(errs...)
}

// Run measures every fleet size Rounds times, printing each run to progress, and returns the
// report. Everything it starts (the cluster, the load, the daemon, each Prometheus) is stopped
// and its files removed when it returns.
func Run(ctx context.Context, o Options, progress io.Writer) (rep *Report, runErr error) {
	if o.Quick {
		o = o.quick()
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	for _, tool := range []string{o.Bin, o.Prometheus} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s: %w (make build builds the daemon; apt-get install prometheus)", tool, err)
		}
	}
	rules, err := readRuleFiles(o.RuleFiles)
	if err != nil {
		return nil, err
	}
	rep = &Report{Started: time.Now().UTC(), CPUs: runtime.NumCPU(), Options: reportOptions(o), Prometheus: promVersion(ctx, o.Prometheus)}

	fmt.Fprintln(progress, "starting a throwaway cluster (track_wal_io_timing = on) and the daemon beside it")
	c, err := lab.StartCluster(ctx, lab.ClusterOptions{Settings: map[string]string{"track_wal_io_timing": "on"}})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	if o.LoadTPS > 0 {
		l, err := startLoad(ctx, c, o.LoadTPS)
		if err != nil {
			return nil, err
		}
		// A load that died would leave counters that stop moving and rules with less to do:
		// the figures would be of another fleet.
		defer func() {
			if err := l.stop(); err != nil && runErr == nil {
				rep, runErr = nil, err
			}
		}()
	}
	probeDir, err := os.MkdirTemp("", "pgwal-fleetcost-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(probeDir)
	daemon, err := lab.StartDaemon(ctx, o.Bin, c, probeDir)
	if err != nil {
		return nil, err
	}
	defer daemon.Stop()
	if rep.Host, err = awaitProbedHost(ctx, daemon.URL("/metrics")); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "one host: %d samples a scrape, %d of them the Go runtime's and the HTTP handler's (go_*, process_*, promhttp_*); %s, %d CPUs\n",
		rep.Host.Samples, rep.Host.RuntimeSamples, rep.Prometheus, rep.CPUs)

	for round := range o.Rounds {
		for _, n := range o.Hosts {
			m, err := measure(ctx, o, rules, daemon.Addr, n)
			if err != nil {
				return nil, fmt.Errorf("%d hosts, round %d: %w", n, round+1, err)
			}
			m.Round = round + 1
			rep.Runs = append(rep.Runs, m)
			fmt.Fprintf(progress, "round %d, %5d hosts: %d/%d targets up, %.0f head series (%.0f recorded), RSS %.0f MB, %.0f samples/s, scrape median %s max %s, rules %s; load %s -> %s\n",
				m.Round, n, m.TargetsUp, n, m.HeadSeries, m.RecordedSeries, m.RSSBytes/1e6, m.SamplesPerSecond,
				seconds(m.ScrapeSecondsMedian), seconds(m.ScrapeSecondsMax), seconds(m.RuleSeconds), m.LoadBefore, m.LoadAfter)
		}
	}
	rep.Finished = time.Now().UTC()
	rep.summarise()
	return rep, nil
}

// load is pgbench running at a fixed rate until stopped.
type load struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// startLoad initialises pgbench's tables at scale 1 and runs its TPC-B-like transactions at tps
// a second, one client, until stopped: the WAL a modest host writes, well above the write-wait
// rules' floor of 10 kB/s.
func startLoad(ctx context.Context, c *lab.Cluster, tps int) (*load, error) {
	if _, err := pgbench.Run(ctx, c, "-i", "-q", "-s", "1"); err != nil {
		return nil, err
	}
	loadCtx, cancel := context.WithCancel(ctx)
	l := &load{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		_, l.err = pgbench.Run(loadCtx, c, "-n", "-c", "1", "-R", strconv.Itoa(tps), "-T", "86400")
	}()
	return l, nil
}

// stop ends the load and returns why it ended early, if it did; it may be called again.
func (l *load) stop() error {
	l.cancel()
	<-l.done
	if errors.Is(l.err, context.Canceled) {
		return nil
	}
	if l.err != nil {
		return fmt.Errorf("the pgbench load stopped: %w", l.err)
	}
	return nil
}
