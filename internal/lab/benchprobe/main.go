// Command benchprobe measures the probe's accuracy and cost against pg_test_fsync (docs/probes.md,
// "Accuracy and cost against pg_test_fsync"). On the bare disk and on the simulated disk at chosen latencies it runs
// our probe (probes.Run with its defaults) and pg_test_fsync (-s 5, its default) on the same
// directory, alternating which goes first, and prints per method and write pattern both ops/s
// and their ratio, both wall times and, on the simulated disk, the probe's fdatasync p50
// against the configured latency. It prints figures and asserts nothing: `make bench-probe`.
//
//	go run ./internal/lab/benchprobe [-runs 2] [-sim-runs 1] [-latencies 1ms,4ms] [-json] [-save FILE]
//
// The simulated disk needs root and /dev/fuse; without them only the bare disk is measured,
// and the output says so. The probe runs in a child process (this program re-executed with
// -probe-child DIR), as pg_test_fsync does, so that neither shares a Go runtime with the
// simulated disk's FUSE server. Every mount is unmounted and every directory removed on the
// way out, Ctrl-C included.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, context.Canceled) {
		err = errors.New("interrupted; the simulated disks are unmounted and the temporary directories removed")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchprobe:", err)
		os.Exit(1)
	}
}

// options are the command line's.
type options struct {
	baseDir       string
	simSource     string
	runs, simRuns int
	latencies     []time.Duration
	probeDuration time.Duration
	pgSecs        int
	pgTestFsync   string
	json          bool
	save          string
	probeChild    string
}

func parseFlags(args []string) (options, error) {
	var (
		o         options
		latencies string
	)
	fs := flag.NewFlagSet("benchprobe", flag.ContinueOnError)
	fs.StringVar(&o.baseDir, "dir", "/var/tmp", "directory on the bare disk to measure in (a temporary directory is made there), and to hold the simulated disk's backing files")
	fs.StringVar(&o.simSource, "sim-src", defaultSimSource(), "directory to hold the simulated disk's backing files (default: tmpfs, so that the host disk's own stalls stay out of the simulated device)")
	fs.IntVar(&o.runs, "runs", 2, "runs on the bare disk (its figures vary from run to run)")
	fs.IntVar(&o.simRuns, "sim-runs", 1, "runs on each simulated disk")
	fs.StringVar(&latencies, "latencies", "1ms,4ms", "simulated disk latencies, comma separated; empty for the bare disk only")
	fs.DurationVar(&o.probeDuration, "duration", probes.DefaultDuration, "our probe's budget (probes.Run's default)")
	fs.IntVar(&o.pgSecs, "secs", 5, "pg_test_fsync's seconds per test (its default: 5)")
	fs.StringVar(&o.pgTestFsync, "pg-test-fsync", "", "pg_test_fsync binary (default: from the installed PostgreSQL)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of markdown")
	fs.StringVar(&o.save, "save", "", "also write the results as JSON to this file")
	fs.StringVar(&o.probeChild, "probe-child", "", "internal: run the probe in this directory and print its report as JSON")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(latencies, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return o, fmt.Errorf("-latencies: %q is not a positive duration", s)
		}
		o.latencies = append(o.latencies, d)
	}
	if o.runs < 0 || o.simRuns < 0 || o.pgSecs < 1 {
		return o, errors.New("-runs and -sim-runs must not be negative, -secs at least 1")
	}
	return o, nil
}

func run(args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Kept until the end: a second Ctrl-C must not kill the program before it has unmounted.
	defer stop()
	if o.probeChild != "" {
		return probeChild(ctx, o.probeChild, o.probeDuration)
	}

	zc := zap.NewDevelopmentConfig()
	zc.Level = zap.NewAtomicLevelAt(zap.InfoLevel)
	zc.DisableCaller, zc.DisableStacktrace = true, true
	logger, err := zc.Build()
	if err != nil {
		return fmt.Errorf("build logger: %w", err)
	}
	defer func() { _ = logger.Sync() }()

	if o.pgTestFsync == "" {
		bin, err := lab.FindBinDir()
		if err != nil {
			return fmt.Errorf("find pg_test_fsync: %w", err)
		}
		o.pgTestFsync = filepath.Join(bin, "pg_test_fsync")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this program to run the probe: %w", err)
	}
	b := &bench{opts: o, self: self, logger: logger, res: newResults(o, args)}

	if err := b.bareDisk(ctx); err != nil {
		return err
	}
	for _, lat := range o.latencies {
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
	if o.save != "" {
		data, err := json.MarshalIndent(b.res, "", "  ")
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := os.WriteFile(o.save, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("save results: %w", err)
		}
	}
	if o.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b.res)
	}
	return b.res.writeMarkdown(os.Stdout)
}

// bench runs the measurements and collects the results.
type bench struct {
	opts   options
	self   string
	logger *zap.Logger
	res    *results
	// runs counts the runs so far, so that the order alternates across disks too.
	runs int
}

func (b *bench) bareDisk(ctx context.Context) (err error) {
	if b.opts.runs == 0 {
		return nil
	}
	dir, err := os.MkdirTemp(b.opts.baseDir, "benchprobe-bare-")
	if err != nil {
		return fmt.Errorf("bare disk directory: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove bare disk directory: %w", rmErr)
		}
	}()
	for i := range b.opts.runs {
		r, err := b.measure(ctx, dir, "bare", 0, i+1, b.opts.runs)
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
	if b.opts.simRuns == 0 {
		return nil
	}
	src, err := os.MkdirTemp(b.opts.simSource, "benchprobe-src-")
	if err != nil {
		return fmt.Errorf("simulated disk source: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(src); rmErr != nil && err == nil {
			err = fmt.Errorf("remove simulated disk source: %w", rmErr)
		}
	}()
	mnt, err := os.MkdirTemp(b.opts.baseDir, "benchprobe-mnt-")
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
	for i := range b.opts.simRuns {
		r, err := b.measure(ctx, d.Mountpoint(), "simulated", latency, i+1, b.opts.simRuns)
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
		log.Info("running our probe", zap.Duration("budget", b.opts.probeDuration))
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
		log.Info("running pg_test_fsync", zap.Int("seconds_per_test", b.opts.pgSecs))
		cpu := readCPUTimes()
		pg, err := runPGTestFsync(ctx, b.opts.pgTestFsync, dir, b.opts.pgSecs)
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
	cmd := exec.CommandContext(ctx, b.self, "-probe-child", dir, "-duration", b.opts.probeDuration.String())
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

// defaultSimSource is /dev/shm when it is a tmpfs, else the system's temporary directory.
//
// On a disk-backed source every simulated sync also waits for the host disk's own sync, which
// is cheap (0.1-0.3 ms) until something else on the machine writes heavily: then it stalls for
// 0.1-0.5 s, and the simulated device with it (seen in trial runs here while other test suites
// ran). The simulated device is meant to cost what it is configured to cost.
func defaultSimSource() string {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		return "/dev/shm"
	}
	return os.TempDir()
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

// probeChild is the child process: probes.Run with its defaults (but the budget) on dir.
func probeChild(ctx context.Context, dir string, budget time.Duration) error {
	rep, err := probes.Run(ctx, probes.Config{Dir: dir, Duration: budget}, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", dir, err)
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}
