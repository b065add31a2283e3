package collector

import "slices"

// Writers is who wrote between two readings: the processes whose write counters
// (/proc/PID/io) grew, the cgroups they run in with the kernel's per-cgroup write counters, and
// the host's cgroup layout, which decides what can throttle them (collector/writers reads it).
type Writers struct {
	// IntervalSeconds is the time the deltas cover: since the previous reading. The first
	// reading is the baseline: it lists no process and IntervalSeconds is 0.
	IntervalSeconds float64      `json:"interval_seconds"`
	Layout          CgroupLayout `json:"cgroup_layout"`
	// Processes are those that wrote in the interval, the most net bytes first, at most the
	// collector's list cap; the rest are summed in OtherProcesses and OtherNetWriteBytes.
	Processes          []ProcessWrites `json:"processes,omitempty"`
	OtherProcesses     int             `json:"other_processes,omitempty"`
	OtherNetWriteBytes uint64          `json:"other_net_write_bytes,omitempty"`
	// NetWriteBytes sums the net bytes of every process read, listed or not.
	NetWriteBytes uint64 `json:"net_write_bytes"`
	// Postmasters are the pids of the PostgreSQL postmasters found among the processes' ancestors.
	Postmasters []int `json:"postmasters,omitempty"`
	// Seen is how many processes /proc listed; Read how many of them had their counters read;
	// Skipped how many were left for a later reading because of the collector's process cap.
	Seen    int `json:"seen"`
	Read    int `json:"read"`
	Skipped int `json:"skipped,omitempty"`
	// Unreadable counts the processes whose /proc/PID/io could not be read (not those that ended
	// while being read), and UnreadableErrno names why, e.g. "EACCES": another user's process
	// without CAP_SYS_PTRACE. Their writes are missing from the figures above.
	Unreadable      int    `json:"unreadable"`
	UnreadableErrno string `json:"unreadable_errno,omitempty"`
	// Cgroups are the kernel's cumulative write counters of the listed processes' cgroups
	// (cgroup v2 io.stat; v1 blkio.throttle.io_service_bytes), where the kernel keeps them.
	Cgroups []CgroupWrites `json:"cgroups,omitempty"`
	// Notes say what could not be seen and why.
	Notes []string `json:"notes,omitempty"`
}

// ProcessWrites is one process's writes in the interval. /proc/PID/io's write_bytes counts a
// buffered write when the page is dirtied, not when write-back sends it to the device, and a
// process's counters include those of the children it has reaped (proc(5)).
type ProcessWrites struct {
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	// Comm is /proc/PID/comm: the executable's name, at most 15 bytes.
	Comm string `json:"comm"`
	// KernelThread marks a kernel thread, e.g. a loop device's worker, which writes what the
	// loop device's users wrote to its backing file.
	KernelThread bool `json:"kernel_thread,omitempty"`
	// WriteBytes and CancelledWriteBytes are the interval's growth of write_bytes and
	// cancelled_write_bytes; NetWriteBytes is the first less the second, at least 0 (the kernel
	// charges a truncated dirty page to the process that truncated it, not to its writer).
	WriteBytes          uint64 `json:"write_bytes"`
	CancelledWriteBytes uint64 `json:"cancelled_write_bytes"`
	NetWriteBytes       uint64 `json:"net_write_bytes"`
	// Cgroup is the process's cgroup v2 path (the "0::" line of /proc/PID/cgroup); BlkioCgroup
	// and MemoryCgroup its cgroup v1 blkio and memory paths. Empty where the host has none.
	Cgroup       string `json:"cgroup,omitempty"`
	BlkioCgroup  string `json:"blkio_cgroup,omitempty"`
	MemoryCgroup string `json:"memory_cgroup,omitempty"`
	// Unit is the systemd unit running the process (the last *.service or *.scope of its cgroup
	// path), empty when systemd is not the host's init or the path names no unit.
	Unit string `json:"unit,omitempty"`
	// Postmaster is the pid of the PostgreSQL postmaster this process descends from (its own
	// pid for the postmaster), 0 when it is not PostgreSQL's.
	Postmaster int `json:"postmaster,omitempty"`
}

// Cgroup hierarchies of a CgroupWrites.
const (
	HierarchyV2    = "v2"
	HierarchyBlkio = "blkio"
)

// CgroupWrites is one cgroup's cumulative written bytes per device, as the kernel counts them.
// On cgroup v2 with the io and memory controllers, write-back is charged to the cgroup that
// dirtied the pages; on v1 blkio only direct and synchronous writes are, and the flusher's
// write-back lands in the root cgroup.
type CgroupWrites struct {
	Hierarchy string         `json:"hierarchy"`
	Path      string         `json:"path"`
	Unit      string         `json:"unit,omitempty"`
	Devices   []DeviceWrites `json:"devices"`
}

// DeviceWrites is a cumulative count of bytes written to one block device ("MAJ:MIN").
type DeviceWrites struct {
	Device     string `json:"device"`
	WriteBytes uint64 `json:"write_bytes"`
}

// Cgroup layouts of a host.
const (
	// CgroupV2: only the unified hierarchy carries controllers.
	CgroupV2 = "v2"
	// CgroupV1: controllers on v1 hierarchies, no cgroup2 mount.
	CgroupV1 = "v1"
	// CgroupHybrid: controllers on v1 hierarchies and a cgroup2 mount beside them (systemd's
	// hybrid mode: /sys/fs/cgroup/unified), whose controllers are whatever v1 did not take.
	CgroupHybrid = "hybrid"
	// CgroupNone: no cgroup file system mounted.
	CgroupNone = "none"
)

// CgroupLayout is how cgroups are mounted on the host.
type CgroupLayout struct {
	// Version is one of the Cgroup* values.
	Version string `json:"version"`
	// V2Mount is where the unified hierarchy is mounted, as the host sees it; V2Controllers are
	// its root's cgroup.controllers, V2SubtreeControl its root's cgroup.subtree_control.
	V2Mount          string   `json:"v2_mount,omitempty"`
	V2Controllers    []string `json:"v2_controllers,omitempty"`
	V2SubtreeControl []string `json:"v2_subtree_control,omitempty"`
	// V1Controllers are the controllers mounted as v1 hierarchies ("blkio", "memory", ...).
	V1Controllers []string `json:"v1_controllers,omitempty"`
	// Systemd is true when the host's init (pid 1) is systemd: units can be named and limited
	// with systemctl set-property.
	Systemd bool `json:"systemd"`
}

// WritebackThrottle reports whether a cgroup limit can throttle a buffered writer's write-back
// here: on the unified hierarchy with both the io and memory controllers, the only place the
// kernel charges write-back to the writer's cgroup (admin-guide/cgroup-v2, "Writeback").
func (l CgroupLayout) WritebackThrottle() bool {
	return l.Version == CgroupV2 && slices.Contains(l.V2Controllers, "io") && slices.Contains(l.V2Controllers, "memory")
}
