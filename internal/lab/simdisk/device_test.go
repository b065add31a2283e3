package simdisk

import (
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func TestDeviceReserve(t *testing.T) {
	type op struct {
		at    time.Duration // arrival, after t0
		bytes int64
		sync  bool
		want  time.Duration // completion, after t0
	}
	tests := []struct {
		name      string
		latency   time.Duration
		bandwidth int64
		ops       []op
	}{
		{
			name:    "unlimited: a sync costs the latency, concurrent syncs do not queue",
			latency: 4 * time.Millisecond,
			ops: []op{
				{at: 0, sync: true, want: 4 * time.Millisecond},
				{at: 0, sync: true, want: 4 * time.Millisecond},
				{at: time.Millisecond, sync: true, want: 5 * time.Millisecond},
			},
		},
		{
			name:    "unlimited: a write costs nothing",
			latency: 4 * time.Millisecond,
			ops:     []op{{at: 0, bytes: 1 << 30, want: 0}},
		},
		{
			name:      "limited: one serial device, syncs wait behind writes",
			latency:   time.Millisecond,
			bandwidth: 1e6,
			ops: []op{
				{at: 0, bytes: 1e6, want: time.Second},
				{at: 0, bytes: 5e5, want: 1500 * time.Millisecond},
				{at: 10 * time.Millisecond, sync: true, want: 1501 * time.Millisecond},
				{at: 10 * time.Millisecond, bytes: 1000, sync: true, want: 1503 * time.Millisecond},
			},
		},
		{
			name:      "limited: idle time is not banked",
			bandwidth: 1e6,
			ops: []op{
				{at: 0, bytes: 1000, want: time.Millisecond},
				{at: time.Second, bytes: 1000, want: time.Second + time.Millisecond},
			},
		},
		{
			name:      "limited: large writes do not overflow",
			bandwidth: 1e6,
			ops:       []op{{at: 0, bytes: 20e9, want: 20000 * time.Second}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dv := newDevice(tt.latency, 0, tt.bandwidth, 1)
			for i, o := range tt.ops {
				got := dv.reserve(t0.Add(o.at), o.bytes, o.sync).Sub(t0)
				if got != o.want {
					t.Errorf("op %d: completes at %v, want %v", i, got, o.want)
				}
			}
		})
	}
}

func TestDeviceJitter(t *testing.T) {
	const latency, jitter = 2 * time.Millisecond, 3 * time.Millisecond
	costs := func(seed int64) []time.Duration {
		dv := newDevice(latency, jitter, 0, seed)
		var out []time.Duration
		for range 1000 {
			out = append(out, dv.reserve(t0, 0, true).Sub(t0))
		}
		return out
	}
	a, b, c := costs(7), costs(7), costs(8)
	var sum time.Duration
	differs := false
	for i := range a {
		if a[i] < latency || a[i] >= latency+jitter {
			t.Fatalf("cost %v outside [%v, %v)", a[i], latency, latency+jitter)
		}
		if a[i] != b[i] {
			t.Fatalf("same seed, cost %d: %v and %v", i, a[i], b[i])
		}
		differs = differs || a[i] != c[i]
		sum += a[i]
	}
	if !differs {
		t.Error("seeds 7 and 8 gave the same jitter sequence")
	}
	// Uniform: the mean is near latency + jitter/2 (3.5 ms; 1000 draws put it well within 0.2 ms).
	if mean := sum / time.Duration(len(a)); mean < 3300*time.Microsecond || mean > 3700*time.Microsecond {
		t.Errorf("mean cost %v, want about 3.5ms", mean)
	}
}

func TestDeviceSetters(t *testing.T) {
	dv := newDevice(time.Millisecond, 0, 0, 1)
	dv.setLatency(5 * time.Millisecond)
	dv.setJitter(-time.Second)
	dv.setBandwidth(1e6)
	lat, jit, bw := dv.settings()
	if lat != 5*time.Millisecond || jit != 0 || bw != 1e6 {
		t.Errorf("settings = %v, %v, %d; want 5ms, 0, 1000000", lat, jit, bw)
	}
	if got := dv.reserve(t0, 1e6, true).Sub(t0); got != time.Second+5*time.Millisecond {
		t.Errorf("sync write of 1 MB completes after %v, want 1.005s", got)
	}
}
