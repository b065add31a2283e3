package apply

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/fullpage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/probes/compression"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// TestFullPageImagesLive is issue 21's live test: pgbench over tables 3.5 times shared_buffers,
// a checkpoint every 30 s, the WAL on the simulated cloud volume (fullpage.Devices: 1 ms a sync, 125 MB/s, 3000 IOPS), so
// that most of the WAL is full-page images. check recommends wal_compression; apply's one-shot
// path sets it; a second check measures the WAL bytes per record, which must fall as the finding
// predicted, within 30%.
func TestFullPageImagesLive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs pgbench on a throwaway cluster for about two minutes: skipped under -short")
	}
	lab.RequireServer(t)
	cloud := fullpage.Devices()[1]
	if cloud.Name != "cloud" {
		t.Fatalf("device profile %s, want cloud", cloud.Name)
	}
	disk := simdisk.MountForTest(t, cloud.Options)
	ctx := context.Background()
	// Registered after the disk's cleanup, so the cluster stops before the disk is unmounted.
	c := lab.NewTestCluster(t, lab.ClusterOptions{WALDir: filepath.Join(disk.Mountpoint(), "wal"), Settings: fullpage.Settings()})
	if err := fullpage.Init(ctx, c, fullpage.TPCB); err != nil {
		t.Fatal(err)
	}
	// From a checkpoint after the tables are made, every page pgbench changes is first changed
	// after one, as on a server that has run for a while; pages the load's first checkpoint
	// interval found already changed since the last one would make fewer images than later.
	if err := c.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	// Rate-limited, so that the CPUs keep room to compress and the images per record do not move
	// with the transactions' speed.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() {
		_, err := c.Command(loadCtx, "pgbench", "-n", "-c", "8", "-j", "2", "-R", "300", "-T", "600").CombinedOutput()
		loadDone <- err
	}()
	t.Cleanup(func() {
		stopLoad()
		<-loadDone
	})
	// The CPU gate (FPIIdleCPUShare of the idle CPUs) is the decide step's to test
	// (rules/decide_test.go); here the suite's other packages share the two CPUs, so the host's
	// idle time is theirs to set, and this test is of the reading, the apply path and the
	// prediction, not of the gate.
	th := rules.DefaultThresholds()
	th.FPIIdleCPUShare = 1
	sampler := func() *advisor.Sampler {
		s := newSampler(t, c)
		s.FullPages = &compression.Source{Gather: 35 * time.Second}
		return s
	}
	cfg := advisor.CheckConfig{Window: 35 * time.Second, Interval: time.Second, WaitInterval: 250 * time.Millisecond, Thresholds: th}

	before, err := advisor.Check(ctx, sampler(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := fullPageFinding(before)
	for rule, why := range before.NotEnoughData {
		t.Logf("not enough data: %s: %s", rule, why)
	}
	if !ok || f.Severity != rules.Warning || f.Predicted == nil || f.Predicted.Name != rules.PredictWALBytesPerRecord {
		t.Fatalf("check: full-page-images finding %+v (present %v), want a warning recommending wal_compression with a prediction; all: %+v",
			f, ok, before.Findings)
	}
	t.Logf("check: %s -> %s: %s; predicted %s %.0f -> %.0f (%s)", f.Current, f.Recommended, f.Summary,
		f.Predicted.Name, f.Predicted.Current, f.Predicted.Value, f.Predicted.Basis)

	// apply --yes: the one-shot path, wal_compression allowed.
	m, err := New(Config{Mode: ModeOn, Settings: []string{collector.WALCompression}, Journal: filepath.Join(t.TempDir(), "apply.journal")},
		nil, []Actuator{newPostgres(t, c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	snap := newSampler(t, c).Sample(ctx)
	st := advisor.State{Snapshot: &snap, Findings: before.Findings, Recommendations: before.Recommendations, Evaluated: snap.Time}
	plan, err := m.Plan(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if plan, err = m.ApplyPlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	applied := false
	for _, p := range plan {
		applied = applied || p.Finding.Setting == collector.WALCompression && p.ID != 0
	}
	if v, _, _ := lab.ReadSetting(t, c, collector.WALCompression); !applied || v != f.Recommended {
		t.Fatalf("after apply: wal_compression = %s (applied %v), want %s; plan %+v", v, applied, f.Recommended, plan)
	}

	after, err := advisor.Check(ctx, sampler(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	measured, ok := rules.MeasurePredicted(f.Predicted.Name, after.History)
	if !ok {
		t.Fatal("wal_bytes_per_record not measurable after the change")
	}
	pc, ok := rules.CheckPrediction(*f.Predicted, measured)
	if !ok {
		t.Fatalf("prediction %+v has no scale", *f.Predicted)
	}
	t.Logf("prediction: %s", pc)
	for _, res := range []*advisor.CheckResult{before, after} {
		b, r, i := res.History.Change(rules.WALBytes), res.History.Change(rules.WALRecords), res.History.Change(rules.WALFPI)
		t.Logf("window: %.0f bytes, %.0f records, %.0f images over %.0f s: %.0f bytes per record, %.3f images per record",
			b.Delta, r.Delta, i.Delta, b.Seconds, b.Delta/r.Delta, i.Delta/r.Delta)
	}
	if math.Abs(pc.Error) > 0.3 || measured >= f.Predicted.Current {
		t.Errorf("WAL bytes per record %.0f -> %.0f, predicted %.0f: error %+.0f%%, want within 30%%",
			f.Predicted.Current, measured, f.Predicted.Value, pc.Error*100)
	}
	// With the images compressed, the rule no longer recommends wal_compression.
	if g, ok := fullPageFinding(after); ok && g.Setting == collector.WALCompression {
		t.Errorf("after apply: still %s %s -> %s", g.Severity, g.Current, g.Recommended)
	}
	select {
	case err := <-loadDone:
		loadDone <- err // for the cleanup
		t.Errorf("pgbench -T 600 ended before the test did: %v", err)
	default:
	}
}

// fullPageFinding is the check's full-page-images finding that recommends a setting, or its
// first one.
func fullPageFinding(res *advisor.CheckResult) (rules.Finding, bool) {
	var first rules.Finding
	found := false
	for _, f := range res.Findings {
		if f.Rule != "full-page-images" {
			continue
		}
		if f.Setting == collector.WALCompression {
			return f, true
		}
		if !found {
			first, found = f, true
		}
	}
	return first, found
}
