package advisor

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func TestAdvisorRunPublishesState(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"fsync": "off"}})
	a, err := New(newTestSampler(t, c), Config{Interval: 200 * time.Millisecond, WaitInterval: 50 * time.Millisecond, HistoryWindow: time.Minute}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if st := a.State(); st.Snapshot != nil {
		t.Fatalf("state before Run has a snapshot")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	var runErr error
	go func() {
		defer wg.Done()
		runErr = a.Run(ctx)
	}()
	deadline := time.Now().Add(20 * time.Second)
	var st State
	for time.Now().Before(deadline) {
		// Concurrent readers while the loop writes: run with -race.
		if st = a.State(); st.Snapshot != nil && st.WaitEvents.Samples > 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("Run returned %v after cancel, want nil", runErr)
	}
	if st.Snapshot == nil {
		t.Fatal("no snapshot published within 20 s")
	}
	if f, ok := findingFor(st.Findings, "fsync-off"); !ok || f.Severity != rules.Critical {
		t.Errorf("fsync-off not among the published findings: %+v", st.Findings)
	}
	if st.ProbeEnabled || st.ProbeDisabledReason == "" {
		t.Errorf("without a probe dir: ProbeEnabled=%v reason=%q, want off with a reason", st.ProbeEnabled, st.ProbeDisabledReason)
	}
	if _, ok := findingFor(st.Findings, "probe-disabled"); !ok {
		t.Errorf("no probe-disabled finding without a probe dir")
	}
	if st.WaitEvents.Samples <= 2 {
		t.Errorf("wait-event samples summed = %d, want > 2", st.WaitEvents.Samples)
	}
}

func TestAdvisorConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Interval: time.Minute, HistoryWindow: time.Minute},
		{Interval: -time.Second},
	} {
		if _, err := New(&Sampler{}, cfg, nil); err == nil {
			t.Errorf("New(%+v) accepted a bad configuration", cfg)
		}
	}
}

func TestAdvisorInheritKeepsHistory(t *testing.T) {
	cfg := Config{Interval: time.Second, HistoryWindow: time.Minute}
	prev, err := New(&Sampler{}, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := 0; i < 5; i++ {
		prev.Observe(collector.Snapshot{Time: t0.Add(time.Duration(i) * time.Second)})
	}
	// A reload to a shorter window keeps the newest snapshots that fit.
	next, err := New(&Sampler{}, Config{Interval: time.Second, HistoryWindow: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	next.Inherit(prev)
	if got, want := next.history.Len(), 3; got != want {
		t.Errorf("inherited history holds %d snapshots, want %d (the new window's limit)", got, want)
	}
	if st := next.State(); st.Snapshot == nil || !st.Snapshot.Time.Equal(t0.Add(4*time.Second)) {
		t.Errorf("inherited state's snapshot = %v, want the previous advisor's latest", st.Snapshot)
	}
}
