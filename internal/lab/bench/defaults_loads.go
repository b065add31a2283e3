package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/fullpage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// dfRig is one device's stack and the loads that run on it.
type dfRig struct {
	r    *runner
	st   *equipment.LoopStack
	dev  fullpage.Device
	dirs int
	// methods are the wal_compression methods the grid tries (gridMethods).
	methods []string
}

// dir makes a fresh directory beside the cluster for a cell's applier journal.
func (g *dfRig) dir() (string, error) {
	g.dirs++
	d := filepath.Join(filepath.Dir(g.st.Cluster.DataDir()), "apply-"+strconv.Itoa(g.dirs))
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("make the applier's directory: %w", err)
	}
	return d, nil
}

// sysbenchThreads is the sysbench loads' threads, as issue 34's shape ran them.
const sysbenchThreads = 8

func (g *dfRig) oltpArgs() []string {
	return []string{"-n", "-c", strconv.Itoa(dfClients), "-j", "2"}
}

// loop runs load until ctx ends: what the advisor watches.
func (g *dfRig) loop(ctx context.Context, load string) error {
	c := g.st.Cluster
	if isSysbench(load) {
		_, err := fullpage.RunSysbench(ctx, c, sysbenchScript(load), sysbenchThreads, 24*time.Hour)
		return err
	}
	if load == loadBulk {
		for ctx.Err() == nil {
			if err := g.bulkOnce(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	if load == loadMixed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One write per dfSecs, as each measured run has: the advisor watches the shape the
			// runs measure, not a writer that never stops.
			period := time.Duration(g.r.sz.dfSecs) * time.Second
			for ctx.Err() == nil {
				begin := time.Now()
				if _, err := g.write(ctx); err != nil && ctx.Err() == nil {
					g.r.logger.Sugar().Warnw("bulk writer", "error", err)
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(begin.Add(period))):
				}
			}
		}()
	}
	_, err := pgbench.Run(ctx, c, append(g.oltpArgs(), "-T", "86400")...)
	wg.Wait()
	return err
}

// bulkOnce empties the bulk table and loads it once.
func (g *dfRig) bulkOnce(ctx context.Context) error {
	c := g.st.Cluster
	if err := c.Exec(ctx, "TRUNCATE bulk"); err != nil {
		return err
	}
	return c.Exec(ctx, fmt.Sprintf("INSERT INTO bulk SELECT i, (random() * 1e9)::int, md5(i::text) FROM generate_series(1, %d) i", g.r.sz.dfRows))
}

// write is the neighbour of the mixed load: dfWriterMB through the page cache in 1 MiB writes,
// an fdatasync every 64 MB and at the end, then the file removed. It returns how long it took.
func (g *dfRig) write(ctx context.Context) (time.Duration, error) {
	path := filepath.Join(g.st.Mnt, "writer")
	f, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("bulk writer: %w", err)
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 1<<20)
	begin := time.Now()
	for mb := 1; mb <= g.r.sz.dfWriterMB; mb++ {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if _, err := f.Write(buf); err != nil {
			return 0, fmt.Errorf("bulk writer: %w", err)
		}
		if mb%64 == 0 || mb == g.r.sz.dfWriterMB {
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return 0, fmt.Errorf("bulk writer: fdatasync: %w", err)
			}
		}
	}
	return time.Since(begin), nil
}

// measure runs load once from a CHECKPOINT and returns its figures.
func (g *dfRig) measure(ctx context.Context, load string) (*DefaultsRun, error) {
	c := g.st.Cluster
	if load == loadBulk {
		if err := c.Exec(ctx, "TRUNCATE bulk"); err != nil {
			return nil, err
		}
	}
	if err := equipment.Checkpoint(ctx, c); err != nil {
		return nil, err
	}
	unix.Sync()
	before, err := readWALStats(ctx, c)
	if err != nil {
		return nil, err
	}
	run := &DefaultsRun{}
	switch load {
	case loadBulk:
		begin := time.Now()
		if err := c.Exec(ctx, fmt.Sprintf("INSERT INTO bulk SELECT i, (random() * 1e9)::int, md5(i::text) FROM generate_series(1, %d) i", g.r.sz.dfRows)); err != nil {
			return nil, err
		}
		run.Seconds = time.Since(begin).Seconds()
		run.Value, run.Txns = run.Seconds, 1
	case loadSysWrite, loadSysInsert:
		res, err := fullpage.RunSysbench(ctx, c, sysbenchScript(load), sysbenchThreads, time.Duration(g.r.sz.dfSecs)*time.Second)
		if err != nil {
			return nil, err
		}
		run.Seconds, run.Txns, run.Value, run.P99LatencyMS = float64(g.r.sz.dfSecs), res.Txns, res.TPS, res.P99MS
	default:
		if err := g.oltp(ctx, load, run); err != nil {
			return nil, err
		}
	}
	after, err := readWALStats(ctx, c)
	if err != nil {
		return nil, err
	}
	run.WALBytes, run.WALRecords, run.WALFPI = after.bytes-before.bytes, after.records-before.records, after.fpi-before.fpi
	run.Checkpoints = after.checkpoints - before.checkpoints
	run.ImageShare = imageShare(run.WALBytes, run.WALRecords, run.WALFPI)
	return run, nil
}

// oltp runs pgbench for dfSecs (with the writer beside it for the mixed load) and fills run.
func (g *dfRig) oltp(ctx context.Context, load string, run *DefaultsRun) error {
	c := g.st.Cluster
	prefix := filepath.Join(filepath.Dir(c.DataDir()), "defaults-log")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg      sync.WaitGroup
		written time.Duration
		werr    error
	)
	if load == loadMixed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			written, werr = g.write(wctx)
		}()
	}
	args := append(g.oltpArgs(), "-T", strconv.Itoa(g.r.sz.dfSecs), "-l", "--log-prefix", prefix)
	_, err := pgbench.Run(ctx, c, args...)
	stop()
	wg.Wait()
	defer pgbench.RemoveLogs(prefix)
	if err != nil {
		return err
	}
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return werr
	}
	txns, err := pgbench.ReadLog(prefix)
	if err != nil {
		return err
	}
	lat := pgbench.Latencies(txns)
	run.Seconds = float64(g.r.sz.dfSecs)
	run.Txns = float64(len(lat))
	run.Value = run.Txns / run.Seconds
	run.P99LatencyMS = stats.Percentile(lat, 99) / 1000
	run.WriterSeconds = written.Seconds()
	return nil
}

type walStats struct {
	bytes, records, fpi float64
	checkpoints         int64
}

// readWALStats reads pg_stat_wal and the checkpoints completed so far.
func readWALStats(ctx context.Context, c *lab.Cluster) (walStats, error) {
	var w walStats
	cp, err := checkpointStats(ctx, c)
	if err != nil {
		return w, err
	}
	w.checkpoints = cp.count
	conn, err := c.Connect(ctx)
	if err != nil {
		return w, err
	}
	defer conn.Close(context.Background())
	// pg_stat_wal is flushed by each backend at its transaction's end: the load has ended.
	if err := conn.QueryRow(ctx, "SELECT wal_bytes::float8, wal_records::float8, wal_fpi::float8 FROM pg_stat_wal").
		Scan(&w.bytes, &w.records, &w.fpi); err != nil {
		return w, fmt.Errorf("read pg_stat_wal: %w", err)
	}
	return w, nil
}

// imageShare estimates the images' share of the WAL's bytes as full-page-images does: what the
// records leave at rules' bytes per record, at most the images x 8 kB.
func imageShare(bytes, records, fpi float64) float64 {
	if bytes <= 0 {
		return 0
	}
	img := min(max(bytes-records*float64(rules.DefaultThresholds().FPIRecordBytes), 0), fpi*8192)
	return img / bytes
}
