// Package equipment sets up what a lab scenario runs on - work directories, simulated disks,
// ext4 on loop devices over them, throwaway clusters - and tears it down in reverse order,
// whatever happened: on errors, and when the context is cancelled (Ctrl-C).
package equipment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// Set is what one scenario set up, torn down by Close.
type Set struct {
	logger *zap.Logger
	say    func(format string, args ...any)
	undo   []func() error
}

// New returns an empty Set. say receives a progress line per slow step (nil: none); tear-down
// errors are logged to logger as well as returned.
func New(logger *zap.Logger, say func(format string, args ...any)) *Set {
	if logger == nil {
		logger = zap.NewNop()
	}
	if say == nil {
		say = func(string, ...any) {}
	}
	return &Set{logger: logger, say: say}
}

// Push adds fn to what Close undoes, before everything pushed so far.
func (e *Set) Push(fn func() error) { e.undo = append(e.undo, fn) }

// Close undoes everything pushed, in reverse order, and returns the errors joined.
func (e *Set) Close() error {
	var errs []error
	for i := len(e.undo) - 1; i >= 0; i-- {
		if err := e.undo[i](); err != nil {
			e.logger.Error("tear down", zap.Error(err))
			errs = append(errs, err)
		}
	}
	e.undo = nil
	return errors.Join(errs...)
}

// WorkPrefix starts the name of every directory a Set makes, with the process ID so that
// suites running at once (tests of several packages) can each check that they left nothing.
func WorkPrefix() string { return fmt.Sprintf("pgwal-bench-%d-", os.Getpid()) }

// Dir makes a directory under parent that the postgres user can traverse (PostgreSQL runs as
// postgres when the lab runs as root), removed at tear-down.
func (e *Set) Dir(parent, pattern string) (string, error) {
	d, err := os.MkdirTemp(parent, WorkPrefix()+pattern)
	if err != nil {
		return "", fmt.Errorf("make work directory: %w", err)
	}
	e.Push(func() error { return os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		return "", fmt.Errorf("make work directory: %w", err)
	}
	return d, nil
}

// SourceParent is where simulated disks keep their files: tmpfs when there is one, so that the
// host's own disk (shared with whatever else runs on the machine) adds neither latency nor
// dirty pages of its own (docs/benchmarks.md, seed 003), and the system's temporary directory
// otherwise.
func SourceParent() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// Disk mounts a simulated disk, unmounted at tear-down. An error matching simdisk.ErrNoFUSE
// means this machine cannot run the scenario.
func (e *Set) Disk(ctx context.Context, opts simdisk.Options) (*simdisk.Disk, error) {
	src, err := e.Dir(SourceParent(), "src-")
	if err != nil {
		return nil, err
	}
	mnt, err := e.Dir("", "disk-")
	if err != nil {
		return nil, err
	}
	d, err := simdisk.Mount(ctx, src, mnt, opts, e.logger)
	if err != nil {
		return nil, err
	}
	e.Push(d.Close)
	return d, nil
}

// Cluster starts a throwaway cluster, stopped at tear-down.
func (e *Set) Cluster(ctx context.Context, opts lab.ClusterOptions) (*lab.Cluster, error) {
	c, err := lab.StartCluster(ctx, opts)
	if err != nil {
		return nil, err
	}
	e.Push(c.Stop)
	return c, nil
}

// ProbeDir makes the directory the advisor's probe writes in, on the WAL's file system.
func ProbeDir(parent string) (string, error) {
	d := filepath.Join(parent, "probe")
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", fmt.Errorf("make probe directory: %w", err)
	}
	return d, nil
}

// Checkpoint runs CHECKPOINT, so that no run inherits the previous one's dirty buffers or
// full-page-write state.
func Checkpoint(ctx context.Context, c *lab.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return c.Exec(ctx, "CHECKPOINT")
}
