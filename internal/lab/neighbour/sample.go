package neighbour

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// Sample is one second's reading of the kernel's and the server's counters.
type Sample struct {
	At               float64 // seconds since the run's start
	Dirty, Writeback int64   // /proc/meminfo, bytes
	// WALOK says whether the WAL flush counters were read: Syncs flushes so far, SyncMS
	// milliseconds spent in them so far.
	WALOK  bool
	Syncs  int64
	SyncMS float64
}

// sample reads meminfo and the WAL flush counters once a second until ctx ends. A failed read
// leaves that reading out of the sample; Figures counts what it has.
func sample(ctx context.Context, procfs string, wal *walSyncReader, t0 time.Time) []Sample {
	var out []Sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s := Sample{At: time.Since(t0).Seconds()}
		if m, err := kernel.ReadMeminfo(ctx, procfs); err == nil {
			s.Dirty, s.Writeback = m.DirtyBytes, m.WritebackBytes
		}
		if n, ms, err := wal.read(ctx); err == nil {
			s.WALOK, s.Syncs, s.SyncMS = true, n, ms
		}
		out = append(out, s)
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
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
func waits(ctx context.Context, c *lab.Cluster, logger *zap.Logger, t0 time.Time) []waitSample {
	conn, err := c.Connect(ctx)
	if err != nil {
		logger.Warn("wait event sampler", zap.Error(err))
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
