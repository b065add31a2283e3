package web

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// metricDef is one metric: its name (without the namespace), its help text, its type and
// labels, and read, which emits its series for one scrape. A metric that exports one of the
// rules' counters says which in counter (its read is then fromCounter), so that a test can
// find a counter nobody exports.
type metricDef struct {
	name, help string
	kind       prometheus.ValueType
	labels     []string
	counter    rules.Counter
	read       func(sc scrapeState, out metricOut)
}

// metricTable lists every metric the collector emits; docs/metrics.md documents each (a test
// checks both ways). A summary's kind is UntypedValue: metricOut.summary sends it.
func metricTable() []metricDef {
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	return []metricDef{
		{"up", "1 when the last collection from PostgreSQL succeeded.", g, nil, 0, readUp},
		{"scrape_collector_duration_seconds", "Time the last collection of that part took.", g, []string{"collector"}, 0, func(sc scrapeState, out metricOut) {
			for _, p := range sc.parts() {
				out.add(p.DurationSeconds, p.Name)
			}
		}},
		{"scrape_collector_success", "1 when the last collection of that part succeeded.", g, []string{"collector"}, 0, func(sc scrapeState, out metricOut) {
			for _, p := range sc.parts() {
				out.add(boolValue(p.OK), p.Name)
			}
		}},
		{"last_snapshot_timestamp_seconds", "When the last snapshot was taken (Unix time).", g, nil, 0, func(sc scrapeState, out metricOut) {
			if s := sc.state.Snapshot; s != nil {
				out.add(float64(s.Time.UnixNano()) / 1e9)
			}
		}},
		{"build_info", "Build information of pgwal-advisor; always 1.", g, []string{"version", "goversion"}, 0, func(sc scrapeState, out metricOut) {
			out.add(1, sc.version, sc.goVersion)
		}},

		{"postgres_server_version_num", "PostgreSQL's server_version_num.", g, nil, 0, func(sc scrapeState, out metricOut) {
			if pg := sc.postgres(); pg != nil {
				out.add(float64(pg.VersionNum))
			}
		}},
		counterMetric("wal_records_total", "WAL records generated (pg_stat_wal.wal_records).", rules.WALRecords),
		counterMetric("wal_fpi_total", "WAL full-page images generated (pg_stat_wal.wal_fpi).", rules.WALFPI),
		counterMetric("wal_bytes_total", "WAL bytes generated (pg_stat_wal.wal_bytes).", rules.WALBytes),
		counterMetric("wal_buffers_full_total", "Times WAL was written because the WAL buffers were full (pg_stat_wal.wal_buffers_full).", rules.WALBuffersFull),
		counterMetric("wal_writes_total", "WAL writes (pg_stat_wal.wal_write; pg_stat_io on PostgreSQL 18).", rules.WALWrites),
		counterMetric("wal_syncs_total", "WAL syncs (pg_stat_wal.wal_sync; pg_stat_io on PostgreSQL 18).", rules.WALSyncs),
		counterMetric("wal_write_time_seconds_total", "Time spent writing WAL (needs track_wal_io_timing).", rules.WALWriteSeconds),
		counterMetric("wal_sync_time_seconds_total", "Time spent syncing WAL (needs track_wal_io_timing).", rules.WALSyncSeconds),
		counterMetric("checkpoints_timed_total", "Checkpoints started by checkpoint_timeout.", rules.CheckpointsTimed),
		counterMetric("checkpoints_requested_total", "Checkpoints requested (mostly by max_wal_size).", rules.CheckpointsRequested),
		counterMetric("checkpoint_write_time_seconds_total", "Time checkpoints spent writing.", rules.CheckpointWriteSeconds),
		counterMetric("checkpoint_sync_time_seconds_total", "Time checkpoints spent syncing.", rules.CheckpointSyncSeconds),

		{"wal_buffers_bytes", "Effective wal_buffers.", g, nil, 0, func(sc scrapeState, out metricOut) {
			if s, ok := sc.setting(collector.WALBuffers); ok && s.Bytes != nil {
				out.add(float64(*s.Bytes))
			}
		}},
		{"wal_sync_method_info", "1 for the configured wal_sync_method.", g, []string{"method"}, 0, func(sc scrapeState, out metricOut) {
			if s, ok := sc.setting(collector.WALSyncMethod); ok {
				out.add(1, s.Value)
			}
		}},
		{"ha_manager_info", "1 for the HA manager that runs the server (patroni, cloudnativepg, stolon, repmgr or none), with the cluster's name when known.", g, []string{"manager", "cluster"}, 0, func(sc scrapeState, out metricOut) {
			if pg := sc.postgres(); pg != nil && pg.HAManager != nil {
				out.add(1, pg.HAManager.Name, pg.HAManager.Cluster)
			}
		}},
		{"fsync_enabled", "1 when fsync is on.", g, nil, 0, settingOn(collector.Fsync)},
		{"full_page_writes_enabled", "1 when full_page_writes is on.", g, nil, 0, settingOn(collector.FullPageWrites)},
		{"synchronous_commit_info", "1 for the configured synchronous_commit.", g, []string{"value"}, 0, func(sc scrapeState, out metricOut) {
			if s, ok := sc.setting(collector.SynchronousCommit); ok {
				out.add(1, s.Value)
			}
		}},
		// Every watched setting gets a series (0 or 1), so that "pending restart" is told apart
		// from "not collected".
		{"setting_pending_restart", "1 for a watched setting changed but waiting for a restart.", g, []string{"setting"}, 0, func(sc scrapeState, out metricOut) {
			if pg := sc.postgres(); pg != nil {
				for _, name := range slices.Sorted(maps.Keys(pg.Settings)) {
					out.add(boolValue(pg.Settings[name].PendingRestart), name)
				}
			}
		}},
		{"wait_event_samples_total", "Backends seen waiting on a WAL wait event, summed over pg_stat_activity samples.", c, []string{"event"}, 0, readWaitEvents},
		{"wait_event_sampler_runs_total", "Times pg_stat_activity was sampled for wait events.", c, nil, 0, func(sc scrapeState, out metricOut) {
			out.add(float64(sc.state.WaitEvents.Samples))
		}},
		{"active_backend_samples_total", "Active client backends, summed over pg_stat_activity samples.", c, nil, 0, func(sc scrapeState, out metricOut) {
			out.add(float64(sc.state.WaitEvents.ActiveBackends))
		}},

		kernelMetric("kernel_dirty_background_threshold_bytes", "Dirty bytes at which background writeback starts (vm.dirty_background_bytes, else the ratio of dirtyable memory).",
			func(k *collector.Kernel) float64 { return float64(k.DirtyBackgroundThresholdBytes) }),
		kernelMetric("kernel_dirty_threshold_bytes", "Dirty bytes at which writers are throttled (vm.dirty_bytes, else the ratio of dirtyable memory).",
			func(k *collector.Kernel) float64 { return float64(k.DirtyThresholdBytes) }),
		kernelMetric("kernel_dirty_expire_seconds", "vm.dirty_expire_centisecs in seconds.",
			func(k *collector.Kernel) float64 { return float64(k.VM.DirtyExpireCentisecs) / 100 }),
		kernelMetric("kernel_dirty_writeback_interval_seconds", "vm.dirty_writeback_centisecs in seconds.",
			func(k *collector.Kernel) float64 { return float64(k.VM.DirtyWritebackCentisecs) / 100 }),
		{"setting_info", "1 for the value of a WAL or write-back setting that the hosts of one role should share.", g, []string{"setting", "value"}, 0, readComparedSettings},

		{"wal_storage_info", "The WAL directory's file system and device; always 1.", g, []string{"fs_type", "device", "mount_point", "write_cache"}, 0, func(sc scrapeState, out metricOut) {
			if st := sc.storage(); st != nil {
				// The kernel's name ("sda1", "dm-0") joins against node_exporter's device label;
				// file systems without a block device (tmpfs) only have the st_dev number.
				device := st.DeviceName
				if device == "" {
					device = st.Device
				}
				out.add(1, st.FSType, device, st.MountPoint, st.WriteCache)
			}
		}},
		{"wal_storage_class_info", "The class of the WAL's device, by which a fleet compares hosts; always 1.", g, []string{"rotational", "nvme", "virtual", "write_back_cache"}, 0, readStorageClass},
		// Unknown facts (no sysfs for the device) get no series rather than a misleading 0.
		{"wal_storage_rotational", "1 when a disk under the WAL is rotational.", g, nil, 0, func(sc scrapeState, out metricOut) {
			if st := sc.storage(); st != nil && st.Rotational != nil {
				out.add(boolValue(*st.Rotational))
			}
		}},
		{"wal_storage_volatile", "1 when the WAL's file system lives in memory (tmpfs, ramfs, RAM disk).", g, nil, 0, func(sc scrapeState, out metricOut) {
			if st := sc.storage(); st != nil {
				out.add(boolValue(st.Volatile))
			}
		}},
		{"wal_storage_write_back_cache", "1 when a disk under the WAL reports a write-back (volatile) cache.", g, nil, 0, func(sc scrapeState, out metricOut) {
			if st := sc.storage(); st != nil && st.WriteCache != "" {
				out.add(boolValue(st.WriteCache == "write back"))
			}
		}},
		{"wal_storage_free_bytes", "Free space on the WAL's file system.", g, nil, 0, func(sc scrapeState, out metricOut) {
			if st := sc.storage(); st != nil {
				out.add(float64(st.FreeBytes))
			}
		}},

		{"probe_sync_latency_seconds", "One sync's latency per wal_sync_method and write pattern over the recent probe window (method=\"write\" is the unsynced baseline).",
			prometheus.UntypedValue, []string{"method", "writes_per_sync", "direct_io"}, 0, readProbeLatency},
		{"probe_enabled", "1 when sync probing runs.", g, nil, 0, func(sc scrapeState, out metricOut) {
			out.add(boolValue(sc.state.ProbeEnabled))
		}},
		{"probe_last_success_timestamp_seconds", "When the last probe burst succeeded (Unix time; 0 before the first).", g, nil, 0, func(sc scrapeState, out metricOut) {
			last := 0.0
			if r := sc.state.Probe; r != nil && !r.Finished.IsZero() {
				last = float64(r.Finished.UnixNano()) / 1e9
			}
			out.add(last)
		}},
		{"probe_durability_verdict", "1 for the current durability verdict of the sync probes.", g, []string{"status"}, 0, readVerdict},

		{"finding", "1 per active finding; state is firing (shown, alerted on, applied) or pending (holds, not yet for RaiseAfter).", g, []string{"rule", "severity", "setting", "state"}, 0, readFindings},
		{"recommendation_info", "1 per recommended change.", g, []string{"rule", "setting", "current", "recommended", "action"}, 0, func(sc scrapeState, out metricOut) {
			// One series per setting: the resolved recommendation, labelled with the rule that
			// decided it, so that an alert joining on setting finds exactly one value.
			for _, r := range sc.state.Recommendations {
				out.add(1, r.Rule, r.Setting, r.Current, r.Recommended, string(r.Action))
			}
		}},
	}
}

// unexportedCounters are the rules' counters that have no metric, each with the reason. A
// counter in neither metricTable nor here fails TestCountersExported.
func unexportedCounters() map[rules.Counter]string {
	const nodeExporter = "node_exporter exports the block device's counters (node_disk_*); docs/metrics.md says to join against them"
	return map[rules.Counter]string{
		rules.CheckpointsDone:          "PostgreSQL 18 only; checkpoints_timed_total + checkpoints_requested_total count checkpoints on every version",
		rules.CheckpointBuffersWritten: "the rules' evidence reports it per checkpoint; postgres_exporter exports the checkpointer's buffer counters",
		rules.DiskWrites:               nodeExporter,
		rules.DiskWriteBytes:           nodeExporter,
		rules.DiskWriteSeconds:         nodeExporter,
		rules.DiskFlushes:              nodeExporter,
		rules.DiskFlushSeconds:         nodeExporter,
		rules.CPUSeconds:               "node_exporter exports the host's CPU time (node_cpu_seconds_total); full-page-images reads it as evidence",
		rules.CPUIdleSeconds:           "node_exporter exports the host's CPU time (node_cpu_seconds_total{mode=\"idle\"}); full-page-images reads it as evidence",
		rules.WALInsertBytes: "a position, not a count of this exporter's: pg_stat_wal's wal_bytes_total counts the same WAL " +
			"once its transaction ends, and a second byte counter of the same WAL would be summed twice on dashboards; " +
			"the rules use it only as evidence of WAL from transactions still running",
	}
}

// counterMetric exports one of the rules' counters as a Prometheus counter: the value is the
// one the rules read, and the series is absent when the snapshot lacks the counter.
func counterMetric(name, help string, counter rules.Counter) metricDef {
	return metricDef{name: name, help: help, kind: prometheus.CounterValue, counter: counter, read: func(sc scrapeState, out metricOut) {
		if s := sc.state.Snapshot; s != nil {
			if v, ok := counter.Value(s); ok {
				out.add(v)
			}
		}
	}}
}

// kernelMetric is a gauge read from the kernel part of the snapshot.
func kernelMetric(name, help string, value func(*collector.Kernel) float64) metricDef {
	return metricDef{name: name, help: help, kind: prometheus.GaugeValue, read: func(sc scrapeState, out metricOut) {
		if s := sc.state.Snapshot; s != nil && s.Kernel != nil {
			out.add(value(s.Kernel))
		}
	}}
}

// settingOn reads a boolean setting as 1 or 0; no series when the setting was not collected.
func settingOn(name string) func(sc scrapeState, out metricOut) {
	return func(sc scrapeState, out metricOut) {
		if s, ok := sc.setting(name); ok {
			out.add(boolValue(s.Value == "on"))
		}
	}
}

func readUp(sc scrapeState, out metricOut) {
	up := 0.0
	for _, p := range sc.parts() {
		if p.Name == collector.PartPostgres && p.OK {
			up = 1
		}
	}
	out.add(up)
}

// comparedSettings are the PostgreSQL settings exported by setting_info: those that decide how
// WAL reaches the disk and that hosts of one role are expected to share, so that the fleet's
// drift rules (deploy/prometheus/recording.yml, docs/fleet.md) can count their values per role.
// Sizing settings that follow a host's memory (shared_buffers) are left out, and so is the rest
// of the setting table, to keep a host's series within docs/fleet.md's budget.
func comparedSettings() []string {
	return []string{collector.WALSyncMethod, collector.WALBuffers, collector.WALCompression, collector.MaxWALSize}
}

// readComparedSettings emits comparedSettings as SHOW prints them, and the kernel's vm.dirty_*
// knobs as /proc/sys/vm holds them (the ratios and the bytes both: the one not in use reads 0).
func readComparedSettings(sc scrapeState, out metricOut) {
	for _, name := range comparedSettings() {
		if s, ok := sc.setting(name); ok {
			out.add(1, name, s.Value)
		}
	}
	if s := sc.state.Snapshot; s != nil && s.Kernel != nil {
		vm := s.Kernel.VM
		for _, k := range []struct {
			name  string
			value int64
		}{
			{"vm.dirty_background_ratio", vm.DirtyBackgroundRatio},
			{collector.KnobDirtyBackgroundBytes, vm.DirtyBackgroundBytes},
			{"vm.dirty_ratio", vm.DirtyRatio},
			{collector.KnobDirtyBytes, vm.DirtyBytes},
			{"vm.dirty_expire_centisecs", vm.DirtyExpireCentisecs},
			{"vm.dirty_writeback_centisecs", vm.DirtyWritebackCentisecs},
		} {
			out.add(1, k.name, strconv.FormatInt(k.value, 10))
		}
	}
}

// readStorageClass emits the facts by which the fleet's outlier rules group hosts, a label
// each, empty when unknown (no disk under the WAL, as on tmpfs or FUSE, or no sysfs attribute).
// The slowest disk under the WAL decides what a sync costs, so the class is rotational when
// any disk is and NVMe only when every disk is. NVMe namespaces are named nvme<C>n<N> by the
// kernel; their driver link is on the controller, so the name is what tells.
func readStorageClass(sc scrapeState, out metricOut) {
	st := sc.storage()
	if st == nil {
		return
	}
	rotational, nvme, virtual, writeBack := "", "", "", ""
	if st.Rotational != nil {
		rotational = strconv.FormatBool(*st.Rotational)
	}
	if len(st.Disks) > 0 {
		all := true
		for _, d := range st.Disks {
			all = all && (strings.HasPrefix(d.Name, "nvme") || d.Driver == "nvme")
		}
		nvme, virtual = strconv.FormatBool(all), strconv.FormatBool(st.Virtual)
	}
	if st.WriteCache != "" {
		writeBack = strconv.FormatBool(st.WriteCache == "write back")
	}
	out.add(1, rotational, nvme, virtual, writeBack)
}

// waitEvents are the WAL wait events that always have a series, so that a counter exists (at 0)
// from the first scrape and rate() works as soon as one appears.
func waitEvents() []string {
	return []string{
		collector.EventIOWALWrite, collector.EventIOWALSync, collector.EventIOWALInitWrite,
		collector.EventIOWALInitSync, collector.EventLWLockWALInsert, collector.EventLWLockWALWrite,
		collector.EventLWLockWALBufMap,
	}
}

func readWaitEvents(sc scrapeState, out metricOut) {
	w := sc.state.WaitEvents
	events := waitEvents()
	for _, k := range slices.Sorted(maps.Keys(w.Counts)) {
		if !slices.Contains(events, k) {
			events = append(events, k)
		}
	}
	for _, ev := range events {
		out.add(float64(w.Counts[ev]), ev)
	}
}

func readProbeLatency(sc scrapeState, out metricOut) {
	r := sc.state.Probe
	if r == nil {
		return
	}
	for _, m := range r.Methods {
		// open_sync's optional 16kB-in-pieces series shares name and writes per sync with the
		// 8kB patterns; the daemon does not run it, and a duplicate series would fail the
		// whole scrape.
		if !m.Available || m.Samples == 0 || m.WriteBytes != probes.BlockBytes {
			continue
		}
		l := m.LatencyUS
		out.summary(uint64(m.Samples), l.Mean*float64(m.Samples)/1e6,
			map[float64]float64{0.5: l.P50 / 1e6, 0.9: l.P90 / 1e6, 0.99: l.P99 / 1e6},
			m.Name, strconv.Itoa(m.WritesPerSync), strconv.FormatBool(m.DirectIO))
	}
}

// verdicts are the durability verdict's states: all three are exported, the current one at 1,
// so that an alert can select `== 1` and a dashboard can show a state timeline.
func verdicts() []string {
	return []string{probes.VerdictPlausible, probes.VerdictTooFast, probes.VerdictUnknown}
}

func readVerdict(sc scrapeState, out metricOut) {
	status := probes.VerdictUnknown
	if r := sc.state.Probe; r != nil && r.Durability.Status != "" {
		status = r.Durability.Status
	}
	known := verdicts()
	if !slices.Contains(known, status) {
		known = append(known, status)
	}
	for _, v := range known {
		out.add(boolValue(v == status), v)
	}
}

func readFindings(sc scrapeState, out metricOut) {
	// The Tracker keeps one finding per rule and setting; the guard keeps a future duplicate
	// from failing the whole scrape.
	seen := map[string]bool{}
	for _, f := range slices.Concat(sc.state.Findings, sc.state.Pending) {
		key := f.Rule + "\x00" + f.Setting
		if seen[key] {
			continue
		}
		seen[key] = true
		state := rules.StateFiring
		if f.State == rules.StatePending {
			state = rules.StatePending
		}
		out.add(1, f.Rule, f.Severity.String(), f.Setting, string(state))
	}
}

// scrapeState is what one scrape's metrics are read from: one consistent read of the state.
type scrapeState struct {
	state              advisor.State
	version, goVersion string
}

func (sc scrapeState) parts() []collector.Part {
	if sc.state.Snapshot == nil {
		return nil
	}
	return sc.state.Snapshot.Parts
}

func (sc scrapeState) postgres() *collector.Postgres {
	if sc.state.Snapshot == nil {
		return nil
	}
	return sc.state.Snapshot.Postgres
}

func (sc scrapeState) storage() *collector.Storage {
	if sc.state.Snapshot == nil {
		return nil
	}
	return sc.state.Snapshot.WALStorage
}

func (sc scrapeState) setting(name string) (collector.Setting, bool) {
	pg := sc.postgres()
	if pg == nil {
		return collector.Setting{}, false
	}
	s, ok := pg.Settings[name]
	return s, ok
}
