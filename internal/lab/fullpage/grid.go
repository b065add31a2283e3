package fullpage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// The compression grid (issue 34): wal_compression's methods against CPU headroom (a CPU-bound
// neighbour taking none, half or all of the cores), two kinds of data (pgbench's pages, which
// compress well, and sysbench's rows of random digits, which do not) and devices, each
// configuration run interleaved from a CHECKPOINT. docs/benchmarks.md, "Compression grid".

// Data is a grid load: pgbench's TPC-B or sysbench's oltp_write_only.
type Data string

// The grid's loads.
const (
	PGBench  Data = "pgbench"
	Sysbench Data = "sysbench"
)

// Grid shapes: pgbench at scale 30 with 12 clients; sysbench's 8 tables of 200k rows with 8
// threads (issue 34's two shapes).
const (
	gridScale         = 30
	gridClients       = 12
	sysbenchTables    = 8
	sysbenchTableSize = 200_000
	sysbenchThreads   = 8
)

// Sysbench's own OLTP scripts (Debian's sysbench): updates, a delete and an insert per
// transaction, and a single-row insert per transaction.
const (
	SysbenchWriteOnly = "oltp_write_only"
	SysbenchInsert    = "oltp_insert"
)

// GridRun is one run: the load's transactions per second and p99 latency, pg_stat_wal over the
// run, and the host's idle CPU share (idle and iowait of /proc/stat).
type GridRun struct {
	TPS, P99MS                   float64
	Txns, WALBytes, Records, FPI float64
	IdleShare                    float64
	Checkpoints                  int64
	Seconds                      float64
	Settings                     map[string]string
	StartedAt                    time.Time
	StartLSN, EndLSN             string
	WALPerTxn                    float64
}

// InitData creates a grid load's tables in c.
func InitData(ctx context.Context, c *lab.Cluster, d Data) error {
	if d == Sysbench {
		_, err := sysbench(ctx, c, SysbenchWriteOnly, "--threads=2", "prepare")
		if err != nil {
			return err
		}
		return c.Exec(ctx, "VACUUM ANALYZE")
	}
	_, err := pgbench.Run(ctx, c, "-i", "-q", "-I", "dtGvp", "-s", strconv.Itoa(gridScale))
	return err
}

// sysbench runs one of Debian's sysbench scripts with its PostgreSQL driver against c's socket,
// on the grid's tables.
func sysbench(ctx context.Context, c *lab.Cluster, script string, args ...string) ([]byte, error) {
	all := append([]string{script, "--db-driver=pgsql", "--pgsql-host=" + c.SocketDir(),
		"--pgsql-port=" + strconv.Itoa(c.Port()), "--pgsql-user=postgres", "--pgsql-db=postgres",
		"--tables=" + strconv.Itoa(sysbenchTables), "--table-size=" + strconv.Itoa(sysbenchTableSize)}, args...)
	out, err := exec.CommandContext(ctx, "sysbench", all...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("sysbench %s: %w: %s", strings.Join(args, " "), err, lastLines(out, 5))
	}
	return out, nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// Neighbours starts n CPU-bound processes (a shell loop each) and returns what stops them.
func Neighbours(n int) (func(), error) {
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for i := 0; i < n; i++ {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("start a CPU neighbour: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// GridMeasure sets cfg (ALTER SYSTEM, reload), starts from a CHECKPOINT and sync(2), runs the
// load for d and returns what it did.
func GridMeasure(ctx context.Context, c *lab.Cluster, data Data, cfg map[string]string, d time.Duration) (GridRun, error) {
	r := GridRun{Settings: cfg, Seconds: d.Seconds()}
	for k, v := range cfg {
		if err := c.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = '%s'", k, v)); err != nil {
			return r, err
		}
	}
	if err := c.Reload(ctx); err != nil {
		return r, err
	}
	if v, ok := cfg["wal_compression"]; ok {
		if err := SetCompression(ctx, c, v); err != nil {
			return r, err
		}
	}
	if err := equipment.Checkpoint(ctx, c); err != nil {
		return r, err
	}
	unix.Sync()
	before, err := readWAL(ctx, c)
	if err != nil {
		return r, err
	}
	cp0, err := checkpoints(ctx, c)
	if err != nil {
		return r, err
	}
	cpu0, err := readCPU()
	if err != nil {
		return r, err
	}
	r.StartedAt = time.Now()
	if data == Sysbench {
		err = r.runSysbench(ctx, c, d)
	} else {
		err = r.runPGBench(ctx, c, d)
	}
	if err != nil {
		return r, err
	}
	cpu1, err := readCPU()
	if err != nil {
		return r, err
	}
	after, err := readWAL(ctx, c)
	if err != nil {
		return r, err
	}
	cp1, err := checkpoints(ctx, c)
	if err != nil {
		return r, err
	}
	r.IdleShare = (cpu1.idle - cpu0.idle) / max(cpu1.total-cpu0.total, 1)
	r.Records, r.FPI, r.WALBytes = after.records-before.records, after.fpi-before.fpi, after.bytes-before.bytes
	r.StartLSN, r.EndLSN, r.Checkpoints = before.lsn, after.lsn, cp1-cp0
	if r.Txns > 0 {
		r.WALPerTxn = r.WALBytes / r.Txns
	}
	return r, nil
}

func (r *GridRun) runPGBench(ctx context.Context, c *lab.Cluster, d time.Duration) error {
	prefix := filepath.Join(filepath.Dir(c.DataDir()), "grid-log")
	defer pgbench.RemoveLogs(prefix)
	if _, err := pgbench.Run(ctx, c, "-n", "-c", strconv.Itoa(gridClients), "-j", "2", "-T", strconv.Itoa(int(d.Seconds())),
		"-l", "--log-prefix", prefix); err != nil {
		return err
	}
	txns, err := pgbench.ReadLog(prefix)
	if err != nil {
		return err
	}
	lat := pgbench.Latencies(txns)
	r.Txns = float64(len(lat))
	r.TPS = r.Txns / d.Seconds()
	r.P99MS = stats.Percentile(lat, 99) / 1000
	return nil
}

var (
	sysbenchTxns = regexp.MustCompile(`transactions:\s+(\d+)\s+\(([0-9.]+) per sec`)
	sysbenchP99  = regexp.MustCompile(`99th percentile:\s+([0-9.]+)`)
)

func (r *GridRun) runSysbench(ctx context.Context, c *lab.Cluster, d time.Duration) error {
	res, err := RunSysbench(ctx, c, SysbenchWriteOnly, sysbenchThreads, d)
	r.Txns, r.TPS, r.P99MS = res.Txns, res.TPS, res.P99MS
	return err
}

// SysbenchResult is what one sysbench run reports: its transactions, their rate and the p99 of
// their latency.
type SysbenchResult struct {
	Txns, TPS, P99MS float64
}

// RunSysbench runs script for d with threads on the tables InitData(Sysbench) made.
func RunSysbench(ctx context.Context, c *lab.Cluster, script string, threads int, d time.Duration) (SysbenchResult, error) {
	var res SysbenchResult
	out, err := sysbench(ctx, c, script, "--threads="+strconv.Itoa(threads), "--time="+strconv.Itoa(int(d.Seconds())),
		"--percentile=99", "run")
	if err != nil {
		return res, err
	}
	m, p := sysbenchTxns.FindSubmatch(out), sysbenchP99.FindSubmatch(out)
	if m == nil || p == nil {
		return res, fmt.Errorf("no transactions or percentile in sysbench's output: %s", lastLines(out, 8))
	}
	res.Txns, _ = strconv.ParseFloat(string(m[1]), 64)
	res.TPS, _ = strconv.ParseFloat(string(m[2]), 64)
	res.P99MS, _ = strconv.ParseFloat(string(p[1]), 64)
	return res, nil
}

type cpuTimes struct{ idle, total float64 }

// readCPU reads /proc/stat's first line: the host's CPU time, idle and iowait counted idle.
func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Scan()
	f := strings.Fields(sc.Text())
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: %q", sc.Text())
	}
	var t cpuTimes
	for i, s := range f[1:] {
		if i >= 8 { // guest times are counted in user already
			break
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += v
		if i == 3 || i == 4 {
			t.idle += v
		}
	}
	return t, nil
}

func checkpoints(ctx context.Context, c *lab.Cluster) (int64, error) {
	conn, err := c.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	q := "SELECT (checkpoints_timed + checkpoints_req)::int8 FROM pg_stat_bgwriter"
	var v int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&v); err != nil {
		return 0, err
	}
	if v >= 170000 {
		q = "SELECT (num_timed + num_requested)::int8 FROM pg_stat_checkpointer"
	}
	var n int64
	return n, conn.QueryRow(ctx, q).Scan(&n)
}
