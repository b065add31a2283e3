package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// TestNeighbourQuick runs the quick neighbour scenario end to end (a 300 MB writer; the start,
// one grid point on each queue model): every configuration produced a run whose figures are
// sane, the report renders its table and prose block, and nothing is left behind.
func TestNeighbourQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick neighbour scenario (about four minutes)")
	}
	requireEquipment(t)
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the neighbour scenario needs %s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	vmBefore := readKnobsT(t)
	rep, err := Run(ctx, Options{Quick: true, Scenarios: []string{Neighbour}, Progress: logWriter{t}}, zaptest.NewLogger(t))
	if errors.Is(err, simdisk.ErrNoFUSE) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("quick neighbour scenario: %v", err)
	}
	if len(rep.Scenarios) != 1 || rep.Scenarios[0].ID != Neighbour {
		t.Fatalf("scenarios = %+v, want neighbour alone", rep.Scenarios)
	}
	s := rep.Scenarios[0]
	if s.Advisor == nil || len(s.Advisor.Rounds) == 0 {
		t.Error("no advisor round")
	}
	for _, q := range []string{"serial", "priority"} {
		if nbWith(s, RoleGrid, q) == nil {
			t.Errorf("no grid configuration on the %s queue", q)
		}
	}
	if nbWith(s, RoleStart, "serial") == nil || nbWith(s, RoleAdvisor, "serial") == nil {
		t.Error("no start or advisor configuration on the serial queue")
	}
	secs := nbRunSeconds(sizesFor(true).nbWriterMB)
	for _, c := range s.Configs {
		if len(c.Neighbour) != 1 || len(c.Runs) != 1 {
			t.Errorf("%s: %d runs (%d values), want 1", c.Name, len(c.Neighbour), len(c.Runs))
			continue
		}
		run := c.Neighbour[0]
		if run.Seconds != secs || len(run.PerSecond.P99MS) != secs || len(run.PerSecond.Dirty) != secs {
			t.Errorf("%s: %d seconds, %d p99 and %d Dirty entries, want %d", c.Name, run.Seconds, len(run.PerSecond.P99MS), len(run.PerSecond.Dirty), secs)
		}
		// -R 200 for the whole run: most of the scheduled commits complete even with a stall.
		if run.Transactions < nbRate*secs/4 {
			t.Errorf("%s: %d transactions in %d s at -R %d", c.Name, run.Transactions, secs, nbRate)
		}
		if !(run.P50LatencyMS > 0 && run.P50LatencyMS <= run.P99LatencyMS && run.P99LatencyMS <= run.MaxLatencyMS) {
			t.Errorf("%s: latency p50 %v, p99 %v, max %v ms: want 0 < p50 <= p99 <= max", c.Name, run.P50LatencyMS, run.P99LatencyMS, run.MaxLatencyMS)
		}
		if run.StallSeconds < 0 || run.StallSeconds >= secs || run.LongestStall > run.StallSeconds || float64(run.StallSeconds) != c.Runs[0] {
			t.Errorf("%s: %d stall seconds (longest %d, value %v) in %d s", c.Name, run.StallSeconds, run.LongestStall, c.Runs[0], secs)
		}
		stalls := 0
		for _, st := range run.PerSecond.Stall {
			if st {
				stalls++
			}
		}
		if stalls != run.StallSeconds {
			t.Errorf("%s: %d seconds marked as stalls, %d counted", c.Name, stalls, run.StallSeconds)
		}
		if run.PerSecond.sampledDirty < secs*3/4 {
			t.Errorf("%s: Dirty sampled in %d of %d seconds", c.Name, run.PerSecond.sampledDirty, secs)
		}
		// The bulk writer puts 300 MB through the page cache; every configuration lets at
		// least its 64 MiB background threshold of it be dirty at once.
		if run.DirtyPeakBytes+run.WritebackPeakBytes < 32<<20 {
			t.Errorf("%s: Dirty peak %d, Writeback peak %d bytes: the bulk writer's pages were not seen", c.Name, run.DirtyPeakBytes, run.WritebackPeakBytes)
		}
		if run.WALSyncs == 0 || run.WALSyncMeanMS <= 0 {
			t.Errorf("%s: %d WAL flushes, mean %v ms: want some, timed (track_wal_io_timing)", c.Name, run.WALSyncs, run.WALSyncMeanMS)
		}
	}
	if len(s.Targets) != 2 {
		t.Errorf("%d targets, want 2", len(s.Targets))
	}

	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Neighbour", "stall seconds (median, runs)", "(priority queue)", proseOpen + Neighbour, "p99 ms:"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	t.Log("\n" + md.String())

	if got := readKnobsT(t); got != vmBefore {
		t.Errorf("vm.dirty_* after the scenario = %s, before %s", got, vmBefore)
	}
	checkNothingLeft(t)
}

func TestNBFigures(t *testing.T) {
	// 4 seconds at t0 = 1000: second 0 calm, second 1 a stall (commits scheduled in it wait
	// 2.5 s), second 2 calm, second 3 the last (left out of the stall count).
	const t0 = 1000.0
	var txns []txn
	for i := range 100 {
		txns = append(txns, txn{done: t0 + 0.01*float64(i) + 0.002, latUS: 2000}) // second 0
	}
	for i := range 100 {
		txns = append(txns, txn{done: t0 + 3.6 + 0.001*float64(i), latUS: 2.5e6}) // scheduled at 1.1-1.2
	}
	for i := range 100 {
		txns = append(txns, txn{done: t0 + 2 + 0.009*float64(i), latUS: 1000})
	}
	samples := []nbSample{
		{at: 0, dirty: 1 << 20, walOK: true, syncs: 10, syncMS: 10},
		{at: 1, dirty: 2 << 20, writeback: 1 << 20, walOK: true, syncs: 110, syncMS: 110},
		{at: 2, dirty: 300 << 20, writeback: 40 << 20, walOK: true, syncs: 112, syncMS: 2110},
		{at: 3, dirty: 200 << 20, writeback: 80 << 20, walOK: true, syncs: 212, syncMS: 2210},
	}
	run := nbFigures(txns, samples, t0, 4)
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
	// The sample at 2 s closes second 1 (the stall): 2 flushes, 2000 ms; at 1 s and 3 s
	// seconds 0 and 2: 200 flushes, 200 ms.
	if run.WALSyncs != 202 || run.WALSyncStallMS != 1000 || run.WALSyncOutsideMS != 1 {
		t.Errorf("WAL flushes %d, mean in the stall %v ms, outside %v ms; want 202, 1000, 1", run.WALSyncs, run.WALSyncStallMS, run.WALSyncOutsideMS)
	}
	if run.FlushlessSeconds != 0 || run.WALSyncMaxSecondMS != 2000 {
		t.Errorf("%d s without a flush, most flush time in a second %v ms; want 0, 2000", run.FlushlessSeconds, run.WALSyncMaxSecondMS)
	}
	samples[2] = nbSample{at: 2, dirty: 300 << 20, walOK: true, syncs: 110, syncMS: 110} // nothing flushed in second 1
	samples[3] = nbSample{at: 3, walOK: true, syncs: 112, syncMS: 2110}
	if run := nbFigures(txns, samples, t0, 4); run.FlushlessSeconds != 1 || run.WALSyncMaxSecondMS != 2000 || run.PerSecond.WALSyncMS[2] != 2000 {
		t.Errorf("a flush stuck through second 1: %d s without a flush, most in a second %v ms, series %v; want 1, 2000, 2000 in second 2",
			run.FlushlessSeconds, run.WALSyncMaxSecondMS, run.PerSecond.WALSyncMS)
	}
	if !(run.P50LatencyMS <= run.P99LatencyMS && run.P99LatencyMS <= run.MaxLatencyMS) || run.MaxLatencyMS != 2500 {
		t.Errorf("p50 %v, p99 %v, max %v ms", run.P50LatencyMS, run.P99LatencyMS, run.MaxLatencyMS)
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
	if got := sharesText(in); got != "LWLock:WALWrite 75%, IO:WALSync 25%" {
		t.Errorf("sharesText = %q", got)
	}
	if in, _ := waitShares(nil, stall); in != nil {
		t.Errorf("no samples: %v, want nil", in)
	}
}

// TestNeighbourQueries runs the neighbour scenario's samplers' queries against a throwaway
// cluster: the WAL flush counters advance with a committed write, and the wait-event query
// sees an active client backend.
func TestNeighbourQueries(t *testing.T) {
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

func TestParseTxnLog(t *testing.T) {
	got, err := parseTxnLog(strings.NewReader("0 0 3100 0 1700000000 100 450\n1 1 skipped 0 1700000000 400 5\n2 5 16000000 0 1700000016 250000 15000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (txn{done: 1700000000.0001, latUS: 3100}) || got[1] != (txn{done: 1700000016.25, latUS: 16e6}) {
		t.Errorf("parseTxnLog = %+v", got)
	}
	if _, err := parseTxnLog(strings.NewReader("0 0 x 0 1700000000 100\n")); err == nil {
		t.Error("a malformed line parsed")
	}
}

// TestWriteNeighbourMarkdown renders a neighbour result built from nbFigures: the table, the
// per-second series of the start, the targets and the prose block.
func TestWriteNeighbourMarkdown(t *testing.T) {
	run := func(stallAt int) *NeighbourRun {
		var txns []txn
		for s := range 10 {
			for i := range nbRate {
				lat := 2000.0
				if s == stallAt {
					lat = 3e6
				}
				txns = append(txns, txn{done: 100 + float64(s) + float64(i)/nbRate + lat/1e6, latUS: lat})
			}
		}
		return nbFigures(txns, []nbSample{{at: 1, dirty: 100 << 20, walOK: true}, {at: 2, dirty: 50 << 20, walOK: true, syncs: 5, syncMS: 10}}, 100, 10)
	}
	start := Config{Name: "start", Durable: true, Queue: "serial", Roles: []string{RoleStart, RoleGrid, RoleAdvisor}}
	low := Config{Name: "dirty 64MB/256MB", Durable: true, Queue: "serial", Roles: []string{RoleGrid},
		Kernel: map[string]string{"dirty_background_bytes": "67108864", "dirty_bytes": "268435456"}}
	res := &ScenarioResult{ID: Neighbour, Title: "Neighbour: test", Metric: "stall seconds", Runs: 2,
		Advisor: &AdvisorRun{Rounds: []AdvisorRound{{Round: 1, WindowSeconds: 90}}}}
	for _, c := range []struct {
		cfg  Config
		runs []*NeighbourRun
	}{{start, []*NeighbourRun{run(3), run(4)}}, {low, []*NeighbourRun{run(-1), run(-1)}}} {
		cr := ConfigResult{Config: c.cfg, Neighbour: c.runs}
		for _, r := range c.runs {
			cr.Runs = append(cr.Runs, float64(r.StallSeconds))
		}
		cr.Value = median(cr.Runs)
		res.Configs = append(res.Configs, cr)
	}
	res.GridBest = nbBest(res, "serial")
	res.Targets = append(res.Targets, nbCheckTarget(res), nbAdvisorTarget(res))
	if res.GridBest != "dirty 64MB/256MB" {
		t.Errorf("best = %q, want dirty 64MB/256MB", res.GridBest)
	}
	if tg := res.Targets[1]; !tg.Scored || tg.Met {
		t.Errorf("advisor target %+v: want scored and missed (start 4-5 stall s against the best's 0)", tg)
	}
	var b strings.Builder
	writeScenario(&b, res)
	md := b.String()
	for _, want := range []string{"| start | start, grid, advisor | serial |", "**0.00 (0, 0)**", "- start (", "p99 ms: ", "3", proseOpen + Neighbour, "MISSED"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
