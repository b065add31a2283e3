package rules

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// writeback-stalls-wal: a WAL flush (fdatasync of a WAL segment, or an O_DSYNC write) waits for
// the device, and on a device shared with another writer it waits behind what the kernel's
// write-back queued there: a backup, a COPY ... TO file, logs, another database, PostgreSQL's
// own checkpoints. The kernel starts that write-back at vm.dirty_background_* and throttles
// writers at vm.dirty_* (kernel doc admin-guide/sysctl/vm), so with the default ratios of a
// large memory several GB can be queued ahead of one commit. The lab reproduced it
// (docs/benchmarks.md, neighbour table: data and WAL on ext4 on a loop device over the simulated
// 80 MB/s disk, pgbench -R 200 and a 3000 MB writer into the same file system): 45.0 stall seconds
// at the kernel's defaults, 55.0 at tuned's 64MB/512MB, 54.5 at 64MB/256MB, 56.5 at 16MB/64MB,
// 54.0 at ratio 20/40, 50.5-51.5 with shorter write-back timers - no vm.dirty_* point shorter -
// and 0 with the writer limited to 40 MB/s. The rule names the cause - WAL flushes slow or waited on while Dirty+Writeback is large and the WAL is
// not what fills it - and advises what removes the queue: the WAL on a device of its own, or the
// writer throttled. Lowering vm.dirty_* is recommended only for a device shape whose row in
// ProvenDirtyRows a benchmark proved; none is.
func writebackStallsWAL(rows []DirtyRow) Rule {
	return Rule{
		ID:       "writeback-stalls-wal",
		Title:    "WAL flushes wait behind the kernel's write-back of another writer",
		Severity: Warning,
		Settings: []string{settingWALDevice, collector.KnobDirtyBackgroundBytes, collector.KnobDirtyBytes},
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
			"docs/benchmarks.md, neighbour table (45.0 stall seconds at the defaults, 55.0 at 64MB/512MB, 54.5 at 64MB/256MB, 0.00 with the writer limited to 40 MB/s)",
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
// the WAL's device matches a row, writeback-stalls-wal recommends the row's values instead of
// advice.
type DirtyRow struct {
	Shape     string
	Bandwidth string
	// BackgroundBytes and DirtyBytes are vm.dirty_background_bytes and vm.dirty_bytes.
	BackgroundBytes, DirtyBytes int64
	// StallRatio is the stall's length with these values over its length at the kernel's
	// defaults, as measured (the prediction).
	StallRatio float64
	// Source names the table and row that proved it.
	Source string
}

// ProvenDirtyRows is the table the rule set uses. It is empty: no vm.dirty_* value has been
// measured to shorten the neighbour stall beyond the spread (docs/rules.md says what a row
// needs). It is a function, not a variable, so that nothing can change it at run time.
func ProvenDirtyRows() []DirtyRow { return nil }

// WritebackStallsWAL returns writeback-stalls-wal over a given table of proven device shapes:
// All uses ProvenDirtyRows; tests use rows of their own to exercise the sysctl path.
func WritebackStallsWAL(rows []DirtyRow) Rule { return writebackStallsWAL(rows) }

// stallInterval is one interval between consecutive snapshots, as the rule reads it.
type stallInterval struct {
	secs          float64
	flushes       float64 // WAL syncs, or writes under open_* (no syncs)
	ioSecs        float64 // WAL write + sync time (track_wal_io_timing)
	hasIO         bool
	active, waits int64 // active backends and those waiting on WAL I/O, summed over samples
	samples       int64
	pile          float64 // Dirty+Writeback, the larger of the two ends
	dirty, wb     float64 // at the end with the larger pile
	hasPile       bool
	devBytes      float64
	hasDev        bool
	walBytes      float64
}

func (iv stallInterval) flushPer() (float64, bool) {
	if !iv.hasIO || iv.flushes <= 0 {
		return 0, false
	}
	return iv.ioSecs / iv.flushes, true
}

func (iv stallInterval) share() (float64, bool) {
	if iv.active <= 0 {
		return 0, false
	}
	return float64(iv.waits) / float64(iv.active), true
}

// StallFacts is what the rule measured over its window; apply verifies a vm.dirty_* change by
// the same figures (Stall).
type StallFacts struct {
	// Seconds is the time the WAL's flushes stalled while Dirty+Writeback was large.
	Seconds float64
	// Intervals is how many intervals there were to judge; 0 means nothing could be judged.
	Intervals int

	flushDuring, flushOutside float64
	flushWorst                float64 // the worst stalled interval's time per flush
	hasFlushDuring            bool
	hasFlushOutside           bool
	shareDuring, shareOutside float64
	hasShareDuring            bool
	hasShareOutside           bool
	samplesDuring             int64
	pilePeak, dirtyPeak, wbPk float64
	hasPile                   bool
	devRateDuring, devPeak    float64
	hasDev                    bool
	walBytes, hostBytes       float64
	walRate                   float64
	span                      float64
	outsideSecs               float64
	timing                    bool
	waitSamples               int64
}

// Stall measures the WAL's write-back stall over a history with thresholds t (the zero value
// means DefaultThresholds): the figure writeback-stalls-wal fires on and apply verifies by.
func Stall(h *History, t Thresholds) StallFacts {
	if t == (Thresholds{}) {
		t = DefaultThresholds()
	}
	timing := false
	if last, ok := h.Latest(); ok && last.Postgres != nil {
		timing, _ = settings(last.Postgres.Settings).on(collector.TrackWALIOTiming)
	}
	return stallFacts(h, t, timing)
}

// intervalsOf reads the history's intervals. An interval in which no WAL flush completed is
// carried into the next one: a flush that takes seconds reports its time only when it ends, so
// the span it blocked is judged as one (the live test: commits stopped for 17 s, several
// one-second intervals counted no flush at all). The kernel's figures of a carried span are its
// largest pile and its summed bytes.
func intervalsOf(h *History, timing bool) []stallInterval {
	var out []stallInterval
	var carry *stallInterval
	for i := 1; i < h.Len(); i++ {
		a, b := &h.snaps[i-1], &h.snaps[i]
		iv := stallInterval{secs: b.Time.Sub(a.Time).Seconds()}
		if iv.secs <= 0 {
			continue
		}
		get := func(c Counter) (float64, bool) {
			x, ok := h.interval(c, i)
			return x.Delta, ok
		}
		syncs, okS := get(WALSyncs)
		writes, okW := get(WALWrites)
		if okS && okW {
			iv.flushes = syncs
			if syncs == 0 {
				iv.flushes = writes // open_* methods sync in the write and count no syncs
			}
			ws, ok1 := get(WALWriteSeconds)
			ss, ok2 := get(WALSyncSeconds)
			iv.ioSecs, iv.hasIO = ws+ss, timing && ok1 && ok2
		}
		if pg := b.Postgres; pg != nil && pg.WaitEvents != nil {
			we := pg.WaitEvents
			iv.samples, iv.active = we.Samples, we.ActiveBackends
			iv.waits = we.Counts[collector.EventIOWALSync] + we.Counts[collector.EventIOWALWrite] + we.Counts[collector.EventLWLockWALWrite]
		}
		for _, s := range []*collector.Snapshot{a, b} {
			if v, ok := DirtyWriteback.read(s); ok && (!iv.hasPile || v > iv.pile) {
				iv.pile, iv.hasPile = v, true
				iv.dirty, iv.wb = float64(s.Kernel.Meminfo.DirtyBytes), float64(s.Kernel.Meminfo.WritebackBytes)
			}
		}
		iv.devBytes, iv.hasDev = get(DiskWriteBytes)
		wal, _ := get(WALBytes)
		lsn, _ := get(WALInsertBytes)
		iv.walBytes = max(wal, lsn)
		if carry != nil {
			iv = carry.merge(iv)
			carry = nil
		}
		if iv.hasIO && iv.flushes == 0 && iv.ioSecs == 0 && iv.waits > 0 {
			c := iv
			carry = &c // backends wait on a flush that has not completed yet
			continue
		}
		out = append(out, iv)
	}
	if carry != nil {
		out = append(out, *carry)
	}
	return out
}

// merge joins iv and the interval after it.
func (iv stallInterval) merge(next stallInterval) stallInterval {
	m := next
	m.secs += iv.secs
	m.flushes += iv.flushes
	m.ioSecs += iv.ioSecs
	m.hasIO = iv.hasIO && next.hasIO
	m.active += iv.active
	m.waits += iv.waits
	m.samples += iv.samples
	if iv.hasPile && (!next.hasPile || iv.pile > next.pile) {
		m.pile, m.dirty, m.wb, m.hasPile = iv.pile, iv.dirty, iv.wb, true
	}
	m.devBytes += iv.devBytes
	m.hasDev = iv.hasDev && next.hasDev
	m.walBytes += iv.walBytes
	return m
}

// lowQuartile is the 25th percentile: the usual level of a figure in a window of which a stall
// may take up to three quarters.
func lowQuartile(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[(len(s)-1)/4], true
}

func stallFacts(h *History, t Thresholds, timing bool) StallFacts {
	ivs := intervalsOf(h, timing)
	f := StallFacts{Intervals: len(ivs), timing: timing}
	var pers, shares []float64
	for _, iv := range ivs {
		if p, ok := iv.flushPer(); ok {
			pers = append(pers, p)
		}
		if s, ok := iv.share(); ok {
			shares = append(shares, s)
		}
		f.waitSamples += iv.samples
	}
	basePer, hasBasePer := lowQuartile(pers)
	baseShare, hasBaseShare := lowQuartile(shares)
	var walRates []float64
	for _, iv := range ivs {
		if iv.secs > 0 {
			walRates = append(walRates, iv.walBytes/iv.secs)
		}
	}
	medianWAL := 0.0
	if len(walRates) > 0 {
		s := slices.Clone(walRates)
		sort.Float64s(s)
		medianWAL = s[len(s)/2]
	}
	slow := t.WritebackFlushSlow.Seconds()

	var dIO, dFl, oIO, oFl float64
	var dW, dA, oW, oA int64
	var stallDev, stallDevSecs float64
	var firstPile, lastPile float64
	havePile := false
	for _, iv := range ivs {
		f.span += iv.secs
		f.walBytes += iv.walBytes
		if iv.hasDev {
			f.hasDev = true
			f.hostBytes += iv.devBytes
			f.devPeak = max(f.devPeak, iv.devBytes/iv.secs)
		}
		if iv.hasPile {
			if !havePile {
				firstPile, havePile = iv.pile, true
			}
			lastPile = iv.pile
			if iv.pile > f.pilePeak || !f.hasPile {
				f.pilePeak, f.dirtyPeak, f.wbPk, f.hasPile = iv.pile, iv.dirty, iv.wb, true
			}
		}

		symptom := false
		if p, ok := iv.flushPer(); ok && p >= slow && (basePer >= slow || (hasBasePer && p >= t.WritebackFlushRise*basePer)) {
			symptom = true
		}
		// The wait share is the fallback without track_wal_io_timing, and it has no floor-only
		// case: a load that is flush-bound all the time waits as much outside a stall as in it
		// (the live test's pgbench -R 200 on the 1 ms device: 75% of active samples), and a few
		// samples per interval move it by a quarter by chance, so only a rise tells a stall.
		// And a rise in waits alone is noise unless the commits behind them stopped: in a stall
		// the WAL barely grows (the live test: a few kB/s against 200 kB/s outside), while a
		// flush-bound single client on a 4 ms device jitters between 75% and 100% of its
		// samples with its WAL rate steady (the seed 000 benchmark, timing off, raised the
		// rule on that before this condition).
		if s, ok := iv.share(); ok && !timing && hasBaseShare && s >= t.WritebackWaitShare && s >= baseShare+t.WritebackWaitRise &&
			medianWAL > 0 && iv.walBytes/iv.secs <= medianWAL/2 {
			symptom = true
		}
		large := iv.hasPile && iv.pile >= float64(t.WritebackPileMin)
		if large && iv.hasDev && iv.devBytes > 0 {
			large = iv.pile >= t.WritebackPileSeconds*iv.devBytes/iv.secs
		}
		if symptom && large {
			if p, ok := iv.flushPer(); ok {
				f.flushWorst = max(f.flushWorst, p)
			}
			f.Seconds += iv.secs
			dIO, dFl = dIO+iv.ioSecs, dFl+iv.flushes
			if iv.hasIO {
				f.hasFlushDuring = true
			}
			dW, dA = dW+iv.waits, dA+iv.active
			f.samplesDuring += iv.samples
			if iv.hasDev {
				stallDev += iv.devBytes
				stallDevSecs += iv.secs
			}
			continue
		}
		f.outsideSecs += iv.secs
		if iv.hasIO {
			oIO, oFl = oIO+iv.ioSecs, oFl+iv.flushes
			f.hasFlushOutside = true
		}
		oW, oA = oW+iv.waits, oA+iv.active
	}
	if f.hasFlushDuring && dFl > 0 {
		f.flushDuring = dIO / dFl
	} else {
		f.hasFlushDuring = false
	}
	if f.hasFlushOutside && oFl > 0 {
		f.flushOutside = oIO / oFl
	} else {
		f.hasFlushOutside = false
	}
	if dA > 0 {
		f.shareDuring, f.hasShareDuring = float64(dW)/float64(dA), true
	}
	if oA > 0 {
		f.shareOutside, f.hasShareOutside = float64(oW)/float64(oA), true
	}
	if stallDevSecs > 0 {
		f.devRateDuring = stallDev / stallDevSecs
	}
	// What the host wrote: what reached the WAL's device, plus what piled up in the page cache
	// and had not reached it by the window's end (a writer on another device shows only there).
	if havePile {
		f.hostBytes += max(0, lastPile-firstPile)
		if !f.hasDev {
			// No block device: the pile is all there is to compare the WAL's bytes with.
			f.hostBytes = max(f.hostBytes, f.pilePeak)
		}
	}
	if f.span > 0 {
		f.walRate = f.walBytes / f.span
	}
	return f
}

func evalWritebackStallsWAL(in Input, rows []DirtyRow) Result {
	snap, ok := in.History.Latest()
	if !ok {
		return notEnough("no snapshot yet")
	}
	if snap.Kernel == nil {
		return notEnough("no kernel facts (Dirty/Writeback) in the latest snapshot")
	}
	pg, missing := latestPostgres(in.History)
	if pg == nil {
		return notEnough("%s", missing)
	}
	t := in.Config
	w := sinceWindow(in, t.Window)
	if cold := coldStart(w, t); cold != "" {
		return notEnough("%s", cold)
	}
	s := settings(pg.Settings)
	timing, _ := s.on(collector.TrackWALIOTiming)
	f := stallFacts(w, t, timing)
	if !timing && f.waitSamples < t.MinWaitSamples {
		return notEnough("need track_wal_io_timing or %d wait-event samples to see WAL flushes stall, have %d", t.MinWaitSamples, f.waitSamples)
	}
	if f.Seconds < t.WritebackStallMin.Seconds() {
		return found()
	}
	if f.hostBytes <= 0 || f.walBytes > t.WritebackWALShare*f.hostBytes {
		return found() // the WAL is what the host writes: a WAL rule's business, not write-back's
	}
	st := snap.WALStorage
	hasDevice := st != nil && st.DeviceName != "" && f.hasDev

	ev := []Evidence{{Name: "writeback_stall_seconds", Value: f.Seconds, Unit: UnitSeconds}}
	if f.hasFlushDuring {
		ev = append(ev, Evidence{Name: "wal_flush_seconds_during", Value: f.flushDuring, Unit: UnitSeconds},
			Evidence{Name: "wal_flush_seconds_worst", Value: f.flushWorst, Unit: UnitSeconds})
	}
	if f.hasFlushOutside {
		ev = append(ev, Evidence{Name: "wal_flush_seconds_outside", Value: f.flushOutside, Unit: UnitSeconds})
	}
	if f.hasShareDuring {
		ev = append(ev, Evidence{Name: "wal_flush_wait_share_during", Value: f.shareDuring, Unit: UnitRatio})
	}
	if f.hasShareOutside {
		ev = append(ev, Evidence{Name: "wal_flush_wait_share_outside", Value: f.shareOutside, Unit: UnitRatio})
	}
	ev = append(ev,
		Evidence{Name: "dirty_writeback_peak_bytes", Value: f.pilePeak, Unit: UnitBytes},
		Evidence{Name: "dirty_bytes", Value: f.dirtyPeak, Unit: UnitBytes},
		Evidence{Name: "writeback_bytes", Value: f.wbPk, Unit: UnitBytes},
		Evidence{Name: "dirty_background_threshold", Value: float64(snap.Kernel.DirtyBackgroundThresholdBytes), Unit: UnitBytes},
		Evidence{Name: "dirty_threshold", Value: float64(snap.Kernel.DirtyThresholdBytes), Unit: UnitBytes},
		Evidence{Name: "wal_write_rate", Value: f.walRate, Unit: UnitBytesPerSecond},
		Evidence{Name: "wal_share_of_writes", Value: f.walBytes / f.hostBytes, Unit: UnitRatio},
	)
	if hasDevice {
		ev = append(ev,
			Evidence{Name: "device_write_rate", Value: f.devRateDuring, Unit: UnitBytesPerSecond},
			Evidence{Name: "device_write_rate_peak", Value: f.devPeak, Unit: UnitBytesPerSecond})
	} else {
		ev = append(ev, Evidence{Name: "wal_block_device", Value: 0, Unit: UnitBool})
	}
	probeNote := ""
	if probe, _ := freshProbe(in); probe != nil {
		if m, ok := probeMethod(probe, pg); ok {
			ev = append(ev, Evidence{Name: "probe_flush_seconds", Value: usSeconds(m.LatencyUS.Mean), Unit: UnitSeconds})
			probeNote = fmt.Sprintf(" The probe's %s took %s on average in the window.", m.Name, humanSeconds(usSeconds(m.LatencyUS.Mean)))
		}
	}

	flush := ""
	switch {
	case f.hasFlushDuring && f.hasFlushOutside:
		flush = fmt.Sprintf("WAL flushes took %s each during it against %s outside", humanSeconds(f.flushDuring), humanSeconds(f.flushOutside))
	case f.hasFlushDuring:
		flush = fmt.Sprintf("WAL flushes took %s each during it (the whole window)", humanSeconds(f.flushDuring))
	}
	if f.hasShareDuring {
		if flush != "" {
			flush += "; "
		}
		flush += fmt.Sprintf("%s of active backends' time waited on WAL I/O", pct(f.shareDuring))
		if f.hasShareOutside {
			flush += fmt.Sprintf(" against %s outside", pct(f.shareOutside))
		}
	}
	where := "on the WAL's device"
	devText := ""
	if hasDevice {
		devText = fmt.Sprintf(", while the device (%s) wrote %s/s", st.DeviceName, humanBytes(f.devRateDuring))
	} else {
		what := "unknown"
		if st != nil && st.FSType != "" {
			what = st.FSType
		}
		where = "in the page cache"
		devText = fmt.Sprintf("; the WAL's file system (%s) has no block device, so the device's write rate and shape "+
			"are unknown and the WAL's share is judged against the Dirty+Writeback pile", what)
	}
	summary := fmt.Sprintf("WAL flushes stalled for %s while %s was dirty or under write-back (Dirty %s, Writeback %s) %s: "+
		"%s. The WAL wrote %s/s, %s of what the host wrote%s: another writer fills the queue the WAL's flushes wait behind.%s",
		humanSeconds(f.Seconds), humanBytes(f.pilePeak), humanBytes(f.dirtyPeak), humanBytes(f.wbPk), where,
		flush, humanBytes(f.walRate), pct(f.walBytes/f.hostBytes), devText, probeNote)
	if off := flushAfterOff(snap, s); len(off) > 0 {
		summary += " " + strings.Join(off, " and ") + " at 0 let the checkpointer add to the pile (flush-after-disabled)."
	}

	shape, class := ShapeUnknown, ""
	if hasDevice {
		shape, class = deviceShape(st), bandwidthClass(f.devPeak)
	}
	if row, ok := findRow(rows, shape, class); ok && hasDevice {
		// A knob already at the row's value and still stalling falls through to the advice.
		if fs := dirtyFindings(snap.Kernel, row, f, summary, ev); len(fs) > 0 {
			return found(fs...)
		}
	}
	throttle := "the writer's own rate limit"
	if hasDevice && f.devPeak > 0 {
		throttle = fmt.Sprintf("a cgroup v2 io.max wbps of about %s/s (half the device's measured %s/s) on the writer, or its own rate limit",
			humanBytes(f.devPeak/2), humanBytes(f.devPeak))
	}
	cur := "shared"
	if hasDevice {
		cur = "shared (" + st.DeviceName + ")"
	}
	return found(Finding{
		Severity:    Warning,
		Setting:     settingWALDevice,
		Current:     cur,
		Recommended: "a device of its own for pg_wal, or the other writer throttled",
		Action:      ActionAdvice,
		Summary: summary + fmt.Sprintf(" Put pg_wal on a device no other writer uses, or throttle the writer: %s. "+
			"No vm.dirty_* value is proven for this device shape (%s); lower values made the lab's stall longer.", throttle, shapeText(shape, class)),
		Evidence: ev,
		Predicted: &Predicted{Name: "writeback_stall_seconds", Current: f.Seconds, Value: 0, Unit: UnitSeconds,
			Basis: "with no other writer's queue ahead of the WAL's flushes they wait only for their own writes"},
		ExpectedEffect: "WAL flushes no longer wait behind another writer's write-back: the stall and its flush times go away.",
	})
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

func findRow(rows []DirtyRow, shape, class string) (DirtyRow, bool) {
	for _, r := range rows {
		if r.Shape == shape && r.Bandwidth == class && r.BackgroundBytes > 0 && r.DirtyBytes > r.BackgroundBytes {
			return r, true
		}
	}
	return DirtyRow{}, false
}

// dirtyFindings recommend a proven row's vm.dirty_* values, each knob that differs.
func dirtyFindings(k *collector.Kernel, row DirtyRow, f StallFacts, summary string, ev []Evidence) []Finding {
	pred := &Predicted{Name: "writeback_stall_seconds", Current: f.Seconds, Value: f.Seconds * row.StallRatio, Unit: UnitSeconds,
		Basis: "the stall's ratio measured for this device shape: " + row.Source}
	effect := fmt.Sprintf("The stall shrinks to about %.0f%% of its length (%s); apply verifies it by the stall and rolls the change back when it did not.",
		row.StallRatio*100, row.Source)
	var fs []Finding
	add := func(knob string, cur, curRatio, want int64, effective int64) {
		if cur == want {
			return
		}
		fs = append(fs, Finding{
			Severity:    Warning,
			Setting:     knob,
			Current:     knobValue(cur, curRatio),
			Recommended: strconv.FormatInt(want, 10),
			Action:      ActionSysctl,
			Summary: summary + fmt.Sprintf(" For this device shape (%s, %s) the lab measured %s=%s shorter stalls (%s); it is %s now.",
				row.Shape, row.Bandwidth, knob, humanBytes(float64(want)), row.Source, humanBytes(float64(effective))),
			Evidence:       ev,
			Predicted:      pred,
			ExpectedEffect: effect,
		})
	}
	add(collector.KnobDirtyBackgroundBytes, k.VM.DirtyBackgroundBytes, k.VM.DirtyBackgroundRatio, row.BackgroundBytes, k.DirtyBackgroundThresholdBytes)
	add(collector.KnobDirtyBytes, k.VM.DirtyBytes, k.VM.DirtyRatio, row.DirtyBytes, k.DirtyThresholdBytes)
	return fs
}
