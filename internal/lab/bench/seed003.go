package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// Seed 003's device (docs/benchmarks.md, "Seed 003"): bandwidth-limited, 1 ms per sync, under
// an ext4 loop device so that the kernel's page cache and write-back sit above it again.
const (
	s003Bandwidth = 80_000_000
	s003Latency   = time.Millisecond
	s003Clients   = 16
)

// seed003 is seed 003: pgbench with 16 clients, rate-limited so that the device keeps up on
// average, across several checkpoints, from the seed's conditions: checkpoint_flush_after and
// bgwriter_flush_after at 0 and the kernel's default dirty settings; data and WAL on the loop
// device's ext4 over the bandwidth-limited simulated device.
func (r *runner) seed003(ctx context.Context) (res *ScenarioResult, err error) {
	secs, rate, scale := r.sz.s003Secs, r.sz.s003Rate, r.sz.s003Scale
	res = &ScenarioResult{
		ID:    Seed003,
		Title: "Seed 003: 16 clients across checkpoints, flush-after off, kernel default dirty settings",
		Workload: fmt.Sprintf("pgbench TPC-B scale %d, -c %d -j 2 -R %d -P 1 -T %d -l; data and WAL on ext4 on a loop device over the "+
			"simulated disk (%d MB/s, %v per sync); throughput per second from -P 1, latency per transaction from -l "+
			"(from its scheduled start)", scale, s003Clients, rate, secs, s003Bandwidth/1_000_000, s003Latency),
		Base: map[string]string{"shared_buffers": "1GB", "checkpoint_timeout": "30s", "max_wal_size": "8GB"},
		// The figure configurations are ranked by; the target is on the worst second.
		Metric: "worst second / median", HigherIsBetter: true, Runs: 1,
	}
	eq := equipment.New(r.logger, r.say)
	defer func() {
		if cerr := eq.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	size := int64(6 << 30)
	if r.opts.Quick {
		size = 2 << 30
	}
	start := Config{Name: "start", Durable: true, Settings: map[string]string{"checkpoint_flush_after": "0", "bgwriter_flush_after": "0"}}
	st, err := eq.LoopStack(ctx, Seed003, simdisk.Options{Latency: s003Latency, BandwidthBytesPerSec: s003Bandwidth}, size,
		lab.ClusterOptions{Settings: merged(res.Base, start.Settings)}, scale)
	if err != nil {
		return res, err
	}
	if st.Note != "" {
		res.Notes = append(res.Notes, st.Note)
	}
	c, probe := st.Cluster, st.Probe

	rateArgs := []string{"-n", "-c", strconv.Itoa(s003Clients), "-j", "2", "-R", strconv.Itoa(rate)}
	load := func(ctx context.Context) error {
		_, err := pgbench.Run(ctx, c, append(rateArgs, "-T", "86400")...)
		return err
	}
	// The checkpoint rules count checkpoints in the window; checkpoint_timeout is 30 s, so
	// the window is at least two of them in the full suite.
	window := r.sz.window
	if !r.opts.Quick {
		window = max(window, 65*time.Second)
	}
	// The applier's journal and sysctl.d file, kept across the rounds.
	journal, err := eq.Dir("", "apply-")
	if err != nil {
		return res, err
	}
	adv, advCfg, err := r.advise(ctx, Seed003, watchSpec{cluster: c, probeDir: probe, window: window, load: load}, start, journal)
	res.Advisor = adv
	res.AdvisorChanges = advisorSettings(start, advCfg)
	if err != nil {
		return res, err
	}

	defaults := map[string]string{"checkpoint_flush_after": "256kB", "bgwriter_flush_after": "512kB"}
	lowDirty := map[string]string{"dirty_background_bytes": strconv.Itoa(64 << 20), "dirty_bytes": strconv.Itoa(256 << 20)}
	set := &configSet{}
	set.add(start, RoleStart)
	set.add(start, RoleGrid)
	if r.sz.s003Grid {
		low := start.with("flush-after 0, dirty 64MB/256MB", nil)
		low.Kernel = lowDirty
		set.add(low, RoleGrid)
		set.add(start.with("flush-after defaults", defaults), RoleGrid)
		both := start.with("flush-after defaults, dirty 64MB/256MB", defaults)
		both.Kernel = lowDirty
		set.add(both, RoleGrid)
	}
	set.add(advCfg, RoleAdvisor)
	if r.sz.s003Grid {
		set.add(r.staticConfig(start), RoleStatic)
	}

	for i, cfg := range set.list {
		if err := r.apply(ctx, c, res.Base, cfg); err != nil {
			return res, err
		}
		sm, err := r.smoothRun(ctx, c, rateArgs, secs, filepath.Join(filepath.Dir(c.DataDir()), fmt.Sprintf("seed003-%d", i)))
		if err != nil {
			return res, fmt.Errorf("%s: %w", cfg.Name, err)
		}
		r.say("%s: %-40s median %.0f tps, worst second %.0f, p5 %.0f, %d s below half, p99 %.0f ms, %d checkpoints, sync %.1f s, Dirty+Writeback peak %s",
			Seed003, cfg.Name, sm.MedianTPS, sm.WorstSecond, sm.P5TPS, sm.SecondsBelowHalf, sm.P99LatencyMS, sm.Checkpoints,
			sm.CheckpointSyncSeconds, collector.FormatBytes(float64(sm.DirtyPeakBytes)))
		v := 0.0
		if sm.MedianTPS > 0 {
			v = sm.WorstSecond / sm.MedianTPS
		}
		res.Configs = append(res.Configs, ConfigResult{Config: cfg, Smooth: sm, Runs: []float64{v}, Value: v})
	}
	if err := r.kernel.restore(); err != nil {
		return res, err
	}
	res.GridBest = res.bestGrid()
	res.Targets = append(res.Targets, seed003Target(res))
	res.Notes = append(res.Notes, "Each configuration ran once, after a CHECKPOINT and sync(2), so each run starts at the same point of the checkpoint cycle; the grid is ranked by worst second / median.")
	return res, nil
}

func seed003Target(res *ScenarioResult) Target {
	t := Target{Name: "with the advisor's settings, the worst second at least half the median", Want: "worst second >= 0.5 x median tps"}
	adv := res.withRole(RoleAdvisor)
	if adv == nil || adv.Smooth == nil || adv.Smooth.MedianTPS <= 0 {
		t.Got = "not measured"
		return t
	}
	s := adv.Smooth
	t.Scored, t.Met = true, s.WorstSecond >= 0.5*s.MedianTPS
	t.Got = fmt.Sprintf("worst second %.0f tps, median %.0f tps: %.2f", s.WorstSecond, s.MedianTPS, s.WorstSecond/s.MedianTPS)
	return t
}

// smoothRun runs the rate-limited pgbench once from a fresh checkpoint and measures it.
func (r *runner) smoothRun(ctx context.Context, c *lab.Cluster, rateArgs []string, secs int, logPrefix string) (*Smoothness, error) {
	if err := equipment.Checkpoint(ctx, c); err != nil {
		return nil, err
	}
	unix.Sync()
	before, err := checkpointStats(ctx, c)
	if err != nil {
		return nil, err
	}
	peakCtx, stopPeak := context.WithCancel(ctx)
	var (
		wg   sync.WaitGroup
		peak int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		peak = dirtyPeak(peakCtx, r.opts.ProcFS)
	}()
	args := append(append([]string{}, rateArgs...), "-P", "1", "-T", strconv.Itoa(secs), "-l", "--log-prefix", logPrefix)
	out, err := pgbench.Run(ctx, c, args...)
	stopPeak()
	wg.Wait()
	defer pgbench.RemoveLogs(logPrefix)
	if err != nil {
		return nil, err
	}
	after, err := checkpointStats(ctx, c)
	if err != nil {
		return nil, err
	}
	per, err := pgbench.ParseProgress(out.Stderr)
	if err != nil {
		return nil, err
	}
	txns, err := pgbench.ReadLog(logPrefix)
	if err != nil {
		return nil, err
	}
	lat := pgbench.Latencies(txns)
	med := stats.Median(per)
	below := 0
	for _, v := range per {
		if v < med/2 {
			below++
		}
	}
	return &Smoothness{
		Seconds: len(per), PerSecond: per, MedianTPS: med, WorstSecond: stats.Min(per), P5TPS: stats.Percentile(per, 5),
		SecondsBelowHalf: below, Transactions: len(lat),
		P99LatencyMS: stats.Percentile(lat, 99) / 1000, MaxLatencyMS: stats.Max(lat) / 1000,
		Checkpoints: after.count - before.count, CheckpointSyncSeconds: (after.syncMS - before.syncMS) / 1000,
		DirtyPeakBytes: peak,
	}, nil
}

type cpStats struct {
	count  int64
	syncMS float64
}

// checkpointStats reads completed checkpoints and their sync time: pg_stat_checkpointer from
// PostgreSQL 17, pg_stat_bgwriter before.
func checkpointStats(ctx context.Context, c *lab.Cluster) (cpStats, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return cpStats{}, err
	}
	defer conn.Close(context.Background())
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return cpStats{}, fmt.Errorf("read server version: %w", err)
	}
	q := "SELECT checkpoints_timed + checkpoints_req, checkpoint_sync_time FROM pg_stat_bgwriter"
	if version >= 170000 {
		q = "SELECT num_timed + num_requested, sync_time FROM pg_stat_checkpointer"
	}
	var s cpStats
	if err := conn.QueryRow(ctx, q).Scan(&s.count, &s.syncMS); err != nil {
		return cpStats{}, fmt.Errorf("read checkpoint statistics: %w", err)
	}
	return s, nil
}

// dirtyPeak samples Dirty+Writeback in meminfo every 250 ms until ctx ends and returns the peak.
func dirtyPeak(ctx context.Context, procfs string) int64 {
	var peak int64
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if m, err := kernel.ReadMeminfo(ctx, procfs); err == nil {
			peak = max(peak, m.DirtyBytes+m.WritebackBytes)
		}
		select {
		case <-ctx.Done():
			return peak
		case <-t.C:
		}
	}
}
