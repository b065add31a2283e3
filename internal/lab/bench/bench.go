// Package bench is the seed benchmark suite: it replays the seed documents' scenarios (each a
// workload and a starting configuration) on throwaway clusters over the simulated disk, and
// compares the starting configuration, the configuration the advisor reaches when its findings
// are applied, the best configuration of a small grid search, and the configuration static
// tuners (PGTune, timescaledb-tune) give for this machine.
//
// It is lab equipment (`pgwal-lab bench`, `make bench`): everything it starts - clusters,
// simulated disks, loop devices, changes to /proc/sys/vm - it undoes, also when its context is
// cancelled (Ctrl-C) and on errors. The figures are the suite's product; the harness never tunes
// itself to meet the targets, it reports them met or missed.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Scenario IDs, in the order the suite runs them.
const (
	Seed000 = "seed000"
	Seed001 = "seed001"
	// Timing001 is seed 001's timing lab: the daemon and check on the seed's statement.
	Timing001 = "timing"
	Seed002   = "seed002"
	Seed003   = "seed003"
	// Neighbour is a bulk writer beside the database on its file system (issue: commit stalls
	// from write-back).
	Neighbour = "neighbour"
	Commit    = "commit"
)

// scenario is one entry of the suite: its ID and the runner's method that measures it.
type scenario struct {
	id  string
	run func(*runner, context.Context) (*ScenarioResult, error)
}

// scenarios is the suite, in running order: a new scenario is one entry here (CONTRIBUTING.md,
// "Add a lab scenario"), and ScenarioIDs, --scenario and the dispatch all read it.
func scenarios() []scenario {
	return []scenario{
		{Seed000, (*runner).seed000},
		{Seed001, (*runner).seed001},
		{Timing001, (*runner).timingScenario},
		{Seed002, (*runner).seed002},
		{Seed003, (*runner).seed003},
		{Neighbour, (*runner).neighbour},
		{NeighbourElsewhere, (*runner).neighbourElsewhere},
		{Commit, (*runner).commit},
		{Defaults, (*runner).defaults},
	}
}

// ScenarioIDs returns every scenario the suite knows, in running order.
func ScenarioIDs() []string {
	var ids []string
	for _, s := range scenarios() {
		ids = append(ids, s.id)
	}
	return ids
}

// Options configure a run of the suite.
type Options struct {
	// Quick runs tiny sizes and few configurations: a smoke test of the harness (CI), not of
	// the figures.
	Quick bool
	// Scenarios to run (ScenarioIDs); empty means all.
	Scenarios []string
	// ProcFS and SysFS are where the collectors read the kernel and storage facts, and where
	// /proc/sys/vm is written; empty means /proc and /sys.
	ProcFS string
	SysFS  string
	// Command is the command line that produced the report, quoted in it.
	Command string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
	// Applier applies the advisor's findings; nil means advisor/apply's one-shot (OnceApplier).
	Applier Applier
	// DefaultsLoads and DefaultsDevices narrow the defaults scenario's loads (DefaultsLoads)
	// and devices (DefaultsDevices) in the full suite; empty: all of them.
	DefaultsLoads, DefaultsDevices []string
	// DefaultsServer is the PostgreSQL major version the defaults scenario's clusters run, from
	// the version matrix's builds (lab.FindVersion: the npm builds, pglz their only
	// wal_compression); 0: the machine's own server (lab.FindBinDir).
	DefaultsServer int
	// NeighbourRounds and NeighbourWriterMB override the neighbour scenario's rounds and bulk
	// writer size (0: the suite's, sizesFor).
	NeighbourRounds   int
	NeighbourWriterMB int
	// NeighbourRestoreOnly runs only the neighbour scenario's restore phase (from tuned's
	// 64MB/512MB, the daemon in apply mode, `rollback`), which a full run adds after its grid.
	NeighbourRestoreOnly bool
	// TimingHeadStart overrides how long the timing lab's daemon runs before the statement (0:
	// the suite's 35 s). The daemon snapshots every 15 s from its start, so the head start sets
	// where in that cycle the statement begins, and with it how soon the first snapshot sees it.
	TimingHeadStart time.Duration
}

// Report is the suite's result. Its JSON is what `bench --format json` prints.
type Report struct {
	Mode            string            `json:"mode"`
	Started         time.Time         `json:"started"`
	DurationSeconds float64           `json:"duration_seconds"`
	Command         string            `json:"command,omitempty"`
	Machine         Machine           `json:"machine"`
	StaticTuner     StaticTuner       `json:"static_tuner"`
	Scenarios       []*ScenarioResult `json:"scenarios"`
	// Runs lists the suite's runs a merged report (MergeReports) was made of.
	Runs []RunInfo `json:"runs,omitempty"`
}

// Machine describes where the figures were measured.
type Machine struct {
	CPUs              int    `json:"cpus"`
	CPUModel          string `json:"cpu_model,omitempty"`
	MemoryBytes       int64  `json:"memory_bytes"`
	Kernel            string `json:"kernel,omitempty"`
	PostgreSQL        string `json:"postgresql,omitempty"`
	LoadAverageBefore string `json:"load_average_before,omitempty"`
	LoadAverageAfter  string `json:"load_average_after,omitempty"`
}

// sizes are the knobs that differ between the quick and the full suite.
type sizes struct {
	latency time.Duration // the simulated disk's sync latency (seeds 000-002)
	// window is the advisor's check window. The measured rules need 30 s of history
	// (rules.Thresholds.MinSpan), so even the quick suite watches a little longer than that.
	window      time.Duration
	probeBudget time.Duration
	rounds      int // check->apply rounds at most

	// Seed 000's target is a 10% difference and identical runs differ by up to a third (docs/benchmarks.md):
	// more, shorter interleaved runs make the medians steadier than two long ones.
	s000Secs, s000Runs int
	s000Methods        []string

	s001Rows, s001Runs int
	// s001Extra more runs go to the configurations that take less than s001Fast: the targets
	// compare those, and their run-to-run spread is largest relative to their time.
	s001Extra   int
	s001Fast    time.Duration
	s001Buffers []string
	s001Methods []string
	// s001SkipSlowOpenSync leaves open_sync out at 64kB and 1MB (it measures as open_datasync
	// there, and each run takes minutes at the full size).
	s001SkipSlowOpenSync bool
	// s001WatchRows is the size of the statement the advisor watches (repeated when it ends
	// before the window); s001TimingRows the timing lab's statement (0: no timing lab), which
	// starts s001HeadStart after the daemon.
	s001WatchRows, s001TimingRows  int
	s001HeadStart, s001TimingWatch time.Duration

	s002Clients []int
	s002Secs    int

	s003Scale, s003Secs, s003Rate int
	s003Grid                      bool // the full 2x2 grid; quick measures start and advisor only

	// The neighbour scenario: pgbench scale, the bulk writer's size, interleaved rounds, the
	// whole grid under both queue models (quick: one grid point), the advisor's window.
	nbScale, nbWriterMB, nbRounds int
	nbGrid                        bool
	nbWindow                      time.Duration

	// The commit grid: seconds per run, interleaved rounds, clients, devices, and the
	// commit_delay (microseconds) x commit_siblings points beside commit_delay=0.
	cgSecs, cgRounds     int
	cgClients            []int
	cgLatencies          []time.Duration
	cgDelays, cgSiblings []int

	// The default-host matrix: devices (fullpage.Devices' names) and loads, pgbench scale, the
	// OLTP runs' seconds, the bulk load's rows, the writer's MB, interleaved rounds, the whole
	// grid and the static tuners (quick: lz4 only), the loop volume's size; dfRounds caps the
	// advisor's rounds (quick: one, which applies and is not checked; 0: rounds).
	dfDevices, dfLoads                  []string
	dfScale, dfSecs, dfRows, dfWriterMB int
	dfRuns, dfRounds                    int
	dfGrid                              bool
	dfVolume                            int64
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{
			latency: 4 * time.Millisecond, window: 32 * time.Second, probeBudget: 3 * time.Second, rounds: 2,
			s000Secs: 3, s000Runs: 1, s000Methods: []string{"open_sync", "fdatasync"},
			s001Rows: 20000, s001Runs: 1, s001Buffers: []string{"64kB", "16MB"}, s001Methods: []string{"open_datasync", "fdatasync"},
			s001WatchRows: 200000, s001TimingRows: 300000, s001HeadStart: 35 * time.Second, s001TimingWatch: 30 * time.Second,
			s002Clients: []int{1, 16}, s002Secs: 3,
			s003Scale: 5, s003Secs: 35, s003Rate: 600,
			nbScale: 5, nbWriterMB: 300, nbRounds: 1, nbWindow: 32 * time.Second,
			cgSecs: 3, cgRounds: 1, cgClients: []int{16}, cgLatencies: []time.Duration{4 * time.Millisecond}, cgDelays: []int{2000}, cgSiblings: []int{5},
			dfDevices: []string{"cloud"}, dfLoads: []string{loadOLTP}, dfScale: 5, dfSecs: 5, dfRows: 100_000, dfWriterMB: 100, dfRuns: 1,
			dfRounds: 1, dfVolume: 2 << 30,
		}
	}
	return sizes{
		latency: 4 * time.Millisecond, window: 35 * time.Second, probeBudget: 5 * time.Second, rounds: 4,
		s000Secs: 10, s000Runs: 4, s000Methods: durableMethods(),
		// 2M rows: at 400k the configurations near the best took 0.5-0.8 s with a 37% spread
		// and were not resolved (docs/benchmarks.md of 2026-12-02). The fast ones run 5 times,
		// enough for a 95% interval of the mean.
		s001Rows: 2000000, s001Runs: 1, s001Extra: 4, s001Fast: 20 * time.Second, s001Buffers: []string{"64kB", "1MB", "16MB", "64MB"}, s001Methods: durableMethods(),
		s001SkipSlowOpenSync: true, s001WatchRows: 2000000, s001TimingRows: 2000000, s001HeadStart: 35 * time.Second,
		s001TimingWatch: rules.DefaultThresholds().RaiseAfter + time.Minute,
		s002Clients:     []int{1, 4, 16, 64, 100}, s002Secs: 8,
		s003Scale: 50, s003Secs: 90, s003Rate: 600, s003Grid: true,
		// The writer (3000 MB, about 38 s of the device's time); 90 s is the issue's
		// check window.
		nbScale: 10, nbWriterMB: 3000, nbRounds: 2, nbGrid: true, nbWindow: 90 * time.Second,
		// Half a flush on each device (the docs' starting point), a full 4 ms flush, and the
		// default commit_siblings beside a higher one; 3 rounds, about 15 minutes.
		cgSecs: 6, cgRounds: 3, cgClients: []int{16, 64, 100, 200}, cgLatencies: []time.Duration{time.Millisecond, 4 * time.Millisecond},
		cgDelays: []int{500, 2000}, cgSiblings: []int{5, 20},
		// Three devices x three loads, 2 interleaved rounds of 15 s runs (the bulk load: 3M rows, about
		// 700MB of WAL, more than max_wal_size 1GB lets pass between two checkpoints): about 50 minutes.
		dfDevices: []string{"fast", "cloud", "hdd"}, dfLoads: []string{loadOLTP, loadBulk, loadMixed},
		dfScale: 50, dfSecs: 15, dfRows: 3_000_000, dfWriterMB: 1000, dfRuns: 2, dfGrid: true, dfVolume: 8 << 30,
	}
}

// durableMethods are Linux's wal_sync_methods (fsync_writethrough does not exist there) in
// pg_test_fsync's order, the order of the report's rows.
func durableMethods() []string {
	return slices.DeleteFunc(probes.SyncMethods(), func(m string) bool { return m == probes.FsyncWritethrough })
}

// runner carries what every scenario needs.
type runner struct {
	opts    Options
	sz      sizes
	logger  *zap.Logger
	started time.Time
	static  StaticTuner
	kernel  *vmKnobs
	// binDir is the defaults scenario's server build (Options.DefaultsServer); "": the
	// machine's own.
	binDir string
}

// Run runs the selected scenarios and returns their report. A scenario that fails is reported
// with its error and the suite goes on with the next one; the returned error joins them. A
// cancelled context stops the suite after tearing down what it started.
func Run(ctx context.Context, opts Options, logger *zap.Logger) (*Report, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.ProcFS == "" {
		opts.ProcFS = "/proc"
	}
	if opts.SysFS == "" {
		opts.SysFS = "/sys"
	}
	if opts.Applier == nil {
		opts.Applier = OnceApplier{Logger: logger}
	}
	ids, err := selectScenarios(opts.Scenarios)
	if err != nil {
		return nil, err
	}
	binDir, err := lab.FindBinDir()
	if err != nil {
		return nil, err
	}
	if opts.DefaultsServer != 0 {
		if binDir, err = lab.FindVersion(ctx, opts.DefaultsServer); err != nil {
			return nil, err
		}
	}
	mem, err := memTotal(ctx, opts.ProcFS)
	if err != nil {
		return nil, err
	}
	r := &runner{opts: opts, sz: sizesFor(opts.Quick), logger: logger, started: time.Now(), static: staticTunerFor(mem)}
	if opts.DefaultsServer != 0 {
		r.binDir = binDir
	}
	if len(opts.DefaultsLoads) > 0 && !opts.Quick {
		r.sz.dfLoads = slices.DeleteFunc(DefaultsLoads(), func(l string) bool { return !slices.Contains(opts.DefaultsLoads, l) })
	}
	// The knobs are read once, before anything changes them, and restored at the end whatever
	// happens: a scenario that fails or is interrupted leaves the kernel as it found it.
	r.kernel, err = readVMKnobs(opts.ProcFS)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := r.kernel.restore(); rerr != nil {
			logger.Error("cannot restore the kernel's dirty-page settings", zap.Error(rerr))
			fmt.Fprintf(opts.Progress, "ERROR: %v\n", rerr)
		}
	}()

	rep := &Report{
		Mode: "full", Started: r.started, Command: opts.Command, StaticTuner: r.static,
		Machine: machineInfo(ctx, opts.ProcFS, mem, binDir),
	}
	if opts.Quick {
		rep.Mode = "quick"
	}
	var errs []error
	for _, id := range ids {
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("suite interrupted: %w", ctx.Err()))
			break
		}
		r.say("%s: starting", id)
		begin := time.Now()
		res, err := r.scenario(ctx, id)
		if res == nil {
			res = &ScenarioResult{ID: id}
		}
		res.DurationSeconds = time.Since(begin).Seconds()
		if err != nil {
			res.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			r.say("%s: FAILED after %s: %v", id, time.Since(begin).Round(time.Second), err)
		} else {
			r.say("%s: done in %s", id, time.Since(begin).Round(time.Second))
		}
		rep.Scenarios = append(rep.Scenarios, res)
		// Restored between scenarios as well, so that none starts from another's kernel.
		if rerr := r.kernel.restore(); rerr != nil {
			errs = append(errs, rerr)
		}
	}
	rep.Machine.LoadAverageAfter = loadAverage(opts.ProcFS)
	rep.DurationSeconds = time.Since(r.started).Seconds()
	return rep, errors.Join(errs...)
}

func (r *runner) scenario(ctx context.Context, id string) (*ScenarioResult, error) {
	for _, s := range scenarios() {
		if s.id == id {
			return s.run(r, ctx)
		}
	}
	return nil, fmt.Errorf("unknown scenario %q", id)
}

func selectScenarios(names []string) ([]string, error) {
	if len(names) == 0 {
		return ScenarioIDs(), nil
	}
	var ids []string
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" {
			continue
		}
		if !slices.Contains(ScenarioIDs(), n) {
			return nil, fmt.Errorf("unknown scenario %q: want one of %s", n, strings.Join(ScenarioIDs(), ", "))
		}
		if !slices.Contains(ids, n) {
			ids = append(ids, n)
		}
	}
	// Always in the suite's order, whatever the order asked.
	slices.SortFunc(ids, func(a, b string) int { return slices.Index(ScenarioIDs(), a) - slices.Index(ScenarioIDs(), b) })
	return ids, nil
}

// say prints a progress line with the time since the suite started.
func (r *runner) say(format string, args ...any) {
	d := time.Since(r.started).Round(time.Second)
	fmt.Fprintf(r.opts.Progress, "[%02d:%02d] %s\n", int(d.Minutes()), int(d.Seconds())%60, fmt.Sprintf(format, args...))
}

func machineInfo(ctx context.Context, procfs string, mem int64, binDir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), MemoryBytes: mem, LoadAverageBefore: loadAverage(procfs)}
	if b, err := os.ReadFile(filepath.Join(procfs, "sys/kernel/osrelease")); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile(filepath.Join(procfs, "cpuinfo")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output(); err == nil {
		m.PostgreSQL = strings.TrimSpace(string(out))
	}
	return m
}

func loadAverage(procfs string) string {
	b, err := os.ReadFile(filepath.Join(procfs, "loadavg"))
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
