package probes

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

func TestSchedulerConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  SchedulerConfig
		want string // "" for accepted
	}{
		{"defaults", SchedulerConfig{Probe: Config{Dir: "/x"}}, ""},
		{"burst too short", SchedulerConfig{Burst: time.Millisecond}, "too short"},
		{"interval shorter than burst", SchedulerConfig{Burst: time.Second, Interval: 500 * time.Millisecond}, "shorter than the burst"},
		{"window of one", SchedulerConfig{Window: 1}, "window"},
		{"bad method", SchedulerConfig{Probe: Config{Methods: []string{"nosync"}}}, "unknown sync method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewScheduler(tt.cfg, nil)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("NewScheduler: %v", err)
				}
				// The documented cost: 2 s every 5 minutes.
				if got := s.DutyCycle(); !near(got, 2.0/300, 1e-12) {
					t.Errorf("DutyCycle = %g, want %g", got, 2.0/300)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewScheduler error = %v, want a ConfigError saying %q", err, tt.want)
			}
		})
	}
}

func TestSchedulerRun(t *testing.T) {
	dir := t.TempDir()
	const window = 40
	s, err := NewScheduler(SchedulerConfig{
		Probe:    Config{Dir: dir, Methods: []string{Fdatasync, OpenDatasync}},
		Burst:    150 * time.Millisecond,
		Interval: 200 * time.Millisecond,
		Window:   window,
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.Latest() != nil {
		t.Fatal("a report before any burst")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// Readers race the bursts (run with -race to check the locking).
	var wg sync.WaitGroup
	stopReaders := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				if r := s.Latest(); r != nil {
					_ = r.Durability.Status
					_ = len(r.Methods)
				}
			}
		}()
	}

	// Wait (generously, without asserting on time) for three bursts.
	var rep *Report
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if rep = s.Latest(); rep != nil && rep.Bursts >= 3 {
			break
		}
	}
	if rep == nil || rep.Bursts < 3 {
		t.Fatalf("no report of three bursts: %+v", rep)
	}
	if len(probeFiles(t, dir)) != 1 {
		t.Errorf("want the one probe file kept between bursts, found %v", probeFiles(t, dir))
	}
	if rep.Stop != StopContinuous {
		t.Errorf("Stop = %q", rep.Stop)
	}
	for _, m := range rep.Methods {
		if m.Available && (m.Samples == 0 || m.Samples > window) {
			t.Errorf("%s %d: %d samples, want 1..%d (the window)", m.Name, m.WritesPerSync, m.Samples, window)
		}
	}

	rot := true
	s.SetFacts(DeviceFacts{FSType: "ext4", Rotational: &rot, WriteCache: "write back"})
	if got := s.Latest().Durability; got.Facts.Rotational == nil || got.Evidence["rotational"] != 1 {
		t.Errorf("SetFacts did not re-judge: %+v", got)
	}

	close(stopReaders)
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil on cancellation", err)
	}
	assertNoProbeFile(t, dir)
}

func TestSchedulerRefusesDir(t *testing.T) {
	s, err := NewScheduler(SchedulerConfig{Probe: Config{Dir: "/nonexistent/probe"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// A refused directory pauses probing and is retried later: Run keeps going, Refused says why.
	for s.Refused() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	var ce *ConfigError
	if err := s.Refused(); !errors.As(err, &ce) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Refused = %v, want a ConfigError naming the missing directory", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil on cancellation", err)
	}
}
