package rules

import (
	"fmt"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Counter names one cumulative counter of a snapshot. What a counter is called, when it
// resets and how it is read is one entry of counterTable; the constant only gives the entry a
// name the rules can use.
type Counter int

// Counters the rules read. Times are in seconds. The order carries no meaning: each constant
// is looked up in counterTable by value.
const (
	WALRecords Counter = iota + 1
	WALFPI
	WALBytes
	WALBuffersFull
	WALWrites
	WALSyncs
	WALWriteSeconds
	WALSyncSeconds
	CheckpointsTimed
	CheckpointsRequested
	CheckpointsDone
	CheckpointWriteSeconds
	CheckpointSyncSeconds
	CheckpointBuffersWritten
	DiskWrites
	DiskWriteBytes
	DiskWriteSeconds
	DiskFlushes
	DiskFlushSeconds
	WALInsertBytes
	CPUSeconds
	CPUIdleSeconds
	// counterEnd is one past the last counter; a new counter goes before it.
	counterEnd
)

// counterDef is one counter: the name the evidence and the rates use, the epoch that tells
// when it was reset (which also says whether a snapshot has its source at all), and how to
// read its value once the source is there. Every function is a plain function, not a
// closure, so that building the table allocates nothing.
type counterDef struct {
	name  string
	epoch func(s *collector.Snapshot) (epoch, bool)
	value func(s *collector.Snapshot) (float64, bool)
}

// counterTable holds every counter, indexed by its constant. It is returned by value (an
// array) so that the table stays a constant of the code rather than a global.
func counterTable() [counterEnd]counterDef {
	return [counterEnd]counterDef{
		WALRecords:      {"wal_records", walEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.WAL.Records), true }},
		WALFPI:          {"wal_fpi", walEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.WAL.FPI), true }},
		WALBytes:        {"wal_bytes", walEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.WAL.Bytes), true }},
		WALBuffersFull:  {"wal_buffers_full", walEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.WAL.BuffersFull), true }},
		WALWrites:       {"wal_write", walEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.WAL.Writes), true }},
		WALSyncs:        {"wal_sync", walEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.WAL.Syncs), true }},
		WALWriteSeconds: {"wal_write_time_seconds", walEpoch, func(s *collector.Snapshot) (float64, bool) { return s.Postgres.WAL.WriteTimeSeconds, true }},
		WALSyncSeconds:  {"wal_sync_time_seconds", walEpoch, func(s *collector.Snapshot) (float64, bool) { return s.Postgres.WAL.SyncTimeSeconds, true }},

		CheckpointsTimed:     {"checkpoints_timed", checkpointEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.Checkpointer.Timed), true }},
		CheckpointsRequested: {"checkpoints_requested", checkpointEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.Postgres.Checkpointer.Requested), true }},
		// num_done exists from PostgreSQL 18 only.
		CheckpointsDone: {"checkpoints_done", checkpointEpoch, func(s *collector.Snapshot) (float64, bool) {
			if d := s.Postgres.Checkpointer.Done; d != nil {
				return float64(*d), true
			}
			return 0, false
		}},
		CheckpointWriteSeconds: {"checkpoint_write_time_seconds", checkpointEpoch, func(s *collector.Snapshot) (float64, bool) { return s.Postgres.Checkpointer.WriteTimeSeconds, true }},
		CheckpointSyncSeconds:  {"checkpoint_sync_time_seconds", checkpointEpoch, func(s *collector.Snapshot) (float64, bool) { return s.Postgres.Checkpointer.SyncTimeSeconds, true }},
		CheckpointBuffersWritten: {"checkpoint_buffers_written", checkpointEpoch, func(s *collector.Snapshot) (float64, bool) {
			return float64(s.Postgres.Checkpointer.BuffersWritten), true
		}},

		DiskWrites:       {"disk_writes", diskEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.WALStorage.IO.Writes), true }},
		DiskWriteBytes:   {"disk_write_bytes", diskEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.WALStorage.IO.WriteBytes), true }},
		DiskWriteSeconds: {"disk_write_time_seconds", diskEpoch, func(s *collector.Snapshot) (float64, bool) { return s.WALStorage.IO.WriteTimeSeconds, true }},
		DiskFlushes:      {"disk_flushes", diskEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(s.WALStorage.IO.Flushes), true }},
		DiskFlushSeconds: {"disk_flush_time_seconds", diskEpoch, func(s *collector.Snapshot) (float64, bool) { return s.WALStorage.IO.FlushTimeSeconds, true }},

		// The insert LSN as a byte count: WAL generated, including that of transactions still
		// running, which pg_stat_wal.wal_bytes counts only when they end.
		WALInsertBytes: {"wal_insert_lsn_bytes", lsnEpoch, func(s *collector.Snapshot) (float64, bool) { return float64(*s.Postgres.WALInsertLSN), true }},

		// The host's CPU time summed over CPUs (/proc/stat), and the part no task used.
		CPUSeconds:     {"cpu_seconds", cpuEpoch, func(s *collector.Snapshot) (float64, bool) { return s.Kernel.CPU.TotalSeconds, true }},
		CPUIdleSeconds: {"cpu_idle_seconds", cpuEpoch, func(s *collector.Snapshot) (float64, bool) { return s.Kernel.CPU.IdleSeconds, true }},
	}
}

// Counters lists every counter, in constant order.
func Counters() []Counter {
	out := make([]Counter, 0, counterEnd-1)
	for c := Counter(1); c < counterEnd; c++ {
		out = append(out, c)
	}
	return out
}

// def returns the counter's table entry; false for a value that is not a counter.
func (c Counter) def() (counterDef, bool) {
	if c < 1 || c >= counterEnd {
		return counterDef{}, false
	}
	d := counterTable()[c]
	return d, d.value != nil
}

// String names the counter as the evidence does.
func (c Counter) String() string {
	if d, ok := c.def(); ok {
		return d.name
	}
	return fmt.Sprintf("counter(%d)", int(c))
}

// Value returns the counter's reading in s and whether s has it. It is what the rules see,
// so that an exporter of the same counter reports the same number.
func (c Counter) Value(s *collector.Snapshot) (float64, bool) {
	v, _, ok := c.read(s)
	return v, ok
}

// epoch identifies the life of a counter: when any part of it changes between two snapshots
// the counter was reset (server restart, pg_stat_reset_shared, another block device) and the
// difference between the two readings means nothing.
type epoch struct {
	start, reset time.Time
	device       string
}

func (e epoch) equal(o epoch) bool {
	return e.start.Equal(o.start) && e.reset.Equal(o.reset) && e.device == o.device
}

// read returns the counter's value in s, its epoch, and whether s has it.
func (c Counter) read(s *collector.Snapshot) (float64, epoch, bool) {
	d, ok := c.def()
	if !ok {
		return 0, epoch{}, false
	}
	e, ok := d.epoch(s)
	if !ok {
		return 0, epoch{}, false
	}
	v, ok := d.value(s)
	if !ok {
		return 0, epoch{}, false
	}
	return v, e, true
}

// walEpoch is the life of a pg_stat_wal counter: the server's and its stats_reset's. False
// when the snapshot has no WAL statistics (below PostgreSQL 14, or the server was not reached).
func walEpoch(s *collector.Snapshot) (epoch, bool) {
	if s.Postgres == nil || s.Postgres.WAL == nil {
		return epoch{}, false
	}
	return epoch{start: s.Postgres.StartTime, reset: s.Postgres.WAL.StatsReset}, true
}

// lsnEpoch is the life of the insert LSN. An LSN never goes back on one server, across
// restarts and stats resets alike, so it has no epoch of its own: a decrease (another server
// behind the same address, a restore) is caught as a reset by the reading going down. False on
// a standby, which inserts no WAL, and when the position could not be read.
func lsnEpoch(s *collector.Snapshot) (epoch, bool) {
	if s.Postgres == nil || s.Postgres.WALInsertLSN == nil {
		return epoch{}, false
	}
	return epoch{}, true
}

// checkpointEpoch is the life of a checkpointer counter (pg_stat_bgwriter or
// pg_stat_checkpointer): the server's and its stats_reset's.
func checkpointEpoch(s *collector.Snapshot) (epoch, bool) {
	if s.Postgres == nil || s.Postgres.Checkpointer == nil {
		return epoch{}, false
	}
	return epoch{start: s.Postgres.StartTime, reset: s.Postgres.Checkpointer.StatsReset}, true
}

// diskEpoch is the life of a block-device counter of the WAL's device. The counters restart at
// boot; a reboot also restarts PostgreSQL, but the counters going down catches it either way.
// Another device under the WAL starts another epoch.
func diskEpoch(s *collector.Snapshot) (epoch, bool) {
	if s.WALStorage == nil || s.WALStorage.IO == nil {
		return epoch{}, false
	}
	return epoch{device: s.WALStorage.Device + "/" + s.WALStorage.DeviceName}, true
}

// cpuEpoch is the life of the host's CPU counters: one boot (btime). False when the snapshot
// has no CPU times.
func cpuEpoch(s *collector.Snapshot) (epoch, bool) {
	if s.Kernel == nil || s.Kernel.CPU == nil {
		return epoch{}, false
	}
	return epoch{start: s.Kernel.CPU.BootTime}, true
}
