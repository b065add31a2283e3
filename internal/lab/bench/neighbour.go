package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// The neighbour scenario's device and workload (issue: "commit stalls from write-back"): seed
// 003's device, four rate-limited clients, and two other writers on the same file system.
const (
	nbBandwidth = 80_000_000
	nbLatency   = time.Millisecond
	nbClients   = 4
	nbRate      = 200
	// nbWriterStart is when the bulk writer starts, after the run's start: the seconds before
	// it are the calm the stall is compared with.
	nbWriterStart = 5 * time.Second
	// A second is a stall second when the commits scheduled in it had a p99 latency above
	// nbStallLatency (pgbench -R counts latency from the scheduled start, so a user arriving
	// then waited that long), or when fewer than half the rate completed in it.
	nbStallLatency = time.Second
	// The log-like writer appends nbLogChunk every nbLogInterval (2.6 MB/s) and fsyncs every
	// nbLogFsync, as a logger or a small database beside PostgreSQL would.
	nbLogChunk    = 64 << 10
	nbLogInterval = 25 * time.Millisecond
	nbLogFsync    = time.Second
	// nbDrained is how little Dirty+Writeback a run waits for before it starts, so that none
	// inherits the write-back of the one before.
	nbDrained = 64 << 20
	// The advice measured: the bulk writer limited to half the device's bandwidth (its own
	// rate limit, as pg_basebackup --max-rate or rsync --bwlimit; cgroup v2 io.max does it
	// for any writer), syncing every nbThrottleSync so that its data does not pile up.
	nbThrottleMBps = nbBandwidth / 2 / 1_000_000
	nbThrottleSync = 8 << 20
)

// nbRunSeconds is how long one run lasts: the bulk writer's start, its data's time on the
// device at full bandwidth, and 42 s more - the kernel's default dirty_expire_centisecs (30 s)
// plus its write-back interval (5 s) plus a margin - because with a background threshold above
// the writer's size (the start on a large machine, ratio 20/40) write-back starts only when
// the data expires. Every configuration runs as long, so their figures compare.
func nbRunSeconds(writerMB int) int {
	drain := float64(writerMB) * 1e6 / nbBandwidth
	return int(math.Ceil(nbWriterStart.Seconds() + drain + 42))
}

// NeighbourRun is one run of the neighbour scenario.
type NeighbourRun struct {
	Seconds      int `json:"seconds"`
	Transactions int `json:"transactions"`
	// StallSeconds counts the stall seconds (nbStallLatency); LongestStall is the longest run
	// of consecutive ones; FirstStall is the first one's second (-1: none).
	StallSeconds int `json:"stall_seconds"`
	LongestStall int `json:"longest_stall_seconds"`
	FirstStall   int `json:"first_stall_second"`
	// Commit latency over the run, from the scheduled start, in milliseconds.
	P50LatencyMS float64 `json:"p50_latency_ms"`
	P99LatencyMS float64 `json:"p99_latency_ms"`
	MaxLatencyMS float64 `json:"max_latency_ms"`
	// WAL flushes (pg_stat_wal wal_sync / wal_sync_time, or pg_stat_io object 'wal' from 18):
	// how many and their mean time over the run, during the stall seconds and outside them.
	WALSyncs         int64   `json:"wal_syncs"`
	WALSyncMeanMS    float64 `json:"wal_sync_mean_ms"`
	WALSyncStallMS   float64 `json:"wal_sync_mean_ms_stall"`
	WALSyncOutsideMS float64 `json:"wal_sync_mean_ms_outside"`
	// A WAL flush stuck behind write-back shows as seconds in which no flush completed while
	// commits were scheduled (FlushlessSeconds), followed by one second that reports the
	// whole stuck flush: WALSyncMaxSecondMS, the most flush time reported in one second, is
	// about the longest flush. (The counters are cumulative; a mean over the flushes hides it,
	// the quick flushes around the stuck one outnumber it.)
	FlushlessSeconds   int     `json:"flushless_seconds"`
	WALSyncMaxSecondMS float64 `json:"wal_sync_max_second_ms"`
	// WaitStall and WaitOutside are the shares of the active client backends' samples
	// (pg_stat_activity every 250 ms) per wait event ("IO:WALSync", "LWLock:WALWrite", "CPU"
	// for none), during the stall seconds and outside them.
	WaitStall   map[string]float64 `json:"wait_share_stall,omitempty"`
	WaitOutside map[string]float64 `json:"wait_share_outside,omitempty"`
	// Peaks of Dirty and of Writeback in /proc/meminfo (the whole host).
	DirtyPeakBytes     int64 `json:"dirty_peak_bytes"`
	WritebackPeakBytes int64 `json:"writeback_peak_bytes"`
	// WriterSeconds is how long the bulk writer took to write its data into the page cache
	// (throttled by balance_dirty_pages); 0 when it did not finish within the run.
	WriterSeconds float64 `json:"writer_seconds"`
	// LogFsyncMaxMS is the slowest fsync of the log-like writer.
	LogFsyncMaxMS float64 `json:"log_fsync_max_ms"`
	// Per second of the run: commits completed, the p50/p99/max latency of the commits
	// scheduled in it (ms), Dirty and Writeback (bytes), WAL flushes and their time (ms).
	PerSecond NeighbourSeconds `json:"per_second"`
}

// NeighbourSeconds are a run's per-second series, one entry per second.
type NeighbourSeconds struct {
	TPS          []float64 `json:"tps"`
	P50MS        []float64 `json:"p50_ms"`
	P99MS        []float64 `json:"p99_ms"`
	MaxMS        []float64 `json:"max_ms"`
	Stall        []bool    `json:"stall"`
	Dirty        []int64   `json:"dirty_bytes"`
	Writeback    []int64   `json:"writeback_bytes"`
	WALSyncs     []int64   `json:"wal_syncs"`
	WALSyncMS    []float64 `json:"wal_sync_ms"` // flush time reported in the second, summed
	sampledDirty int
}

// neighbour is the neighbour scenario: pgbench -c 4 -R 200 with data and WAL on ext4 on a loop
// device over the bandwidth-limited simulated disk, a bulk writer (dd bs=1M of zeros through
// the page cache) and a log-like writer on the same file system; per configuration of vm.dirty_*
// and of the simulated disk's queue model, how long the commits stall.
func (r *runner) neighbour(ctx context.Context) (res *ScenarioResult, err error) {
	writerMB, rounds := r.sz.nbWriterMB, r.sz.nbRounds
	if r.opts.NeighbourWriterMB > 0 {
		writerMB = r.opts.NeighbourWriterMB
	}
	if r.opts.NeighbourRounds > 0 {
		rounds = r.opts.NeighbourRounds
	}
	secs := nbRunSeconds(writerMB)
	res = &ScenarioResult{
		ID:    Neighbour,
		Title: "Neighbour: a bulk writer on the database's file system, 4 rate-limited clients",
		Workload: fmt.Sprintf("pgbench TPC-B scale %d, -c %d -j 2 -R %d -T %d -l; from %v a bulk writer writes %d MB of zeros "+
			"through the page cache (1 MiB writes, no fsync, as dd bs=1M), and throughout a log-like writer appends %d KiB every %v "+
			"with an fsync every %v; data, WAL and both writers on ext4 on a loop device over the simulated disk (%d MB/s, %v per sync, "+
			"queue model per configuration); a stall second is one whose scheduled commits had a p99 latency above %v or in which "+
			"fewer than %d commits completed", r.sz.nbScale, nbClients, nbRate, secs, nbWriterStart, writerMB, nbLogChunk>>10,
			nbLogInterval, nbLogFsync, nbBandwidth/1_000_000, nbLatency, nbStallLatency, nbRate/2),
		Base: map[string]string{"shared_buffers": "256MB", "checkpoint_timeout": "30min", "max_wal_size": "8GB",
			"track_wal_io_timing": "on"},
		Metric: "stall seconds", HigherIsBetter: false, Runs: rounds,
	}
	eq := &equipment{logger: r.logger}
	defer func() {
		if cerr := eq.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	// Room for the bulk writer's file, the log, the cluster and its WAL.
	size := (int64(writerMB)*1_000_000 + 3<<30 + 1<<30 - 1) / (1 << 30) * (1 << 30)
	start := Config{Name: "start", Durable: true, Settings: map[string]string{}}
	st, err := r.loopStack(ctx, eq, Neighbour, simdisk.Options{Latency: nbLatency, BandwidthBytesPerSec: nbBandwidth}, size, res.Base, r.sz.nbScale)
	if err != nil {
		return res, err
	}
	if st.note != "" {
		res.Notes = append(res.Notes, st.note)
	}
	disk, c, probe := st.disk, st.c, st.probe
	writers := filepath.Join(st.mnt, "neighbour")
	if err := os.Mkdir(writers, 0o755); err != nil {
		return res, fmt.Errorf("make the writers' directory: %w", err)
	}

	nb := &nbRig{r: r, c: c, disk: disk, dir: writers, writerMB: writerMB}
	rateArgs := []string{"-n", "-c", strconv.Itoa(nbClients), "-j", "2", "-R", strconv.Itoa(nbRate)}
	load := func(ctx context.Context) error {
		if err := nb.reset(ctx); err != nil {
			return err
		}
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); nb.bulk(wctx, 0) }()
		go func() { defer wg.Done(); nb.log(wctx) }()
		_, err := runPgbench(ctx, c, append(rateArgs, "-T", "86400")...)
		stop()
		wg.Wait()
		return err
	}
	// The advisor watches the start on the calibrated (serial) device, the writer starting
	// 5 s into its window: the target is a check with a 90 s window during the stall.
	journal, err := eq.dir("", "apply-")
	if err != nil {
		return res, err
	}
	adv, advCfg, err := r.advise(ctx, Neighbour, watchSpec{cluster: c, probeDir: probe, window: r.sz.nbWindow, load: load}, start, journal)
	res.Advisor = adv
	res.AdvisorChanges = advisorSettings(start, advCfg)
	if err != nil {
		return res, err
	}
	if len(res.AdvisorChanges) == 0 {
		res.Notes = append(res.Notes, "The advisor changed nothing: its configuration is the start's.")
	}

	set := &configSet{}
	queues := []simdisk.QueueModel{simdisk.QueueSerial, simdisk.QueuePriority}
	grid := nbGrid(r.sz.nbGrid)
	for _, q := range queues {
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
		if q == simdisk.QueueSerial || r.sz.nbGrid {
			set.add(onQueue(start), RoleGrid)
		}
		if q == simdisk.QueueSerial {
			set.add(onQueue(advCfg), RoleAdvisor)
			if r.sz.nbGrid {
				throttled := start.with(fmt.Sprintf("writer limited to %d MB/s", nbThrottleMBps), nil)
				throttled.WriterMBps = nbThrottleMBps
				set.add(onQueue(throttled), RoleAdvice)
			}
		}
		for _, g := range grid {
			// The priority model only tells which conclusions depend on the device's queue:
			// the start and the first grid point (quick) or tuned's profile (full) are
			// enough for that, and every run takes a minute and a half.
			onPriority := g.Name == grid[0].Name
			if r.sz.nbGrid {
				onPriority = strings.Contains(g.Name, "(tuned)")
			}
			if q != simdisk.QueueSerial && !onPriority {
				continue
			}
			set.add(onQueue(g), RoleGrid)
		}
	}

	runs := map[string][]*NeighbourRun{}
	prefix := filepath.Join(filepath.Dir(c.DataDir()), "neighbour")
	n := 0
	results, err := r.measureInterleaved(ctx, Neighbour, c, res.Base, set, rounds, 0, nil, func(ctx context.Context, cfg Config) (float64, error) {
		n++
		run, err := nb.run(ctx, cfg, rateArgs, secs, fmt.Sprintf("%s-%d", prefix, n))
		if err != nil {
			return 0, err
		}
		runs[cfg.Name] = append(runs[cfg.Name], run)
		r.say("%s: %-36s %2d stall s (longest %d), p50 %s ms, p99 %s ms, max %s ms, %d s without a WAL flush, most flush time in a second %.0f ms, "+
			"waits in the stall %s, Dirty peak %s, Writeback peak %s, writer %.0f s", Neighbour, cfg.Name, run.StallSeconds, run.LongestStall,
			num(run.P50LatencyMS), num(run.P99LatencyMS), num(run.MaxLatencyMS), run.FlushlessSeconds, run.WALSyncMaxSecondMS,
			sharesText(run.WaitStall), humanBytes(float64(run.DirtyPeakBytes)), humanBytes(float64(run.WritebackPeakBytes)), run.WriterSeconds)
		return float64(run.StallSeconds), nil
	})
	for i := range results {
		results[i].Neighbour = runs[results[i].Name]
	}
	res.Configs = results
	if err != nil {
		return res, err
	}
	if err := r.kernel.restore(); err != nil {
		return res, err
	}
	res.GridBest = nbBest(res, string(simdisk.QueueSerial))
	res.Targets = append(res.Targets, nbCheckTarget(res), nbAdvisorTarget(res))
	if best := nbBest(res, string(simdisk.QueuePriority)); best != "" {
		res.Notes = append(res.Notes, fmt.Sprintf("Best of the grid on the priority queue model: %s.", best))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("Each configuration ran %d time(s), interleaved (rounds over all configurations, the order "+
		"reversed every round), each run after removing the writers' files, CHECKPOINT, sync(2) and Dirty+Writeback below %s; "+
		"figures are medians over the runs, stall seconds with their range. The simulated disk's source is on tmpfs: the loop "+
		"device's blocks there are memory the kernel cannot reclaim (a removed file's blocks stay in the backing file: discards "+
		"do not reach it), so the ratio thresholds are of up to %s less available memory as the file system fills.",
		rounds, humanBytes(nbDrained), humanBytes(float64(size))))
	if s := spreadNote(res); s != "" {
		res.Notes = append(res.Notes, s)
	}
	return res, nil
}

// nbGrid is the neighbour scenario's grid over vm.dirty_*: below and above the kernel's
// default ratios, tuned's postgresql profile (64MB/512MB), and the two write-back timers. The
// quick suite measures the first point only.
func nbGrid(full bool) []Config {
	const MB = 1 << 20
	bytes := func(name string, bg, limit int64) Config {
		return Config{Name: name, Durable: true, Settings: map[string]string{},
			Kernel: map[string]string{"dirty_background_bytes": strconv.FormatInt(bg, 10), "dirty_bytes": strconv.FormatInt(limit, 10)}}
	}
	knob := func(name string, kv ...string) Config {
		c := Config{Name: name, Durable: true, Settings: map[string]string{}, Kernel: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Kernel[kv[i]] = kv[i+1]
		}
		return c
	}
	grid := []Config{bytes("dirty 64MB/256MB", 64*MB, 256*MB)}
	if !full {
		return grid
	}
	return append(grid,
		bytes("dirty 16MB/64MB", 16*MB, 64*MB),
		bytes("dirty 64MB/512MB (tuned)", 64*MB, 512*MB),
		bytes("dirty 256MB/1GB", 256*MB, 1024*MB),
		// Above the default ratios (10/20). 5/10 sits between 256MB/1GB and the default on
		// this machine and is left out: every configuration costs a minute and a half a run.
		knob("ratio 20/40", "dirty_background_ratio", "20", "dirty_ratio", "40"),
		knob("expire 5 s", "dirty_expire_centisecs", "500"),
		knob("writeback every 1 s", "dirty_writeback_centisecs", "100"),
	)
}

// nbRig is the neighbour scenario's equipment: the cluster, the disk, the writers' directory.
type nbRig struct {
	r        *runner
	c        *lab.Cluster
	disk     *simdisk.Disk
	dir      string
	writerMB int
}

// reset removes the writers' files, checkpoints and waits for write-back to drain, so that
// every run starts from the same state.
func (nb *nbRig) reset(ctx context.Context) error {
	for _, f := range []string{"bulk", "log"} {
		if err := os.Remove(filepath.Join(nb.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the %s writer's file: %w", f, err)
		}
	}
	unix.Sync()
	if err := checkpoint(ctx, nb.c); err != nil {
		return err
	}
	unix.Sync()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := readMeminfo(nb.r.opts.ProcFS)
		if err != nil {
			return err
		}
		if m.dirty+m.writeback < nbDrained || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// bulk is the neighbour: from nbWriterStart, writerMB MB of zeros in 1 MiB writes through the
// page cache, no fsync, as `dd if=/dev/zero of=... bs=1M` does. It returns how long the writes
// took, 0 when ctx ended first.
func (nb *nbRig) bulk(ctx context.Context, mbps int) time.Duration {
	select {
	case <-ctx.Done():
		return 0
	case <-time.After(nbWriterStart):
	}
	f, err := os.Create(filepath.Join(nb.dir, "bulk"))
	if err != nil {
		nb.r.logger.Warn("bulk writer", zap.Error(err))
		return 0
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	total := int64(nb.writerMB) * 1_000_000
	begin := time.Now()
	for written := int64(0); written < total; {
		if ctx.Err() != nil {
			return 0
		}
		n, err := f.Write(buf[:min(int64(len(buf)), total-written)])
		if err != nil {
			nb.r.logger.Warn("bulk writer", zap.Error(err))
			return 0
		}
		written += int64(n)
		if mbps <= 0 {
			continue
		}
		// The rate limit: what it has written is on the device every nbThrottleSync, and
		// it writes no faster than mbps, so its write-back never takes the whole device.
		if written%nbThrottleSync == 0 {
			if err := f.Sync(); err != nil {
				nb.r.logger.Warn("bulk writer", zap.Error(err))
				return 0
			}
		}
		due := begin.Add(time.Duration(float64(written) / (float64(mbps) * 1e6) * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return 0
			case <-time.After(d):
			}
		}
	}
	return time.Since(begin)
}

// log is the log-like writer: small appends and an fsync every nbLogFsync, until ctx ends. It
// returns its slowest fsync.
func (nb *nbRig) log(ctx context.Context) time.Duration {
	f, err := os.OpenFile(filepath.Join(nb.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		nb.r.logger.Warn("log writer", zap.Error(err))
		return 0
	}
	defer f.Close()
	buf := make([]byte, nbLogChunk)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	tick := time.NewTicker(nbLogInterval)
	defer tick.Stop()
	var slowest time.Duration
	lastSync := time.Now()
	for {
		select {
		case <-ctx.Done():
			return slowest
		case <-tick.C:
		}
		if _, err := f.Write(buf); err != nil {
			nb.r.logger.Warn("log writer", zap.Error(err))
			return slowest
		}
		if time.Since(lastSync) >= nbLogFsync {
			t := time.Now()
			if err := f.Sync(); err != nil {
				nb.r.logger.Warn("log writer", zap.Error(err))
				return slowest
			}
			slowest = max(slowest, time.Since(t))
			lastSync = time.Now()
		}
	}
}

// run measures one configuration once (r.apply has put it in force).
func (nb *nbRig) run(ctx context.Context, cfg Config, rateArgs []string, secs int, logPrefix string) (*NeighbourRun, error) {
	if err := nb.disk.SetQueueModel(simdisk.QueueModel(cfg.Queue)); err != nil {
		return nil, err
	}
	if err := nb.reset(ctx); err != nil {
		return nil, err
	}
	wal, err := newWALSyncReader(ctx, nb.c)
	if err != nil {
		return nil, err
	}
	defer wal.close()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg               sync.WaitGroup
		samples          []nbSample
		writer, slowSync time.Duration
	)
	t0 := time.Now()
	var waits []waitSample
	wg.Add(4)
	go func() { defer wg.Done(); samples = nb.sample(runCtx, wal, t0) }()
	go func() { defer wg.Done(); waits = nb.waits(runCtx, t0) }()
	go func() { defer wg.Done(); writer = nb.bulk(runCtx, cfg.WriterMBps) }()
	go func() { defer wg.Done(); slowSync = nb.log(runCtx) }()
	args := append(append([]string{}, rateArgs...), "-T", strconv.Itoa(secs), "-l", "--log-prefix", logPrefix)
	_, err = runPgbench(ctx, nb.c, args...)
	stop()
	wg.Wait()
	defer removeLogs(logPrefix)
	if err != nil {
		return nil, err
	}
	txns, err := readTxnLogs(logPrefix)
	if err != nil {
		return nil, err
	}
	run := nbFigures(txns, samples, float64(t0.UnixNano())/1e9, secs)
	run.WaitStall, run.WaitOutside = waitShares(waits, run.PerSecond.Stall)
	run.WriterSeconds = writer.Seconds()
	run.LogFsyncMaxMS = float64(slowSync) / float64(time.Millisecond)
	return run, nil
}

// nbSample is one second's reading of the kernel's and the server's counters.
type nbSample struct {
	at               float64 // seconds since the run's start
	dirty, writeback int64
	walOK            bool
	syncs            int64
	syncMS           float64
}

// sample reads meminfo and the WAL flush counters once a second until ctx ends.
func (nb *nbRig) sample(ctx context.Context, wal *walSyncReader, t0 time.Time) []nbSample {
	var out []nbSample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s := nbSample{at: time.Since(t0).Seconds()}
		if m, err := readMeminfo(nb.r.opts.ProcFS); err == nil {
			s.dirty, s.writeback = m.dirty, m.writeback
		}
		if n, ms, err := wal.read(ctx); err == nil {
			s.walOK, s.syncs, s.syncMS = true, n, ms
		}
		out = append(out, s)
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// waitSample is what one active client backend waited on at one moment of the run.
type waitSample struct {
	at    float64 // seconds since the run's start
	event string  // "type:event", "CPU" for none
	n     int     // how many backends
}

// waitQuery counts the active client backends per wait event, the sampler's own excluded.
const waitQuery = `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), count(*)::int FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid() GROUP BY 1`

// waits samples the client backends' wait events every 250 ms until ctx ends. A failed read
// loses that sample only: the figures it feeds are shares.
func (nb *nbRig) waits(ctx context.Context, t0 time.Time) []waitSample {
	conn, err := nb.c.Connect(ctx)
	if err != nil {
		nb.r.logger.Warn("wait event sampler", zap.Error(err))
		return nil
	}
	defer conn.Close(context.Background())
	var out []waitSample
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		s, err := readWaits(ctx, conn, time.Since(t0).Seconds())
		if err != nil {
			continue
		}
		out = append(out, s...)
	}
}

func readWaits(ctx context.Context, conn *pgx.Conn, at float64) ([]waitSample, error) {
	rows, err := conn.Query(ctx, waitQuery)
	if err != nil {
		return nil, fmt.Errorf("read wait events: %w", err)
	}
	defer rows.Close()
	var out []waitSample
	for rows.Next() {
		w := waitSample{at: at}
		if err := rows.Scan(&w.event, &w.n); err != nil {
			return nil, fmt.Errorf("read wait events: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// waitShares splits the wait samples by the second they fell in, stall or not, and returns
// each wait event's share of the samples on either side (nil for a side without samples).
func waitShares(ws []waitSample, stall []bool) (inStall, outside map[string]float64) {
	count := func(want bool) map[string]float64 {
		m := map[string]float64{}
		total := 0
		for _, w := range ws {
			i := int(w.at)
			if i < 0 || i >= len(stall)-1 || stall[i] != want {
				continue
			}
			m[w.event] += float64(w.n)
			total += w.n
		}
		if total == 0 {
			return nil
		}
		for k := range m {
			m[k] /= float64(total)
		}
		return m
	}
	return count(true), count(false)
}

// txn is one transaction of pgbench's log: when it completed and its latency from its
// scheduled start.
type txn struct {
	done  float64 // Unix seconds
	latUS float64
}

// readTxnLogs reads pgbench -l's per-transaction logs (readLatencies describes them) with the
// completion times.
func readTxnLogs(prefix string) ([]txn, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, fmt.Errorf("find pgbench logs: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no pgbench logs at %s.*", prefix)
	}
	var out []txn
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("read pgbench log: %w", err)
		}
		t, err := parseTxnLog(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("read pgbench log %s: %w", f, err)
		}
		out = append(out, t...)
	}
	return out, nil
}

func parseTxnLog(r io.Reader) ([]txn, error) {
	var out []txn
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[2] == "skipped" || f[2] == "failed" {
			continue
		}
		lat, err1 := strconv.ParseFloat(f[2], 64)
		sec, err2 := strconv.ParseInt(f[4], 10, 64)
		us, err3 := strconv.ParseInt(f[5], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out = append(out, txn{done: float64(sec) + float64(us)/1e6, latUS: lat})
	}
	return out, sc.Err()
}

// nbFigures computes a run's figures from its transactions (t0: the run's start, Unix seconds)
// and its per-second samples. The last second is cut short by pgbench's end and is left out of
// the stall count.
func nbFigures(txns []txn, samples []nbSample, t0 float64, secs int) *NeighbourRun {
	run := &NeighbourRun{Seconds: secs, Transactions: len(txns), FirstStall: -1}
	ps := &run.PerSecond
	sched := make([][]float64, secs)
	ps.TPS = make([]float64, secs)
	all := make([]float64, 0, len(txns))
	for _, t := range txns {
		lat := t.latUS / 1000
		all = append(all, lat)
		if i := int(t.done - t0); i >= 0 && i < secs {
			ps.TPS[i]++
		}
		if i := int(t.done - t.latUS/1e6 - t0); i >= 0 && i < secs {
			sched[i] = append(sched[i], lat)
		}
	}
	run.P50LatencyMS, run.P99LatencyMS, run.MaxLatencyMS = percentile(all, 50), percentile(all, 99), maxOf(all)
	ps.P50MS, ps.P99MS, ps.MaxMS, ps.Stall = make([]float64, secs), make([]float64, secs), make([]float64, secs), make([]bool, secs)
	streak := 0
	for i := range secs {
		ps.P50MS[i], ps.P99MS[i], ps.MaxMS[i] = percentile(sched[i], 50), percentile(sched[i], 99), maxOf(sched[i])
		if i == secs-1 {
			break
		}
		if ps.P99MS[i] > float64(nbStallLatency/time.Millisecond) || ps.TPS[i] < nbRate/2 {
			ps.Stall[i] = true
			run.StallSeconds++
			streak++
			run.LongestStall = max(run.LongestStall, streak)
			if run.FirstStall < 0 {
				run.FirstStall = i
			}
		} else {
			streak = 0
		}
	}

	// Samples at about every second; each second's reading is the one taken nearest its end,
	// and a second's WAL flushes are the counters' difference from the second before.
	ps.Dirty, ps.Writeback = make([]int64, secs), make([]int64, secs)
	ps.WALSyncs, ps.WALSyncMS = make([]int64, secs), make([]float64, secs)
	var prev *nbSample
	var stallN, calmN int64
	var stallMS, calmMS float64
	for k := range samples {
		s := &samples[k]
		run.DirtyPeakBytes = max(run.DirtyPeakBytes, s.dirty)
		run.WritebackPeakBytes = max(run.WritebackPeakBytes, s.writeback)
		i := int(math.Round(s.at)) - 1
		if i >= 0 && i < secs {
			ps.Dirty[i], ps.Writeback[i] = s.dirty, s.writeback
			ps.sampledDirty++
		}
		if !s.walOK {
			continue
		}
		if prev != nil && i >= 0 && i < secs {
			dn, dms := s.syncs-prev.syncs, s.syncMS-prev.syncMS
			if dn > 0 && dms >= 0 {
				ps.WALSyncs[i] += dn
				ps.WALSyncMS[i] += dms
				if ps.Stall[i] {
					stallN, stallMS = stallN+dn, stallMS+dms
				} else {
					calmN, calmMS = calmN+dn, calmMS+dms
				}
			}
		}
		prev = s
	}
	for i := range secs - 1 {
		run.WALSyncMaxSecondMS = max(run.WALSyncMaxSecondMS, ps.WALSyncMS[i])
		// Second 0 has no reading before it.
		if i > 0 && ps.WALSyncs[i] == 0 {
			run.FlushlessSeconds++
		}
	}
	run.WALSyncs = stallN + calmN
	if run.WALSyncs > 0 {
		run.WALSyncMeanMS = (stallMS + calmMS) / float64(run.WALSyncs)
	}
	if stallN > 0 {
		run.WALSyncStallMS = stallMS / float64(stallN)
	}
	if calmN > 0 {
		run.WALSyncOutsideMS = calmMS / float64(calmN)
	}
	return run
}

// walSyncReader reads the server's WAL flush counters: pg_stat_wal's wal_sync and
// wal_sync_time (14-17; the time needs track_wal_io_timing), or from 18 pg_stat_io's fsyncs
// and fsync_time for object 'wal' (context 'normal', summed over backend types).
type walSyncReader struct {
	conn  *pgx.Conn
	query string
}

func newWALSyncReader(ctx context.Context, c *lab.Cluster) (*walSyncReader, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("read server version: %w", err)
	}
	q := "SELECT wal_sync, wal_sync_time FROM pg_stat_wal"
	if version >= 180000 {
		q = "SELECT coalesce(sum(fsyncs), 0)::bigint, coalesce(sum(fsync_time), 0)::float8 FROM pg_stat_io WHERE object = 'wal' AND context = 'normal'"
	}
	return &walSyncReader{conn: conn, query: q}, nil
}

func (w *walSyncReader) close() { w.conn.Close(context.Background()) }

func (w *walSyncReader) read(ctx context.Context) (int64, float64, error) {
	var n int64
	var ms float64
	if err := w.conn.QueryRow(ctx, w.query).Scan(&n, &ms); err != nil {
		return 0, 0, fmt.Errorf("read WAL flush counters: %w", err)
	}
	return n, ms, nil
}

// meminfo holds the write-back figures of /proc/meminfo.
type meminfo struct{ dirty, writeback int64 }

func readMeminfo(procfs string) (meminfo, error) {
	f, err := os.Open(filepath.Join(procfs, "meminfo"))
	if err != nil {
		return meminfo{}, err
	}
	defer f.Close()
	var m meminfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "Dirty" && name != "Writeback") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("read meminfo %s: %w", name, err)
		}
		if name == "Dirty" {
			m.dirty = kb << 10
		} else {
			m.writeback = kb << 10
		}
	}
	return m, sc.Err()
}

// NeighbourSummary is a configuration's medians over its runs.
type NeighbourSummary struct {
	StallSeconds, StallMin, StallMax     float64
	LongestStall                         float64
	P50MS, P99MS, MaxMS                  float64
	WALSyncMS, WALSyncStallMS, WALCalmMS float64
	DirtyPeak, WritebackPeak             float64
	WriterSeconds, LogFsyncMaxMS         float64
	FlushlessSeconds, WALMaxSecondMS     float64
	// Median is the run whose stall seconds are the median's (the lower middle for an even
	// count): its per-second series are the ones shown.
	Median *NeighbourRun
}

func summarize(runs []*NeighbourRun) *NeighbourSummary {
	if len(runs) == 0 {
		return nil
	}
	pick := func(f func(*NeighbourRun) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	stalls := make([]float64, len(runs))
	for i, r := range runs {
		stalls[i] = float64(r.StallSeconds)
	}
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b *NeighbourRun) int { return a.StallSeconds - b.StallSeconds })
	return &NeighbourSummary{
		StallSeconds: median(stalls), StallMin: minOf(stalls), StallMax: maxOf(stalls),
		LongestStall:     pick(func(r *NeighbourRun) float64 { return float64(r.LongestStall) }),
		P50MS:            pick(func(r *NeighbourRun) float64 { return r.P50LatencyMS }),
		P99MS:            pick(func(r *NeighbourRun) float64 { return r.P99LatencyMS }),
		MaxMS:            pick(func(r *NeighbourRun) float64 { return r.MaxLatencyMS }),
		WALSyncMS:        pick(func(r *NeighbourRun) float64 { return r.WALSyncMeanMS }),
		WALSyncStallMS:   pick(func(r *NeighbourRun) float64 { return r.WALSyncStallMS }),
		WALCalmMS:        pick(func(r *NeighbourRun) float64 { return r.WALSyncOutsideMS }),
		DirtyPeak:        pick(func(r *NeighbourRun) float64 { return float64(r.DirtyPeakBytes) }),
		WritebackPeak:    pick(func(r *NeighbourRun) float64 { return float64(r.WritebackPeakBytes) }),
		WriterSeconds:    pick(func(r *NeighbourRun) float64 { return r.WriterSeconds }),
		LogFsyncMaxMS:    pick(func(r *NeighbourRun) float64 { return r.LogFsyncMaxMS }),
		FlushlessSeconds: pick(func(r *NeighbourRun) float64 { return float64(r.FlushlessSeconds) }),
		WALMaxSecondMS:   pick(func(r *NeighbourRun) float64 { return r.WALSyncMaxSecondMS }),
		Median:           sorted[(len(sorted)-1)/2],
	}
}

// nbWith returns the configuration playing role on queue q.
func nbWith(res *ScenarioResult, role, q string) *ConfigResult {
	for i := range res.Configs {
		c := &res.Configs[i]
		if c.has(role) && nbQueue(c.Config) == q {
			return c
		}
	}
	return nil
}

func nbQueue(c Config) string {
	if c.Queue == "" {
		return string(simdisk.QueueSerial)
	}
	return c.Queue
}

// nbBest names the grid configuration on queue q with the fewest stall seconds (median).
func nbBest(res *ScenarioResult, q string) string {
	var best *ConfigResult
	for i := range res.Configs {
		c := &res.Configs[i]
		if !c.has(RoleGrid) || nbQueue(c.Config) != q || len(c.Runs) == 0 {
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

// nbCheckTarget: the advisor's check, watching the stall, raises writeback-stalls-wal.
func nbCheckTarget(res *ScenarioResult) Target {
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

// nbAdvisorTarget: on the calibrated (serial) device, the advisor's stall is no longer than the
// start's beyond the spread, and within 1.2x of the grid's best (or of its spread).
func nbAdvisorTarget(res *ScenarioResult) Target {
	q := string(simdisk.QueueSerial)
	t := Target{Name: "with the advisor's settings the stall is no longer than the start's and within 1.2x of the grid's best (serial queue)",
		Want: "stall seconds <= start's + spread, and <= 1.2 x best (or best + its spread)"}
	adv, start := nbWith(res, RoleAdvisor, q), nbWith(res, RoleStart, q)
	var best *ConfigResult
	if name := nbBest(res, q); name != "" {
		best = res.config(name)
	}
	if adv == nil || start == nil || best == nil || len(adv.Runs) == 0 || len(start.Runs) == 0 {
		t.Got = "not measured"
		return t
	}
	spread := func(c *ConfigResult) float64 { return maxOf(c.Runs) - minOf(c.Runs) }
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
