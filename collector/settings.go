package collector

import "strconv"

// Setting names collected from pg_settings.
const (
	WALBuffers                 = "wal_buffers"
	WALSyncMethod              = "wal_sync_method"
	Fsync                      = "fsync"
	SynchronousCommit          = "synchronous_commit"
	FullPageWrites             = "full_page_writes"
	WALLevel                   = "wal_level"
	WALCompression             = "wal_compression"
	CommitDelay                = "commit_delay"
	CommitSiblings             = "commit_siblings"
	WALWriterDelay             = "wal_writer_delay"
	WALWriterFlushAfter        = "wal_writer_flush_after"
	CheckpointTimeout          = "checkpoint_timeout"
	CheckpointCompletionTarget = "checkpoint_completion_target"
	CheckpointFlushAfter       = "checkpoint_flush_after"
	BgwriterFlushAfter         = "bgwriter_flush_after"
	MaxWALSize                 = "max_wal_size"
	MinWALSize                 = "min_wal_size"
	SharedBuffers              = "shared_buffers"
	TrackWALIOTiming           = "track_wal_io_timing"
	DataDirectory              = "data_directory"
	MaxConnections             = "max_connections"
	DebugIODirect              = "debug_io_direct"
	BlockSize                  = "block_size"
)

// Kernel knobs (/proc/sys/vm) a rule may recommend and the apply mode may change.
const (
	KnobDirtyBackgroundBytes = "vm.dirty_background_bytes"
	KnobDirtyBytes           = "vm.dirty_bytes"
	// KnobDirtyThresholds is the pair of thresholds, background and dirty, changed as one
	// (advisor/apply: "10%/20%" or byte counts); the apply mode writes the four files it stands for.
	KnobDirtyThresholds = "vm.dirty_thresholds"
)

// Facts of the host and of the advisor's own configuration that a rule may name as the thing
// to change; they are advice only, as no program should change them on its own.
const (
	HostWALFileSystem = "wal_file_system"
	HostMountOptions  = "mount_options"
	HostWriteCache    = "write_cache"
	// HostWALDevice is where the WAL lives and who else writes there (writeback-stalls-wal).
	HostWALDevice = "wal_device"
	HostProbeDir  = "probe.dir"
	// HostHAConfig is the HA manager's configuration of the cluster (Patroni's DCS), which a
	// member's postgresql.auto.conf can shadow (ha-override).
	HostHAConfig = "ha_manager.configuration"
)

// SettingSource is where a setting lives.
type SettingSource int

// Where settings live.
const (
	// FromPostgres: a pg_settings row, read by the collector at every snapshot.
	FromPostgres SettingSource = iota + 1
	// FromKernel: a /proc/sys/vm knob; the kernel part of a snapshot holds its state.
	FromKernel
	// FromHost: the WAL's storage or the advisor's own configuration.
	FromHost
)

// ApplyMode says what the rules and the apply mode may do with a setting.
type ApplyMode int

// What may be done with a setting.
const (
	// Observed: read for the rules, the metrics or the report; no rule recommends changing it.
	Observed ApplyMode = iota + 1
	// AdviceOnly: a rule may recommend a change, but only a person makes it. fsync,
	// synchronous_commit and full_page_writes are here because each trades durability for
	// speed; host facts because changing them is not a setting's job.
	AdviceOnly
	// Applicable: the apply mode can change it (advisor/apply has its bounds) when
	// --apply.settings names it.
	Applicable
	// AppliedByDefault: Applicable, and in the default --apply.settings.
	AppliedByDefault
)

// Applies reports whether the apply mode can change a setting of this mode.
func (m ApplyMode) Applies() bool { return m == Applicable || m == AppliedByDefault }

// SettingDef is one setting the advisor knows. SettingTable is the one list of them: the
// collector reads the FromPostgres entries, the rules may recommend what is not Observed, and
// the apply mode changes what Applies (its defaults are the AppliedByDefault entries).
type SettingDef struct {
	Name   string
	Source SettingSource
	Apply  ApplyMode
}

// SettingTable lists every setting the advisor knows. The FromPostgres entries keep the order
// in which `collect` prints them.
func SettingTable() []SettingDef {
	pg := func(name string, m ApplyMode) SettingDef {
		return SettingDef{Name: name, Source: FromPostgres, Apply: m}
	}
	return []SettingDef{
		pg(WALBuffers, AppliedByDefault),
		pg(WALSyncMethod, AppliedByDefault),
		pg(Fsync, AdviceOnly),
		pg(SynchronousCommit, AdviceOnly),
		pg(FullPageWrites, AdviceOnly),
		// wal_level decides what a standby or a logical decoder can read: never the advisor's call.
		pg(WALLevel, Observed),
		// Compressing full-page images costs CPU, not durability: a reload turns it on or off, and
		// full-page-images recommends it only with idle CPU to spare (docs/rules.md).
		pg(WALCompression, AppliedByDefault),
		pg(CommitDelay, Applicable),
		pg(CommitSiblings, Applicable),
		pg(WALWriterDelay, Applicable),
		pg(WALWriterFlushAfter, Applicable),
		pg(CheckpointTimeout, Applicable),
		pg(CheckpointCompletionTarget, AppliedByDefault),
		pg(CheckpointFlushAfter, AppliedByDefault),
		pg(BgwriterFlushAfter, AppliedByDefault),
		pg(MaxWALSize, AppliedByDefault),
		pg(MinWALSize, Applicable),
		pg(SharedBuffers, Observed),
		pg(TrackWALIOTiming, Applicable),
		pg(DataDirectory, Observed),
		pg(MaxConnections, Observed),
		pg(DebugIODirect, Observed),
		// The size of a full-page image at most (BLCKSZ; 8kB unless PostgreSQL was built otherwise).
		pg(BlockSize, Observed),

		{Name: KnobDirtyBackgroundBytes, Source: FromKernel, Apply: AppliedByDefault},
		{Name: KnobDirtyBytes, Source: FromKernel, Apply: AppliedByDefault},
		{Name: KnobDirtyThresholds, Source: FromKernel, Apply: AppliedByDefault},

		{Name: HostWALFileSystem, Source: FromHost, Apply: AdviceOnly},
		{Name: HostMountOptions, Source: FromHost, Apply: AdviceOnly},
		{Name: HostWriteCache, Source: FromHost, Apply: AdviceOnly},
		{Name: HostWALDevice, Source: FromHost, Apply: AdviceOnly},
		{Name: HostProbeDir, Source: FromHost, Apply: AdviceOnly},
		{Name: HostHAConfig, Source: FromHost, Apply: AdviceOnly},
	}
}

// LookupSetting returns the table entry of a setting and whether there is one.
func LookupSetting(name string) (SettingDef, bool) {
	for _, d := range SettingTable() {
		if d.Name == name {
			return d, true
		}
	}
	return SettingDef{}, false
}

// SettingNames lists the settings the collector reads (those a server lacks are left out).
func SettingNames() []string {
	var out []string
	for _, d := range SettingTable() {
		if d.Source == FromPostgres {
			out = append(out, d.Name)
		}
	}
	return out
}

// String names the mode as collector.SettingTable spells it.
func (m ApplyMode) String() string {
	switch m {
	case Observed:
		return "Observed"
	case AdviceOnly:
		return "AdviceOnly"
	case Applicable:
		return "Applicable"
	case AppliedByDefault:
		return "AppliedByDefault"
	}
	return "ApplyMode(" + strconv.Itoa(int(m)) + ")"
}
