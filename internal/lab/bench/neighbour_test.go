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

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
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
		if neighbourWith(s, RoleGrid, q) == nil {
			t.Errorf("no grid configuration on the %s queue", q)
		}
	}
	if neighbourWith(s, RoleStart, "serial") == nil || neighbourWith(s, RoleAdvisor, "serial") == nil {
		t.Error("no start or advisor configuration on the serial queue")
	}
	secs := neighbour.Calibrated().RunSeconds(sizesFor(true).nbWriterMB)
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
		if run.Transactions < neighbour.Rate*secs/4 {
			t.Errorf("%s: %d transactions in %d s at -R %d", c.Name, run.Transactions, secs, neighbour.Rate)
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
		if run.PerSecond.SampledDirty() < secs*3/4 {
			t.Errorf("%s: Dirty sampled in %d of %d seconds", c.Name, run.PerSecond.SampledDirty(), secs)
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

func TestSharesText(t *testing.T) {
	in := map[string]float64{"IO:WALSync": 0.25, "LWLock:WALWrite": 0.73, "CPU": 0.02}
	if got := sharesText(in); got != "LWLock:WALWrite 73%, IO:WALSync 25%" {
		t.Errorf("sharesText = %q", got)
	}
	if got := sharesText(nil); got != "-" {
		t.Errorf("sharesText(nil) = %q, want -", got)
	}
}

// TestWriteNeighbourMarkdown renders a neighbour result built from neighbour.Figures: the
// table, the per-second series of the start, the targets and the prose block.
func TestWriteNeighbourMarkdown(t *testing.T) {
	run := func(stallAt int) *neighbour.Run {
		var txns []pgbench.Txn
		for s := range 10 {
			for i := range neighbour.Rate {
				lat := 2000.0
				if s == stallAt {
					lat = 3e6
				}
				txns = append(txns, pgbench.Txn{Done: 100 + float64(s) + float64(i)/neighbour.Rate + lat/1e6, LatencyUS: lat})
			}
		}
		return neighbour.Figures(txns, []neighbour.Sample{{At: 1, Dirty: 100 << 20, WALOK: true}, {At: 2, Dirty: 50 << 20, WALOK: true, Syncs: 5, SyncMS: 10}}, 100, 10)
	}
	start := Config{Name: "start", Durable: true, Queue: "serial", Roles: []string{RoleStart, RoleGrid, RoleAdvisor}}
	low := Config{Name: "dirty 64MB/256MB", Durable: true, Queue: "serial", Roles: []string{RoleGrid},
		Kernel: map[string]string{"dirty_background_bytes": "67108864", "dirty_bytes": "268435456"}}
	res := &ScenarioResult{ID: Neighbour, Title: "Neighbour: test", Metric: "stall seconds", Runs: 2,
		Advisor: &AdvisorRun{Rounds: []AdvisorRound{{Round: 1, WindowSeconds: 90}}}}
	for _, c := range []struct {
		cfg  Config
		runs []*neighbour.Run
	}{{start, []*neighbour.Run{run(3), run(4)}}, {low, []*neighbour.Run{run(-1), run(-1)}}} {
		cr := ConfigResult{Config: c.cfg, Neighbour: c.runs}
		for _, r := range c.runs {
			cr.Runs = append(cr.Runs, float64(r.StallSeconds))
		}
		cr.Value = stats.Median(cr.Runs)
		res.Configs = append(res.Configs, cr)
	}
	res.GridBest = neighbourBest(res, "serial")
	res.Targets = append(res.Targets, neighbourCheckTarget(res), neighbourAdvisorTarget(res))
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
