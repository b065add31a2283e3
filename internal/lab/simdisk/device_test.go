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

// TestDeviceQueueModels issues a sync and a synchronous (O_DSYNC) write behind N queued plain
// writes: under the serial model both complete after every one of them, under the priority
// model before the first. The device only computes completion times, so the order is exact.
func TestDeviceQueueModels(t *testing.T) {
	const n = 5
	const latency = time.Millisecond
	tests := []struct {
		queue QueueModel
		// before is whether the synchronous work completes before the first queued write.
		before bool
	}{
		{QueueSerial, false},
		{"", false}, // the default is serial
		{QueuePriority, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.queue), func(t *testing.T) {
			dv := newDevice(latency, 0, 1e6, 1)
			dv.setQueue(tt.queue)
			var plain []time.Time
			for range n {
				plain = append(plain, dv.book(t0, 1e6, false, false)) // 1 s of write-back each
			}
			sync := dv.book(t0.Add(10*time.Millisecond), 0, true, true)
			dsyncWrite := dv.book(t0.Add(20*time.Millisecond), 8192, false, true)
			dsync := dv.book(t0.Add(20*time.Millisecond), 0, true, true) // its FSYNC, from the write's arrival
			later := dv.book(t0.Add(30*time.Millisecond), 1e6, false, false)

			first, last := plain[0], plain[n-1]
			for name, at := range map[string]time.Time{"sync": sync, "O_DSYNC write": dsync} {
				if got := at.Before(first); got != tt.before {
					t.Errorf("%s completes at %v, first of %d queued writes at %v: before = %v, want %v", name, at.Sub(t0), n, first.Sub(t0), got, tt.before)
				}
				if !tt.before && !at.After(last) {
					t.Errorf("%s completes at %v, not after the last queued write (%v)", name, at.Sub(t0), last.Sub(t0))
				}
			}
			if dsync.Before(dsyncWrite) {
				t.Errorf("the O_DSYNC write's sync completes at %v, before its write (%v)", dsync.Sub(t0), dsyncWrite.Sub(t0))
			}
			// Plain writes keep their FIFO order, and the bandwidth is conserved: the write
			// queued after everything completes when all the bytes are transferred, plus the
			// medium's time the serial model charges in line.
			for i := 1; i < n; i++ {
				if !plain[i].After(plain[i-1]) {
					t.Errorf("queued write %d completes at %v, not after write %d (%v)", i, plain[i].Sub(t0), i-1, plain[i-1].Sub(t0))
				}
			}
			transfer := time.Duration(float64((n+1)*1e6+8192) / 1e6 * float64(time.Second))
			want := transfer
			if !tt.before {
				want += 2 * latency
			}
			if got := later.Sub(t0); got != want {
				t.Errorf("the write queued last completes at %v, want %v", got, want)
			}
		})
	}
}

func TestParseQueueModel(t *testing.T) {
	for in, want := range map[string]QueueModel{"": QueueSerial, "serial": QueueSerial, "priority": QueuePriority} {
		if got, err := ParseQueueModel(in); err != nil || got != want {
			t.Errorf("ParseQueueModel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseQueueModel("ncq"); err == nil {
		t.Error("ParseQueueModel(\"ncq\") succeeded, want an error")
	}
	if err := (Options{Queue: "fifo"}).validate(); err == nil {
		t.Error("Options{Queue: fifo} validates, want an error")
	}
}

// TestDeviceIOPS: with an IOPS cap, operations arriving together start 1/IOPS apart, with or
// without a bandwidth limit; spaced out below the cap they do not wait.
func TestDeviceIOPS(t *testing.T) {
	dv := newDevice(time.Millisecond, 0, 0, 1)
	dv.setIOPS(1000)
	for i, want := range []time.Duration{1, 2, 3, 4} {
		if got := dv.reserve(t0, 0, true).Sub(t0); got != want*time.Millisecond {
			t.Errorf("sync %d at once: done after %v, want %v", i, got, want*time.Millisecond)
		}
	}
	if got := dv.reserve(t0.Add(10*time.Millisecond), 0, true).Sub(t0); got != 11*time.Millisecond {
		t.Errorf("a sync below the cap: done after %v, want 11ms", got)
	}
	limited := newDevice(0, 0, 1e6, 1)
	limited.setIOPS(100)
	limited.reserve(t0, 1000, false) // 1 ms of transfer, next slot at 10 ms
	if got := limited.reserve(t0, 1000, false).Sub(t0); got != 11*time.Millisecond {
		t.Errorf("second write under 100 IOPS: done after %v, want 11ms (its slot, then 1 ms of transfer)", got)
	}
	if (Options{IOPS: -1}).validate() == nil {
		t.Error("a negative IOPS cap was accepted")
	}
}
