package neighbour

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// Rig is what a neighbour run needs: the cluster the clients commit to, the simulated disks
// whose queue model a configuration sets, and the writers.
type Rig struct {
	Cluster *lab.Cluster
	Disks   []*simdisk.Disk
	Writers Writers
	// ProcFS is where meminfo is read ("/proc" on the host).
	ProcFS string
	Logger *zap.Logger
}

// Spec describes the equipment Setup sets up.
type Spec struct {
	// Scenario names the scenario in progress lines and errors.
	Scenario string
	Device   Device
	// WriterMB is the bulk writer's size; Scale pgbench's scale; Settings the cluster's.
	WriterMB, Scale int
	Settings        map[string]string
	ProcFS          string
	Logger          *zap.Logger
}

// Setup sets up the neighbour scenario's equipment in eq: ext4 on a loop device over a
// simulated disk of spec.Device (VolumeSize), a cluster with its data and WAL there, and the
// writers' directory beside the cluster, so that the writers share the database's file system
// and device. The LoopStack holds the probes' directory and a note for the report.
func Setup(ctx context.Context, eq *equipment.Set, spec Spec) (*Rig, *equipment.LoopStack, error) {
	st, err := eq.LoopStack(ctx, spec.Scenario, spec.Device.Options(), VolumeSize(spec.WriterMB), lab.ClusterOptions{Settings: spec.Settings}, spec.Scale)
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(st.Mnt, "neighbour")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("make the writers' directory: %w", err)
	}
	logger := spec.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Rig{
		Cluster: st.Cluster,
		Disks:   []*simdisk.Disk{st.Disk},
		Writers: Writers{Dir: dir, MB: spec.WriterMB, Logger: logger},
		ProcFS:  spec.ProcFS,
		Logger:  logger,
	}, st, nil
}

// rateArgs are pgbench's arguments for the clients beside the writers.
func rateArgs() []string {
	return []string{"-n", "-c", strconv.Itoa(Clients), "-j", "2", "-R", strconv.Itoa(Rate)}
}

// Reset removes the writers' files, checkpoints and waits (a minute at most) for write-back
// to drain below Drained, so that every run starts from the same state.
func (rg *Rig) Reset(ctx context.Context) error {
	if err := rg.Writers.Remove(); err != nil {
		return err
	}
	unix.Sync()
	if err := equipment.Checkpoint(ctx, rg.Cluster); err != nil {
		return err
	}
	unix.Sync()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := kernel.ReadMeminfo(ctx, rg.ProcFS)
		if err != nil {
			return err
		}
		if m.DirtyBytes+m.WritebackBytes < Drained || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Load is the workload for the advisor to watch: after a Reset, the clients and both writers
// (the bulk writer unthrottled) until ctx ends.
func (rg *Rig) Load(ctx context.Context) error {
	if err := rg.Reset(ctx); err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); rg.Writers.Bulk(wctx, 0) }()
	go func() { defer wg.Done(); rg.Writers.Log(wctx) }()
	_, err := pgbench.Run(ctx, rg.Cluster, append(rateArgs(), "-T", "86400")...)
	stop()
	wg.Wait()
	return err
}

// RunConfig is what a configuration sets beyond the server's settings and the kernel's knobs,
// which the caller puts in force.
type RunConfig struct {
	// Queue is the disks' queue model ("": serial).
	Queue simdisk.QueueModel
	// WriterMBps limits the bulk writer (0: no limit).
	WriterMBps int
}

// Measure runs the clients for secs seconds beside the writers, once, and returns the run's
// figures. logPrefix is where pgbench's transaction logs go; they are removed.
func (rg *Rig) Measure(ctx context.Context, cfg RunConfig, secs int, logPrefix string) (*Run, error) {
	for _, d := range rg.Disks {
		if err := d.SetQueueModel(cfg.Queue); err != nil {
			return nil, err
		}
	}
	if err := rg.Reset(ctx); err != nil {
		return nil, err
	}
	wal, err := newWALSyncReader(ctx, rg.Cluster)
	if err != nil {
		return nil, err
	}
	defer wal.close()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg               sync.WaitGroup
		samples          []Sample
		waited           []waitSample
		writer, slowSync time.Duration
	)
	t0 := time.Now()
	wg.Add(4)
	go func() { defer wg.Done(); samples = sample(runCtx, rg.ProcFS, wal, t0) }()
	go func() { defer wg.Done(); waited = waits(runCtx, rg.Cluster, rg.Logger, t0) }()
	go func() { defer wg.Done(); writer = rg.Writers.Bulk(runCtx, cfg.WriterMBps) }()
	go func() { defer wg.Done(); slowSync = rg.Writers.Log(runCtx) }()
	args := append(rateArgs(), "-T", strconv.Itoa(secs), "-l", "--log-prefix", logPrefix)
	_, err = pgbench.Run(ctx, rg.Cluster, args...)
	stop()
	wg.Wait()
	defer pgbench.RemoveLogs(logPrefix)
	if err != nil {
		return nil, err
	}
	txns, err := pgbench.ReadLog(logPrefix)
	if err != nil {
		return nil, err
	}
	run := Figures(txns, samples, float64(t0.UnixNano())/1e9, secs)
	run.WaitStall, run.WaitOutside = waitShares(waited, run.PerSecond.Stall)
	run.WriterSeconds = writer.Seconds()
	run.LogFsyncMaxMS = float64(slowSync) / float64(time.Millisecond)
	return run, nil
}
