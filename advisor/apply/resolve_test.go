package apply

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// TestApplyActsOnResolvedRecommendations runs `pgwal-advisor apply --yes` as its command does,
// on seed 001's start on the simulated 4 ms disk (wal_buffers=64kB, open_datasync, a batched
// bulk load), where both wal_sync_method rules fire: check's recommendations name each setting
// once, and apply journals exactly the recommendations it allows, with their values.
func TestApplyActsOnResolvedRecommendations(t *testing.T) {
	lab.RequireServer(t)
	ctx := context.Background()
	disk := simdisk.MountForTest(t, simdisk.Options{Latency: 4 * time.Millisecond})
	mnt := disk.Mountpoint()
	probeDir := filepath.Join(mnt, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered after the disk's cleanup, so the cluster stops before the disk is unmounted.
	c := lab.NewTestCluster(t, lab.ClusterOptions{
		WALDir:   filepath.Join(mnt, "wal"),
		Settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"},
	})
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		// Batches, because pg_stat_wal counts a backend's WAL only at transaction end.
		_, _ = c.BatchedLoad(loadCtx, "foo", 10000000, 20000)
	}()
	sampler := newSampler(t, c)
	// sync-method-slow needs the probe's difference beyond noise; on a shared machine one
	// window sometimes falls short, so a few windows are allowed for both rules to fire.
	var res *advisor.CheckResult
	syncRules := map[string]string{}
	for attempt := 1; attempt <= 3 && len(syncRules) < 2; attempt++ {
		var err error
		res, err = advisor.Check(ctx, sampler, advisor.CheckConfig{
			Window: 32 * time.Second, Interval: time.Second, WaitInterval: 200 * time.Millisecond, // MinSpan is 30 s
			ProbeDir: probeDir, ProbeBudget: 6 * time.Second,
		}, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		clear(syncRules)
		for _, f := range res.Findings {
			t.Logf("check %d: finding %s %s %s: %s -> %s", attempt, f.Severity, f.Rule, f.Setting, f.Current, f.Recommended)
			if f.Setting == collector.WALSyncMethod {
				syncRules[f.Rule] = f.Recommended
			}
		}
		if res.Probe != nil {
			for _, m := range res.Probe.Methods {
				t.Logf("check %d: probe %s x%d: mean %.0f us [%.0f, %.0f], n=%d %s", attempt, m.Name, m.WritesPerSync,
					m.LatencyUS.Mean, m.LatencyUS.CILow, m.LatencyUS.CIHigh, m.Samples, m.Error)
			}
		} else {
			t.Logf("check %d: no probe: %s", attempt, res.ProbeSkipped)
		}
		for rule, why := range res.NotEnoughData {
			t.Logf("check %d: not enough data: %s: %s", attempt, rule, why)
		}
	}
	stopLoad()
	<-loadDone
	if len(syncRules) != 2 {
		t.Fatalf("want both wal_sync_method rules to fire, got %v", syncRules)
	}

	// The JSON contract: .recommendations[].setting unique, each with because[] and overruled[].
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Recommendations []struct {
			Setting, Recommended, Action, Severity string
			Because                                []struct{ Rule, Summary string }
			Overruled                              *[]struct{ Rule, Recommended, Reason string }
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, r := range doc.Recommendations {
		t.Logf("recommendation %s=%s (%s, %s) because %+v overruled %+v", r.Setting, r.Recommended, r.Action, r.Severity, r.Because, r.Overruled)
		if _, dup := want[r.Setting]; dup {
			t.Errorf("two recommendations for %s", r.Setting)
		}
		want[r.Setting] = r.Recommended
		if len(r.Because) == 0 || r.Overruled == nil || r.Action == "" || r.Severity == "" {
			t.Errorf("%s: because %v, overruled %v, action %q, severity %q: want them all", r.Setting, r.Because, r.Overruled, r.Action, r.Severity)
		}
	}
	if want[collector.WALSyncMethod] == "" {
		t.Fatalf("no wal_sync_method recommendation in %s", b)
	}

	// apply --yes, as cmd/pgwal-advisor/apply.go wires it.
	snap := sampler.Sample(ctx)
	st := advisor.State{Snapshot: &snap, Findings: res.Findings, Recommendations: res.Recommendations, Probe: res.Probe,
		ProbeEnabled: res.Probe != nil, ProbeDisabledReason: res.ProbeSkipped}
	journal := filepath.Join(t.TempDir(), "apply.journal")
	m, err := New(Config{Mode: ModeOn, Settings: DefaultSettings(), Journal: journal}, nil,
		[]Actuator{newPostgres(t, c.DSN())}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := m.Plan(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]string{}
	for _, p := range plan {
		t.Logf("plan %s=%s: refused %q skipped %q", p.Finding.Setting, p.Finding.Recommended, p.Refused, p.Skipped)
		if got, ok := want[p.Finding.Setting]; !ok || got != p.Finding.Recommended {
			t.Errorf("plan proposes %s=%s, which is not a recommendation (%v)", p.Finding.Setting, p.Finding.Recommended, want)
		}
		if _, dup := allowed[p.Finding.Setting]; dup {
			t.Errorf("plan proposes %s twice", p.Finding.Setting)
		}
		if p.Allowed() {
			allowed[p.Finding.Setting] = p.Finding.Recommended
		}
	}
	if len(plan) != len(want) {
		t.Errorf("plan has %d proposals for %d recommendations", len(plan), len(want))
	}
	if allowed[collector.WALSyncMethod] != want[collector.WALSyncMethod] {
		t.Fatalf("wal_sync_method=%s is not allowed by the plan", want[collector.WALSyncMethod])
	}
	if _, err := m.ApplyPlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	recs, _, err := NewJournal(journal).Read()
	if err != nil {
		t.Fatal(err)
	}
	journaled := map[string]string{}
	for _, r := range recs {
		if r.Kind == KindIntent {
			if _, dup := journaled[r.Setting]; dup {
				t.Errorf("journal has two intents for %s", r.Setting)
			}
			journaled[r.Setting] = r.New
		}
	}
	if len(journaled) != len(allowed) {
		t.Errorf("journaled %v, want exactly %v", journaled, allowed)
	}
	for s, v := range allowed {
		if journaled[s] != v {
			t.Errorf("journaled %s=%q, want %q", s, journaled[s], v)
		}
	}
	if v, _, _ := lab.ReadSetting(t, c, collector.WALSyncMethod); v != want[collector.WALSyncMethod] {
		t.Errorf("wal_sync_method = %s after apply, want %s", v, want[collector.WALSyncMethod])
	}
}
