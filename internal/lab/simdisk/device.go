package simdisk

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// QueueModel is how a bandwidth-limited disk orders the work queued on it.
type QueueModel string

const (
	// QueueSerial is one FIFO queue: every operation starts when the one before it has
	// finished, so a sync issued behind queued write-back waits for all of it to drain. The
	// default, and the model every figure in docs/benchmarks.md before the neighbour scenario
	// was measured on.
	QueueSerial QueueModel = "serial"
	// QueuePriority is closer to a device with a write cache and a command queue (NCQ): a sync
	// (fsync, a cache flush) and a synchronous write (O_SYNC/O_DSYNC) are served ahead of
	// queued plain writes, and a sync waits only for synchronous work booked before it. A flush
	// promises durability only for writes that had completed when it was issued (the Linux
	// block layer orders the rest itself: a journal commit waits for its data writes to
	// complete before it issues the flush), and on this write-through device a completed write
	// is already durable, so a flush never waits for plain writes still queued. Plain writes
	// keep their order among themselves and give up the bandwidth synchronous transfers take.
	QueuePriority QueueModel = "priority"
)

// ParseQueueModel reads a queue model name; "" is the default, serial.
func ParseQueueModel(s string) (QueueModel, error) {
	switch QueueModel(s) {
	case "", QueueSerial:
		return QueueSerial, nil
	case QueuePriority:
		return QueuePriority, nil
	}
	return "", fmt.Errorf("queue model %q: want serial or priority", s)
}

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
	queue     QueueModel
	// cursor is when the serial device finishes the work queued so far; with the priority
	// model, when the plain (background) writes queued so far are done. Used only with a
	// bandwidth limit; a cursor in the past means the device is idle (idle time is not banked).
	cursor time.Time
	// syncCursor is, with the priority model, when the synchronous work queued so far is done.
	syncCursor time.Time
	// iops caps the operations (writes and syncs) started per second; 0 means no cap. opCursor
	// is when the next operation may start: each one takes 1/iops of it, as a cloud volume's
	// provisioned IOPS do (a token bucket without a burst balance).
	iops     int64
	opCursor time.Time
}

func newDevice(latency, jitter time.Duration, bandwidth, seed int64) *device {
	return &device{
		latency:   latency,
		jitter:    jitter,
		bandwidth: bandwidth,
		queue:     QueueSerial,
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

func (dv *device) setIOPS(perSec int64) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.iops = max(perSec, 0)
}

func (dv *device) setQueue(q QueueModel) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if q == "" {
		q = QueueSerial
	}
	dv.queue = q
}

func (dv *device) queueModel() QueueModel {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	return dv.queue
}

// settings returns the current latency, jitter and bandwidth.
func (dv *device) settings() (latency, jitter time.Duration, bandwidth int64) {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	return dv.latency, dv.jitter, dv.bandwidth
}

// reserve books an operation that arrives at now, transfers bytes and, when sync is set, waits
// for the medium (the configured latency plus jitter drawn uniformly from [0, jitter)). It
// returns when the operation completes. A sync is synchronous work for the priority model.
//
// Without a bandwidth limit operations do not queue: each sync pays its latency on its own, as
// on a device with a deep command queue - what lets group commit scale (docs/benchmarks.md, seed 002 table).
// With a limit and the serial model the disk is one serial device: an operation starts when the
// one before it has finished, so a sync issued behind a large write waits for that write to
// drain (seed 003). The priority model is QueuePriority's.
func (dv *device) reserve(now time.Time, bytes int64, sync bool) time.Time {
	return dv.book(now, bytes, sync, sync)
}

// book is reserve with the operation's class spelt out: urgent marks synchronous work (a sync,
// or the write of an O_SYNC/O_DSYNC write(2), whose sync is booked separately), which the
// priority model serves ahead of plain writes.
func (dv *device) book(now time.Time, bytes int64, sync, urgent bool) time.Time {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	if dv.iops > 0 {
		// An operation past the cap waits for its slot before anything else happens to it.
		now = later(now, dv.opCursor)
		dv.opCursor = now.Add(time.Duration(float64(time.Second) / float64(dv.iops)))
	}
	var medium time.Duration
	if sync {
		medium = dv.latency
		if dv.jitter > 0 {
			medium += time.Duration(dv.rng.Int64N(int64(dv.jitter)))
		}
	}
	if dv.bandwidth <= 0 {
		return now.Add(medium)
	}
	var transfer time.Duration
	if bytes > 0 {
		// Computed in float64: bytes*1e9 overflows int64 above about 9 GB.
		transfer = time.Duration(float64(bytes) / float64(dv.bandwidth) * float64(time.Second))
	}
	if dv.queue != QueuePriority || !urgent {
		start := later(now, dv.cursor)
		dv.cursor = start.Add(transfer + medium)
		return dv.cursor
	}
	// Synchronous work queues only behind synchronous work. Its transfer takes the medium's
	// bandwidth from the plain writes: those not yet started move back by it (those already
	// booked keep their completion times, a simplification that overlaps a small synchronous
	// transfer with the plain write in progress).
	start := later(now, dv.syncCursor)
	dv.syncCursor = start.Add(transfer + medium)
	if transfer > 0 {
		dv.cursor = later(start, dv.cursor).Add(transfer)
	}
	return dv.syncCursor
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
