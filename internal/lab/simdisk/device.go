package simdisk

import (
	"math/rand/v2"
	"sync"
	"time"
)

// device is the timing model of the simulated disk: what a sync and a write cost, and, when a
// bandwidth limit is set, the queue that makes the disk one serial device.
//
// It only computes when an operation completes; the caller waits. Keeping the arithmetic apart
// from the waiting keeps it testable without FUSE and without sleeping.
type device struct {
	mu        sync.Mutex
	latency   time.Duration
	jitter    time.Duration
	bandwidth int64      // bytes per second; 0 means unlimited
	rng       *rand.Rand // owned by this device, so a seed reproduces its jitter sequence
	// cursor is when the serial device finishes the work queued so far. Used only with a
	// bandwidth limit; a cursor in the past means the device is idle (idle time is not banked).
	cursor time.Time
}

func newDevice(latency, jitter time.Duration, bandwidth, seed int64) *device {
	return &device{
		latency:   latency,
		jitter:    jitter,
		bandwidth: bandwidth,
		rng:       rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
	}
}

func (dv *device) setLatency(d time.Duration) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.latency = max(d, 0)
}

func (dv *device) setJitter(d time.Duration) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.jitter = max(d, 0)
}

func (dv *device) setBandwidth(bytesPerSec int64) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.bandwidth = max(bytesPerSec, 0)
}

// settings returns the current latency, jitter and bandwidth.
func (dv *device) settings() (latency, jitter time.Duration, bandwidth int64) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	return dv.latency, dv.jitter, dv.bandwidth
}

// reserve books an operation that arrives at now, transfers bytes and, when sync is set, waits
// for the medium (the configured latency plus jitter drawn uniformly from [0, jitter)). It
// returns when the operation completes.
//
// Without a bandwidth limit operations do not queue: each sync pays its latency on its own, as
// on a device with a deep command queue - what lets group commit scale (docs/benchmarks.md, seed 002 table).
// With a limit the disk is one serial device: an operation starts when the one before it has
// finished, so a sync issued behind a large write waits for that write to drain (seed 003).
func (dv *device) reserve(now time.Time, bytes int64, sync bool) time.Time {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	var cost time.Duration
	if sync {
		cost = dv.latency
		if dv.jitter > 0 {
			cost += time.Duration(dv.rng.Int64N(int64(dv.jitter)))
		}
	}
	if dv.bandwidth <= 0 {
		return now.Add(cost)
	}
	if bytes > 0 {
		// Computed in float64: bytes*1e9 overflows int64 above about 9 GB.
		cost += time.Duration(float64(bytes) / float64(dv.bandwidth) * float64(time.Second))
	}
	start := now
	if dv.cursor.After(start) {
		start = dv.cursor
	}
	dv.cursor = start.Add(cost)
	return dv.cursor
}
