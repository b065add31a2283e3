// Package fullpage is the lab's equipment for full-page images (issue 21): an OLTP load over
// data larger than shared_buffers with checkpoints every 30 s, so that most of the WAL is page
// images, and the WAL that load writes under each wal_compression. The full-page-images rule's
// live test and its calibration (docs/benchmarks.md, "Full page images") use it; a bench
// scenario can too.
package fullpage

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// Settings make images dominant: shared_buffers well below the pgbench tables of Scale, a
// checkpoint every 30 s, and max_wal_size large enough that the timeout, not WAL volume, starts
// every checkpoint.
func Settings() map[string]string {
	return map[string]string{
		"shared_buffers":     "128MB",
		"checkpoint_timeout": "30s",
		"max_wal_size":       "4GB",
	}
}

// Scale is pgbench's scale: 30 is about 450MB of tables and indexes, 3.5 times Settings'
// shared_buffers, and more pages than the load changes between two checkpoints.
const Scale = 30

// Load is one workload: pgbench's built-in TPC-B, or Rows, a script updating rows of random
// text (table r, made by Init), whose pages compress much less than pgbench's blank-padded ones.
type Load string

// Loads.
const (
	TPCB Load = "tpcb"
	Rows Load = "rows"
)

// rowsScript updates a random row of r; rowsTable makes r about as large as pgbench's tables.
const (
	rowsRows   = 3_000_000
	rowsScript = "\\set id random(1, 3000000)\nUPDATE r SET n = n + 1, t = now() WHERE id = :id;\n"
	rowsTable  = `CREATE TABLE r (id int PRIMARY KEY, n bigint, t timestamptz, s text);
INSERT INTO r SELECT i, (random() * 1e12)::bigint, now() - random() * interval '300 days',
	md5(i::text) || ' ' || substr(md5((i * 7)::text), 1, (random() * 24)::int) FROM generate_series(1, 3000000) i`
)

// Init creates the load's tables: pgbench -i at Scale for TPCB, table r for Rows.
func Init(ctx context.Context, c *lab.Cluster, load Load) error {
	if load == Rows {
		if err := c.Exec(ctx, rowsTable); err != nil {
			return err
		}
		return c.Exec(ctx, "VACUUM ANALYZE r")
	}
	_, err := pgbench.Run(ctx, c, "-i", "-q", "-s", strconv.Itoa(Scale))
	return err
}

// Run is what one run of a load wrote: pg_stat_wal's counters over the run, pgbench's
// transactions and tps.
type Run struct {
	Load        Load
	Compression string
	Seconds     float64
	Txns        float64
	TPS         float64
	Records     float64
	FPI         float64
	Bytes       float64
	// StartLSN and EndLSN bound the run's WAL, for pg_waldump --stats.
	StartLSN, EndLSN string
}

// BytesPerRecord is the WAL bytes per record, the figure full-page-images predicts.
func (r Run) BytesPerRecord() float64 { return r.Bytes / r.Records }

// BytesPerTxn is the WAL bytes per transaction.
func (r Run) BytesPerTxn() float64 { return r.Bytes / r.Txns }

// Options shape a run: clients and, when Rate > 0, pgbench's rate limit in transactions per
// second (so that the CPU keeps room and the WAL per transaction does not move with the tps).
type Options struct {
	Clients  int
	Rate     int
	Duration time.Duration
}

// Measure sets wal_compression (ALTER SYSTEM, reload), starts from a checkpoint so that every
// run begins at the same phase, and runs the load for opts.Duration.
func Measure(ctx context.Context, c *lab.Cluster, load Load, compression string, opts Options) (Run, error) {
	r := Run{Load: load, Compression: compression}
	if err := SetCompression(ctx, c, compression); err != nil {
		return r, err
	}
	if err := c.Exec(ctx, "CHECKPOINT"); err != nil {
		return r, err
	}
	before, err := readWAL(ctx, c)
	if err != nil {
		return r, err
	}
	args := []string{"-n", "-c", strconv.Itoa(opts.Clients), "-j", strconv.Itoa(min(opts.Clients, 2)),
		"-T", strconv.Itoa(int(opts.Duration.Seconds()))}
	if opts.Rate > 0 {
		args = append(args, "-R", strconv.Itoa(opts.Rate))
	}
	if load == Rows {
		args = append(args, "-f", "-") // the script on stdin
	}
	out, err := runLoad(ctx, c, load, args)
	if err != nil {
		return r, err
	}
	after, err := readWAL(ctx, c)
	if err != nil {
		return r, err
	}
	if r.TPS, err = pgbench.ParseTPS(out); err != nil {
		return r, err
	}
	if r.Txns, err = parseTxns(out); err != nil {
		return r, err
	}
	r.Seconds = opts.Duration.Seconds()
	r.Records, r.FPI, r.Bytes = after.records-before.records, after.fpi-before.fpi, after.bytes-before.bytes
	r.StartLSN, r.EndLSN = before.lsn, after.lsn
	return r, nil
}

// CompressionMethods lists the wal_compression methods c's server accepts, pglz first:
// pg_settings.enumvals from 15 (lz4 and zstd only in builds with those libraries); on 14 the
// setting is a boolean whose on is pglz.
func CompressionMethods(ctx context.Context, c *lab.Cluster) ([]string, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var vals []string
	if err := conn.QueryRow(ctx, "SELECT coalesce(enumvals, '{}') FROM pg_settings WHERE name = 'wal_compression'").Scan(&vals); err != nil {
		return nil, fmt.Errorf("read wal_compression's methods: %w", err)
	}
	if len(vals) == 0 {
		return []string{"on"}, nil
	}
	out := []string{"pglz"}
	for _, m := range []string{"lz4", "zstd"} {
		if slices.Contains(vals, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// SetCompression sets wal_compression with ALTER SYSTEM and reloads, waiting until a new
// session sees it.
func SetCompression(ctx context.Context, c *lab.Cluster, value string) error {
	if err := c.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET wal_compression = '%s'", value)); err != nil {
		return err
	}
	if err := c.Reload(ctx); err != nil {
		return err
	}
	for range 100 {
		conn, err := c.Connect(ctx)
		if err != nil {
			return err
		}
		var v string
		err = conn.QueryRow(ctx, "SELECT setting FROM pg_settings WHERE name = 'wal_compression'").Scan(&v)
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("read wal_compression: %w", err)
		}
		if v == value || value == "on" && v == "pglz" {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("wal_compression did not become %s after a reload", value)
}

func runLoad(ctx context.Context, c *lab.Cluster, load Load, args []string) ([]byte, error) {
	cmd := c.Command(ctx, "pgbench", args...)
	if load == Rows {
		cmd.Stdin = strings.NewReader(rowsScript)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("pgbench %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// parseTxns reads "number of transactions actually processed: N" (PostgreSQL 14+ adds "/M"
// with -t; the first number is the count).
func parseTxns(out []byte) (float64, error) {
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "number of transactions actually processed: "); ok {
			n, _, _ := strings.Cut(strings.TrimSpace(rest), "/")
			return strconv.ParseFloat(n, 64)
		}
	}
	return 0, fmt.Errorf("no transaction count in pgbench's output")
}

type walCounters struct {
	records, fpi, bytes float64
	lsn                 string
}

func readWAL(ctx context.Context, c *lab.Cluster) (walCounters, error) {
	var w walCounters
	conn, err := c.Connect(ctx)
	if err != nil {
		return w, err
	}
	defer conn.Close(context.Background())
	// pg_stat_wal is flushed by each backend at its transaction's end: pgbench has ended.
	err = conn.QueryRow(ctx, "SELECT wal_records::float8, wal_fpi::float8, wal_bytes::float8, pg_current_wal_insert_lsn()::text FROM pg_stat_wal").
		Scan(&w.records, &w.fpi, &w.bytes, &w.lsn)
	if err != nil {
		return w, fmt.Errorf("read pg_stat_wal: %w", err)
	}
	return w, nil
}

// Device is a profile of the simulated disk for issue 21's default-host matrix.
type Device struct {
	Name    string
	Options simdisk.Options
}

// Devices are the matrix's three device profiles: a fast NVMe-like drive (0.05 ms a sync,
// 2 GB/s), a cloud volume (1 ms, 125 MB/s and 3000 IOPS, a gp3 volume's baseline) and a
// rotating disk (4 ms, 150 MB/s).
func Devices() []Device {
	return []Device{
		{Name: "fast", Options: simdisk.Options{Latency: 50 * time.Microsecond, BandwidthBytesPerSec: 2_000_000_000}},
		{Name: "cloud", Options: simdisk.Options{Latency: time.Millisecond, BandwidthBytesPerSec: 125_000_000, IOPS: 3000}},
		{Name: "hdd", Options: simdisk.Options{Latency: 4 * time.Millisecond, BandwidthBytesPerSec: 150_000_000}},
	}
}
