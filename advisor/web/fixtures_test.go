package web

import (
	"sync"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// staticSource serves a fixed state; set replaces it (as the advisor's next evaluation would).
type staticSource struct {
	mu sync.Mutex
	st advisor.State
}

func (s *staticSource) State() advisor.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *staticSource) set(st advisor.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = st
}

// fixtureTime is when the fixtures were evaluated.
func fixtureTime() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

func ptr[T any](v T) *T { return &v }

func setting(value string) collector.Setting {
	return collector.Setting{Value: value, Raw: value, Source: "default", Context: "sighup"}
}

// snapshot is a snapshot of a healthy PostgreSQL 16 on an ext4 SSD.
func snapshot() *collector.Snapshot {
	return &collector.Snapshot{
		Time: fixtureTime(),
		Postgres: &collector.Postgres{
			VersionNum: 160004,
			Version:    "16.4",
			Settings: map[string]collector.Setting{
				collector.WALBuffers:        {Value: "16MB", Bytes: ptr(int64(16 << 20)), Raw: "2048", Unit: "8kB", Source: "default", Context: "postmaster"},
				collector.WALSyncMethod:     setting("fdatasync"),
				collector.Fsync:             setting("on"),
				collector.FullPageWrites:    setting("on"),
				collector.SynchronousCommit: setting("on"),
				collector.WALCompression:    setting("off"),
				collector.MaxWALSize:        {Value: "1GB", Bytes: ptr(int64(1 << 30)), Raw: "1024", Unit: "MB", Source: "default", Context: "sighup"},
			},
			WAL: &collector.WALStats{
				Records: 1000, FPI: 10, Bytes: 123456, BuffersFull: 3, Writes: 200, Syncs: 150,
				WriteTimeSeconds: 0.25, SyncTimeSeconds: 1.5,
			},
			Checkpointer: &collector.CheckpointStats{Timed: 7, Requested: 2, WriteTimeSeconds: 30.5, SyncTimeSeconds: 0.75},
			DataDir:      "/var/lib/postgresql/16/main",
			WALDir:       "/var/lib/postgresql/16/main/pg_wal",
			HAManager:    &collector.HAManager{Name: collector.ManagerPatroni, Evidence: "the data directory holds patroni.dynamic.json", Cluster: "main"},
		},
		Kernel: &collector.Kernel{
			VM: collector.VM{
				DirtyBackgroundRatio: 10, DirtyRatio: 20, DirtyExpireCentisecs: 3000, DirtyWritebackCentisecs: 500,
			},
			DirtyBackgroundThresholdBytes: 1 << 30,
			DirtyThresholdBytes:           2 << 30,
		},
		WALStorage: &collector.Storage{
			Path: "/var/lib/postgresql/16/main/pg_wal", Device: "259:2", DeviceName: "nvme0n1p2",
			MountPoint: "/", FSType: "ext4", Rotational: ptr(false), WriteCache: "write through",
			FreeBytes: 50 << 30, TotalBytes: 100 << 30,
			Disks: []collector.Disk{{Name: "nvme0n1", WriteCache: "write through", Model: "Samsung SSD 980 PRO 1TB"}},
		},
		Parts: []collector.Part{
			{Name: collector.PartPostgres, OK: true, DurationSeconds: 0.012},
			{Name: collector.PartKernel, OK: true, DurationSeconds: 0.001},
			{Name: collector.PartWALStorage, OK: true, DurationSeconds: 0.002},
		},
	}
}

func probeReport() *probes.Report {
	return &probes.Report{
		Started:  fixtureTime().Add(-5 * time.Minute),
		Finished: fixtureTime().Add(-5*time.Minute + 2*time.Second),
		Methods: []probes.MethodResult{
			{Name: probes.Fdatasync, WritesPerSync: 1, WriteBytes: probes.BlockBytes, Available: true, Samples: 200,
				LatencyUS: probes.Latency{Mean: 500, P50: 450, P90: 700, P99: 1200}},
			{Name: probes.OpenDatasync, DirectIO: true, WritesPerSync: 1, WriteBytes: probes.BlockBytes, Available: true, Samples: 100,
				LatencyUS: probes.Latency{Mean: 400, P50: 380, P90: 500, P99: 900}},
			// Unavailable methods and open_sync's 16kB series get no series.
			{Name: probes.FsyncWritethrough, WritesPerSync: 1, WriteBytes: probes.BlockBytes, Available: false, Error: "not on Linux"},
			{Name: probes.OpenSync, WritesPerSync: 1, WriteBytes: 16 << 10, Available: true, Samples: 10,
				LatencyUS: probes.Latency{Mean: 900, P50: 900, P90: 900, P99: 900}},
		},
		Durability: probes.Verdict{Status: probes.VerdictPlausible, Reason: "syncs take as long as the device needs"},
	}
}

func healthyState() advisor.State {
	return advisor.State{
		Snapshot:      snapshot(),
		NotEnoughData: map[string]string{"checkpoint-stalls": "need 2 checkpoints in 1h, have 0"},
		Probe:         probeReport(),
		ProbeEnabled:  true,
		WaitEvents: collector.WaitEvents{Samples: 60, ActiveBackends: 120, Counts: map[string]int64{
			collector.EventIOWALSync: 12, collector.EventLWLockWALWrite: 3,
		}},
		Evaluated: fixtureTime(),
	}
}

// fsyncOffState is a server with fsync off, a pending restart, and findings with and without
// a recommendation.
func fsyncOffState() advisor.State {
	st := healthyState()
	snap := snapshot()
	snap.Postgres.Settings[collector.Fsync] = setting("off")
	snap.Postgres.Settings[collector.SynchronousCommit] = setting("off")
	wb := snap.Postgres.Settings[collector.WALBuffers]
	wb.PendingRestart = true
	snap.Postgres.Settings[collector.WALBuffers] = wb
	st.Snapshot = snap
	st.Findings = []rules.Finding{
		{
			Rule: "fsync-off", Severity: rules.Critical, Setting: "fsync", Current: "off", Recommended: "on",
			Action: rules.ActionNeverAuto, Summary: "fsync is off: a crash can corrupt the cluster.",
			Evidence:  []rules.Evidence{{Name: "fsync", Value: 0, Unit: rules.UnitBool}},
			FirstSeen: fixtureTime(), LastSeen: fixtureTime(),
		},
		{
			Rule: "durability-traded-off", Severity: rules.Info, Setting: "synchronous_commit", Current: "off",
			Action: rules.ActionAdvice, Summary: "synchronous_commit is off: the last commits can be lost.",
			FirstSeen: fixtureTime(), LastSeen: fixtureTime(),
		},
	}
	st.Recommendations = rules.Resolve(rules.All(), st.Findings).Recommendations
	return st
}

// probeDisabledState is a server whose probe directory is on another file system, and whose
// storage facts are partly unknown.
func probeDisabledState() advisor.State {
	st := healthyState()
	st.Probe = nil
	st.ProbeEnabled = false
	st.ProbeDisabledReason = `probe directory "/var/lib/pgwal-advisor/probe" is not on the file system of the WAL directory`
	snap := snapshot()
	snap.WALStorage.Rotational = nil
	snap.WALStorage.WriteCache = ""
	snap.WALStorage.DeviceName = ""
	snap.Parts[1] = collector.Part{Name: collector.PartKernel, OK: false, DurationSeconds: 0.0005, Error: "read /proc/meminfo: permission denied"}
	snap.Kernel = nil
	st.Snapshot = snap
	st.Findings = []rules.Finding{{
		Rule: "probe-disabled", Severity: rules.Info, Setting: "probe.dir", Action: rules.ActionAdvice,
		Summary: "Sync probes are off: " + st.ProbeDisabledReason, FirstSeen: fixtureTime(), LastSeen: fixtureTime(),
	}}
	return st
}

// fullState has every metric of docs/metrics.md: a healthy state with findings, a
// recommendation and a pending restart.
func fullState() advisor.State {
	st := fsyncOffState()
	st.Snapshot.WALStorage.WriteCache = "write back"
	return st
}
