// Package demo is the README's main job: a throwaway cluster with seed 001's starting
// configuration on the simulated slow disk, seed 001's bulk load, and the advisor finding what
// is wrong. It is lab equipment: everything it starts it stops, also on Ctrl-C.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// Options configure the demo.
type Options struct {
	// Latency is the simulated disk's sync latency (seed 001 ran on a 7200 RPM disk).
	Latency time.Duration
	// Window is how long the advisor watches the load.
	Window time.Duration
	ProcFS string
	SysFS  string
}

// Run runs the demo, printing progress and the findings to w.
func Run(ctx context.Context, w io.Writer, opts Options, logger *zap.Logger) (*advisor.CheckResult, error) {
	if opts.Latency == 0 {
		opts.Latency = 4 * time.Millisecond
	}
	if opts.Window == 0 {
		opts.Window = 35 * time.Second
	}
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
		fmt.Fprintf(w, "note: %v\n      continuing on a plain temporary directory: the effects will be small on a fast disk\n", err)
		walParent = src
	case err != nil:
		return nil, err
	default:
		defer disk.Close()
		fmt.Fprintf(w, "Mounted a simulated disk whose syncs take %v (a 7200 RPM disk, as in seed 001).\n", opts.Latency)
	}
	probeDir := filepath.Join(walParent, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		return nil, fmt.Errorf("make probe directory: %w", err)
	}

	settings := map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync", "shared_buffers": "256MB"}
	fmt.Fprintf(w, "Starting a throwaway PostgreSQL cluster with seed 001's settings: wal_buffers=64kB, wal_sync_method=open_datasync ...\n")
	c, err := lab.StartCluster(ctx, lab.ClusterOptions{WALDir: filepath.Join(walParent, "wal"), Settings: settings})
	if err != nil {
		return nil, err
	}
	defer c.Stop()

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loaded := make(chan error, 1)
	go func() {
		_, err := c.BatchedLoad(loadCtx, "foo", 100000000, 20000)
		loaded <- err
	}()
	fmt.Fprintf(w, "Loading rows in batches of 20000 (seed 001's INSERT ... SELECT generate_series) while the advisor watches for %v ...\n", opts.Window)

	pg := postgres.New(c.DSN(), postgres.Options{Logger: logger})
	defer pg.Close(context.Background())
	s := &advisor.Sampler{Postgres: pg, Kernel: kernel.New(opts.ProcFS), Storage: storage.New(opts.ProcFS, opts.SysFS)}
	res, err := advisor.Check(ctx, s, advisor.CheckConfig{
		Window: opts.Window, Interval: time.Second, WaitInterval: 250 * time.Millisecond,
		ProbeDir: probeDir, ProbeBudget: 5 * time.Second,
	}, logger)
	stopLoad()
	<-loaded
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(w)
	if err := advisor.WriteCheckTable(w, res); err != nil {
		return nil, fmt.Errorf("write findings: %w", err)
	}
	return res, nil
}
