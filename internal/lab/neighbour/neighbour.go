// Package neighbour is the lab's neighbour equipment (issue: "commit stalls from write-back"):
// rate-limited pgbench clients beside two other writers - a bulk writer through the page cache
// and a log-like writer that fsyncs - on a simulated device, and the figures of how long the
// commits stall while the kernel writes the bulk writer's pages back.
//
// Its parts are meant to be combined by a scenario: a Device and its Rig (Setup puts the
// writers on the database's file system), the Writers, the per-second sampling of commit
// latency, meminfo and WAL flushes that Rig.Measure turns into a Run, and the Grid of
// vm.dirty_* to run them over. The bench's neighbour scenario (internal/lab/bench) runs them
// under both of the simulated disk's queue models and reports the Runs.
package neighbour

import (
	"math"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// The workload beside the writers: four rate-limited clients, as the issue describes it.
const (
	Clients = 4
	Rate    = 200
	// WriterStart is when the bulk writer starts, after the run's start: the seconds before
	// it are the calm the stall is compared with.
	WriterStart = 5 * time.Second
	// A second is a stall second when the commits scheduled in it had a p99 latency above
	// StallLatency (pgbench -R counts latency from the scheduled start, so a user arriving
	// then waited that long), or when fewer than half the rate completed in it.
	StallLatency = time.Second
	// The log-like writer appends LogChunk every LogInterval (2.6 MB/s) and fsyncs every
	// LogFsync, as a logger or a small database beside PostgreSQL would.
	LogChunk    = 64 << 10
	LogInterval = 25 * time.Millisecond
	LogFsync    = time.Second
	// Drained is how little Dirty+Writeback a run waits for before it starts, so that none
	// inherits the write-back of the one before.
	Drained = 64 << 20
	// ThrottleSync is how often the bulk writer under a rate limit (Device.ThrottleMBps)
	// syncs, so that its data does not pile up.
	ThrottleSync = 8 << 20
)

// Device is a simulated device of a neighbour scenario.
type Device struct {
	BandwidthBytesPerSec int64
	Latency              time.Duration
}

// Calibrated is seed 003's device (docs/benchmarks.md, "Seed 003"): 80 MB/s, 1 ms per sync.
func Calibrated() Device {
	return Device{BandwidthBytesPerSec: 80_000_000, Latency: time.Millisecond}
}

// Options are the simulated disk's options for the device.
func (d Device) Options() simdisk.Options {
	return simdisk.Options{Latency: d.Latency, BandwidthBytesPerSec: d.BandwidthBytesPerSec}
}

// RunSeconds is how long one run lasts with the bulk writer's writerMB on this device: the
// writer's start, its data's time on the device at full bandwidth, and 42 s more - the
// kernel's default dirty_expire_centisecs (30 s) plus its write-back interval (5 s) plus a
// margin - because with a background threshold above the writer's size (the start on a large
// machine, ratio 20/40) write-back starts only when the data expires. Every configuration runs
// as long, so their figures compare.
func (d Device) RunSeconds(writerMB int) int {
	drain := float64(writerMB) * 1e6 / float64(d.BandwidthBytesPerSec)
	return int(math.Ceil(WriterStart.Seconds() + drain + 42))
}

// ThrottleMBps is the advice measured: the bulk writer limited to half the device's bandwidth
// (its own rate limit, as pg_basebackup --max-rate or rsync --bwlimit; cgroup v2 io.max does
// it for any writer), syncing every ThrottleSync.
func (d Device) ThrottleMBps() int { return int(d.BandwidthBytesPerSec / 2 / 1_000_000) }

// VolumeSize is the file system that holds the bulk writer's file of writerMB, the log, the
// cluster and its WAL: whole GiB.
func VolumeSize(writerMB int) int64 {
	return (int64(writerMB)*1_000_000 + 3<<30 + 1<<30 - 1) / (1 << 30) * (1 << 30)
}
