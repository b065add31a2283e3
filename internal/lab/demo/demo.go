// Package demo is the README's main job: a throwaway cluster with seed 001's starting
// configuration on the simulated slow disk, seed 001's bulk insert, the advisor finding what is
// wrong, applying what is safe, and the same insert again. It is lab equipment: everything it
// starts it stops and removes, also on Ctrl-C.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/web"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/probes/compression"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Options configure the demo.
type Options struct {
	// Latency is the simulated disk's sync latency (seed 001 ran on a 7200 RPM disk).
	Latency time.Duration
	// Rows is the size of the timed bulk insert (seed 001: 1,000,000).
	Rows int
	// Timeout bounds the watching phase: the demo applies what was found by then.
	Timeout time.Duration
	// ListenAddress, when set, serves the landing page, /metrics and the API while it runs.
	ListenAddress string
	ProcFS, SysFS string
	Version       string
	// LogFile is where the logs of the advisor and of the demo's equipment go ("": a new file
	// in the temporary directory, kept after the demo); Verbose shows them on the terminal
	// too, through the logger Run is given.
	LogFile string
	Verbose bool
}

// Applied is one change the demo made.
type Applied struct {
	Setting string `json:"setting"`
	From    string `json:"from"`
	To      string `json:"to"`
	Rule    string `json:"rule"`
	Action  string `json:"action"`
}

// Summary is the demo's result; its JSON is the contract of `demo --format json`.
type Summary struct {
	Rows          int             `json:"rows"`
	LatencyMS     float64         `json:"sync_latency_ms"`
	Simulated     bool            `json:"simulated_disk"`
	BeforeSeconds float64         `json:"before_seconds"`
	AfterSeconds  float64         `json:"after_seconds"`
	Speedup       float64         `json:"speedup"`
	Applied       []Applied       `json:"applied"`
	Findings      []rules.Finding `json:"findings"`
	LogFile       string          `json:"log_file"`
}

// watchRows is the size of the statement the advisor watches: on the starting configuration
// it runs for many minutes, longer than any watch.
const watchRows = 50_000_000

// demoThresholds are the rules' defaults with one change: a measured finding shows after 5 s
// instead of 2 minutes, so that the demo fits in a minute or two. The evidence the rules need
// (30 s of history, a significant probe difference) is not shortened.
func demoThresholds() rules.Thresholds {
	t := rules.DefaultThresholds()
	t.RaiseAfter = 5 * time.Second
	return t
}

// Run runs the demo, printing progress to w.
func Run(ctx context.Context, w io.Writer, opts Options, logger *zap.Logger) (*Summary, error) {
	if opts.Latency == 0 {
		opts.Latency = 4 * time.Millisecond
	}
	if opts.Rows == 0 {
		opts.Rows = 200000
	}
	if opts.Timeout == 0 {
		opts.Timeout = 90 * time.Second
	}
	logger, logFile, err := openLog(opts.LogFile, logger, opts.Verbose)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	defer func() { _ = logger.Sync() }()
	shown := "--verbose shows them here too"
	if opts.Verbose {
		shown = "and here, --verbose"
	}
	fmt.Fprintf(w, "daemon logs: %s (%s)\n", logFile.Name(), shown)
	sum := &Summary{Rows: opts.Rows, LatencyMS: float64(opts.Latency) / float64(time.Millisecond), LogFile: logFile.Name()}

	base, err := os.MkdirTemp("", "pgwal-demo-")
	if err != nil {
		return nil, fmt.Errorf("make demo directory: %w", err)
	}
	defer os.RemoveAll(base)
	// The postgres user must be able to reach the WAL directory below it.
	if err := os.Chmod(base, 0o755); err != nil {
		return nil, fmt.Errorf("make demo directory: %w", err)
	}
	src, mnt := filepath.Join(base, "src"), filepath.Join(base, "disk")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, fmt.Errorf("make demo directory: %w", err)
		}
	}
	walParent := mnt
	disk, err := simdisk.Mount(ctx, src, mnt, simdisk.Options{Latency: opts.Latency}, logger)
	switch {
	case errors.Is(err, simdisk.ErrNoFUSE):
		fmt.Fprintf(w, "note: %v\n      continuing on a plain temporary directory: on a fast disk the effects are small\n", err)
		walParent = src
	case err != nil:
		return nil, err
	default:
		defer disk.Close()
		sum.Simulated = true
		fmt.Fprintf(w, "1. Mounted a simulated disk whose syncs take %v (a 7200 RPM disk, as in seed 001).\n", opts.Latency)
	}
	probeDir := filepath.Join(walParent, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		return nil, fmt.Errorf("make probe directory: %w", err)
	}

	fmt.Fprintf(w, "2. Starting a throwaway PostgreSQL cluster with seed 001's settings (shared_buffers=256MB, wal_buffers=64kB, wal_sync_method=open_datasync), WAL on that disk ...\n")
	c, err := lab.StartCluster(ctx, lab.ClusterOptions{
		WALDir:   filepath.Join(walParent, "wal"),
		Settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync", "shared_buffers": "256MB"},
	})
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	before, err := timedInsert(ctx, w, c, opts.Rows, "before")
	if err != nil {
		return nil, err
	}
	sum.BeforeSeconds = before.Seconds()

	pg := postgres.New(c.DSN(), postgres.Options{Logger: logger})
	defer pg.Close(context.WithoutCancel(ctx))
	s := &advisor.Sampler{Postgres: pg, Kernel: kernel.New(opts.ProcFS), Storage: storage.New(opts.ProcFS, opts.SysFS),
		FullPages: &compression.Source{}}
	a, err := advisor.New(s, advisor.Config{
		Interval: time.Second, WaitInterval: 250 * time.Millisecond, HistoryWindow: 10 * time.Minute,
		ProbeDir: probeDir, Thresholds: demoThresholds(),
	}, logger)
	if err != nil {
		return nil, err
	}
	runCtx, stopAdvisor := context.WithCancel(ctx)
	defer stopAdvisor()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(runCtx); err != nil {
			logger.Error("advisor stopped", zap.Error(err))
		}
	}()
	if opts.ListenAddress != "" {
		srv, err := web.NewServer(a, web.Config{ListenAddresses: []string{opts.ListenAddress}, Version: opts.Version}, logger)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(runCtx); err != nil {
				logger.Error("web server stopped", zap.Error(err))
			}
		}()
		fmt.Fprintf(w, "   The landing page, /metrics and the API are at http://%s/ while the demo runs.\n", opts.ListenAddress)
	}

	fmt.Fprintf(w, "4. The advisor watches seed 001's load (one INSERT ... SELECT generate_series, as the seed ran it) and probes the disk; findings as they appear:\n")
	st, err := watch(ctx, w, c, a, opts.Timeout)
	if err != nil {
		return nil, err
	}
	sum.Findings = st.Findings

	fmt.Fprintf(w, "5. Applying what is safe to apply (journaled; fsync, synchronous_commit and full_page_writes never are) ...\n")
	applied, err := applyFindings(ctx, w, c, st, filepath.Join(base, "apply.journal"), logger)
	if err != nil {
		return nil, err
	}
	sum.Applied = applied

	after, err := timedInsert(ctx, w, c, opts.Rows, "after")
	if err != nil {
		return nil, err
	}
	sum.AfterSeconds = after.Seconds()
	if sum.AfterSeconds > 0 {
		sum.Speedup = sum.BeforeSeconds / sum.AfterSeconds
	}
	stopAdvisor()
	writeSummary(w, sum)
	return sum, nil
}

// openLog creates the file the logs of the advisor and of the demo's equipment go to, and the
// logger writing them there as JSON lines at terminal's level; with verbose, terminal gets them
// too. A newcomer reads the steps and the table; the logs are there for whoever wants them.
func openLog(path string, terminal *zap.Logger, verbose bool) (*zap.Logger, *os.File, error) {
	var f *os.File
	var err error
	if path == "" {
		f, err = os.CreateTemp("", "pgwal-demo-*.log")
	} else {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("create the demo's log file: %w", err)
	}
	level := zapcore.InfoLevel
	if terminal != nil {
		level = zapcore.LevelOf(terminal.Core())
	}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(f), level)
	if verbose && terminal != nil {
		core = zapcore.NewTee(core, terminal.Core())
	}
	return zap.New(core), f, nil
}

// timedInsert runs seed 001's INSERT ... SELECT generate_series once and times it.
func timedInsert(ctx context.Context, w io.Writer, c *lab.Cluster, rows int, label string) (time.Duration, error) {
	step := "3"
	if label == "after" {
		step = "6"
	}
	fmt.Fprintf(w, "%s. Timing seed 001's bulk insert (%d rows in one INSERT ... SELECT generate_series) %s ...\n", step, rows, label)
	d, err := c.BulkInsert(ctx, "seed001_"+label, rows)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(w, "   %s: %.2f s\n", label, d.Seconds())
	return d, nil
}

// watch runs seed 001's statement - one INSERT ... SELECT generate_series, too large to end
// while the advisor watches, so that nothing of it reaches pg_stat_wal and the advisor must see
// it in flight - until the advisor recommends both a sync method and a WAL buffer size (seed
// 001's two fixes), no new recommendation came for a while, or timeout passed, and returns the
// advisor's state then. The statement is cancelled when the watch ends.
func watch(ctx context.Context, w io.Writer, c *lab.Cluster, a *advisor.Advisor, timeout time.Duration) (advisor.State, error) {
	loadCtx, stopLoad := context.WithCancel(ctx)
	loaded := make(chan error, 1)
	go func() {
		var err error
		for loadCtx.Err() == nil && err == nil {
			_, err = c.BulkInsert(loadCtx, "seed001_load", watchRows)
		}
		loaded <- err
	}()
	defer func() {
		stopLoad()
		<-loaded
	}()
	start := time.Now()
	seen := map[string]bool{}
	lastNew := time.Time{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return advisor.State{}, ctx.Err()
		case <-tick.C:
		}
		st := a.State()
		// Pending findings are shown as they ripen, as the landing page shows them; a
		// finding is printed again when it fires.
		for _, f := range append(slices.Clone(st.Pending), st.Findings...) {
			key := f.Rule + "/" + f.Setting + "/" + string(f.State)
			if seen[key] {
				continue
			}
			seen[key] = true
			lastNew = time.Now()
			fmt.Fprintf(w, "   %5.0fs  %-8s %s", time.Since(start).Seconds(), strings.ToUpper(f.Severity.String()), f.Rule)
			if f.Recommended != "" {
				fmt.Fprintf(w, ": %s %s -> %s (%s)", f.Setting, f.Current, f.Recommended, f.Action)
			}
			if f.State == rules.StatePending && f.FiresAt != nil {
				fmt.Fprintf(w, " [pending, fires in %.0fs if it holds]", time.Until(*f.FiresAt).Seconds())
			}
			fmt.Fprintln(w)
		}
		recommends := func(setting string) bool {
			for _, f := range st.Findings {
				if f.Setting == setting && f.Recommended != "" && f.Severity >= rules.Warning {
					return true
				}
			}
			return false
		}
		elapsed := time.Since(start)
		switch {
		case recommends("wal_sync_method") && recommends("wal_buffers") && time.Since(lastNew) > 3*time.Second:
			return st, nil
		case elapsed > timeout:
			fmt.Fprintf(w, "   (%v passed: applying what was found so far)\n", timeout)
			return st, nil
		}
	}
}

// applyFindings applies the state's safe recommendations once, restarts the cluster when a
// change needs it, and returns what changed.
func applyFindings(ctx context.Context, w io.Writer, c *lab.Cluster, st advisor.State, journal string, logger *zap.Logger) ([]Applied, error) {
	pg := apply.NewPostgres(c.DSN(), apply.PostgresOptions{Logger: logger})
	defer pg.Close(context.WithoutCancel(ctx))
	// The demo changes its own cluster only, never this machine's kernel settings.
	var settings []string
	for _, s := range apply.DefaultSettings() {
		if !strings.HasPrefix(s, "vm.") {
			settings = append(settings, s)
		}
	}
	m, err := apply.New(apply.Config{Mode: apply.ModeOn, Settings: settings, Journal: journal}, nil, []apply.Actuator{pg}, logger)
	if err != nil {
		return nil, err
	}
	plan, err := m.Plan(ctx, st)
	if err != nil {
		return nil, err
	}
	plan, err = m.ApplyPlan(ctx, plan)
	if err != nil {
		return nil, err
	}
	if err := apply.WritePlan(w, plan, true, journal); err != nil {
		return nil, fmt.Errorf("write the plan: %w", err)
	}
	var out []Applied
	restart := false
	for _, p := range plan {
		if p.ID == 0 || p.Error != "" {
			continue
		}
		out = append(out, Applied{Setting: p.Finding.Setting, From: p.Finding.Current, To: p.Finding.Recommended, Rule: p.Finding.Rule, Action: string(p.Finding.Action)})
		restart = restart || p.Outcome == apply.PendingRestart
	}
	if restart {
		fmt.Fprintf(w, "   Restarting the demo's own cluster for the settings pending a restart (the daemon never restarts a server itself) ...\n")
		if err := c.Restart(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func writeSummary(w io.Writer, s *Summary) {
	fmt.Fprintf(w, "\nSeed 001's bulk insert of %d rows, WAL on a disk with %.0f ms syncs:\n\n", s.Rows, s.LatencyMS)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  \tbefore\tafter\n")
	fmt.Fprintf(tw, "  time\t%.2f s\t%.2f s\n", s.BeforeSeconds, s.AfterSeconds)
	for _, a := range s.Applied {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", a.Setting, a.From, a.To)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nSpeed-up: %.1fx\n", s.Speedup)
}
