// Package collector defines what one sample of a database host holds: PostgreSQL's WAL and
// checkpoint statistics and settings, the kernel's dirty-page state, the WAL directory's storage
// and which processes wrote. The types here are plain data so that the rules can be pure
// functions of them; the subpackages postgres, kernel, storage and writers read them from a
// server, a procfs root and a sysfs root.
package collector

import "time"

// Snapshot is one timestamped sample of a host. A part that could not be collected is nil and
// its Part entry says why; the rest of the snapshot is still filled in.
type Snapshot struct {
	Time       time.Time `json:"time"`
	Postgres   *Postgres `json:"postgres,omitempty"`
	Kernel     *Kernel   `json:"kernel,omitempty"`
	WALStorage *Storage  `json:"wal_storage,omitempty"`
	// Writers is who wrote since the previous snapshot (collector/writers).
	Writers *Writers `json:"writers,omitempty"`
	// FullPages is the latest reading of the WAL's full-page images and what compressing them
	// costs (probes/compression): read every few minutes, so snapshots in between repeat it.
	FullPages *FullPages `json:"full_pages,omitempty"`
	// Parts reports, per source ("postgres", "kernel", "wal_storage", "writers", "full_pages"), how the
	// collection went.
	Parts []Part `json:"parts"`
}

// Part is the outcome of collecting one source of a snapshot.
type Part struct {
	Name            string  `json:"name"`
	OK              bool    `json:"ok"`
	DurationSeconds float64 `json:"duration_seconds"`
	// Error says what failed and what to do about it; empty when OK.
	Error string `json:"error,omitempty"`
	// Status is, for the postgres part, whether the advisor could use the server: one of the
	// Target* values; empty where the source does not say.
	Status string `json:"status,omitempty"`
}

// What the postgres part's Status says about the target server.
const (
	TargetOK = "ok"
	// TargetUnreachable: no connection, or the server did not answer within the query timeout.
	TargetUnreachable = "unreachable"
	// TargetUnauthenticated: the server refused the role (password, unknown role, pg_hba.conf).
	TargetUnauthenticated = "unauthenticated"
	// TargetMissingPrivileges: connected, but the role lacks pg_monitor's privileges.
	TargetMissingPrivileges = "missing_privileges"
)

// Part returns the named part and whether it is present.
func (s *Snapshot) Part(name string) (Part, bool) {
	for _, p := range s.Parts {
		if p.Name == name {
			return p, true
		}
	}
	return Part{}, false
}

// Names of the parts of a snapshot.
const (
	PartPostgres   = "postgres"
	PartKernel     = "kernel"
	PartWALStorage = "wal_storage"
	PartWriters    = "writers"
	PartFullPages  = "full_pages"
)

// Postgres is what one connection to the server tells.
type Postgres struct {
	// VersionNum is server_version_num, e.g. 150004.
	VersionNum int    `json:"version_num"`
	Version    string `json:"version"`
	// StartTime is pg_postmaster_start_time(): a change means the server restarted.
	StartTime  time.Time `json:"start_time"`
	InRecovery bool      `json:"in_recovery"`
	// SystemIdentifier is pg_control_system()'s: initdb draws it, a physical standby shares its
	// primary's. With InRecovery it tells a switchover or another server from the same one.
	SystemIdentifier string `json:"system_identifier,omitempty"`
	// Settings holds the WAL, checkpoint and durability settings by name (see SettingNames).
	Settings map[string]Setting `json:"settings"`
	// WAL is nil below PostgreSQL 14, where pg_stat_wal does not exist.
	WAL *WALStats `json:"wal,omitempty"`
	// Checkpointer holds the checkpoint counters (pg_stat_bgwriter up to 16, pg_stat_checkpointer from 17).
	Checkpointer *CheckpointStats `json:"checkpointer,omitempty"`
	// WaitEvents aggregates the WAL wait events sampled since the previous snapshot.
	WaitEvents *WaitEvents `json:"wait_events,omitempty"`
	// WALInsertLSN is pg_current_wal_insert_lsn() as a byte position: it moves as WAL is
	// inserted, before the transaction that inserts it ends, whereas a backend's pg_stat_wal
	// counters arrive only at its transaction's end. Nil on a standby (which inserts no WAL)
	// and when it could not be read.
	WALInsertLSN *uint64 `json:"wal_insert_lsn,omitempty"`
	// DataDir is data_directory; WALDir is its pg_wal with symlinks resolved, or --wal-dir.
	DataDir string `json:"data_directory,omitempty"`
	WALDir  string `json:"wal_dir,omitempty"`
	// WALDirProblem says why WALDir is empty: what hid it and what to do ("" when it is known).
	WALDirProblem string `json:"wal_dir_problem,omitempty"`
	// HAManager is the high-availability manager that runs the server, if one was found: its
	// configuration, not the server's postgresql.auto.conf, is where settings belong.
	HAManager *HAManager `json:"ha_manager,omitempty"`
	// Primary is, on a standby of a repmgr cluster, what its primary runs from its
	// postgresql.auto.conf: repmgr manages no parameters, so after a failover this standby runs
	// its own values.
	Primary *PrimarySettings `json:"primary,omitempty"`
	// Notes are things an operator should know about this collection (e.g. "WAL statistics need 14+").
	Notes []string `json:"notes,omitempty"`
}

// PrimarySettings are the settings of the setting table a standby's primary runs from its
// postgresql.auto.conf, read over a connection to primary_conninfo's host and port.
type PrimarySettings struct {
	// Address is the primary's host:port, from primary_conninfo.
	Address  string             `json:"address,omitempty"`
	Settings map[string]Setting `json:"settings,omitempty"`
	// Error says why they could not be read ("" when they were).
	Error string `json:"error,omitempty"`
}

// Setting is one pg_settings row.
type Setting struct {
	// Value is the value as SHOW prints it ("64kB", "open_datasync", "on").
	Value string `json:"value"`
	// Bytes is set for memory settings, Seconds for time settings, both normalized from the unit.
	Bytes   *int64   `json:"bytes,omitempty"`
	Seconds *float64 `json:"seconds,omitempty"`
	// Raw and Unit are pg_settings.setting and pg_settings.unit.
	Raw            string   `json:"raw"`
	Unit           string   `json:"unit,omitempty"`
	Source         string   `json:"source"`
	Context        string   `json:"context"`
	PendingRestart bool     `json:"pending_restart"`
	EnumVals       []string `json:"enumvals,omitempty"`
}

// WALStats are the cumulative WAL counters (pg_stat_wal; on 18 writes and syncs come from
// pg_stat_io where object = 'wal'). Times are in seconds; they stay 0 unless track_wal_io_timing is on.
type WALStats struct {
	Records          int64     `json:"records"`
	FPI              int64     `json:"fpi"`
	Bytes            int64     `json:"bytes"`
	BuffersFull      int64     `json:"buffers_full"`
	Writes           int64     `json:"writes"`
	Syncs            int64     `json:"syncs"`
	WriteTimeSeconds float64   `json:"write_time_seconds"`
	SyncTimeSeconds  float64   `json:"sync_time_seconds"`
	StatsReset       time.Time `json:"stats_reset"`
}

// CheckpointStats are the cumulative checkpoint counters. Times are in seconds.
type CheckpointStats struct {
	Timed     int64 `json:"timed"`
	Requested int64 `json:"requested"`
	// Done is num_done (18+): checkpoints that completed; nil before 18.
	Done             *int64    `json:"done,omitempty"`
	WriteTimeSeconds float64   `json:"write_time_seconds"`
	SyncTimeSeconds  float64   `json:"sync_time_seconds"`
	BuffersWritten   int64     `json:"buffers_written"`
	StatsReset       time.Time `json:"stats_reset"`
}

// WaitEvents aggregates pg_stat_activity samples taken between two snapshots.
type WaitEvents struct {
	// Samples is how many times pg_stat_activity was read; ActiveBackends sums, over those
	// samples, the client backends that were active. Counts sums, over the same samples, the
	// backends waiting on each WAL wait event (keys are the Event* constants).
	Samples        int64            `json:"samples"`
	ActiveBackends int64            `json:"active_backends"`
	Counts         map[string]int64 `json:"counts"`
}

// Normalized WAL wait-event keys (the names changed in PostgreSQL 17: WALWrite became WalWrite
// for the IO events; the collector matches on type and name).
const (
	EventIOWALWrite      = "io_wal_write"
	EventIOWALSync       = "io_wal_sync"
	EventIOWALInitWrite  = "io_wal_init_write"
	EventIOWALInitSync   = "io_wal_init_sync"
	EventLWLockWALInsert = "lwlock_wal_insert"
	EventLWLockWALWrite  = "lwlock_wal_write"
	EventLWLockWALBufMap = "lwlock_wal_buf_mapping"
)

// Kernel is the kernel's dirty-page configuration and state.
type Kernel struct {
	VM VM `json:"vm"`
	// DirtyBackgroundThresholdBytes and DirtyThresholdBytes are the effective thresholds: the
	// *_bytes knob when set, else the ratio of dirtyable memory, approximated as MemFree +
	// Active(file) + Inactive(file) (the kernel's global_dirtyable_memory, less its reserves).
	DirtyBackgroundThresholdBytes int64   `json:"dirty_background_threshold_bytes"`
	DirtyThresholdBytes           int64   `json:"dirty_threshold_bytes"`
	Meminfo                       Meminfo `json:"meminfo"`
	// CPU is the host's CPU time (/proc/stat); nil where the procfs root has no stat file.
	CPU *CPU `json:"cpu,omitempty"`
}

// CPU holds the cumulative CPU time of the host from /proc/stat's "cpu" line, in seconds summed
// over all CPUs. The counters restart at boot; BootTime (btime) tells one boot from the next.
type CPU struct {
	CPUs int `json:"cpus"`
	// TotalSeconds is user, nice, system, idle, iowait, irq, softirq and steal (guest time is
	// already counted in user and nice); IdleSeconds is idle plus iowait: time no task used,
	// which a CPU-bound change such as wal_compression could take.
	TotalSeconds float64   `json:"total_seconds"`
	IdleSeconds  float64   `json:"idle_seconds"`
	BootTime     time.Time `json:"boot_time"`
}

// VM holds /proc/sys/vm/dirty_* as the kernel reports them.
type VM struct {
	DirtyBackgroundRatio    int64 `json:"dirty_background_ratio"`
	DirtyBackgroundBytes    int64 `json:"dirty_background_bytes"`
	DirtyRatio              int64 `json:"dirty_ratio"`
	DirtyBytes              int64 `json:"dirty_bytes"`
	DirtyExpireCentisecs    int64 `json:"dirty_expire_centisecs"`
	DirtyWritebackCentisecs int64 `json:"dirty_writeback_centisecs"`
}

// Meminfo holds the /proc/meminfo fields the rules use, in bytes.
type Meminfo struct {
	MemTotalBytes     int64 `json:"mem_total_bytes"`
	MemFreeBytes      int64 `json:"mem_free_bytes"`
	MemAvailableBytes int64 `json:"mem_available_bytes"`
	ActiveFileBytes   int64 `json:"active_file_bytes"`
	InactiveFileBytes int64 `json:"inactive_file_bytes"`
	DirtyBytes        int64 `json:"dirty_bytes"`
	WritebackBytes    int64 `json:"writeback_bytes"`
}

// Storage describes the file system and block devices under the WAL directory.
type Storage struct {
	Path string `json:"path"`
	// Device is the st_dev of Path as "MAJ:MIN"; DeviceName its /sys/dev/block name ("sda1",
	// "dm-0"), empty for file systems without a block device (tmpfs, FUSE, overlay).
	Device       string   `json:"device"`
	DeviceName   string   `json:"device_name,omitempty"`
	MountPoint   string   `json:"mount_point"`
	FSType       string   `json:"fs_type"`
	MountSource  string   `json:"mount_source,omitempty"`
	MountOptions []string `json:"mount_options"`
	// Volatile is true for file systems that live in memory (tmpfs, ramfs) and for any file
	// system on a RAM disk (zram, brd): nothing survives a power cut. NoBarrier is true for
	// nobarrier/barrier=0 mounts; DataWriteback for data=writeback.
	Volatile      bool `json:"volatile"`
	NoBarrier     bool `json:"nobarrier"`
	DataWriteback bool `json:"data_writeback"`
	// Rotational, WriteCache and FUA summarize Disks: rotational if any disk is, "write back" if
	// any disk caches writes, FUA only if every disk supports it. Nil/empty when unknown.
	Rotational *bool  `json:"rotational"`
	WriteCache string `json:"write_cache"`
	FUA        *bool  `json:"fua"`
	// Virtual is true when a disk under the WAL is a hypervisor's virtual disk (virtio, Xen,
	// VMware, Hyper-V, cloud block storage): its rotational and cache flags describe the
	// emulation, not the storage that really holds the data.
	Virtual bool `json:"virtual"`
	// Disks are the whole disks under the device: its parent for a partition, the slaves of a
	// dm or md device (recursively).
	Disks      []Disk  `json:"disks,omitempty"`
	FreeBytes  uint64  `json:"free_bytes"`
	TotalBytes uint64  `json:"total_bytes"`
	IO         *DiskIO `json:"io,omitempty"`
	// Notes say what could not be determined and why.
	Notes []string `json:"notes,omitempty"`
}

// Disk is one whole disk's queue attributes from sysfs.
type Disk struct {
	Name       string `json:"name"`
	Rotational bool   `json:"rotational"`
	// WriteCache is queue/write_cache: "write back" or "write through".
	WriteCache string `json:"write_cache"`
	FUA        bool   `json:"fua"`
	Model      string `json:"model,omitempty"`
	// Driver is the kernel driver of the disk's device (virtio_blk, nvme, sd...).
	Driver string `json:"driver,omitempty"`
	// Virtual: see Storage.Virtual.
	Virtual bool `json:"virtual"`
}

// DiskIO holds the cumulative I/O counters of the WAL's block device (/sys/dev/block/M:m/stat).
type DiskIO struct {
	Writes           uint64  `json:"writes"`
	WriteBytes       uint64  `json:"write_bytes"`
	WriteTimeSeconds float64 `json:"write_time_seconds"`
	Flushes          uint64  `json:"flushes"`
	FlushTimeSeconds float64 `json:"flush_time_seconds"`
}

// HA managers that run PostgreSQL servers, by the name HAManager.Name holds.
const (
	ManagerNone          = "none"
	ManagerPatroni       = "patroni"
	ManagerCloudNativePG = "cloudnativepg"
	ManagerStolon        = "stolon"
	ManagerRepmgr        = "repmgr"
)

// HAManager is the high-availability manager found running a server, and what showed it.
type HAManager struct {
	// Name is one of the Manager* constants.
	Name string `json:"name"`
	// Evidence says what showed it ("the postmaster's parent runs patroni /etc/patroni.yml").
	Evidence string `json:"evidence,omitempty"`
	// Cluster is the manager's name for the cluster (cluster_name) when known.
	Cluster string `json:"cluster,omitempty"`
	// RESTURL is Patroni's REST API, from its configuration file, when it could be read.
	RESTURL string `json:"rest_url,omitempty"`
	// ClusterSettings are the PostgreSQL parameters the manager's configuration of the cluster
	// sets (Patroni: GET /config's postgresql.parameters), as it writes them; nil when unknown.
	ClusterSettings map[string]string `json:"cluster_settings,omitempty"`
	// AutoConf are the settings this server runs from its postgresql.auto.conf (ALTER SYSTEM),
	// as SHOW prints them.
	AutoConf map[string]string `json:"auto_conf,omitempty"`
	// ConfigError says why ClusterSettings could not be read.
	ConfigError string `json:"config_error,omitempty"`
}
