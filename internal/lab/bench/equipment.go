package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// equipment tears down what a scenario set up, in reverse order, whatever happened.
type equipment struct {
	logger *zap.Logger
	undo   []func() error
}

func (e *equipment) push(fn func() error) { e.undo = append(e.undo, fn) }

func (e *equipment) close() error {
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

// workPrefix starts the name of every directory the suite makes, with the process ID so that
// suites running at once (tests of several packages) can each check that they left nothing.
func workPrefix() string { return fmt.Sprintf("pgwal-bench-%d-", os.Getpid()) }

// dir makes a directory under parent that the postgres user can traverse (PostgreSQL runs as
// postgres when the suite runs as root), removed at tear-down.
func (e *equipment) dir(parent, pattern string) (string, error) {
	d, err := os.MkdirTemp(parent, workPrefix()+pattern)
	if err != nil {
		return "", fmt.Errorf("make work directory: %w", err)
	}
	e.push(func() error { return os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		return "", fmt.Errorf("make work directory: %w", err)
	}
	return d, nil
}

// sourceParent is where simulated disks keep their files: tmpfs when there is one, so that the
// host's own disk (shared with whatever else runs on the machine) adds neither latency nor
// dirty pages of its own (docs/benchmarks.md, seed 003), and the system's temporary directory otherwise.
func sourceParent() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return ""
}

// disk mounts a simulated disk and returns it with a directory on it for the probes. An error
// matching simdisk.ErrNoFUSE means this machine cannot run the suite.
func (e *equipment) disk(ctx context.Context, opts simdisk.Options) (*simdisk.Disk, error) {
	src, err := e.dir(sourceParent(), "src-")
	if err != nil {
		return nil, err
	}
	mnt, err := e.dir("", "disk-")
	if err != nil {
		return nil, err
	}
	d, err := simdisk.Mount(ctx, src, mnt, opts, e.logger)
	if err != nil {
		return nil, err
	}
	e.push(d.Close)
	return d, nil
}

// cluster starts a throwaway cluster, stopped at tear-down.
func (e *equipment) cluster(ctx context.Context, opts lab.ClusterOptions) (*lab.Cluster, error) {
	c, err := lab.StartCluster(ctx, opts)
	if err != nil {
		return nil, err
	}
	e.push(c.Stop)
	return c, nil
}

// probeDir makes the directory the advisor's probe writes in, on the WAL's file system.
func probeDir(parent string) (string, error) {
	d := filepath.Join(parent, "probe")
	if err := os.Mkdir(d, 0o755); err != nil {
		return "", fmt.Errorf("make probe directory: %w", err)
	}
	return d, nil
}

// checkpoint runs CHECKPOINT, so that no run inherits the previous one's dirty buffers or
// full-page-write state.
func checkpoint(ctx context.Context, c *lab.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return c.Exec(ctx, "CHECKPOINT")
}

// loopStack is the device of seed 003 and the neighbour scenario: ext4 on a loop device over a
// simulated disk, and a cluster with its data and WAL there, initialised by pgbench -i.
type loopStack struct {
	disk  *simdisk.Disk
	mnt   string // where the ext4 file system is mounted
	c     *lab.Cluster
	probe string // the probes' directory on the file system
	// note is for the report when the loop device fell back to buffered I/O; "" when not.
	note string
}

// loopStack sets up a loopStack of size bytes with a cluster of settings at pgbench scale. The
// disk runs at full speed while it is set up (mkfs and pgbench -i are not what is measured),
// and at opts' bandwidth and latency once it returns, after a CHECKPOINT and sync(2).
func (r *runner) loopStack(ctx context.Context, eq *equipment, scenario string, opts simdisk.Options, size int64,
	settings map[string]string, scale int) (*loopStack, error) {
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s's loop-device stack needs %s: %w", scenario, tool, err)
		}
	}
	disk, err := eq.disk(ctx, opts)
	if err != nil {
		return nil, err
	}
	disk.SetBandwidth(0)
	disk.SetLatency(0)
	mnt, err := eq.dir("", "ext4-")
	if err != nil {
		return nil, err
	}
	r.say("%s: ext4 on a loop device over the simulated disk (%s)", scenario, humanBytes(float64(size)))
	loop, err := simdisk.MountLoopExt4(ctx, disk.Mountpoint(), size, mnt)
	if err != nil {
		return nil, err
	}
	eq.push(loop.Close)
	st := &loopStack{disk: disk, mnt: mnt}
	if !loop.DirectIO {
		st.note = "The loop device fell back to buffered I/O on its backing file."
	}
	if st.c, err = eq.cluster(ctx, lab.ClusterOptions{BaseDir: mnt, WALDir: filepath.Join(mnt, "wal"), Settings: settings}); err != nil {
		return nil, err
	}
	if st.probe, err = probeDir(mnt); err != nil {
		return nil, err
	}
	r.say("%s: pgbench -i -s %d", scenario, scale)
	if _, err := runPgbench(ctx, st.c, "-i", "-q", "-I", "dtGvp", "-s", strconv.Itoa(scale)); err != nil {
		return nil, err
	}
	if err := checkpoint(ctx, st.c); err != nil {
		return nil, err
	}
	unix.Sync()
	disk.SetBandwidth(opts.BandwidthBytesPerSec)
	disk.SetLatency(opts.Latency)
	return st, nil
}
