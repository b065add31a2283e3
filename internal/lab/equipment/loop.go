package equipment

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// LoopVolume is ext4 on a loop device over a simulated disk: the kernel's page cache and
// write-back sit above the simulated device again, as they do above a real one.
type LoopVolume struct {
	Disk *simdisk.Disk
	Mnt  string // where the ext4 file system is mounted
	// Note is for a report when the loop device fell back to buffered I/O; "" when not.
	Note string
}

// LoopVolume mounts a LoopVolume of size bytes over a simulated disk of opts. The disk runs at
// full speed when it returns (mkfs is not what is measured): Throttle puts opts in force.
func (e *Set) LoopVolume(ctx context.Context, scenario string, opts simdisk.Options, size int64) (*LoopVolume, error) {
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s's loop-device stack needs %s: %w", scenario, tool, err)
		}
	}
	disk, err := e.Disk(ctx, opts)
	if err != nil {
		return nil, err
	}
	disk.SetBandwidth(0)
	disk.SetLatency(0)
	disk.SetIOPS(0)
	mnt, err := e.Dir("", "ext4-")
	if err != nil {
		return nil, err
	}
	e.say("%s: ext4 on a loop device over the simulated disk (%.1f GiB)", scenario, float64(size)/(1<<30))
	loop, err := simdisk.MountLoopExt4(ctx, disk.Mountpoint(), size, mnt)
	if err != nil {
		return nil, err
	}
	e.Push(loop.Close)
	v := &LoopVolume{Disk: disk, Mnt: mnt}
	if !loop.DirectIO {
		v.Note = "The loop device fell back to buffered I/O on its backing file."
	}
	return v, nil
}

// Throttle puts the simulated disk's bandwidth, latency and IOPS cap of opts in force.
func (v *LoopVolume) Throttle(opts simdisk.Options) {
	v.Disk.SetBandwidth(opts.BandwidthBytesPerSec)
	v.Disk.SetLatency(opts.Latency)
	v.Disk.SetIOPS(opts.IOPS)
}

// LoopStack is the device of seed 003 and the neighbour scenario: a LoopVolume and a cluster
// with its data and WAL there, initialised by pgbench -i.
type LoopStack struct {
	*LoopVolume
	Cluster *lab.Cluster
	Probe   string // the probes' directory on the file system
}

// LoopStack sets up a LoopStack of size bytes with a cluster of cluster's settings and server
// build (cluster.BinDir; BaseDir and WALDir are the volume's) at pgbench scale. The
// disk runs at full speed while it is set up (mkfs and pgbench -i are not what is measured),
// and at opts' bandwidth and latency once it returns, after a CHECKPOINT and sync(2).
func (e *Set) LoopStack(ctx context.Context, scenario string, opts simdisk.Options, size int64,
	cluster lab.ClusterOptions, scale int) (*LoopStack, error) {
	v, err := e.LoopVolume(ctx, scenario, opts, size)
	if err != nil {
		return nil, err
	}
	st := &LoopStack{LoopVolume: v}
	cluster.BaseDir, cluster.WALDir = v.Mnt, filepath.Join(v.Mnt, "wal")
	if st.Cluster, err = e.Cluster(ctx, cluster); err != nil {
		return nil, err
	}
	if st.Probe, err = ProbeDir(v.Mnt); err != nil {
		return nil, err
	}
	e.say("%s: pgbench -i -s %d", scenario, scale)
	if _, err := pgbench.Run(ctx, st.Cluster, "-i", "-q", "-I", "dtGvp", "-s", strconv.Itoa(scale)); err != nil {
		return nil, err
	}
	if err := Checkpoint(ctx, st.Cluster); err != nil {
		return nil, err
	}
	unix.Sync()
	v.Throttle(opts)
	return st, nil
}
