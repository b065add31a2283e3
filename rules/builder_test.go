package rules

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// t0 is when every synthetic history starts.
func t0() time.Time { return time.Date(2025, 1, 6, 12, 0, 0, 0, time.UTC) }

const (
	kB = int64(1) << 10
	mB = int64(1) << 20
	gB = int64(1) << 30
)

// memSetting builds a memory setting as the collector reports it ("64kB" -> Bytes 65536).
func memSetting(v string) collector.Setting {
	s := collector.Setting{Value: v, Raw: v, Source: "configuration file", Context: "sighup"}
	num := strings.TrimRight(v, "kMGTB")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		panic("memSetting " + v)
	}
	mult := map[string]int64{"": 1, "B": 1, "kB": kB, "MB": mB, "GB": gB}[v[len(num):]]
	b := n * mult
	s.Bytes = &b
	return s
}

// timeSetting builds a time setting ("200ms", "5min", "0").
func timeSetting(v string, seconds float64) collector.Setting {
	return collector.Setting{Value: v, Raw: v, Seconds: &seconds, Source: "configuration file"}
}

func plain(v string) collector.Setting {
	return collector.Setting{Value: v, Raw: v, Source: "configuration file"}
}

// defaultSettings are PostgreSQL 15's defaults on Linux with shared_buffers 128MB.
func defaultSettings() map[string]collector.Setting {
	m := map[string]collector.Setting{
		collector.WALBuffers:                 memSetting("4MB"),
		collector.WALSyncMethod:              {Value: "fdatasync", Raw: "fdatasync", Source: "default", EnumVals: []string{"fsync", "fdatasync", "open_sync", "open_datasync"}},
		collector.Fsync:                      plain("on"),
		collector.SynchronousCommit:          plain("on"),
		collector.FullPageWrites:             plain("on"),
		collector.CommitDelay:                timeSetting("0", 0),
		collector.CommitSiblings:             plain("5"),
		collector.WALWriterDelay:             timeSetting("200ms", 0.2),
		collector.CheckpointTimeout:          timeSetting("5min", 300),
		collector.CheckpointCompletionTarget: plain("0.9"),
		collector.CheckpointFlushAfter:       memSetting("256kB"),
		collector.BgwriterFlushAfter:         memSetting("512kB"),
		collector.MaxWALSize:                 memSetting("1GB"),
		collector.SharedBuffers:              memSetting("128MB"),
		collector.TrackWALIOTiming:           plain("off"),
	}
	for k, v := range m {
		v.Source = "default"
		m[k] = v
	}
	return m
}

// with returns defaultSettings with overrides: memory values for memory settings, plain
// strings otherwise.
func with(kv ...string) map[string]collector.Setting {
	m := defaultSettings()
	for i := 0; i+1 < len(kv); i += 2 {
		name, v := kv[i], kv[i+1]
		old := m[name]
		var s collector.Setting
		switch {
		case old.Bytes != nil:
			s = memSetting(v)
		default:
			s = plain(v)
			s.EnumVals = old.EnumVals
			s.Seconds = old.Seconds
			if old.Seconds != nil {
				f, _ := strconv.ParseFloat(v, 64)
				if name == collector.CommitDelay {
					f /= 1e6
				}
				s.Seconds = &f
			}
		}
		m[name] = s
	}
	return m
}

// scenario describes a synthetic history: per-step counter increments and what happens at
// checkpoint ends. Counters start at arbitrary non-zero values, as on a running server.
type scenario struct {
	steps    int           // snapshots; 21 by default (5 min at 15 s)
	step     time.Duration // 15 s by default
	settings map[string]collector.Setting
	noWAL    bool // PostgreSQL 13: no pg_stat_wal

	// Per step increments of pg_stat_wal.
	walBytes, buffersFull, writes, syncs float64
	writeSec, syncSec                    float64
	records                              float64 // WAL records
	// insertLSN is the per step advance of pg_current_wal_insert_lsn(); 0 leaves it unread,
	// as on a standby.
	insertLSN float64

	// A checkpoint completes every ckptEvery steps (0: none), requested or timed, with these
	// phase times; WAL syncs in that interval take syncSecAtCkpt instead of syncSec.
	ckptEvery      int
	ckptRequested  bool
	ckptWrite      float64
	ckptSync       float64
	ckptBuffers    float64
	syncSecAtCkpt  float64
	dirtyBase      int64 // Dirty+Writeback normally
	dirtyAtCkpt    int64 // Dirty at checkpoint ends
	diskBytes      float64
	noDisk         bool
	noKernel       bool
	dirtyBGBytes   int64 // kernel effective background threshold
	dirtyBytes     int64 // kernel effective dirty threshold
	waits          *collector.WaitEvents
	storage        *collector.Storage
	mutate         func(i int, s *collector.Snapshot)
	pgStart        time.Time
	statsReset     time.Time
	startCounters  float64
	missingPgAtEnd bool
}

func (sc scenario) history() *History {
	steps, step := sc.steps, sc.step
	if steps == 0 {
		steps = 21
	}
	if step == 0 {
		step = 15 * time.Second
	}
	settings := sc.settings
	if settings == nil {
		settings = defaultSettings()
	}
	start := sc.pgStart
	if start.IsZero() {
		start = t0().Add(-24 * time.Hour)
	}
	base := sc.startCounters
	if base == 0 {
		base = 1000
	}
	h := NewHistory(DefaultHistoryLen)
	var timed, requested, ckWrite, ckSync, ckBuf, walSyncSec float64
	for i := 0; i < steps; i++ {
		at := t0().Add(time.Duration(i) * step)
		ckptEnd := sc.ckptEvery > 0 && i > 0 && i%sc.ckptEvery == 0
		if ckptEnd {
			if sc.ckptRequested {
				requested++
			} else {
				timed++
			}
			ckWrite += sc.ckptWrite
			ckSync += sc.ckptSync
			ckBuf += sc.ckptBuffers
		}
		if i > 0 {
			if ckptEnd && sc.syncSecAtCkpt > 0 {
				walSyncSec += sc.syncSecAtCkpt
			} else {
				walSyncSec += sc.syncSec
			}
		}
		f := float64(i)
		pg := &collector.Postgres{
			VersionNum: 150004,
			StartTime:  start,
			Settings:   settings,
			Checkpointer: &collector.CheckpointStats{
				Timed: int64(base + timed), Requested: int64(base + requested),
				WriteTimeSeconds: base + ckWrite, SyncTimeSeconds: base + ckSync,
				BuffersWritten: int64(base + ckBuf), StatsReset: sc.statsReset,
			},
		}
		if !sc.noWAL {
			pg.WAL = &collector.WALStats{
				Records: int64(base + f*sc.records), Bytes: int64(base + f*sc.walBytes), BuffersFull: int64(base + f*sc.buffersFull),
				Writes: int64(base + f*sc.writes), Syncs: int64(base + f*sc.syncs),
				WriteTimeSeconds: base + f*sc.writeSec, SyncTimeSeconds: base + walSyncSec,
				StatsReset: sc.statsReset,
			}
		}
		if sc.insertLSN > 0 {
			lsn := uint64(base + f*sc.insertLSN)
			pg.WALInsertLSN = &lsn
		}
		if sc.waits != nil && i > 0 {
			w := *sc.waits
			pg.WaitEvents = &w
		}
		s := collector.Snapshot{Time: at, Postgres: pg}
		if !sc.noKernel {
			dirty := sc.dirtyBase
			if ckptEnd {
				dirty = sc.dirtyAtCkpt
			}
			bg, hard := sc.dirtyBGBytes, sc.dirtyBytes
			if bg == 0 {
				bg, hard = 1600*mB, 3200*mB // 10%/20% of 16GB dirtyable
			}
			s.Kernel = &collector.Kernel{
				VM:                            collector.VM{DirtyBackgroundRatio: 10, DirtyRatio: 20, DirtyExpireCentisecs: 3000, DirtyWritebackCentisecs: 500},
				DirtyBackgroundThresholdBytes: bg,
				DirtyThresholdBytes:           hard,
				Meminfo:                       collector.Meminfo{MemTotalBytes: 32 * gB, DirtyBytes: dirty},
			}
		}
		st := collector.Storage{
			Path: "/var/lib/postgresql/15/main/pg_wal", Device: "8:1", DeviceName: "sda1",
			MountPoint: "/", FSType: "ext4", MountOptions: []string{"rw", "relatime"},
			WriteCache: "write back", FreeBytes: uint64(100 * gB), TotalBytes: uint64(200 * gB),
		}
		if sc.storage != nil {
			st = *sc.storage
		}
		if !sc.noDisk {
			st.IO = &collector.DiskIO{Writes: uint64(base + f*100), WriteBytes: uint64(base + f*sc.diskBytes)}
		}
		s.WALStorage = &st
		if sc.mutate != nil {
			sc.mutate(i, &s)
		}
		if sc.missingPgAtEnd && i == steps-1 {
			s.Postgres = nil
			s.Parts = []collector.Part{{Name: collector.PartPostgres, Error: "connection refused"}}
		}
		h.Add(s)
	}
	return h
}

// input builds an Input evaluated at the end of the scenario's history, with the probe
// report (if any) finishing then.
func (sc scenario) input(p *probes.Report) Input {
	h := sc.history()
	last, _ := h.Latest()
	if p != nil {
		c := *p
		c.Started, c.Finished = last.Time.Add(-30*time.Second), last.Time
		p = &c
	}
	return Input{History: h, Probe: p, Now: last.Time, Config: DefaultThresholds()}
}

// mres is a probe result: mean and 95% half-width in microseconds.
func mres(name string, writesPerSync int, meanUS, halfUS float64, samples int) probes.MethodResult {
	return probes.MethodResult{
		Name: name, WritesPerSync: writesPerSync, WriteBytes: 8192, Available: true, Samples: samples,
		OpsPerSec: 1e6 / meanUS,
		LatencyUS: probes.Latency{Mean: meanUS, P50: meanUS, P90: meanUS * 1.1, P99: meanUS * 1.3, Max: meanUS * 2,
			CILow: meanUS - halfUS, CIHigh: meanUS + halfUS},
	}
}

// probeAt is a plausible probe report; scenario.input dates it.
func probeAt(results ...probes.MethodResult) *probes.Report {
	return &probes.Report{
		Dir:        "/var/lib/pgwal-advisor/probe",
		Methods:    results,
		Durability: probes.Verdict{Status: probes.VerdictPlausible, Reason: "sync latency is consistent with a persisting device"},
	}
}

// slowDiskProbe is the lab's 4 ms simulated device (pg_test_fsync on it: fdatasync about 4.6 ms/op, docs/probes.md): the
// open_* methods pay per write, so their two-write pattern costs twice.
func slowDiskProbe() *probes.Report {
	return probeAt(
		mres(probes.Fdatasync, 1, 4600, 60, 200), mres(probes.Fdatasync, 2, 4700, 60, 200),
		mres(probes.Fsync, 1, 4650, 60, 200), mres(probes.Fsync, 2, 4750, 60, 200),
		mres(probes.OpenDatasync, 1, 4600, 60, 200), mres(probes.OpenDatasync, 2, 9200, 90, 200),
		mres(probes.OpenSync, 1, 4650, 60, 200), mres(probes.OpenSync, 2, 9300, 90, 200),
		mres(probes.Write, 1, 20, 2, 200),
	)
}

// fastDiskProbe is this machine's virtual disk (about 0.1 ms per sync), methods within noise.
func fastDiskProbe() *probes.Report {
	return probeAt(
		mres(probes.Fdatasync, 1, 110, 8, 300), mres(probes.Fdatasync, 2, 125, 8, 300),
		mres(probes.Fsync, 1, 115, 8, 300), mres(probes.Fsync, 2, 130, 8, 300),
		mres(probes.OpenDatasync, 1, 100, 8, 300), mres(probes.OpenDatasync, 2, 200, 10, 300),
		mres(probes.OpenSync, 1, 105, 8, 300), mres(probes.OpenSync, 2, 210, 10, 300),
		mres(probes.Write, 1, 8, 1, 300),
	)
}

// healthy is a default cluster under pgbench on a fast disk: a few buffer-full writes a
// minute, timed checkpoints with short syncs, little dirty data, some WAL waits.
func healthy() scenario {
	return scenario{
		steps:    241, // an hour
		walBytes: 15 * 2 * float64(mB), buffersFull: 1, writes: 15 * 800, syncs: 15 * 780,
		ckptEvery: 20, ckptWrite: 270, ckptSync: 0.05, ckptBuffers: 3000,
		dirtyBase: 8 * mB, dirtyAtCkpt: 20 * mB, diskBytes: 15 * 30 * float64(mB),
		waits: &collector.WaitEvents{Samples: 15, ActiveBackends: 15 * 8, Counts: map[string]int64{
			collector.EventLWLockWALWrite: 15, collector.EventIOWALSync: 12, collector.EventIOWALWrite: 3,
		}},
	}
}

// wantFinding is what a test checks of one finding.
type wantFinding struct {
	setting     string
	severity    Severity
	recommended string
}

// checkResult compares a rule's result with the findings (by setting) and the not-enough-data
// state a case wants.
func checkResult(t *testing.T, got Result, notEnough bool, want ...wantFinding) {
	t.Helper()
	if (got.NotEnoughData != "") != notEnough {
		t.Errorf("NotEnoughData = %q, want not-enough-data %v", got.NotEnoughData, notEnough)
	}
	if len(got.Findings) != len(want) {
		t.Fatalf("got %d findings %v, want %d %v", len(got.Findings), summarize(got.Findings), len(want), want)
	}
	for i, w := range want {
		f := got.Findings[i]
		if f.Setting != w.setting || f.Severity != w.severity || (w.recommended != "" && f.Recommended != w.recommended) {
			t.Errorf("finding %d = {%s %s %q}, want {%s %s %q}\nsummary: %s", i, f.Setting, f.Severity, f.Recommended,
				w.setting, w.severity, w.recommended, f.Summary)
		}
		if f.Summary == "" || f.ExpectedEffect == "" || f.Action == "" || len(f.Evidence) == 0 {
			t.Errorf("finding %d lacks a summary, effect, action or evidence: %+v", i, f)
		}
	}
}

func summarize(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Setting+"="+f.Recommended+" ("+f.Severity.String()+"): "+f.Summary)
	}
	return out
}

// evidence returns a finding's named figure.
func evidence(f Finding, name string) (float64, bool) {
	for _, e := range f.Evidence {
		if e.Name == name {
			return e.Value, true
		}
	}
	return 0, false
}

// tmpfsStorage is seed 002's WAL directory on tmpfs.
func tmpfsStorage() *collector.Storage {
	return &collector.Storage{Path: "/mnt/ram/pg_wal", MountPoint: "/mnt/ram", FSType: "tmpfs", Volatile: true,
		MountOptions: []string{"rw", "size=2g"}}
}

// seed004Probe is seed 004's drive: a rotating IDE disk with its write cache on, whose
// fdatasync returns in 0.2 ms - faster than a platter turns.
func seed004Probe() *probes.Report {
	rotational := true
	p := probeAt(mres(probes.Fdatasync, 1, 210, 10, 300), mres(probes.Write, 1, 15, 1, 300))
	p.Durability = probes.Verdict{
		Status:   probes.VerdictTooFast,
		Reason:   "fdatasync p50 0.2 ms on a rotational disk with a write-back cache.",
		Evidence: map[string]float64{"fdatasync_p50_us": 200, "write_p50_us": 15},
		Facts:    probes.DeviceFacts{FSType: "ext3", Rotational: &rotational, WriteCache: "write back"},
	}
	return p
}

// checkPredicted checks that a finding carries a usable prediction: a named figure in a unit,
// finite values, and a basis that says where it came from.
func checkPredicted(t *testing.T, f Finding) {
	t.Helper()
	p := f.Predicted
	if p == nil {
		t.Errorf("%s %s -> %s: no predicted figure", f.Rule, f.Setting, f.Recommended)
		return
	}
	if p.Name == "" || p.Unit == "" || p.Basis == "" {
		t.Errorf("%s %s: predicted %+v lacks a name, unit or basis", f.Rule, f.Setting, *p)
	}
	for _, v := range []float64{p.Current, p.Value} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Errorf("%s %s: predicted %+v has a value that is no figure", f.Rule, f.Setting, *p)
		}
	}
}
