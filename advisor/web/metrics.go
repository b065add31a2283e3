// Package web is the daemon's face: the Prometheus collector over the advisor's state, the
// JSON API (/api/v1/findings, /api/v1/recommendations, /api/v1/snapshot), the health
// endpoints, the landing page with the current findings, and the HTTP server that serves them
// through prometheus/exporter-toolkit (TLS and basic auth from --web.config.file).
//
// Everything here reads advisor.State and nothing else: the collector builds its metrics from
// the state at each scrape, so a finding that clears disappears from the next scrape instead
// of lingering as a stale series.
package web

import (
	"maps"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// StateSource is where the collector and the handlers read the advisor's state; *advisor.Advisor
// satisfies it. State must be safe for concurrent use and its result must not be modified.
type StateSource interface {
	State() advisor.State
}

// namespace is the one metric prefix (docs/metrics.md).
const namespace = "pgwal_advisor"

// waitEvents are the WAL wait events that always have a series, so that a counter exists (at 0)
// from the first scrape and rate() works as soon as one appears.
func waitEvents() []string {
	return []string{
		collector.EventIOWALWrite, collector.EventIOWALSync, collector.EventIOWALInitWrite,
		collector.EventIOWALInitSync, collector.EventLWLockWALInsert, collector.EventLWLockWALWrite,
		collector.EventLWLockWALBufMap,
	}
}

// verdicts are the durability verdict's states: all three are exported, the current one at 1,
// so that an alert can select `== 1` and a dashboard can show a state timeline.
func verdicts() []string {
	return []string{probes.VerdictPlausible, probes.VerdictTooFast, probes.VerdictUnknown}
}

// Collector turns the advisor's state into metrics at each scrape. Create it with NewCollector.
type Collector struct {
	src       StateSource
	version   string
	goVersion string

	up, collectorDuration, collectorSuccess, lastSnapshot, buildInfo *prometheus.Desc

	serverVersion, walRecords, walFPI, walBytes, walBuffersFull, walWrites, walSyncs       *prometheus.Desc
	walWriteTime, walSyncTime, checkpointsTimed, checkpointsRequested                      *prometheus.Desc
	checkpointWriteTime, checkpointSyncTime, walBuffers, syncMethod, fsync, fullPageWrites *prometheus.Desc
	synchronousCommit, pendingRestart, waitEventSamples, waitSamplerRuns, activeBackends   *prometheus.Desc

	dirtyBackground, dirty, dirtyExpire, dirtyWriteback *prometheus.Desc

	storageInfo, storageRotational, storageVolatile, storageWriteBack, storageFree *prometheus.Desc

	probeLatency, probeEnabled, probeLastSuccess, probeVerdict *prometheus.Desc

	finding, recommendation *prometheus.Desc
}

// NewCollector returns a collector over src; version and goVersion label build_info.
func NewCollector(src StateSource, version, goVersion string) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	return &Collector{
		src:       src,
		version:   version,
		goVersion: goVersion,

		up:                d("up", "1 when the last collection from PostgreSQL succeeded."),
		collectorDuration: d("scrape_collector_duration_seconds", "Time the last collection of that part took.", "collector"),
		collectorSuccess:  d("scrape_collector_success", "1 when the last collection of that part succeeded.", "collector"),
		lastSnapshot:      d("last_snapshot_timestamp_seconds", "When the last snapshot was taken (Unix time)."),
		buildInfo:         d("build_info", "Build information of pgwal-advisor; always 1.", "version", "goversion"),

		serverVersion:        d("postgres_server_version_num", "PostgreSQL's server_version_num."),
		walRecords:           d("wal_records_total", "WAL records generated (pg_stat_wal.wal_records)."),
		walFPI:               d("wal_fpi_total", "WAL full-page images generated (pg_stat_wal.wal_fpi)."),
		walBytes:             d("wal_bytes_total", "WAL bytes generated (pg_stat_wal.wal_bytes)."),
		walBuffersFull:       d("wal_buffers_full_total", "Times WAL was written because the WAL buffers were full (pg_stat_wal.wal_buffers_full)."),
		walWrites:            d("wal_writes_total", "WAL writes (pg_stat_wal.wal_write; pg_stat_io on PostgreSQL 18)."),
		walSyncs:             d("wal_syncs_total", "WAL syncs (pg_stat_wal.wal_sync; pg_stat_io on PostgreSQL 18)."),
		walWriteTime:         d("wal_write_time_seconds_total", "Time spent writing WAL (needs track_wal_io_timing)."),
		walSyncTime:          d("wal_sync_time_seconds_total", "Time spent syncing WAL (needs track_wal_io_timing)."),
		checkpointsTimed:     d("checkpoints_timed_total", "Checkpoints started by checkpoint_timeout."),
		checkpointsRequested: d("checkpoints_requested_total", "Checkpoints requested (mostly by max_wal_size)."),
		checkpointWriteTime:  d("checkpoint_write_time_seconds_total", "Time checkpoints spent writing."),
		checkpointSyncTime:   d("checkpoint_sync_time_seconds_total", "Time checkpoints spent syncing."),
		walBuffers:           d("wal_buffers_bytes", "Effective wal_buffers."),
		syncMethod:           d("wal_sync_method_info", "1 for the configured wal_sync_method.", "method"),
		fsync:                d("fsync_enabled", "1 when fsync is on."),
		fullPageWrites:       d("full_page_writes_enabled", "1 when full_page_writes is on."),
		synchronousCommit:    d("synchronous_commit_info", "1 for the configured synchronous_commit.", "value"),
		pendingRestart:       d("setting_pending_restart", "1 for a watched setting changed but waiting for a restart.", "setting"),
		waitEventSamples:     d("wait_event_samples_total", "Backends seen waiting on a WAL wait event, summed over pg_stat_activity samples.", "event"),
		waitSamplerRuns:      d("wait_event_sampler_runs_total", "Times pg_stat_activity was sampled for wait events."),
		activeBackends:       d("active_backend_samples_total", "Active client backends, summed over pg_stat_activity samples."),

		dirtyBackground: d("kernel_dirty_background_threshold_bytes", "Dirty bytes at which background writeback starts (vm.dirty_background_bytes, else the ratio of dirtyable memory)."),
		dirty:           d("kernel_dirty_threshold_bytes", "Dirty bytes at which writers are throttled (vm.dirty_bytes, else the ratio of dirtyable memory)."),
		dirtyExpire:     d("kernel_dirty_expire_seconds", "vm.dirty_expire_centisecs in seconds."),
		dirtyWriteback:  d("kernel_dirty_writeback_interval_seconds", "vm.dirty_writeback_centisecs in seconds."),

		storageInfo:       d("wal_storage_info", "The WAL directory's file system and device; always 1.", "fs_type", "device", "mount_point", "write_cache"),
		storageRotational: d("wal_storage_rotational", "1 when a disk under the WAL is rotational."),
		storageVolatile:   d("wal_storage_volatile", "1 when the WAL's file system lives in memory (tmpfs, ramfs, RAM disk)."),
		storageWriteBack:  d("wal_storage_write_back_cache", "1 when a disk under the WAL reports a write-back (volatile) cache."),
		storageFree:       d("wal_storage_free_bytes", "Free space on the WAL's file system."),

		probeLatency:     d("probe_sync_latency_seconds", "One sync's latency per wal_sync_method and write pattern over the recent probe window (method=\"write\" is the unsynced baseline).", "method", "writes_per_sync", "direct_io"),
		probeEnabled:     d("probe_enabled", "1 when sync probing runs."),
		probeLastSuccess: d("probe_last_success_timestamp_seconds", "When the last probe burst succeeded (Unix time; 0 before the first)."),
		probeVerdict:     d("probe_durability_verdict", "1 for the current durability verdict of the sync probes.", "status"),

		finding:        d("finding", "1 per active finding; state is firing (shown, alerted on, applied) or pending (holds, not yet for RaiseAfter).", "rule", "severity", "setting", "state"),
		recommendation: d("recommendation_info", "1 per recommended change.", "rule", "setting", "current", "recommended", "action"),
	}
}

// descs lists every metric the collector can emit.
func (c *Collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{
		c.up, c.collectorDuration, c.collectorSuccess, c.lastSnapshot, c.buildInfo,
		c.serverVersion, c.walRecords, c.walFPI, c.walBytes, c.walBuffersFull, c.walWrites, c.walSyncs,
		c.walWriteTime, c.walSyncTime, c.checkpointsTimed, c.checkpointsRequested,
		c.checkpointWriteTime, c.checkpointSyncTime, c.walBuffers, c.syncMethod, c.fsync, c.fullPageWrites,
		c.synchronousCommit, c.pendingRestart, c.waitEventSamples, c.waitSamplerRuns, c.activeBackends,
		c.dirtyBackground, c.dirty, c.dirtyExpire, c.dirtyWriteback,
		c.storageInfo, c.storageRotational, c.storageVolatile, c.storageWriteBack, c.storageFree,
		c.probeLatency, c.probeEnabled, c.probeLastSuccess, c.probeVerdict,
		c.finding, c.recommendation,
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one consistent read of the state, turned into
// constant metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.State()
	e := emitter{ch: ch}
	e.gauge(c.buildInfo, 1, c.version, c.goVersion)

	snap := st.Snapshot
	up := 0.0
	if snap != nil {
		e.gauge(c.lastSnapshot, float64(snap.Time.UnixNano())/1e9)
		for _, p := range snap.Parts {
			e.gauge(c.collectorDuration, p.DurationSeconds, p.Name)
			e.gauge(c.collectorSuccess, boolValue(p.OK), p.Name)
			if p.Name == collector.PartPostgres && p.OK {
				up = 1
			}
		}
		if snap.Postgres != nil {
			c.collectPostgres(e, snap.Postgres)
		}
		if snap.Kernel != nil {
			c.collectKernel(e, snap.Kernel)
		}
		if snap.WALStorage != nil {
			c.collectStorage(e, snap.WALStorage)
		}
	}
	e.gauge(c.up, up)
	c.collectWaitEvents(e, st.WaitEvents)
	c.collectProbe(e, st)
	c.collectFindings(e, st)
}

func (c *Collector) collectPostgres(e emitter, pg *collector.Postgres) {
	e.gauge(c.serverVersion, float64(pg.VersionNum))
	if w := pg.WAL; w != nil {
		e.counter(c.walRecords, float64(w.Records))
		e.counter(c.walFPI, float64(w.FPI))
		e.counter(c.walBytes, float64(w.Bytes))
		e.counter(c.walBuffersFull, float64(w.BuffersFull))
		e.counter(c.walWrites, float64(w.Writes))
		e.counter(c.walSyncs, float64(w.Syncs))
		e.counter(c.walWriteTime, w.WriteTimeSeconds)
		e.counter(c.walSyncTime, w.SyncTimeSeconds)
	}
	if cp := pg.Checkpointer; cp != nil {
		e.counter(c.checkpointsTimed, float64(cp.Timed))
		e.counter(c.checkpointsRequested, float64(cp.Requested))
		e.counter(c.checkpointWriteTime, cp.WriteTimeSeconds)
		e.counter(c.checkpointSyncTime, cp.SyncTimeSeconds)
	}
	if s, ok := pg.Settings[collector.WALBuffers]; ok && s.Bytes != nil {
		e.gauge(c.walBuffers, float64(*s.Bytes))
	}
	if s, ok := pg.Settings[collector.WALSyncMethod]; ok {
		e.gauge(c.syncMethod, 1, s.Value)
	}
	if s, ok := pg.Settings[collector.Fsync]; ok {
		e.gauge(c.fsync, boolValue(s.Value == "on"))
	}
	if s, ok := pg.Settings[collector.FullPageWrites]; ok {
		e.gauge(c.fullPageWrites, boolValue(s.Value == "on"))
	}
	if s, ok := pg.Settings[collector.SynchronousCommit]; ok {
		e.gauge(c.synchronousCommit, 1, s.Value)
	}
	// Every watched setting gets a series (0 or 1), so that "pending restart" is told apart
	// from "not collected".
	for _, name := range slices.Sorted(maps.Keys(pg.Settings)) {
		e.gauge(c.pendingRestart, boolValue(pg.Settings[name].PendingRestart), name)
	}
}

func (c *Collector) collectWaitEvents(e emitter, w collector.WaitEvents) {
	events := waitEvents()
	for _, k := range slices.Sorted(maps.Keys(w.Counts)) {
		if !slices.Contains(events, k) {
			events = append(events, k)
		}
	}
	for _, ev := range events {
		e.counter(c.waitEventSamples, float64(w.Counts[ev]), ev)
	}
	e.counter(c.waitSamplerRuns, float64(w.Samples))
	e.counter(c.activeBackends, float64(w.ActiveBackends))
}

func (c *Collector) collectKernel(e emitter, k *collector.Kernel) {
	e.gauge(c.dirtyBackground, float64(k.DirtyBackgroundThresholdBytes))
	e.gauge(c.dirty, float64(k.DirtyThresholdBytes))
	e.gauge(c.dirtyExpire, float64(k.VM.DirtyExpireCentisecs)/100)
	e.gauge(c.dirtyWriteback, float64(k.VM.DirtyWritebackCentisecs)/100)
}

func (c *Collector) collectStorage(e emitter, st *collector.Storage) {
	// The kernel's name ("sda1", "dm-0") joins against node_exporter's device label; file
	// systems without a block device (tmpfs) only have the st_dev number.
	device := st.DeviceName
	if device == "" {
		device = st.Device
	}
	e.gauge(c.storageInfo, 1, st.FSType, device, st.MountPoint, st.WriteCache)
	// Unknown facts (no sysfs for the device) get no series rather than a misleading 0.
	if st.Rotational != nil {
		e.gauge(c.storageRotational, boolValue(*st.Rotational))
	}
	e.gauge(c.storageVolatile, boolValue(st.Volatile))
	if st.WriteCache != "" {
		e.gauge(c.storageWriteBack, boolValue(st.WriteCache == "write back"))
	}
	e.gauge(c.storageFree, float64(st.FreeBytes))
}

func (c *Collector) collectProbe(e emitter, st advisor.State) {
	e.gauge(c.probeEnabled, boolValue(st.ProbeEnabled))
	status := probes.VerdictUnknown
	last := 0.0
	if r := st.Probe; r != nil {
		if r.Durability.Status != "" {
			status = r.Durability.Status
		}
		if !r.Finished.IsZero() {
			last = float64(r.Finished.UnixNano()) / 1e9
		}
		for _, m := range r.Methods {
			// open_sync's optional 16kB-in-pieces series shares name and writes per sync with
			// the 8kB patterns; the daemon does not run it, and a duplicate series would fail
			// the whole scrape.
			if !m.Available || m.Samples == 0 || m.WriteBytes != probes.BlockBytes {
				continue
			}
			l := m.LatencyUS
			e.summary(c.probeLatency, uint64(m.Samples), l.Mean*float64(m.Samples)/1e6,
				map[float64]float64{0.5: l.P50 / 1e6, 0.9: l.P90 / 1e6, 0.99: l.P99 / 1e6},
				m.Name, strconv.Itoa(m.WritesPerSync), strconv.FormatBool(m.DirectIO))
		}
	}
	e.gauge(c.probeLastSuccess, last)
	known := verdicts()
	if !slices.Contains(known, status) {
		known = append(known, status)
	}
	for _, v := range known {
		e.gauge(c.probeVerdict, boolValue(v == status), v)
	}
}

func (c *Collector) collectFindings(e emitter, st advisor.State) {
	// The Tracker keeps one finding per rule and setting; the guard keeps a future duplicate
	// from failing the whole scrape.
	seen := map[string]bool{}
	for _, f := range slices.Concat(st.Findings, st.Pending) {
		key := f.Rule + "\x00" + f.Setting
		if seen[key] {
			continue
		}
		seen[key] = true
		state := rules.StateFiring
		if f.State == rules.StatePending {
			state = rules.StatePending
		}
		e.gauge(c.finding, 1, f.Rule, f.Severity.String(), f.Setting, string(state))
	}
	// One series per setting: the resolved recommendation, labelled with the rule that decided
	// it, so that an alert joining on setting finds exactly one value.
	for _, r := range st.Recommendations {
		e.gauge(c.recommendation, 1, r.Rule, r.Setting, r.Current, r.Recommended, string(r.Action))
	}
}

// emitter sends constant metrics; a metric that cannot be built (a label value that is not
// UTF-8) becomes an invalid metric, which promhttp reports while serving the rest.
type emitter struct {
	ch chan<- prometheus.Metric
}

func (e emitter) send(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- m
}

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.send(d, prometheus.GaugeValue, v, labels...)
}

func (e emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e.send(d, prometheus.CounterValue, v, labels...)
}

func (e emitter) summary(d *prometheus.Desc, count uint64, sum float64, quantiles map[float64]float64, labels ...string) {
	m, err := prometheus.NewConstSummary(d, count, sum, quantiles, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- m
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
