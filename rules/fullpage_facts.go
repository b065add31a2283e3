package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// fullPageFacts is what full-page-images judges over the window.
type fullPageFacts struct {
	window *History
	// The window's WAL: bytes, records and full-page images (pg_stat_wal), and bytes per second.
	walBytes, records, fpi float64
	walRate                float64
	// imageBytes estimates the images' bytes; share is imageBytes / walBytes and upper the bound
	// fpi x block_size / walBytes. estimate says how imageBytes was reached, for the basis.
	imageBytes, share, upper float64
	estimate                 string
	fullPageWrites           bool
	// compression is wal_compression as shown, compressed whether it is on; accepted are the
	// methods the server takes (pg_settings.enumvals; PostgreSQL 14's on).
	compression string
	compressed  bool
	accepted    []string
	// methods are the accepted methods as measured on the server's own recent images (nil when
	// there is no reading: readingWhy says why); images is the reading's images' share of the
	// WAL it read and imageRate the window's image bytes per second before compression.
	methods    []methodFigures
	readingWhy string
	reading    *collector.FullPages
	imageRate  float64
	// cpuIdle is the share of the host's CPU time that was idle (idle + iowait), idleCores the
	// same in CPUs (idle CPU seconds per second), when hasCPU.
	cpuIdle, idleCores float64
	hasCPU             bool
	// writeCost is what the WAL's writes cost the backends, when hasWriteCost: the share of
	// active backends' samples waiting on them (waitSamples samples), or, without samples, WAL
	// write and sync seconds per second (track_wal_io_timing).
	writeCost    float64
	hasWriteCost bool
	waitSamples  int64
	// diskRate and diskBusy are the WAL device's write bytes and write seconds per second
	// (evidence only: a FUSE or tmpfs WAL has no device counters).
	diskRate, diskBusy float64
	hasDisk            bool
	// Checkpoints completed over CheckpointWindow, and what started them.
	checkpoints, timed, requested float64
	timeout                       float64 // checkpoint_timeout, seconds
	hasTimeout                    bool
	timeoutText                   string
}

// fullPageFactsOf gathers the facts, or says what is missing to judge.
func fullPageFactsOf(in Input) (fullPageFacts, string) {
	var f fullPageFacts
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	if pg.WAL == nil {
		return f, "full-page images need pg_stat_wal (PostgreSQL 14+)"
	}
	s := settings(pg.Settings)
	var ok bool
	if f.fullPageWrites, ok = s.on(collector.FullPageWrites); !ok {
		return f, "full_page_writes is missing from pg_settings"
	}
	if f.compression, ok = s.value(collector.WALCompression); !ok {
		return f, "wal_compression is missing from pg_settings"
	}
	t := in.Config
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return f, cold
	}
	bytes, records, fpi := w.Change(WALBytes), w.Change(WALRecords), w.Change(WALFPI)
	if !bytes.OK() || !records.OK() || !fpi.OK() {
		return f, fmt.Sprintf("no pg_stat_wal interval without a reset in the last %s", t.Window)
	}
	f.window, f.walBytes, f.records, f.fpi, f.walRate = w, bytes.Delta, records.Delta, fpi.Delta, bytes.Rate()
	f.estimateImages(s, t)
	f.compressed = isCompressed(f.compression)
	f.accepted = compressionMethods(pg, s)
	f.measureCosts(w, t)
	f.readImages(in.History, t)
	cw := sinceWindow(in, t.CheckpointWindow)
	f.checkpoints = checkpointsIn(cw).count
	f.timed, f.requested = cw.Change(CheckpointsTimed).Delta, cw.Change(CheckpointsRequested).Delta
	f.timeout, f.hasTimeout = s.seconds(collector.CheckpointTimeout)
	f.timeoutText = s[collector.CheckpointTimeout].Value
	return f, ""
}

// estimateImages estimates the images' bytes. PostgreSQL 14-18 count images (wal_fpi) but not
// their bytes: a page image is at most block_size (less the free space in the middle of the page,
// which PostgreSQL leaves out), and the rest of the WAL is records of about FPIRecordBytes each.
// The estimate is what the records leave, never more than the bound (docs/rules.md,
// full-page-images, "How the images' share is estimated").
func (f *fullPageFacts) estimateImages(s settings, t Thresholds) {
	block, ok := s.number(collector.BlockSize)
	if !ok || block <= 0 {
		block = 8192
	}
	bound := f.fpi * block
	f.imageBytes = min(max(f.walBytes-f.records*float64(t.FPIRecordBytes), 0), bound)
	f.estimate = fmt.Sprintf("WAL bytes less %d bytes per record, at most %.0f images x %.0f bytes", t.FPIRecordBytes, f.fpi, block)
	if f.walBytes > 0 {
		f.share, f.upper = f.imageBytes/f.walBytes, min(bound/f.walBytes, 1)
	}
}

// measureCosts reads the CPU's idle time, what the WAL's writes cost and the WAL device's rates.
func (f *fullPageFacts) measureCosts(w *History, t Thresholds) {
	total, idle := w.Change(CPUSeconds), w.Change(CPUIdleSeconds)
	if total.OK() && idle.OK() && total.Delta > 0 {
		f.cpuIdle, f.hasCPU = min(max(idle.Delta/total.Delta, 0), 1), true
		f.idleCores = max(idle.Rate(), 0)
	}
	waits := w.WaitEvents()
	f.waitSamples = waits.Samples
	if waits.Samples >= t.MinWaitSamples && waits.ActiveBackends > 0 {
		f.writeCost, f.hasWriteCost = waits.Share(walWaitEvents()...), true
	} else if secs, ok := walIOSeconds(w); ok && w.Span() > 0 {
		f.writeCost, f.hasWriteCost = secs/w.Span().Seconds(), true
	}
	bytes, busy := w.Change(DiskWriteBytes), w.Change(DiskWriteSeconds)
	if bytes.OK() && busy.OK() {
		f.diskRate, f.diskBusy, f.hasDisk = bytes.Rate(), busy.Rate(), true
	}
}

// isCompressed reads wal_compression as SHOW prints it: a method name or a boolean.
func isCompressed(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "no", "0", "":
		return false
	}
	return true
}

// compressionMethods lists the methods the server takes, as pg_settings.enumvals lists them.
// PostgreSQL 14's wal_compression is a boolean whose on is pglz; from 15 pglz is always built in.
func compressionMethods(pg *collector.Postgres, s settings) []string {
	vals := s[collector.WALCompression].EnumVals
	if len(vals) == 0 {
		if pg.VersionNum > 0 && pg.VersionNum < 150000 {
			return []string{compressionOn}
		}
		return []string{compressionPGLZ}
	}
	var out []string
	for _, m := range []string{compressionLZ4, compressionZstd, compressionPGLZ} {
		if slices.Contains(vals, m) {
			out = append(out, m)
		}
	}
	return out
}

// evidenceWith adds a measured method's figures to the evidence.
func (f fullPageFacts) evidenceWith(m methodFigures) []Evidence {
	ev := f.evidence()
	if m.method == "" {
		return ev
	}
	return append(ev,
		Evidence{Name: "compression_kept_ratio", Value: m.kept, Unit: UnitRatio},
		Evidence{Name: "compression_cpu_seconds_per_mb", Value: m.cpuPerMB, Unit: UnitSecondsPerMB},
		Evidence{Name: "compression_cpus", Value: m.cores, Unit: UnitRatio})
}

func (f fullPageFacts) evidence() []Evidence {
	ev := []Evidence{
		{Name: "wal_rate", Value: f.walRate, Unit: UnitBytesPerSecond},
		{Name: "wal_fpi_rate", Value: f.fpi / f.window.Span().Seconds(), Unit: UnitPerSecond},
		{Name: "full_page_image_share", Value: f.share, Unit: UnitRatio},
		{Name: "full_page_image_share_max", Value: f.upper, Unit: UnitRatio},
		{Name: "checkpoints", Value: f.checkpoints, Unit: UnitCount},
	}
	if f.records > 0 {
		ev = append(ev, Evidence{Name: PredictWALBytesPerRecord, Value: f.walBytes / f.records, Unit: UnitBytesPerRecord})
	}
	if f.hasCPU {
		ev = append(ev, Evidence{Name: "cpu_idle_share", Value: f.cpuIdle, Unit: UnitRatio})
	}
	if f.hasWriteCost && f.waitSamples > 0 {
		ev = append(ev, Evidence{Name: "wal_write_wait_share", Value: f.writeCost, Unit: UnitRatio})
	} else if f.hasWriteCost {
		ev = append(ev, Evidence{Name: "wal_io_seconds_per_second", Value: f.writeCost, Unit: UnitRatio})
	}
	if f.hasDisk {
		ev = append(ev, Evidence{Name: "disk_write_rate", Value: f.diskRate, Unit: UnitBytesPerSecond},
			Evidence{Name: "disk_write_seconds_per_second", Value: f.diskBusy, Unit: UnitRatio})
	}
	return ev
}

// writeCostText says what the WAL's writes cost, or that it is unknown.
func (f fullPageFacts) writeCostText() string {
	switch {
	case !f.hasWriteCost:
		return "what the WAL's writes cost is unknown (no wait-event samples, track_wal_io_timing off)"
	case f.waitSamples > 0:
		return fmt.Sprintf("active backends spent %s of their time waiting on the WAL's writes, syncs and buffers", pct(f.writeCost))
	}
	return fmt.Sprintf("WAL writes and syncs took %.2f s per second (track_wal_io_timing)", f.writeCost)
}

// cpuText is a clause on the CPU's idle time, empty when it is unknown.
func (f fullPageFacts) cpuText() string {
	if !f.hasCPU {
		return ""
	}
	return fmt.Sprintf(", with the host's CPUs idle %s of the time", pct(f.cpuIdle))
}
