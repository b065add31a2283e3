package advisor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestCheckSeed001SingleStatement is seed 001 as its reporter ran it: one
// INSERT ... SELECT generate_series statement, not committed batches, on the 4 ms simulated disk
// from wal_buffers=64kB and open_datasync. pg_stat_wal counts a backend's WAL only when its
// transaction ends, so while the statement runs its counters stay flat; the check, started a
// few seconds into the statement and ended long before it, must judge it from the insert LSN
// and the IO WALWrite wait events and recommend both fixes.
func TestCheckSeed001SingleStatement(t *testing.T) {
	lab.RequireServer(t)
	disk := simdisk.MountForTest(t, simdisk.Options{Latency: 4 * time.Millisecond})
	mnt := disk.Mountpoint()
	probeDir := filepath.Join(mnt, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := lab.NewTestCluster(t, lab.ClusterOptions{
		WALDir:   filepath.Join(mnt, "wal"),
		Settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"},
	})
	ctx := context.Background()

	// 5M rows take minutes here (2M took 131 s: docs/benchmarks.md, seed 001 table): the statement is
	// still running when the check ends, and is cancelled then.
	stmtCtx, cancel := context.WithCancel(ctx)
	started := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := c.BulkInsert(stmtCtx, "foo", 5000000)
		done <- err
	}()
	time.Sleep(3 * time.Second)

	cfg := quickCheck(32 * time.Second) // the measured rules need 30 s of history (Thresholds.MinSpan)
	cfg.ProbeDir = probeDir
	cfg.ProbeBudget = 4 * time.Second
	res, err := Check(ctx, newTestSampler(t, c), cfg, zaptest.NewLogger(t))
	checked := time.Since(started)
	select {
	case err := <-done:
		t.Fatalf("the statement ended (%v) before the check did, after %s: size it up", err, checked)
	default:
	}
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("check ended %s after the statement started, the statement still running", checked.Round(time.Second))

	var estimated bool
	for _, f := range res.Findings {
		t.Logf("%s %s %s: %s -> %s", f.Severity, f.Rule, f.Setting, f.Current, f.Recommended)
		for _, e := range f.Evidence {
			if e.Name == "buffers_full_estimated_from_lsn" && e.Value == 1 {
				estimated = true
			}
		}
	}
	for id, why := range res.NotEnoughData {
		t.Logf("not enough data: %s: %s", id, why)
	}
	got := map[string]rules.Recommendation{}
	for _, r := range res.Recommendations {
		got[r.Setting] = r
	}
	if r, ok := got["wal_sync_method"]; !ok || r.Recommended != "fdatasync" || r.Severity < rules.Warning {
		t.Errorf("one uncommitted statement: wal_sync_method recommendation %+v (present %v), want a warning for fdatasync", r, ok)
	}
	if r, ok := got["wal_buffers"]; !ok || r.Severity < rules.Warning {
		t.Errorf("one uncommitted statement: wal_buffers recommendation %+v (present %v), want a warning", r, ok)
	}
	if !estimated {
		t.Errorf("no finding says its buffer-full writes were estimated from the insert LSN: the statement's WAL was judged some other way")
	}
}
