package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// wbPhase is what one interval of a write-back history holds.
type wbPhase struct {
	flushes, flushSecs float64 // WAL syncs and their write+sync time
	active, waits      int64   // active backends and those waiting on WAL I/O, over 25 samples
	dirty, writeback   int64   // at the interval's end
	devRate, walRate   float64 // bytes per second
}

// wbScenario is a history of 5 s snapshots shaped by a phase per interval.
type wbScenario struct {
	steps    int // snapshots; 61 (5 min) by default
	step     time.Duration
	noTiming bool
	version  int
	storage  *collector.Storage
	noDevice bool
	settings map[string]collector.Setting
	kernel   func(k *collector.Kernel)
	phase    func(i int) wbPhase
}

// calm is the committing load on the lab's 1 ms device outside any stall: pgbench -c 4
// -R 200, 1.5 ms per flush, a third of active time waiting on the WAL, little dirty data.
func calm() wbPhase {
	return wbPhase{flushes: 1000, flushSecs: 1.5, active: 40, waits: 12, dirty: 10 * mB, devRate: 1 << 20, walRate: 200 << 10}
}

// stalled is the neighbour stall: a 3 GB dd into the WAL's file system at the
// kernel's defaults, commits waiting seconds for a flush, the device writing 80 MB/s.
func stalled() wbPhase {
	return wbPhase{flushes: 3, flushSecs: 5, active: 100, waits: 100, dirty: 2 * gB, writeback: 200 * mB, devRate: 80e6, walRate: 5 << 10}
}

// neighbour: calm, then the writer fills the page cache (intervals 15-19, no stall yet), the
// stall (20-23, 20 s), the pile draining (24-30), calm again.
func neighbour() wbScenario {
	return wbScenario{phase: func(i int) wbPhase {
		switch {
		case i >= 15 && i < 20:
			p := calm()
			p.dirty, p.devRate = int64(i-14)*400*mB, 80e6
			return p
		case i >= 20 && i < 24:
			return stalled()
		case i >= 24 && i < 31:
			p := calm()
			p.dirty, p.devRate = int64(31-i)*200*mB, 80e6
			return p
		}
		return calm()
	}}
}

func loopStorage() *collector.Storage {
	rot := false
	return &collector.Storage{Path: "/mnt/lab/wal", Device: "7:3", DeviceName: "loop3", MountPoint: "/mnt/lab", FSType: "ext4",
		Rotational: &rot, WriteCache: "write through", FreeBytes: uint64(5 * gB), TotalBytes: uint64(6 * gB)}
}

func (sc wbScenario) input() Input {
	steps, step := sc.steps, sc.step
	if steps == 0 {
		steps = 61
	}
	if step == 0 {
		step = 5 * time.Second
	}
	set := sc.settings
	if set == nil {
		set = defaultSettings()
		if !sc.noTiming {
			set = with(collector.TrackWALIOTiming, "on")
		}
	}
	version := sc.version
	if version == 0 {
		version = 150004
	}
	h := NewHistory(DefaultHistoryLen)
	var syncs, ioSecs, dev, wal float64 = 5000, 30, 1 << 30, 1 << 30
	for i := 0; i < steps; i++ {
		var p wbPhase
		if i > 0 {
			p = sc.phase(i)
			syncs += p.flushes
			ioSecs += p.flushSecs
			dev += p.devRate * step.Seconds()
			wal += p.walRate * step.Seconds()
		} else {
			p = sc.phase(1)
		}
		lsn := uint64(wal)
		pg := &collector.Postgres{
			VersionNum: version, StartTime: t0().Add(-time.Hour), Settings: set,
			WAL:          &collector.WALStats{Bytes: int64(wal), Writes: int64(syncs), Syncs: int64(syncs), SyncTimeSeconds: ioSecs},
			Checkpointer: &collector.CheckpointStats{Timed: 10},
			WALInsertLSN: &lsn,
		}
		if i > 0 {
			pg.WaitEvents = &collector.WaitEvents{Samples: 25, ActiveBackends: p.active, Counts: map[string]int64{
				collector.EventIOWALSync: p.waits / 2, collector.EventLWLockWALWrite: p.waits - p.waits/2}}
		}
		k := &collector.Kernel{
			VM:                            collector.VM{DirtyBackgroundRatio: 10, DirtyRatio: 20, DirtyExpireCentisecs: 3000, DirtyWritebackCentisecs: 500},
			DirtyBackgroundThresholdBytes: 2400 * mB, DirtyThresholdBytes: 4800 * mB,
			Meminfo: collector.Meminfo{MemTotalBytes: 24 * gB, DirtyBytes: p.dirty, WritebackBytes: p.writeback},
		}
		if sc.kernel != nil {
			sc.kernel(k)
		}
		st := loopStorage()
		if sc.storage != nil {
			c := *sc.storage
			st = &c
		}
		if !sc.noDevice {
			st.IO = &collector.DiskIO{Writes: uint64(dev / 65536), WriteBytes: uint64(dev)}
		}
		h.Add(collector.Snapshot{Time: t0().Add(time.Duration(i) * step), Postgres: pg, Kernel: k, WALStorage: st})
	}
	last, _ := h.Latest()
	return Input{History: h, Now: last.Time, Config: DefaultThresholds()}
}

func TestWritebackStallsWAL(t *testing.T) {
	waitsOnly := neighbour()
	waitsOnly.noTiming = true

	// Timing off, one flush-bound client on a 4 ms FUSE disk (seed 000): with a few samples an
	// interval its wait share jitters between about half and all of them, its WAL rate is
	// steady, and the host holds 200MB of someone's dirty data. Not a stall.
	jitter := wbScenario{noTiming: true, noDevice: true,
		storage: &collector.Storage{Path: "/mnt/sim/wal", MountPoint: "/mnt/sim", FSType: "fuse.simdisk"},
		phase: func(i int) wbPhase {
			w := int64(13)
			if i%3 == 0 {
				w = 25
			}
			return wbPhase{flushes: 1000, flushSecs: 4, active: 25, waits: w, dirty: 200 * mB, walRate: 100 << 10}
		}}

	tmpfs := neighbour()
	tmpfs.storage, tmpfs.noDevice = &collector.Storage{Path: "/dev/shm/wal", MountPoint: "/dev/shm", FSType: "tmpfs", Volatile: true}, true
	overlay := neighbour()
	overlay.storage, overlay.noDevice = &collector.Storage{Path: "/var/lib/postgresql/wal", MountPoint: "/", FSType: "overlay"}, true

	wholeWindow := wbScenario{steps: 19, phase: func(int) wbPhase { return stalled() }}

	// A bulk load: the WAL itself writes most of what the device writes while flushes slow.
	bulk := neighbour()
	bulk.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		p.walRate = 0.6 * max(p.devRate, 1<<20)
		return p
	}
	// Flushes slow on a slow device with nothing piled up in the page cache.
	slowDevice := neighbour()
	slowDevice.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		p.dirty, p.writeback = 30*mB, 0
		return p
	}
	// A pile that drains without hurting the WAL: a fast device.
	harmless := neighbour()
	harmless.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		if i >= 20 && i < 24 {
			q := calm()
			q.dirty, q.writeback, q.devRate = 2*gB, 200*mB, 80e6
			return q
		}
		return p
	}
	spike := neighbour()
	spike.step = 2 * time.Second
	spike.steps = 150
	spike.phase = func(i int) wbPhase {
		if i == 20 || i == 21 {
			return stalled()
		}
		return calm()
	}
	// seed 003 with flush-after restored (docs/benchmarks.md, seed 003 table (Dirty+Writeback
	// peak 2.4 MiB)) under the same WAL timing and waits.
	seed003Restored := neighbour()
	seed003Restored.settings = with(collector.SharedBuffers, "1GB", collector.MaxWALSize, "8GB", collector.TrackWALIOTiming, "on")
	seed003Restored.phase = func(i int) wbPhase {
		p := calm()
		p.flushes, p.active, p.waits = 3000, 150, 60
		p.dirty, p.devRate, p.walRate = 2*mB, 10e6, 5e6
		if i%6 == 0 { // checkpoint ends: syncs a little slower
			p.flushSecs = 9
		}
		return p
	}
	// With track_wal_io_timing on, waits that rise while flushes keep their usual time are
	// not a stall (the live test's load alone: 75% -> 100% of a few samples, 2.4 ms flushes).
	waitsRiseOnly := neighbour()
	waitsRiseOnly.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		if i >= 20 && i < 24 {
			q := calm()
			q.dirty, q.devRate, q.waits = 2*gB, 80e6, q.active
			return q
		}
		return p
	}
	// Commits stop: no flush completes for three intervals, then the blocked flushes report 16 s.
	stuck := neighbour()
	stuck.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		if i >= 20 && i < 23 {
			p.flushes, p.flushSecs = 0, 0
		}
		if i == 23 {
			p.flushes, p.flushSecs = 4, 16
		}
		return p
	}
	noKernel := neighbour()
	noKernel.kernel = nil
	healthyHost := healthy()
	healthyHost.settings = with(collector.TrackWALIOTiming, "on")
	healthyHost.syncSec = 15 * 780 * 0.0005

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "neighbour at the kernel's defaults", in: neighbour().input(), want: []wantFinding{{settingWALDevice, Warning, ""}}},
		{name: "wait events only (no track_wal_io_timing)", in: waitsOnly.input(), want: []wantFinding{{settingWALDevice, Warning, ""}}},
		{name: "timing off, a flush-bound client's wait share jitters, WAL steady: quiet", in: jitter.input()},
		{name: "WAL on tmpfs: no block device", in: tmpfs.input(), want: []wantFinding{{settingWALDevice, Warning, ""}}},
		{name: "WAL on overlay: no block device", in: overlay.input(), want: []wantFinding{{settingWALDevice, Warning, ""}}},
		{name: "commits stop: flushes that complete late", in: stuck.input(), want: []wantFinding{{settingWALDevice, Warning, ""}}},
		{name: "the whole window is the stall", in: wholeWindow.input(), want: []wantFinding{{settingWALDevice, Warning, ""}}},
		{name: "the WAL fills the cache itself", in: bulk.input()},
		{name: "slow flushes without a pile", in: slowDevice.input()},
		{name: "a pile that does not slow the WAL", in: harmless.input()},
		{name: "a stall shorter than WritebackStallMin", in: spike.input()},
		{name: "waits rise, flush times do not (timing on)", in: waitsRiseOnly.input()},
		{name: "seed 003 with flush-after restored", in: seed003Restored.input()},
		{name: "healthy host, no writer", in: healthyHost.input(nil)},
		{name: "no kernel facts", in: func() Input {
			in := noKernel.input()
			s := in.History.Snapshots()
			h := NewHistory(DefaultHistoryLen)
			for _, x := range s {
				x.Kernel = nil
				h.Add(x)
			}
			in.History = h
			return in
		}(), notEnough: true},
		{name: "no timing, no wait samples", in: func() Input { sc := healthy(); sc.waits = nil; return sc.input(nil) }(), notEnough: true},
		{name: "cold start", in: wbScenario{steps: 3, phase: func(int) wbPhase { return stalled() }}.input(), notEnough: true},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalWritebackStallsWAL(tt.in, nil), tt.notEnough, tt.want...)
		})
	}
}

func TestWritebackStallsWALEvidence(t *testing.T) {
	f := evalWritebackStallsWAL(neighbour().input(), nil).Findings[0]
	want := map[string]float64{
		"writeback_stall_seconds":      20,
		"wal_flush_seconds_during":     5.0 / 3,
		"wal_flush_seconds_outside":    0.0015,
		"wal_flush_wait_share_during":  1,
		"wal_flush_wait_share_outside": 0.3,
		"dirty_writeback_peak_bytes":   float64(2*gB + 200*mB),
		"device_write_rate":            80e6,
	}
	for name, v := range want {
		got, ok := evidence(f, name)
		if !ok || got < v*0.99 || got > v*1.01 {
			t.Errorf("evidence %s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	if share, _ := evidence(f, "wal_share_of_writes"); share > 0.05 {
		t.Errorf("wal_share_of_writes = %v, want the neighbour's bytes to dominate", share)
	}
	for _, s := range []string{"20s", "1.67s", "1.5ms", "loop3", "pv -L 38M", "own", "100%", "30%"} {
		if !strings.Contains(f.Summary, s) {
			t.Errorf("summary lacks %q: %s", s, f.Summary)
		}
	}
	if f.Action != ActionAdvice || f.Predicted == nil || f.Predicted.Current != 20 {
		t.Errorf("action %s, predicted %+v: want advice predicting the 20 s stall gone", f.Action, f.Predicted)
	}

	tmpfs := neighbour()
	tmpfs.storage, tmpfs.noDevice = &collector.Storage{Path: "/dev/shm/wal", FSType: "tmpfs", Volatile: true}, true
	g := evalWritebackStallsWAL(tmpfs.input(), nil).Findings[0]
	if v, ok := evidence(g, "wal_block_device"); !ok || v != 0 {
		t.Errorf("no block device: wal_block_device = %v (present %v)", v, ok)
	}
	if _, ok := evidence(g, "device_write_rate"); ok {
		t.Errorf("no block device, but a device write rate in the evidence")
	}
	if !strings.Contains(g.Summary, "no block device") || !strings.Contains(g.Summary, "tmpfs") {
		t.Errorf("summary does not say what is missing: %s", g.Summary)
	}
}

// The same history under every supported major version: the collector normalizes the wait
// events 17 renamed and the WAL counters 18 moved to pg_stat_io, so the thresholds are the same.
func TestWritebackStallsWALStuckFlushes(t *testing.T) {
	sc := neighbour()
	sc.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		if i >= 20 && i < 23 {
			p.flushes, p.flushSecs = 0, 0
		}
		if i == 23 {
			p.flushes, p.flushSecs = 4, 16
		}
		return p
	}
	f := evalWritebackStallsWAL(sc.input(), nil).Findings[0]
	// The three intervals without a completed flush count with the one that reports them.
	if v, _ := evidence(f, "writeback_stall_seconds"); v != 20 {
		t.Errorf("writeback_stall_seconds = %v, want 20 (four 5 s intervals)", v)
	}
	if v, _ := evidence(f, "wal_flush_seconds_worst"); v != 4 {
		t.Errorf("wal_flush_seconds_worst = %v, want 4 (16 s over 4 flushes)", v)
	}
}

func TestWritebackStallsWALVersions(t *testing.T) {
	for _, v := range []int{140010, 150004, 160002, 170000, 180000} {
		sc := neighbour()
		sc.version = v
		res := evalWritebackStallsWAL(sc.input(), nil)
		if len(res.Findings) != 1 || res.Findings[0].Severity != Warning {
			t.Errorf("version %d: %+v %s", v, res.Findings, res.NotEnoughData)
		}
	}
}

// lowered sets the kernel of a scenario to tuned's 64MB/512MB on a host with 20GB dirtyable.
func lowered(bg, dirty int64) func(k *collector.Kernel) {
	return func(k *collector.Kernel) {
		k.VM.DirtyBackgroundRatio, k.VM.DirtyRatio = 0, 0
		k.VM.DirtyBackgroundBytes, k.VM.DirtyBytes = bg, dirty
		k.DirtyBackgroundThresholdBytes, k.DirtyThresholdBytes = bg, dirty
		k.Meminfo.MemFreeBytes, k.Meminfo.ActiveFileBytes, k.Meminfo.InactiveFileBytes = 12*gB, 4*gB, 4*gB
	}
}

// TestProvenDirtyRows: the table holds exactly the rows docs/benchmarks.md proves. A row added
// or changed here needs its table in docs/benchmarks.md and a case below.
func TestProvenDirtyRows(t *testing.T) {
	want := []DirtyRow{{Shape: ShapeLoop, Bandwidth: BandwidthSlow, LoweredDirtyBytesMax: 1 << 30, BackgroundRatio: 10, DirtyRatio: 20,
		StallRatio: 45.0 / 55.0}}
	got := ProvenDirtyRows()
	if len(got) != len(want) {
		t.Fatalf("ProvenDirtyRows holds %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g := got[i]
		if !strings.Contains(g.Source, "docs/benchmarks.md, neighbour table") {
			t.Errorf("row %d cites %q, not the neighbour table", i, g.Source)
		}
		g.Source = ""
		if g != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, g, want[i])
		}
	}
}

// TestWritebackStallsWALRestoreRatios is the table test of ProvenDirtyRows' row: on the lab's
// loop device at 80 MB/s, lowered thresholds meeting the neighbour's stall bring back the
// kernel's ratios as one vm.dirty_thresholds change; every other starting point stays advice.
func TestWritebackStallsWALRestoreRatios(t *testing.T) {
	rows := ProvenDirtyRows()
	tuned := neighbour()
	tuned.kernel = lowered(64*mB, 512*mB)
	res := evalWritebackStallsWAL(tuned.input(), rows)
	checkResult(t, res, false, wantFinding{collector.KnobDirtyThresholds, Warning, "10%/20%"})
	f := res.Findings[0]
	if f.Action != ActionSysctl || f.Current != "67108864/536870912" {
		t.Errorf("action %s, current %q: want sysctl from 67108864/536870912", f.Action, f.Current)
	}
	if p := f.Predicted; p == nil || p.Current != 20 || p.Value < 16.3 || p.Value > 16.4 {
		t.Errorf("predicted %+v: want 20 s -> 20 x 45/55 = 16.4 s", p)
	}
	// The prediction's figure is what apply measures after the change: the same measurement.
	if got, ok := MeasurePredicted(PredictWritebackStall, tuned.input().History); !ok || got != f.Predicted.Current {
		t.Errorf("MeasurePredicted(%s) = %v, %v; want the finding's current %v", PredictWritebackStall, got, ok, f.Predicted.Current)
	}
	if !strings.Contains(f.Summary, "neighbour table") || !strings.Contains(f.Summary, "vm.dirty_thresholds to 10%/20%") {
		t.Errorf("summary does not cite the table or name the pair: %s", f.Summary)
	}
	folklore := neighbour()
	folklore.kernel = lowered(16*mB, 64*mB)
	checkResult(t, evalWritebackStallsWAL(folklore.input(), rows), false, wantFinding{collector.KnobDirtyThresholds, Warning, "10%/20%"})

	advice := wantFinding{settingWALDevice, Warning, ""}
	for name, sc := range map[string]func() wbScenario{
		"the kernel's ratios already": func() wbScenario { return neighbour() },
		"bytes above the lowest measured": func() wbScenario {
			sc := neighbour()
			sc.kernel = lowered(1*gB, 2*gB)
			return sc
		},
		"ratios not twice the lowered bytes": func() wbScenario {
			sc := neighbour()
			sc.kernel = func(k *collector.Kernel) {
				lowered(64*mB, 512*mB)(k)
				k.Meminfo.MemFreeBytes, k.Meminfo.ActiveFileBytes, k.Meminfo.InactiveFileBytes = 2*gB, 256*mB, 256*mB
			}
			return sc
		},
		"only the background bytes": func() wbScenario {
			sc := neighbour()
			sc.kernel = func(k *collector.Kernel) {
				lowered(64*mB, 0)(k)
				k.VM.DirtyRatio = 20
			}
			return sc
		},
		"another device shape": func() wbScenario {
			sc := neighbour()
			sc.kernel = lowered(64*mB, 512*mB)
			no := false
			st := loopStorage()
			st.DeviceName, st.Rotational = "nvme0n1p1", &no
			sc.storage = st
			return sc
		},
		"the pile on another device": func() wbScenario {
			sc := elsewhereScenario()
			sc.kernel = lowered(64*mB, 512*mB)
			return sc
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkResult(t, evalWritebackStallsWAL(sc().input(), rows), false, advice)
		})
	}
}

// elsewhereScenario: the neighbour's stall and pile, but the WAL's device writes only the WAL:
// the writer's pile drains to another device.
func elsewhereScenario() wbScenario {
	sc := neighbour()
	sc.phase = func(i int) wbPhase {
		p := neighbour().phase(i)
		p.devRate = 1 << 20
		if i >= 20 && i < 24 {
			p.devRate = 64 << 10
		}
		return p
	}
	return sc
}

// TestWritebackStallsWALElsewhere: the rule names the shape where the pile is another device's
// and does not tell the operator to move a WAL that already has its own device.
func TestWritebackStallsWALElsewhere(t *testing.T) {
	res := evalWritebackStallsWAL(elsewhereScenario().input(), ProvenDirtyRows())
	checkResult(t, res, false, wantFinding{settingWALDevice, Warning, "the other writer throttled"})
	f := res.Findings[0]
	if v, ok := evidence(f, "wal_device_writes_over_pile"); !ok || v >= pileElsewhereShare {
		t.Errorf("wal_device_writes_over_pile = %v (%v), want below %v", v, ok, pileElsewhereShare)
	}
	for _, want := range []string{"another device's", "balance_dirty_pages", "Neighbour elsewhere", "max_bytes"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary lacks %q: %s", want, f.Summary)
		}
	}
	if strings.Contains(f.Summary, "Put pg_wal on a device") {
		t.Errorf("tells a WAL on its own device to move: %s", f.Summary)
	}
	// The same-device neighbour: its device wrote more than the pile.
	same := evalWritebackStallsWAL(neighbour().input(), nil)
	if v, _ := evidence(same.Findings[0], "wal_device_writes_over_pile"); v < 0.1 || strings.Contains(same.Findings[0].Summary, "balance_dirty_pages") {
		t.Errorf("same device: wal_device_writes_over_pile %v, summary %s", v, same.Findings[0].Summary)
	}
}

// A test-only bytes row: the finding is one vm.dirty_thresholds change of both bytes values;
// with the pair already at them, or on another shape, it stays advice.
func TestWritebackStallsWALBytesRow(t *testing.T) {
	row := DirtyRow{Shape: ShapeLoop, Bandwidth: BandwidthSlow, BackgroundBytes: 32 * mB, DirtyBytes: 128 * mB, StallRatio: 0.5,
		Source: "test-only row"}
	res := evalWritebackStallsWAL(neighbour().input(), []DirtyRow{row})
	checkResult(t, res, false, wantFinding{collector.KnobDirtyThresholds, Warning, "33554432/134217728"})
	if f := res.Findings[0]; f.Action != ActionSysctl || f.Predicted == nil || f.Predicted.Value != 10 || f.Current != "10%/20%" {
		t.Errorf("action %s, predicted %+v, current %q: want sysctl from 10%%/20%% predicting 20 s -> 10 s", f.Action, f.Predicted, f.Current)
	}

	other := row
	other.Shape = ShapeNVMe
	checkResult(t, evalWritebackStallsWAL(neighbour().input(), []DirtyRow{other}), false, wantFinding{settingWALDevice, Warning, ""})

	already := neighbour()
	already.kernel = lowered(32*mB, 128*mB)
	checkResult(t, evalWritebackStallsWAL(already.input(), []DirtyRow{row}), false, wantFinding{settingWALDevice, Warning, ""})

	insane := row
	insane.BackgroundBytes = 256 * mB
	checkResult(t, evalWritebackStallsWAL(neighbour().input(), []DirtyRow{insane}), false, wantFinding{settingWALDevice, Warning, ""})

	tmpfs := neighbour()
	tmpfs.storage, tmpfs.noDevice = &collector.Storage{FSType: "tmpfs"}, true
	checkResult(t, evalWritebackStallsWAL(tmpfs.input(), []DirtyRow{{Shape: ShapeUnknown, Bandwidth: "", BackgroundBytes: 1, DirtyBytes: 2}}), false,
		wantFinding{settingWALDevice, Warning, ""})
}

func TestDeviceShape(t *testing.T) {
	yes, no := true, false
	for _, tt := range []struct {
		st   collector.Storage
		want string
	}{
		{collector.Storage{DeviceName: "loop3", Rotational: &no}, ShapeLoop},
		{collector.Storage{DeviceName: "vda1", Virtual: true, Rotational: &yes}, ShapeVirtual},
		{collector.Storage{DeviceName: "nvme0n1p2", Rotational: &no}, ShapeNVMe},
		{collector.Storage{DeviceName: "dm-0", Disks: []collector.Disk{{Name: "nvme1n1", Driver: "nvme"}}, Rotational: &no}, ShapeNVMe},
		{collector.Storage{DeviceName: "sda1", Rotational: &yes}, ShapeRotational},
		{collector.Storage{DeviceName: "sdb1", Rotational: &no}, ShapeSSD},
		{collector.Storage{DeviceName: "sdc1"}, ShapeUnknown},
	} {
		if got := deviceShape(&tt.st); got != tt.want {
			t.Errorf("deviceShape(%s) = %s, want %s", tt.st.DeviceName, got, tt.want)
		}
	}
	for rate, want := range map[float64]string{80e6: BandwidthSlow, 500e6: BandwidthMedium, 3e9: BandwidthFast} {
		if got := bandwidthClass(rate); got != want {
			t.Errorf("bandwidthClass(%g) = %s, want %s", rate, got, want)
		}
	}
}
