package neighbour

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
)

func TestDevice(t *testing.T) {
	d := Calibrated()
	// The writer: 3000 MB take 37.5 s of the device, after the 5 s start and before
	// the 42 s of expiry and margin.
	if got := d.RunSeconds(3000); got != 85 {
		t.Errorf("RunSeconds(3000) = %d, want 85", got)
	}
	if got := d.ThrottleMBps(); got != 40 {
		t.Errorf("ThrottleMBps = %d, want 40 (half of 80 MB/s)", got)
	}
	if got, want := VolumeSize(3000), int64(6<<30); got != want {
		t.Errorf("VolumeSize(3000) = %d, want %d (3 GB and 3 GiB, in whole GiB)", got, want)
	}
	if o := d.Options(); o.BandwidthBytesPerSec != 80_000_000 || o.Latency != time.Millisecond {
		t.Errorf("Options = %+v", o)
	}
}

func TestGrid(t *testing.T) {
	if g := Grid(false); len(g) != 1 || g[0].Name != "dirty 64MB/256MB" || g[0].Kernel["dirty_bytes"] != "268435456" {
		t.Errorf("quick grid = %+v, want dirty 64MB/256MB alone", g)
	}
	full := Grid(true)
	seen := map[string]bool{}
	for _, p := range full {
		if seen[p.Name] || len(p.Kernel) == 0 {
			t.Errorf("grid point %+v: repeated or without knobs", p)
		}
		seen[p.Name] = true
	}
	if len(full) != 7 || !seen["dirty 64MB/512MB (tuned)"] {
		t.Errorf("full grid has %d points (%v), want 7 with tuned's profile", len(full), seen)
	}
}

func TestFigures(t *testing.T) {
	// 4 seconds at t0 = 1000: second 0 calm, second 1 a stall (commits scheduled in it wait
	// 2.5 s), second 2 calm, second 3 the last (left out of the stall count).
	const t0 = 1000.0
	var txns []pgbench.Txn
	for i := range 100 {
		txns = append(txns, pgbench.Txn{Done: t0 + 0.01*float64(i) + 0.002, LatencyUS: 2000}) // second 0
	}
	for i := range 100 {
		txns = append(txns, pgbench.Txn{Done: t0 + 3.6 + 0.001*float64(i), LatencyUS: 2.5e6}) // scheduled at 1.1-1.2
	}
	for i := range 100 {
		txns = append(txns, pgbench.Txn{Done: t0 + 2 + 0.009*float64(i), LatencyUS: 1000})
	}
	samples := []Sample{
		{At: 0, Dirty: 1 << 20, WALOK: true, Syncs: 10, SyncMS: 10},
		{At: 1, Dirty: 2 << 20, Writeback: 1 << 20, WALOK: true, Syncs: 110, SyncMS: 110},
		{At: 2, Dirty: 300 << 20, Writeback: 40 << 20, WALOK: true, Syncs: 112, SyncMS: 2110},
		{At: 3, Dirty: 200 << 20, Writeback: 80 << 20, WALOK: true, Syncs: 212, SyncMS: 2210},
	}
	run := Figures(txns, samples, t0, 4)
	if run.StallSeconds != 1 || run.LongestStall != 1 || run.FirstStall != 1 {
		t.Errorf("stall seconds %d, longest %d, first %d; want 1, 1, 1 (second 1: p99 2.5 s, and 0 commits completed)",
			run.StallSeconds, run.LongestStall, run.FirstStall)
	}
	if got := run.PerSecond.TPS; got[0] != 100 || got[1] != 0 || got[2] != 100 || got[3] != 100 {
		t.Errorf("tps per second %v, want [100 0 100 100]", got)
	}
	if run.DirtyPeakBytes != 300<<20 || run.WritebackPeakBytes != 80<<20 {
		t.Errorf("peaks Dirty %d, Writeback %d", run.DirtyPeakBytes, run.WritebackPeakBytes)
	}
	if got := run.PerSecond.SampledDirty(); got != 3 {
		t.Errorf("%d seconds with a meminfo reading, want 3 (the samples at 1, 2 and 3 s close seconds 0-2)", got)
	}
	// The sample at 2 s closes second 1 (the stall): 2 flushes, 2000 ms; at 1 s and 3 s
	// seconds 0 and 2: 200 flushes, 200 ms.
	if run.WALSyncs != 202 || run.WALSyncStallMS != 1000 || run.WALSyncOutsideMS != 1 {
		t.Errorf("WAL flushes %d, mean in the stall %v ms, outside %v ms; want 202, 1000, 1", run.WALSyncs, run.WALSyncStallMS, run.WALSyncOutsideMS)
	}
	if run.FlushlessSeconds != 0 || run.WALSyncMaxSecondMS != 2000 {
		t.Errorf("%d s without a flush, most flush time in a second %v ms; want 0, 2000", run.FlushlessSeconds, run.WALSyncMaxSecondMS)
	}
	samples[2] = Sample{At: 2, Dirty: 300 << 20, WALOK: true, Syncs: 110, SyncMS: 110} // nothing flushed in second 1
	samples[3] = Sample{At: 3, WALOK: true, Syncs: 112, SyncMS: 2110}
	if run := Figures(txns, samples, t0, 4); run.FlushlessSeconds != 1 || run.WALSyncMaxSecondMS != 2000 || run.PerSecond.WALSyncMS[2] != 2000 {
		t.Errorf("a flush stuck through second 1: %d s without a flush, most in a second %v ms, series %v; want 1, 2000, 2000 in second 2",
			run.FlushlessSeconds, run.WALSyncMaxSecondMS, run.PerSecond.WALSyncMS)
	}
	if !(run.P50LatencyMS <= run.P99LatencyMS && run.P99LatencyMS <= run.MaxLatencyMS) || run.MaxLatencyMS != 2500 {
		t.Errorf("p50 %v, p99 %v, max %v ms", run.P50LatencyMS, run.P99LatencyMS, run.MaxLatencyMS)
	}
}

func TestSummarize(t *testing.T) {
	if Summarize(nil) != nil {
		t.Error("Summarize(nil) is not nil")
	}
	runs := []*Run{{StallSeconds: 9, P99LatencyMS: 30}, {StallSeconds: 1, P99LatencyMS: 10}, {StallSeconds: 4, P99LatencyMS: 20}}
	s := Summarize(runs)
	if s.StallSeconds != 4 || s.StallMin != 1 || s.StallMax != 9 || s.P99MS != 20 || s.Median != runs[2] {
		t.Errorf("Summarize = %+v, want stall 4 (1-9), p99 20 ms, the median run the third", s)
	}
	// An even count shows the lower middle run.
	if s := Summarize(runs[:2]); s.StallSeconds != 5 || s.Median != runs[1] {
		t.Errorf("two runs: stall %v, median run %+v; want 5 and the run of 1 stall second", s.StallSeconds, s.Median)
	}
}

func TestWaitShares(t *testing.T) {
	stall := []bool{false, true, false, false}
	ws := []waitSample{
		{at: 0.25, event: "CPU", n: 1}, {at: 0.5, event: "Client:ClientRead", n: 3},
		{at: 1.25, event: "IO:WALSync", n: 1}, {at: 1.25, event: "LWLock:WALWrite", n: 3},
		{at: 3.5, event: "IO:WALSync", n: 9}, // the last second is out
	}
	in, out := waitShares(ws, stall)
	if in["IO:WALSync"] != 0.25 || in["LWLock:WALWrite"] != 0.75 || len(in) != 2 {
		t.Errorf("shares in the stall %v, want WALSync 0.25, WALWrite 0.75", in)
	}
	if out["CPU"] != 0.25 || out["Client:ClientRead"] != 0.75 || len(out) != 2 {
		t.Errorf("shares outside %v", out)
	}
	if in, _ := waitShares(nil, stall); in != nil {
		t.Errorf("no samples: %v, want nil", in)
	}
}

// TestQueries runs the samplers' queries against a throwaway cluster: the WAL flush counters
// advance with a committed write, and the wait-event query sees an active client backend.
func TestQueries(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"track_wal_io_timing": "on"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wal, err := newWALSyncReader(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer wal.close()
	n0, _, err := wal.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// Backends report their WAL counters when they go idle, at most once a second.
	var n1 int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if n1, _, err = wal.read(ctx); err != nil {
			t.Fatal(err)
		}
		if n1 > n0 {
			break
		}
	}
	if n1 <= n0 {
		t.Errorf("WAL flushes %d before and %d after a commit", n0, n1)
	}

	sleeper, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.Close(context.Background())
	done := make(chan error, 1)
	go func() { _, err := sleeper.Exec(ctx, "SELECT pg_sleep(2)"); done <- err }()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var seen []waitSample
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && len(seen) == 0; time.Sleep(100 * time.Millisecond) {
		if seen, err = readWaits(ctx, conn, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 1 || seen[0].event != "Timeout:PgSleep" || seen[0].n != 1 {
		t.Errorf("wait events while one backend sleeps: %+v, want one Timeout:PgSleep", seen)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestMeasure runs one short run on a throwaway cluster on the host's own disk (no simulated
// disk, so no FUSE or root needed beyond the cluster's): the figures cover every second, the
// clients committed, the log-like writer wrote, and pgbench's logs are gone afterwards.
func TestMeasure(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"track_wal_io_timing": "on"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := pgbench.Run(ctx, c, "-i", "-q", "-s", "1"); err != nil {
		t.Fatal(err)
	}
	rig := &Rig{Cluster: c, Writers: Writers{Dir: t.TempDir(), MB: 2, Logger: zaptest.NewLogger(t)}, ProcFS: "/proc", Logger: zaptest.NewLogger(t)}
	prefix := filepath.Join(filepath.Dir(c.DataDir()), "neighbour-test")
	const secs = 8
	run, err := rig.Measure(ctx, RunConfig{WriterMBps: 1}, secs, prefix)
	if err != nil {
		t.Fatal(err)
	}
	ps := run.PerSecond
	if run.Seconds != secs || len(ps.TPS) != secs || len(ps.P99MS) != secs || len(ps.Stall) != secs || len(ps.Dirty) != secs || len(ps.WALSyncMS) != secs {
		t.Errorf("%d seconds, series of %d, %d, %d, %d, %d entries; want %d each", run.Seconds, len(ps.TPS), len(ps.P99MS), len(ps.Stall),
			len(ps.Dirty), len(ps.WALSyncMS), secs)
	}
	if run.Transactions == 0 || !(run.P50LatencyMS > 0 && run.P50LatencyMS <= run.P99LatencyMS && run.P99LatencyMS <= run.MaxLatencyMS) {
		t.Errorf("%d transactions, latency p50 %v, p99 %v, max %v ms", run.Transactions, run.P50LatencyMS, run.P99LatencyMS, run.MaxLatencyMS)
	}
	if fi, err := os.Stat(filepath.Join(rig.Writers.Dir, "log")); err != nil || fi.Size() == 0 {
		t.Errorf("the log-like writer's file: %v, %v", fi, err)
	}
	if left, _ := filepath.Glob(prefix + ".*"); len(left) != 0 {
		t.Errorf("pgbench's logs left behind: %v", left)
	}
	if err := rig.Writers.Remove(); err != nil {
		t.Fatal(err)
	}
}
