package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// newLabSimdiskCmd is `pgwal-lab simdisk`: test and demo equipment, used by the project's tests,
// demo and benchmarks and available to anyone who wants to see the advisor at work without a
// slow disk at hand.
func newLabSimdiskCmd(g *cli.Globals) *cobra.Command {
	var (
		opts      simdisk.Options
		bandwidth string
		queue     string
	)
	cmd := &cobra.Command{
		Use:   "simdisk [flags] SRC MNT",
		Short: "Mount SRC at MNT as a simulated disk with slow syncs, until interrupted",
		Long: `simdisk mounts the directory SRC at MNT (an existing directory) through FUSE, and makes every
fsync, fdatasync and O_SYNC/O_DSYNC write there cost --latency (plus up to --jitter), as on a
spinning disk where one sync costs milliseconds. Put a cluster's WAL on it (initdb -X MNT/wal)
and the advisor measures and reasons about a slow device. It serves until SIGINT or SIGTERM,
then unmounts.

--bandwidth limits writes and makes the disk one serial device: writes and syncs queue.
--queue priority keeps the limit but serves syncs and O_SYNC/O_DSYNC writes ahead of queued
plain writes, as a device with a write cache and a command queue (NCQ) does; a sync then waits
only for synchronous work issued before it.
--volatile-cache makes syncs return at once without persisting anything, like a drive whose
write cache lies; the cache is written out every --flush-interval (0: only at unmount).
SIGUSR2 writes the cache out now; SIGUSR1 cuts the power: every file returns to what was last
written out, and files created since disappear (stop the processes using the disk first).

Needs root and /dev/fuse. Files created on it belong to their creator, so the postgres user
can use a disk mounted by root.`,
		Example: `  pgwal-lab simdisk --latency 4ms /srv/simdisk-src /mnt/slow
  pgwal-lab simdisk --latency 1ms --bandwidth 80MB /dev/shm/simdisk /mnt/slow
  pgwal-lab simdisk --latency 1ms --bandwidth 80MB --queue priority /dev/shm/simdisk /mnt/slow`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return fmt.Errorf("want SRC and MNT, got %d arguments: %w", len(args), cli.ErrUsage)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			bw, err := simdisk.ParseBandwidth(bandwidth)
			if err != nil {
				return fmt.Errorf("--%v (see --help): %w", err, cli.ErrUsage)
			}
			opts.BandwidthBytesPerSec = bw
			if opts.Queue, err = simdisk.ParseQueueModel(queue); err != nil {
				return fmt.Errorf("--queue: %w: %w", err, cli.ErrUsage)
			}
			ctx := cmd.Context()
			d, err := simdisk.Mount(ctx, args[0], args[1], opts, g.Logger)
			if err != nil {
				return err
			}
			// SIGUSR1 and SIGUSR2 drive the volatile cache from outside, for demos of seed 004:
			// kill the server, cut the power, restart it and see which commits survived.
			cacheSignals := make(chan os.Signal, 1)
			signal.Notify(cacheSignals, syscall.SIGUSR1, syscall.SIGUSR2)
			defer signal.Stop(cacheSignals)
			for {
				select {
				case <-ctx.Done():
					g.Logger.Info("signal received: unmounting", zap.String("mountpoint", d.Mountpoint()))
					return d.Close()
				case sig := <-cacheSignals:
					if sig == syscall.SIGUSR2 {
						d.FlushCache()
						g.Logger.Info("cache flushed", zap.String("mountpoint", d.Mountpoint()))
						continue
					}
					if err := d.PowerCut(); err != nil {
						g.Logger.Error("power cut incomplete", zap.Error(err))
					}
				}
			}
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Latency, "latency", 4*time.Millisecond, "what each sync costs")
	f.DurationVar(&opts.Jitter, "jitter", 0, "add a uniformly random [0, jitter) to each sync")
	f.StringVar(&bandwidth, "bandwidth", "0", "write bandwidth limit, e.g. 80MB (decimal) or 80MiB; 0: unlimited")
	f.StringVar(&queue, "queue", "serial", "with --bandwidth, how queued work is ordered: serial (one FIFO queue) or priority (syncs ahead of plain writes)")
	f.BoolVar(&opts.VolatileCache, "volatile-cache", false, "acknowledge syncs without persisting (a lying drive cache)")
	f.DurationVar(&opts.FlushInterval, "flush-interval", 0, "with --volatile-cache: write the cache out this often (0: only at unmount)")
	f.Int64Var(&opts.Seed, "seed", 1, "seed for the jitter, to repeat a run")
	return cmd
}
