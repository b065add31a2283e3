package rules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// writeback-stalls-wal: a WAL flush on a device shared with another writer waits behind what the
// kernel's write-back queued there (kernel doc admin-guide/sysctl/vm). The rule names the cause -
// WAL flushes slow or waited on while Dirty+Writeback is large and the WAL is not what fills it -
// and advises what removes the queue: the WAL on a device of its own, or the writer throttled.
// Lower vm.dirty_* made the lab's stall longer, so it is recommended only for a device shape a
// benchmark proved (docs/rules.md, writeback-stalls-wal; docs/benchmarks.md, neighbour table).
func writebackStallsWAL(rows []DirtyRow) Rule {
	return Rule{
		ID:       "writeback-stalls-wal",
		Title:    "WAL flushes wait behind the kernel's write-back of another writer",
		Severity: Warning,
		Settings: []string{settingWALDevice, collector.KnobDirtyThresholds},
		Rationale: "A WAL flush on a device shared with another writer waits behind the dirty pages the " +
			"kernel queued there; with the default dirty ratios that is many seconds of device writes. " +
			"The rule fires when WAL flushes slow down while Dirty+Writeback is large and the WAL's own " +
			"writes are a small part of what the host writes. The lab found lower vm.dirty_* made the stall " +
			"longer, so the advice is the WAL on its own device or a throttled writer; a vm.dirty_* change " +
			"only for a device shape a benchmark proved.",
		Sources: []string{
			"https://www.kernel.org/doc/html/latest/admin-guide/sysctl/vm.html#dirty-background-bytes",
			"https://docs.kernel.org/admin-guide/cgroup-v2.html#io (io.max)",
			pgDocs + "wal-configuration.html",
			pgDocs + "monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW",
			"docs/rules.md, writeback-stalls-wal", "docs/benchmarks.md, neighbour table",
			"seed 003",
		},
		Eval: withDefaults(func(in Input) Result { return evalWritebackStallsWAL(in, rows) }),
	}
}

// settingWALDevice is the storage property the advice changes: where the WAL lives, and who
// else writes there.
const settingWALDevice = collector.HostWALDevice

// Device shapes and bandwidth classes of the DirtyRow table.
const (
	ShapeRotational = "rotational"
	ShapeSSD        = "ssd"
	ShapeNVMe       = "nvme"
	ShapeVirtual    = "virtual"
	ShapeLoop       = "loop"
	ShapeUnknown    = "unknown"

	// Bandwidth classes by the WAL device's peak measured write rate in the window.
	BandwidthSlow   = "below 200MB/s"
	BandwidthMedium = "200MB/s-2GB/s"
	BandwidthFast   = "2GB/s and above"
)

// DirtyRow is one device shape for which a benchmark (docs/benchmarks.md, neighbour table)
// measured a vm.dirty_* setting that shortened the stall beyond the run-to-run spread. Where
// the WAL's device matches a row, and the thresholds in force are the ones the row was
// measured from, writeback-stalls-wal recommends the row's pair (vm.dirty_thresholds, one
// change of all four vm.dirty_* files) instead of advice.
type DirtyRow struct {
	Shape     string
	Bandwidth string
	// LoweredDirtyBytesMax, when set, limits the row to hosts whose thresholds were lowered:
	// both bytes knobs in force, vm.dirty_bytes at most this, and the row's ratios at least
	// twice it in bytes (the shape measured: every lowered point from 16MB/64MB to 256MB/1GB
	// against the kernel's ratios on a host where those were 2.5GB and more).
	LoweredDirtyBytesMax int64
	// The pair to write: both ratios (BackgroundRatio, DirtyRatio) or both byte counts
	// (BackgroundBytes, DirtyBytes), the background one below the other.
	BackgroundRatio, DirtyRatio int64
	BackgroundBytes, DirtyBytes int64
	// StallRatio is the stall's length with these values over its length with the values the
	// row was measured from, as measured (the prediction).
	StallRatio float64
	// Source names the table and rows that proved it.
	Source string
}

// pair is the row's value of vm.dirty_thresholds, and whether the row has a sane one.
func (r DirtyRow) pair() (string, bool) {
	switch {
	case r.BackgroundRatio > 0 && r.DirtyRatio > r.BackgroundRatio && r.DirtyRatio <= 100 && r.BackgroundBytes == 0 && r.DirtyBytes == 0:
		return fmt.Sprintf("%d%%/%d%%", r.BackgroundRatio, r.DirtyRatio), true
	case r.BackgroundBytes > 0 && r.DirtyBytes > r.BackgroundBytes && r.BackgroundRatio == 0 && r.DirtyRatio == 0:
		return fmt.Sprintf("%d/%d", r.BackgroundBytes, r.DirtyBytes), true
	}
	return "", false
}

// ProvenDirtyRows is the table the rule set uses: every row docs/benchmarks.md's tables prove,
// and none they do not (docs/rules.md, writeback-stalls-wal, says what a row needs). It is a
// function, not a variable, so that nothing can change it at run time.
//
// The one row: on the neighbour scenario's device (ext4 on a loop device over the simulated
// disk at 80 MB/s), every lowered pair of bytes the grid measured made the stall longer than
// the kernel's default ratios, in every run: 16MB/64MB 56.5 s (54, 59), 64MB/256MB 54.5 (54,
// 55), tuned's 64MB/512MB 55.0 (54, 56), 256MB/1GB 55.5 (52, 59), against 45.0 (43, 47). So
// where lowered thresholds meet a neighbour's stall there, the kernel's ratios go back.
// Nothing lower than the defaults beat them (ProvenDirtyRows has no bytes row), and the
// writer on another device stalled the WAL at no setting (docs/benchmarks.md, Neighbour
// elsewhere).
func ProvenDirtyRows() []DirtyRow {
	return []DirtyRow{{
		Shape: ShapeLoop, Bandwidth: BandwidthSlow,
		LoweredDirtyBytesMax: 1 << 30,
		BackgroundRatio:      10, DirtyRatio: 20,
		StallRatio: 45.0 / 55.0,
		Source: "docs/benchmarks.md, neighbour table: the kernel's ratios 45.0 stall s (runs 43, 47) against " +
			"tuned's 64MB/512MB 55.0 (54, 56), 64MB/256MB 54.5, 16MB/64MB 56.5, 256MB/1GB 55.5",
	}}
}

// WritebackStallsWAL returns writeback-stalls-wal over a given table of proven device shapes:
// All uses ProvenDirtyRows; tests use rows of their own to exercise the sysctl path.
func WritebackStallsWAL(rows []DirtyRow) Rule { return writebackStallsWAL(rows) }

// writebackFacts is what writeback-stalls-wal judges: the stall measured over the window, and
// the host it happened on.
type writebackFacts struct {
	stall   StallFacts
	kernel  *collector.Kernel
	storage *collector.Storage // the WAL's; nil when unknown
	// hasDevice says the WAL is on a block device whose writes were measured; shape and class
	// are then its shape and bandwidth class for the DirtyRow table (ShapeUnknown and "" without).
	hasDevice    bool
	shape, class string
	// probe is the configured method's one-write flush, measured under the load, when hasProbe.
	probe    probes.MethodResult
	hasProbe bool
	// flushAfterOff names the *_flush_after settings at 0, which add the checkpointer's pages
	// to the pile.
	flushAfterOff []string
	// writers is who wrote over the stall and its lead-in (rules/writeback_writers.go).
	writers writerFacts
}

func evalWritebackStallsWAL(in Input, rows []DirtyRow) Result {
	f, lacking := writebackFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	if decideWriteback(f.stall, in.Config) != verdictFire {
		return found()
	}
	summary, ev := writebackSummary(f), writebackEvidence(f)
	if row, ok := findRow(rows, f.shape, f.class, f.kernel); ok && f.hasDevice && !f.elsewhere() {
		// A pair already at the row's value and still stalling falls through to the advice.
		if fd, ok := dirtyFinding(f.kernel, row, f.stall, summary, ev); ok {
			return found(fd)
		}
	}
	return found(writebackAdvice(f, summary, ev))
}

// decideWriteback: WAL flushes stalled for at least WritebackStallMin, and the WAL is not what
// fills the cache - a bulk load whose WAL is the pile is the WAL rules' business.
func decideWriteback(s StallFacts, t Thresholds) verdict {
	switch {
	case s.Seconds < t.WritebackStallMin.Seconds():
		return verdictQuiet
	case s.hostBytes <= 0 || s.walBytes > t.WritebackWALShare*s.hostBytes:
		return verdictQuiet
	}
	return verdictFire
}

// writebackFactsOf gathers the facts, or says what is missing to judge.
func writebackFactsOf(in Input) (writebackFacts, string) {
	var f writebackFacts
	snap, ok := in.History.Latest()
	if !ok {
		return f, "no snapshot yet"
	}
	if snap.Kernel == nil {
		return f, "no kernel facts (Dirty/Writeback) in the latest snapshot"
	}
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return f, missing
	}
	t := in.Config
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return f, cold
	}
	s := settings(pg.Settings)
	timing, _ := s.on(collector.TrackWALIOTiming)
	f.stall = stallFacts(w, t, timing)
	if !timing && f.stall.waitSamples < t.MinWaitSamples {
		return f, fmt.Sprintf("need track_wal_io_timing or %d wait-event samples to see WAL flushes stall, have %d", t.MinWaitSamples, f.stall.waitSamples)
	}
	f.kernel, f.storage = snap.Kernel, snap.WALStorage
	f.hasDevice = f.storage != nil && f.storage.DeviceName != "" && f.stall.hasDev
	f.shape = ShapeUnknown
	if f.hasDevice {
		f.shape, f.class = deviceShape(f.storage), bandwidthClass(f.stall.devPeak)
	}
	if probe, _ := freshProbe(in); probe != nil {
		f.probe, f.hasProbe = probeMethod(probe, pg)
	}
	f.flushAfterOff = flushAfterOff(snap, s)
	f.writers = writersOf(in.History, f.stall, f.kernel, f.storage)
	return f, ""
}

func writebackEvidence(f writebackFacts) []Evidence {
	s := f.stall
	ev := []Evidence{{Name: PredictWritebackStall, Value: s.Seconds, Unit: UnitSeconds}}
	if s.hasFlushDuring {
		ev = append(ev, Evidence{Name: "wal_flush_seconds_during", Value: s.flushDuring, Unit: UnitSeconds},
			Evidence{Name: "wal_flush_seconds_worst", Value: s.flushWorst, Unit: UnitSeconds})
	}
	if s.hasFlushOutside {
		ev = append(ev, Evidence{Name: "wal_flush_seconds_outside", Value: s.flushOutside, Unit: UnitSeconds})
	}
	if s.hasShareDuring {
		ev = append(ev, Evidence{Name: "wal_flush_wait_share_during", Value: s.shareDuring, Unit: UnitRatio})
	}
	if s.hasShareOutside {
		ev = append(ev, Evidence{Name: "wal_flush_wait_share_outside", Value: s.shareOutside, Unit: UnitRatio})
	}
	ev = append(ev,
		Evidence{Name: "dirty_writeback_peak_bytes", Value: s.pilePeak, Unit: UnitBytes},
		Evidence{Name: "dirty_bytes", Value: s.dirtyPeak, Unit: UnitBytes},
		Evidence{Name: "writeback_bytes", Value: s.writebackPeak, Unit: UnitBytes},
		Evidence{Name: "dirty_background_threshold", Value: float64(f.kernel.DirtyBackgroundThresholdBytes), Unit: UnitBytes},
		Evidence{Name: "dirty_threshold", Value: float64(f.kernel.DirtyThresholdBytes), Unit: UnitBytes},
		Evidence{Name: "wal_write_rate", Value: s.walRate, Unit: UnitBytesPerSecond},
		Evidence{Name: "wal_share_of_writes", Value: s.walBytes / s.hostBytes, Unit: UnitRatio},
	)
	if f.hasDevice {
		ev = append(ev,
			Evidence{Name: "device_write_rate", Value: s.devRateDuring, Unit: UnitBytesPerSecond},
			Evidence{Name: "device_write_rate_peak", Value: s.devPeak, Unit: UnitBytesPerSecond})
	} else {
		ev = append(ev, Evidence{Name: "wal_block_device", Value: 0, Unit: UnitBool})
	}
	if share, ok := f.walDeviceShareOfPile(); ok {
		ev = append(ev, Evidence{Name: "wal_device_writes_over_pile", Value: share, Unit: UnitRatio})
	}
	if f.hasProbe {
		ev = append(ev, Evidence{Name: "probe_flush_seconds", Value: usSeconds(f.probe.LatencyUS.Mean), Unit: UnitSeconds})
	}
	return append(ev, f.writers.evidence()...)
}

// writebackSummary says what stalled, behind what, and what the WAL's share of the writes was.
func writebackSummary(f writebackFacts) string {
	s := f.stall
	where, devText := "on the WAL's device", ""
	if f.hasDevice {
		devText = fmt.Sprintf(", while the device (%s) wrote %s/s", f.storage.DeviceName, collector.FormatBytes(s.devRateDuring))
	} else {
		what := "unknown"
		if f.storage != nil && f.storage.FSType != "" {
			what = f.storage.FSType
		}
		where = "in the page cache"
		devText = fmt.Sprintf("; the WAL's file system (%s) has no block device, so the device's write rate and shape "+
			"are unknown and the WAL's share is judged against the Dirty+Writeback pile", what)
	}
	probeNote := ""
	if f.hasProbe {
		probeNote = fmt.Sprintf(" The probe's %s took %s on average in the window.", f.probe.Name, humanSeconds(usSeconds(f.probe.LatencyUS.Mean)))
	}
	summary := fmt.Sprintf("WAL flushes stalled for %s while %s was dirty or under write-back (Dirty %s, Writeback %s) %s: "+
		"%s. The WAL wrote %s/s, %s of what the host wrote%s: another writer fills the queue the WAL's flushes wait behind.%s",
		humanSeconds(s.Seconds), collector.FormatBytes(s.pilePeak), collector.FormatBytes(s.dirtyPeak), collector.FormatBytes(s.writebackPeak), where,
		stallFlushText(s), collector.FormatBytes(s.walRate), pct(s.walBytes/s.hostBytes), devText, probeNote) + f.writers.summary()
	if len(f.flushAfterOff) > 0 {
		summary += " " + strings.Join(f.flushAfterOff, " and ") + " at 0 let the checkpointer add to the pile (flush-after-disabled)."
	}
	return summary
}

// stallFlushText compares the WAL's flushes during the stall with outside it.
func stallFlushText(s StallFacts) string {
	var parts []string
	switch {
	case s.hasFlushDuring && s.hasFlushOutside:
		parts = append(parts, fmt.Sprintf("WAL flushes took %s each during it against %s outside", humanSeconds(s.flushDuring), humanSeconds(s.flushOutside)))
	case s.hasFlushDuring:
		parts = append(parts, fmt.Sprintf("WAL flushes took %s each during it (the whole window)", humanSeconds(s.flushDuring)))
	}
	if s.hasShareDuring {
		waits := fmt.Sprintf("%s of active backends' time waited on WAL I/O", pct(s.shareDuring))
		if s.hasShareOutside {
			waits += fmt.Sprintf(" against %s outside", pct(s.shareOutside))
		}
		parts = append(parts, waits)
	}
	return strings.Join(parts, "; ")
}

// pileElsewhereShare: when the WAL's device wrote less than this share of the Dirty+Writeback
// pile over the whole stall, the pile is draining to another device. Where the pile is the WAL
// device's own, the device writes it out at its bandwidth through the stall (the lab's
// neighbour: 80 MB/s for 43 s against a 2.7GB pile, more than the pile).
const pileElsewhereShare = 0.1

// walDeviceShareOfPile is what the WAL's device wrote during the stall over the pile's peak.
func (f writebackFacts) walDeviceShareOfPile() (float64, bool) {
	s := f.stall
	if !f.hasDevice || s.pilePeak <= 0 || s.Seconds <= 0 {
		return 0, false
	}
	return s.devRateDuring * s.Seconds / s.pilePeak, true
}

// elsewhere: the pile is another device's, and the WAL's writes wait behind the kernel's
// global dirty limit (balance_dirty_pages), not behind their own device's queue.
func (f writebackFacts) elsewhere() bool {
	share, ok := f.walDeviceShareOfPile()
	return ok && share < pileElsewhereShare
}

// writebackAdvice is the default finding: move the WAL or throttle the writer.
func writebackAdvice(f writebackFacts, summary string, ev []Evidence) Finding {
	s := f.stall
	throttle := f.writers.throttle(s, f.hasDevice)
	cur := "shared"
	if f.hasDevice {
		cur = "shared (" + f.storage.DeviceName + ")"
	}
	rec := "a device of its own for pg_wal, or the other writer throttled"
	text := fmt.Sprintf(" Put pg_wal on a device no other writer uses, or throttle the writer. %s "+
		"No vm.dirty_* value is proven for this device shape (%s); lower values made the lab's stall longer.", throttle.Text, shapeText(f.shape, f.class))
	if share, _ := f.walDeviceShareOfPile(); f.elsewhere() {
		cur = "own device (" + f.storage.DeviceName + "), another device's pile"
		rec = "the other writer throttled"
		text = fmt.Sprintf(" The WAL's device wrote %s during the stall, %s of the pile: the pile is another device's, and the WAL's "+
			"writes wait behind the kernel's global dirty limit (balance_dirty_pages), not behind their own device's queue. "+
			"Throttle the writer. %s The lab's run of this shape (docs/benchmarks.md, Neighbour elsewhere) stalled the WAL at no "+
			"setting, the kernel's defaults included, so no vm.dirty_* value or per-device limit (/sys/class/bdi/DEVICE/max_bytes, "+
			"strict_limit) is proven for it.", collector.FormatBytes(s.devRateDuring*s.Seconds), pct(share), throttle.Text)
	}
	return Finding{
		Severity:    Warning,
		Setting:     settingWALDevice,
		Current:     cur,
		Recommended: rec,
		Action:      ActionAdvice,
		Summary:     summary + text,
		Evidence:    ev,
		Predicted: &Predicted{Name: PredictWritebackStall, Current: s.Seconds, Value: 0, Unit: UnitSeconds,
			Basis: "with no other writer's queue ahead of the WAL's flushes they wait only for their own writes"},
		ExpectedEffect: "WAL flushes no longer wait behind another writer's write-back: the stall and its flush times go away.",
	}
}

func shapeText(shape, class string) string {
	if class == "" {
		return shape
	}
	return shape + ", " + class
}

// probeMethod is the probe's single-write result for the configured wal_sync_method.
func probeMethod(p *probes.Report, pg *collector.Postgres) (probes.MethodResult, bool) {
	method := settings(pg.Settings)[collector.WALSyncMethod].Value
	for _, m := range p.Methods {
		if m.Name == method && m.WritesPerSync == 1 && m.Available && m.Samples > 0 {
			return m, true
		}
	}
	return probes.MethodResult{}, false
}

// deviceShape classifies the WAL's device for the DirtyRow table.
func deviceShape(st *collector.Storage) string {
	switch {
	case strings.HasPrefix(st.DeviceName, "loop"):
		return ShapeLoop
	case st.Virtual:
		return ShapeVirtual
	}
	for _, d := range st.Disks {
		if d.Driver == "nvme" || strings.HasPrefix(d.Name, "nvme") {
			return ShapeNVMe
		}
	}
	if strings.HasPrefix(st.DeviceName, "nvme") {
		return ShapeNVMe
	}
	if st.Rotational == nil {
		return ShapeUnknown
	}
	if *st.Rotational {
		return ShapeRotational
	}
	return ShapeSSD
}

// bandwidthClass classes the device by the highest write rate measured on it in the window:
// a device's bandwidth is what it wrote while a writer kept it busy, which a stall is.
func bandwidthClass(rate float64) string {
	switch {
	case rate < 200e6:
		return BandwidthSlow
	case rate < 2e9:
		return BandwidthMedium
	}
	return BandwidthFast
}

// findRow returns the first row for the device's shape and class whose starting point is the
// kernel's: for a row measured from lowered thresholds, both bytes knobs in force and low
// enough, with the row's ratios at least twice the dirty one in bytes.
func findRow(rows []DirtyRow, shape, class string, k *collector.Kernel) (DirtyRow, bool) {
	for _, r := range rows {
		if _, ok := r.pair(); !ok || r.Shape != shape || r.Bandwidth != class {
			continue
		}
		if r.LoweredDirtyBytesMax > 0 {
			lowered := k.VM.DirtyBytes > 0 && k.VM.DirtyBackgroundBytes > 0 && k.VM.DirtyBytes <= r.LoweredDirtyBytesMax
			if !lowered || r.DirtyRatio == 0 || float64(r.DirtyRatio)/100*float64(dirtyableBytes(k)) < 2*float64(k.VM.DirtyBytes) {
				continue
			}
		}
		return r, true
	}
	return DirtyRow{}, false
}

// dirtyableBytes is the memory the ratios are of, as the collector approximates it
// (collector.Kernel: MemFree + Active(file) + Inactive(file)).
func dirtyableBytes(k *collector.Kernel) int64 {
	m := k.Meminfo
	return m.MemFreeBytes + m.ActiveFileBytes + m.InactiveFileBytes
}

// dirtyPairOf is vm.dirty_thresholds as it is in force: of each twin the non-zero one, a
// ratio with its percent sign (the apply mode's spelling, advisor/apply).
func dirtyPairOf(k *collector.Kernel) string {
	side := func(bytes, ratio int64) string {
		if bytes > 0 {
			return strconv.FormatInt(bytes, 10)
		}
		return strconv.FormatInt(ratio, 10) + "%"
	}
	return side(k.VM.DirtyBackgroundBytes, k.VM.DirtyBackgroundRatio) + "/" + side(k.VM.DirtyBytes, k.VM.DirtyRatio)
}

// dirtyFinding recommends a proven row's pair as one change, or nothing when it is in force.
func dirtyFinding(k *collector.Kernel, row DirtyRow, f StallFacts, summary string, ev []Evidence) (Finding, bool) {
	want, _ := row.pair()
	cur := dirtyPairOf(k)
	if cur == want {
		return Finding{}, false
	}
	effect := fmt.Sprintf("The stall shrinks to about %.0f%% of its length (%s); apply writes the four vm.dirty_* files as one change, "+
		"verifies it by the stall and rolls it back when it did not help. A gain this size may be within what one stall on each side "+
		"can confirm: the lab's daemon rolled it back as not proven (docs/benchmarks.md, neighbour restore phase).", row.StallRatio*100, row.Source)
	return Finding{
		Severity:    Warning,
		Setting:     collector.KnobDirtyThresholds,
		Current:     cur,
		Recommended: want,
		Action:      ActionSysctl,
		Summary: summary + fmt.Sprintf(" For this device shape (%s, %s) the lab measured the thresholds %s give shorter stalls than %s "+
			"(%s): set vm.dirty_thresholds to %s (background/dirty; the thresholds in force are %s and %s).",
			row.Shape, row.Bandwidth, want, cur, row.Source, want, collector.FormatBytes(float64(k.DirtyBackgroundThresholdBytes)),
			collector.FormatBytes(float64(k.DirtyThresholdBytes))),
		Evidence: ev,
		Predicted: &Predicted{Name: PredictWritebackStall, Current: f.Seconds, Value: f.Seconds * row.StallRatio, Unit: UnitSeconds,
			Basis: "the stall's ratio measured for this device shape: " + row.Source},
		ExpectedEffect: effect,
	}, true
}
