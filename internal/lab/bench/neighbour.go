package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// neighbour is the neighbour scenario (internal/lab/neighbour): pgbench -c 4 -R 200 with data
// and WAL on ext4 on a loop device over the bandwidth-limited simulated disk, a bulk writer (dd
// bs=1M of zeros through the page cache) and a log-like writer on the same file system; per
// configuration of vm.dirty_* and of the simulated disk's queue model, how long the commits
// stall.
func (r *runner) neighbour(ctx context.Context) (res *ScenarioResult, err error) {
	writerMB, rounds := r.sz.nbWriterMB, r.sz.nbRounds
	if r.opts.NeighbourWriterMB > 0 {
		writerMB = r.opts.NeighbourWriterMB
	}
	if r.opts.NeighbourRounds > 0 {
		rounds = r.opts.NeighbourRounds
	}
	dev := neighbour.Calibrated()
	secs := dev.RunSeconds(writerMB)
	res = &ScenarioResult{
		ID:    Neighbour,
		Title: "Neighbour: a bulk writer on the database's file system, 4 rate-limited clients",
		Workload: fmt.Sprintf("pgbench TPC-B scale %d, -c %d -j 2 -R %d -T %d -l; from %v a bulk writer writes %d MB of zeros "+
			"through the page cache (1 MiB writes, no fsync, as dd bs=1M), and throughout a log-like writer appends %d KiB every %v "+
			"with an fsync every %v; data, WAL and both writers on ext4 on a loop device over the simulated disk (%d MB/s, %v per sync, "+
			"queue model per configuration); a stall second is one whose scheduled commits had a p99 latency above %v or in which "+
			"fewer than %d commits completed", r.sz.nbScale, neighbour.Clients, neighbour.Rate, secs, neighbour.WriterStart, writerMB,
			neighbour.LogChunk>>10, neighbour.LogInterval, neighbour.LogFsync, dev.BandwidthBytesPerSec/1_000_000, dev.Latency,
			neighbour.StallLatency, neighbour.Rate/2),
		Base: map[string]string{"shared_buffers": "256MB", "checkpoint_timeout": "30min", "max_wal_size": "8GB",
			"track_wal_io_timing": "on"},
		Metric: "stall seconds", HigherIsBetter: false, Runs: rounds,
	}
	eq := equipment.New(r.logger, r.say)
	defer func() {
		if cerr := eq.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	rig, st, err := neighbour.Setup(ctx, eq, neighbour.Spec{Scenario: Neighbour, Device: dev, WriterMB: writerMB, Scale: r.sz.nbScale,
		Settings: res.Base, ProcFS: r.opts.ProcFS, Logger: r.logger})
	if err != nil {
		return res, err
	}
	if st.Note != "" {
		res.Notes = append(res.Notes, st.Note)
	}

	if r.opts.NeighbourRestoreOnly || r.sz.nbGrid {
		defer func() {
			if err != nil && !r.opts.NeighbourRestoreOnly {
				return
			}
			if rerr := r.neighbourRestore(ctx, res, rig, st.Probe, rounds, secs); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	if r.opts.NeighbourRestoreOnly {
		res.Notes = append(res.Notes, "Only the restore phase ran (--neighbour-restore-only).")
		return res, nil
	}

	// The advisor watches the start on the calibrated (serial) device, the writer starting
	// 5 s into its window: the target is a check with a 90 s window during the stall.
	start := Config{Name: "start", Durable: true, Settings: map[string]string{}}
	journal, err := eq.Dir("", "apply-")
	if err != nil {
		return res, err
	}
	adv, advCfg, err := r.advise(ctx, Neighbour, watchSpec{cluster: rig.Cluster, probeDir: st.Probe, window: r.sz.nbWindow, load: rig.Load}, start, journal)
	res.Advisor = adv
	res.AdvisorChanges = advisorSettings(start, advCfg)
	if err != nil {
		return res, err
	}
	if len(res.AdvisorChanges) == 0 {
		res.Notes = append(res.Notes, "The advisor changed nothing: its configuration is the start's.")
	}

	set := neighbourConfigs(start, advCfg, r.sz.nbGrid, dev.ThrottleMBps())
	if err := r.measureNeighbour(ctx, res, rig, set, rounds, secs); err != nil {
		return res, err
	}
	if err := r.kernel.restore(); err != nil {
		return res, err
	}
	res.GridBest = neighbourBest(res, string(simdisk.QueueSerial))
	res.Targets = append(res.Targets, neighbourCheckTarget(res), neighbourAdvisorTarget(res))
	if best := neighbourBest(res, string(simdisk.QueuePriority)); best != "" {
		res.Notes = append(res.Notes, fmt.Sprintf("Best of the grid on the priority queue model: %s.", best))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Each configuration ran %d time(s), interleaved (rounds over all configurations, the order "+
		"reversed every round), each run after removing the writers' files, CHECKPOINT, sync(2) and Dirty+Writeback below %s; "+
		"figures are medians over the runs, stall seconds with their range. The simulated disk's source is on tmpfs: the loop "+
		"device's blocks there are memory the kernel cannot reclaim (a removed file's blocks stay in the backing file: discards "+
		"do not reach it), so the ratio thresholds are of up to %s less available memory as the file system fills.",
		rounds, collector.FormatBytes(neighbour.Drained), collector.FormatBytes(float64(neighbour.VolumeSize(writerMB)))))
	if s := spreadNote(res); s != "" {
		res.Notes = append(res.Notes, s)
	}
	return res, nil
}

// neighbourConfigs are the neighbour scenario's configurations: on the serial queue model the
// start, the advisor's, the advice measured (the bulk writer limited to throttleMBps; full grid
// only) and the grid (neighbour.Grid); on the priority model the start and tuned's profile
// (full) or the first grid point (quick).
func neighbourConfigs(start, advCfg Config, full bool, throttleMBps int) *configSet {
	set := &configSet{}
	var grid []Config
	for _, p := range neighbour.Grid(full) {
		grid = append(grid, Config{Name: p.Name, Durable: true, Settings: map[string]string{}, Kernel: p.Kernel})
	}
	for _, q := range []simdisk.QueueModel{simdisk.QueueSerial, simdisk.QueuePriority} {
		onQueue := func(c Config) Config {
			c.Queue = string(q)
			if q != simdisk.QueueSerial {
				c.Name += " (priority queue)"
			}
			return c
		}
		if q == simdisk.QueueSerial {
			set.add(onQueue(start), RoleStart)
		}
		if q == simdisk.QueueSerial || full {
			set.add(onQueue(start), RoleGrid)
		}
		if q == simdisk.QueueSerial {
			set.add(onQueue(advCfg), RoleAdvisor)
			if full {
				throttled := start.with(fmt.Sprintf("writer limited to %d MB/s", throttleMBps), nil)
				throttled.WriterMBps = throttleMBps
				set.add(onQueue(throttled), RoleAdvice)
			}
		}
		for _, g := range grid {
			// The priority model only tells which conclusions depend on the device's queue:
			// the start and the first grid point (quick) or tuned's profile (full) are
			// enough for that, and every run takes a minute and a half.
			onPriority := g.Name == grid[0].Name
			if full {
				onPriority = strings.Contains(g.Name, "(tuned)")
			}
			if q != simdisk.QueueSerial && !onPriority {
				continue
			}
			set.add(onQueue(g), RoleGrid)
		}
	}
	return set
}

// measureNeighbour runs the configurations of set in interleaved rounds on the rig, secs
// seconds each, and puts their results, with every run's figures, in res.
func (r *runner) measureNeighbour(ctx context.Context, res *ScenarioResult, rig *neighbour.Rig, set *configSet, rounds, secs int) error {
	runs := map[string][]*neighbour.Run{}
	prefix := filepath.Join(filepath.Dir(rig.Cluster.DataDir()), "neighbour")
	n := 0
	results, err := r.measureInterleaved(ctx, Neighbour, rig.Cluster, res.Base, set, rounds, 0, nil, func(ctx context.Context, cfg Config) (float64, error) {
		n++
		run, err := rig.Measure(ctx, neighbour.RunConfig{Queue: simdisk.QueueModel(cfg.Queue), WriterMBps: cfg.WriterMBps}, secs, fmt.Sprintf("%s-%d", prefix, n))
		if err != nil {
			return 0, err
		}
		runs[cfg.Name] = append(runs[cfg.Name], run)
		r.say("%s: %-36s %2d stall s (longest %d), p50 %s ms, p99 %s ms, max %s ms, %d s without a WAL flush, most flush time in a second %.0f ms, "+
			"waits in the stall %s, Dirty peak %s, Writeback peak %s, writer %.0f s", Neighbour, cfg.Name, run.StallSeconds, run.LongestStall,
			num(run.P50LatencyMS), num(run.P99LatencyMS), num(run.MaxLatencyMS), run.FlushlessSeconds, run.WALSyncMaxSecondMS,
			sharesText(run.WaitStall), collector.FormatBytes(float64(run.DirtyPeakBytes)), collector.FormatBytes(float64(run.WritebackPeakBytes)), run.WriterSeconds)
		return float64(run.StallSeconds), nil
	})
	for i := range results {
		results[i].Neighbour = runs[results[i].Name]
	}
	res.Configs = results
	return err
}

// neighbourWith returns the configuration playing role on queue q.
func neighbourWith(res *ScenarioResult, role, q string) *ConfigResult {
	for i := range res.Configs {
		c := &res.Configs[i]
		if c.has(role) && neighbourQueue(c.Config) == q {
			return c
		}
	}
	return nil
}

func neighbourQueue(c Config) string {
	if c.Queue == "" {
		return string(simdisk.QueueSerial)
	}
	return c.Queue
}

// neighbourBest names the grid configuration on queue q with the fewest stall seconds (median).
func neighbourBest(res *ScenarioResult, q string) string {
	var best *ConfigResult
	for i := range res.Configs {
		c := &res.Configs[i]
		if !c.has(RoleGrid) || neighbourQueue(c.Config) != q || len(c.Runs) == 0 {
			continue
		}
		if best == nil || c.Value < best.Value {
			best = c
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}

// neighbourCheckTarget: the advisor's check, watching the stall, raises writeback-stalls-wal.
func neighbourCheckTarget(res *ScenarioResult) Target {
	t := Target{Name: "the advisor's check during the stall raises writeback-stalls-wal as a warning", Want: "warning writeback-stalls-wal"}
	if res.Advisor == nil || len(res.Advisor.Rounds) == 0 {
		t.Got = "not measured"
		return t
	}
	var seen []string
	for _, f := range res.Advisor.Rounds[0].Findings {
		seen = append(seen, f.Severity+" "+f.Rule)
		if f.Rule == "writeback-stalls-wal" && f.Severity == "warning" {
			t.Met = true
		}
	}
	t.Scored = true
	if len(seen) == 0 {
		seen = []string{"no findings"}
	}
	t.Got = fmt.Sprintf("round 1 (%.0f s watched): %s", res.Advisor.Rounds[0].WindowSeconds, strings.Join(seen, ", "))
	return t
}

// neighbourAdvisorTarget: on the calibrated (serial) device, the advisor's stall is no longer
// than the start's beyond the spread, and within 1.2x of the grid's best (or of its spread).
func neighbourAdvisorTarget(res *ScenarioResult) Target {
	q := string(simdisk.QueueSerial)
	t := Target{Name: "with the advisor's settings the stall is no longer than the start's and within 1.2x of the grid's best (serial queue)",
		Want: "stall seconds <= start's + spread, and <= 1.2 x best (or best + its spread)"}
	adv, start := neighbourWith(res, RoleAdvisor, q), neighbourWith(res, RoleStart, q)
	var best *ConfigResult
	if name := neighbourBest(res, q); name != "" {
		best = res.config(name)
	}
	if adv == nil || start == nil || best == nil || len(adv.Runs) == 0 || len(start.Runs) == 0 {
		t.Got = "not measured"
		return t
	}
	spread := func(c *ConfigResult) float64 { return stats.Max(c.Runs) - stats.Min(c.Runs) }
	t.Scored = true
	noWorse := adv.Value <= start.Value+max(spread(start), spread(adv))
	nearBest := adv.Value <= 1.2*best.Value || adv.Value-best.Value <= spread(best)
	t.Met = noWorse && nearBest
	t.Got = fmt.Sprintf("advisor (%s) %s stall s (runs %s), start %s (runs %s), best %s %s (runs %s)", adv.Name, num(adv.Value),
		runsText(adv.Runs), num(start.Value), runsText(start.Runs), best.Name, num(best.Value), runsText(best.Runs))
	return t
}

func runsText(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strings.Join(parts, ", ")
}
