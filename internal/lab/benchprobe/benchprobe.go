// Package benchprobe measures the probe's accuracy and cost against pg_test_fsync
// (docs/probes.md, "Accuracy and cost against pg_test_fsync"): `pgwal-lab bench-probe` (make
// bench-probe). On the bare disk and on the simulated disk at chosen latencies it runs our probe
// (probes.Run with its defaults) and pg_test_fsync (-s 5, its default) on the same directory,
// alternating which goes first, and prints per method and write pattern both ops/s and their
// ratio, both wall times and, on the simulated disk, the probe's fdatasync p50 against the
// configured latency. It prints figures and asserts nothing.
//
// The simulated disk needs root and /dev/fuse; without them only the bare disk is measured,
// and the output says so. The probe runs in a child process (Options.Child, which ends in
// ProbeChild), as pg_test_fsync does, so that neither shares a Go runtime with the simulated
// disk's FUSE server. Every mount is unmounted and every directory removed on the way out,
// Ctrl-C included.
package benchprobe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// Options are what to measure and how to report it.
type Options struct {
	// BaseDir is the directory on the bare disk to measure in (a temporary directory is made
	// there), and where the simulated disks are mounted; SimSource holds their backing files.
	BaseDir, SimSource string
	// Runs on the bare disk and SimRuns on each simulated disk, one per latency of Latencies.
	Runs, SimRuns int
	Latencies     []time.Duration
	// ProbeDuration is our probe's budget; PGSecs pg_test_fsync's seconds per test.
	ProbeDuration time.Duration
	PGSecs        int
	// PGTestFsync is the pg_test_fsync binary; "" finds the installed PostgreSQL's.
	PGTestFsync string
	// JSON prints JSON instead of markdown; Save also writes the JSON to this file.
	JSON bool
	Save string
	// Command is the command line, quoted in the results.
	Command string
	// Child is the command line that runs our probe in a child process: this program and the
	// arguments that lead to ProbeChild, to which "--probe-child DIR --duration D" is added.
	Child []string
}

// DefaultSimSource is /dev/shm when it is a tmpfs, else the system's temporary directory.
//
// On a disk-backed source every simulated sync also waits for the host disk's own sync, which
// is cheap (0.1-0.3 ms) until something else on the machine writes heavily: then it stalls for
// 0.1-0.5 s, and the simulated device with it (seen in trial runs here while other test suites
// ran). The simulated device is meant to cost what it is configured to cost.
func DefaultSimSource() string {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		return "/dev/shm"
	}
	return os.TempDir()
}

// ParseLatencies reads a comma-separated list of positive durations; empty entries are
// skipped, so "" is none (the bare disk only).
func ParseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive duration", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// Validate says what is wrong with the counts, by the names of pgwal-lab bench-probe's flags.
func (o Options) Validate() error {
	if o.Runs < 0 || o.SimRuns < 0 || o.PGSecs < 1 {
		return fmt.Errorf("--runs %d, --sim-runs %d, --secs %d: runs must not be negative, secs at least 1", o.Runs, o.SimRuns, o.PGSecs)
	}
	return nil
}

// Run measures, then writes the results to out (markdown, or JSON with o.JSON) and to o.Save.
func Run(ctx context.Context, o Options, out io.Writer, logger *zap.Logger) error {
	err := run(ctx, o, out, logger)
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted; the simulated disks are unmounted and the temporary directories removed: %w", err)
	}
	return err
}

func run(ctx context.Context, o Options, out io.Writer, logger *zap.Logger) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if o.PGTestFsync == "" {
		bin, err := lab.FindBinDir()
		if err != nil {
			return fmt.Errorf("find pg_test_fsync: %w", err)
		}
		o.PGTestFsync = filepath.Join(bin, "pg_test_fsync")
	}
	if len(o.Child) == 0 {
		return errors.New("no command to run the probe in a child process")
	}
	b := &bench{opts: o, logger: logger, res: newResults(o)}

	if err := b.bareDisk(ctx); err != nil {
		return err
	}
	for _, lat := range o.Latencies {
		err := b.simulatedDisk(ctx, lat)
		if errors.Is(err, simdisk.ErrNoFUSE) {
			b.res.Notes = append(b.res.Notes, fmt.Sprintf("The simulated disk was not measured: %v.", err))
			logger.Warn("simulated disk not available; measuring the bare disk only", zap.Error(err))
			break
		}
		if err != nil {
			return err
		}
	}
	b.res.finish()
	if o.Save != "" {
		data, err := json.MarshalIndent(b.res, "", "  ")
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := os.WriteFile(o.Save, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("save results: %w", err)
		}
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(b.res); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
		return nil
	}
	return b.res.writeMarkdown(out)
}

// bench runs the measurements and collects the results.
type bench struct {
	opts   Options
	logger *zap.Logger
	res    *results
	// runs counts the runs so far, so that the order alternates across disks too.
	runs int
}

func (b *bench) bareDisk(ctx context.Context) (err error) {
	if b.opts.Runs == 0 {
		return nil
	}
	dir, err := os.MkdirTemp(b.opts.BaseDir, "benchprobe-bare-")
	if err != nil {
		return fmt.Errorf("bare disk directory: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove bare disk directory: %w", rmErr)
		}
	}()
	for i := range b.opts.Runs {
		r, err := b.measure(ctx, dir, "bare", 0, i+1, b.opts.Runs)
		if err != nil {
			return err
		}
		b.res.Runs = append(b.res.Runs, r)
	}
	return nil
}

// simulatedDisk mounts a simulated disk with the latency over a fresh directory, measures on
// it and always unmounts it and removes both directories.
func (b *bench) simulatedDisk(ctx context.Context, latency time.Duration) (err error) {
	if b.opts.SimRuns == 0 {
		return nil
	}
	src, err := os.MkdirTemp(b.opts.SimSource, "benchprobe-src-")
	if err != nil {
		return fmt.Errorf("simulated disk source: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(src); rmErr != nil && err == nil {
			err = fmt.Errorf("remove simulated disk source: %w", rmErr)
		}
	}()
	mnt, err := os.MkdirTemp(b.opts.BaseDir, "benchprobe-mnt-")
	if err != nil {
		return fmt.Errorf("simulated disk mount point: %w", err)
	}
	d, err := simdisk.Mount(ctx, src, mnt, simdisk.Options{Latency: latency}, b.logger)
	if err != nil {
		_ = os.Remove(mnt)
		return err
	}
	defer func() {
		// Remove, not RemoveAll: should the unmount have failed, nothing is deleted through
		// the mount.
		closeErr := d.Close()
		if closeErr == nil {
			closeErr = os.Remove(mnt)
		}
		if closeErr != nil && err == nil {
			err = fmt.Errorf("unmount simulated disk: %w", closeErr)
		}
	}()
	for i := range b.opts.SimRuns {
		r, err := b.measure(ctx, d.Mountpoint(), "simulated", latency, i+1, b.opts.SimRuns)
		if err != nil {
			return err
		}
		r.Source, r.SourceFS = src, fsName(src)
		b.res.Runs = append(b.res.Runs, r)
	}
	return nil
}

// measure runs our probe and pg_test_fsync on dir, in alternating order.
func (b *bench) measure(ctx context.Context, dir, disk string, latency time.Duration, n, of int) (runResult, error) {
	r := runResult{Disk: disk, Dir: dir, Run: n, Of: of, OursFirst: b.runs%2 == 0, LoadBefore: loadAverage(), DirFS: fsName(dir)}
	if latency > 0 {
		r.LatencyMS = latency.Seconds() * 1000
	}
	b.runs++
	log := b.logger.With(zap.String("disk", r.label()), zap.Int("run", n), zap.Int("of", of))
	ours := func() error {
		log.Info("running our probe", zap.Duration("budget", b.opts.ProbeDuration))
		cpu := readCPUTimes()
		rep, wall, err := b.runProbe(ctx, dir)
		if err != nil {
			return err
		}
		r.Ours, r.OursWallSeconds, r.OursCPUBusy = rep, wall.Seconds(), cpu.busySince()
		log.Info("our probe done", zap.Duration("wall", wall.Round(time.Millisecond)), zap.String("stop", rep.Stop))
		return nil
	}
	theirs := func() error {
		log.Info("running pg_test_fsync", zap.Int("seconds_per_test", b.opts.PGSecs))
		cpu := readCPUTimes()
		pg, err := runPGTestFsync(ctx, b.opts.PGTestFsync, dir, b.opts.PGSecs)
		if err != nil {
			return err
		}
		r.PG, r.PGCPUBusy = pg, cpu.busySince()
		log.Info("pg_test_fsync done", zap.Float64("wall_seconds", pg.WallSeconds))
		return nil
	}
	steps := []func() error{ours, theirs}
	if !r.OursFirst {
		steps[0], steps[1] = theirs, ours
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return r, err
		}
	}
	r.LoadAfter = loadAverage()
	r.compare()
	return r, nil
}

// runProbe runs the probe in a child process on dir and returns its report and the child's
// wall time (process start included).
func (b *bench) runProbe(ctx context.Context, dir string) (*probes.Report, time.Duration, error) {
	args := append(append([]string{}, b.opts.Child[1:]...), "--probe-child", dir, "--duration", b.opts.ProbeDuration.String())
	cmd := exec.CommandContext(ctx, b.opts.Child[0], args...)
	// SIGINT lets the probe remove its file.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stderr = os.Stderr
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, 0, ctxErr
	}
	if err != nil {
		return nil, 0, fmt.Errorf("probe in %s: %w", dir, err)
	}
	var rep probes.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, 0, fmt.Errorf("read the probe's report: %w", err)
	}
	return &rep, wall, nil
}

// ProbeChild is the child process: probes.Run with its defaults (but the budget) on dir, its
// report as JSON on out.
func ProbeChild(ctx context.Context, dir string, budget time.Duration, out io.Writer) error {
	rep, err := probes.Run(ctx, probes.Config{Dir: dir, Duration: budget}, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", dir, err)
	}
	if err := json.NewEncoder(out).Encode(rep); err != nil {
		return fmt.Errorf("write the probe's report: %w", err)
	}
	return nil
}

// loadAverage returns the one-minute load average, the machine's business while measuring.
func loadAverage() float64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return -1
	}
	return float64(si.Loads[0]) / (1 << unix.SI_LOAD_SHIFT)
}

// cpuTimes is the machine's CPU time so far, from /proc/stat, in clock ticks.
type cpuTimes struct {
	idle, total uint64
}

// readCPUTimes reads the aggregate "cpu" line of /proc/stat; zero when it cannot.
func readCPUTimes() cpuTimes {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return cpuTimes{}
	}
	var t cpuTimes
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}
		}
		// user nice system idle iowait irq softirq steal; guest time is already in user.
		if i >= 8 {
			break
		}
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t
}

// busySince is the share of the machine's CPU time that was busy (anyone's, ours included)
// since t was read; -1 when unknown. A tool measured while the CPUs were saturated waited for
// them at every wake-up.
func (t cpuTimes) busySince() float64 {
	now := readCPUTimes()
	if t.total == 0 || now.total <= t.total {
		return -1
	}
	return 1 - float64(now.idle-t.idle)/float64(now.total-t.total)
}
