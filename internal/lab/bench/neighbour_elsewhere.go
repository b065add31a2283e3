package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
)

// NeighbourElsewhere is the bulk writer on another, slower device than the database's (issue:
// "vm.dirty_* where it is the lever"): a backup disk beside a WAL device of its own.
const NeighbourElsewhere = "neighbour-elsewhere"

// elsewhereDevice is the writer's device: a slow backup disk or USB target.
func elsewhereDevice() neighbour.Device {
	return neighbour.Device{BandwidthBytesPerSec: 40_000_000, Latency: 4 * time.Millisecond}
}

// elsewhereConfig is one configuration of the scenario: the suite's Config (vm.dirty_*, the
// writer's rate limit) and the writer's device's per-device limits (bdiKnobNames).
type elsewhereConfig struct {
	Config
	bdi map[string]string
}

// elsewhereConfigs are the scenario's grid: the kernel's defaults; lower global thresholds;
// per-device limits on the writer's device (with the defaults, and on a host already at
// tuned's thresholds); the writer limited to half its device. Quick: the defaults and one
// per-device limit, so that setting and restoring those is exercised.
func elsewhereConfigs(full bool, throttleMBps int) []elsewhereConfig {
	const MB = 1 << 20
	dirty := func(bg, limit int64) map[string]string {
		return map[string]string{"dirty_background_bytes": strconv.FormatInt(bg, 10), "dirty_bytes": strconv.FormatInt(limit, 10)}
	}
	cfg := func(name string, kernel, bdi map[string]string, role string) elsewhereConfig {
		return elsewhereConfig{Config: Config{Name: name, Durable: true, Settings: map[string]string{}, Kernel: kernel, Roles: []string{role}}, bdi: bdi}
	}
	strict64 := map[string]string{"strict_limit": "1", "max_bytes": strconv.Itoa(64 * MB)}
	if !full {
		return []elsewhereConfig{cfg("kernel defaults", nil, nil, RoleStart), cfg("writer's device max_bytes 64MB + strict_limit", nil, strict64, RoleGrid)}
	}
	limited := cfg(fmt.Sprintf("writer limited to %d MB/s", throttleMBps), nil, nil, RoleAdvice)
	limited.WriterMBps = throttleMBps
	return []elsewhereConfig{
		cfg("kernel defaults", nil, nil, RoleStart),
		cfg("dirty 64MB/512MB (tuned)", dirty(64*MB, 512*MB), nil, RoleGrid),
		cfg("dirty 16MB/64MB", dirty(16*MB, 64*MB), nil, RoleGrid),
		cfg("writer's device max_bytes 64MB + strict_limit", nil, strict64, RoleGrid),
		cfg("tuned + writer's device max_bytes 64MB", dirty(64*MB, 512*MB), map[string]string{"max_bytes": strconv.Itoa(64 * MB)}, RoleGrid),
		limited,
	}
}

// neighbourElsewhere is the neighbour-elsewhere scenario: the neighbour scenario's clients
// with data and WAL on the calibrated device, the bulk and log-like writers on ext4 on a loop
// device over a second, slower simulated disk; per configuration, how long the commits stall.
func (r *runner) neighbourElsewhere(ctx context.Context) (res *ScenarioResult, err error) {
	writerMB, rounds, full := 1500, 2, !r.opts.Quick
	if r.opts.Quick {
		writerMB, rounds = 300, 1
	}
	if r.opts.NeighbourWriterMB > 0 {
		writerMB = r.opts.NeighbourWriterMB
	}
	if r.opts.NeighbourRounds > 0 {
		rounds = r.opts.NeighbourRounds
	}
	dev, slow := neighbour.Calibrated(), elsewhereDevice()
	secs := slow.RunSeconds(writerMB)
	res = &ScenarioResult{
		ID:    NeighbourElsewhere,
		Title: "Neighbour elsewhere: a bulk writer on another, slower device, 4 rate-limited clients",
		Workload: fmt.Sprintf("pgbench TPC-B scale %d, -c %d -j 2 -R %d -T %d -l, data and WAL on ext4 on a loop device over the "+
			"simulated disk (%d MB/s, %v per sync); from %v a bulk writer writes %d MB of zeros through the page cache (1 MiB writes, "+
			"no fsync), and throughout a log-like writer appends %d KiB every %v with an fsync every %v, both on ext4 on a second loop "+
			"device over a second simulated disk (%d MB/s, %v per sync); a stall second is one whose scheduled commits had a p99 "+
			"latency above %v or in which fewer than %d commits completed", r.sz.nbScale, neighbour.Clients, neighbour.Rate, secs,
			dev.BandwidthBytesPerSec/1_000_000, dev.Latency, neighbour.WriterStart, writerMB, neighbour.LogChunk>>10,
			neighbour.LogInterval, neighbour.LogFsync, slow.BandwidthBytesPerSec/1_000_000, slow.Latency, neighbour.StallLatency, neighbour.Rate/2),
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
	rig, bdi, err := r.elsewhereRig(ctx, eq, res, dev, slow, writerMB)
	if err != nil {
		return res, err
	}
	err = r.measureElsewhere(ctx, res, rig, bdi, elsewhereConfigs(full, slow.ThrottleMBps()), rounds, secs)
	if rerr := r.kernel.restore(); err == nil {
		err = rerr
	}
	if err != nil {
		return res, err
	}
	res.GridBest = elsewhereBest(res)
	res.Notes = append(res.Notes, fmt.Sprintf("Each configuration ran %d time(s), interleaved (rounds over all configurations, the order "+
		"reversed every round), each run after removing the writers' files, CHECKPOINT, sync(2) and Dirty+Writeback below %s; "+
		"figures are medians over the runs, stall seconds with their range. The per-device limits are the writer's loop device's "+
		"(/sys/class/bdi/%s), restored after every run.", rounds, collector.FormatBytes(neighbour.Drained), bdi.Device()))
	if s := spreadNote(res); s != "" {
		res.Notes = append(res.Notes, s)
	}
	return res, nil
}

// elsewhereBest names the grid's best when it stalls less than the defaults (median): a grid
// point that only ties them is no "best", or the report would present a tie (every
// configuration at 0 stall seconds) as a finding.
func elsewhereBest(res *ScenarioResult) string {
	best, start := res.config(neighbourBest(res, "serial")), neighbourWith(res, RoleStart, "serial")
	if best == nil || start == nil || best.Value >= start.Value {
		return ""
	}
	return best.Name
}

// elsewhereRig sets up the database's stack (neighbour.Setup) and the writers' volume on a
// second simulated disk, and returns the rig with its writers there and that volume's
// per-device limits, which eq restores before it detaches the loop device.
func (r *runner) elsewhereRig(ctx context.Context, eq *equipment.Set, res *ScenarioResult, dev, slow neighbour.Device,
	writerMB int) (*neighbour.Rig, *bdiKnobs, error) {
	rig, st, err := neighbour.Setup(ctx, eq, neighbour.Spec{Scenario: NeighbourElsewhere, Device: dev, Scale: r.sz.nbScale,
		Settings: res.Base, ProcFS: r.opts.ProcFS, Logger: r.logger})
	if err != nil {
		return nil, nil, err
	}
	size := (int64(writerMB)*1_000_000 + 1<<30 + 1<<30 - 1) / (1 << 30) * (1 << 30)
	v, err := eq.LoopVolume(ctx, NeighbourElsewhere, slow.Options(), size)
	if err != nil {
		return nil, nil, err
	}
	v.Throttle(slow.Options())
	for _, note := range []string{st.Note, v.Note} {
		if note != "" {
			res.Notes = append(res.Notes, note)
		}
	}
	bdi, err := readBDIKnobs(r.opts.SysFS, v.Mnt)
	if err != nil {
		return nil, nil, err
	}
	eq.Push(bdi.restore)
	dir := filepath.Join(v.Mnt, "neighbour")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("make the writers' directory: %w", err)
	}
	rig.Disks = append(rig.Disks, v.Disk)
	rig.Writers = neighbour.Writers{Dir: dir, MB: writerMB, Logger: rig.Logger}
	return rig, bdi, nil
}

// measureElsewhere runs cfgs in interleaved rounds on the rig, secs seconds each, with each
// configuration's per-device limits in force during its runs only.
func (r *runner) measureElsewhere(ctx context.Context, res *ScenarioResult, rig *neighbour.Rig, bdi *bdiKnobs, cfgs []elsewhereConfig,
	rounds, secs int) error {
	set := &configSet{}
	limits := map[string]map[string]string{}
	for _, c := range cfgs {
		set.list = append(set.list, c.Config)
		limits[c.Name] = c.bdi
	}
	runs := map[string][]*neighbour.Run{}
	prefix := filepath.Join(filepath.Dir(rig.Cluster.DataDir()), "elsewhere")
	n := 0
	results, err := r.measureInterleaved(ctx, NeighbourElsewhere, rig.Cluster, res.Base, set, rounds, 0, nil, func(ctx context.Context, cfg Config) (_ float64, err error) {
		n++
		if err := bdi.set(limits[cfg.Name]); err != nil {
			return 0, err
		}
		defer func() {
			if rerr := bdi.restore(); err == nil {
				err = rerr
			}
		}()
		run, err := rig.Measure(ctx, neighbour.RunConfig{WriterMBps: cfg.WriterMBps}, secs, fmt.Sprintf("%s-%d", prefix, n))
		if err != nil {
			return 0, err
		}
		runs[cfg.Name] = append(runs[cfg.Name], run)
		r.say("%s: %-46s %2d stall s (longest %d), p99 %s ms, max %s ms, Dirty peak %s, Writeback peak %s, writer %.0f s",
			NeighbourElsewhere, cfg.Name, run.StallSeconds, run.LongestStall, num(run.P99LatencyMS), num(run.MaxLatencyMS),
			collector.FormatBytes(float64(run.DirtyPeakBytes)), collector.FormatBytes(float64(run.WritebackPeakBytes)), run.WriterSeconds)
		return float64(run.StallSeconds), nil
	})
	for i := range results {
		results[i].Neighbour = runs[results[i].Name]
	}
	res.Configs = results
	return err
}

// elsewhereProse is the default text of the scenario's prose block: what the grid decides.
// Rewrite it in the report from the full run's figures.
const elsewhereProse = `**What the grid decided.** A configuration beats the kernel's defaults when its runs are ` +
	`disjoint from theirs (every run fewer stall seconds); nothing else is a candidate for a proven row.`
