package rules

import (
	"slices"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// The decide steps judge facts alone: these tables hand them facts directly, without building a
// history, so that each threshold's side of the decision shows in one row.

func TestDecideWALBuffers(t *testing.T) {
	cfg := DefaultThresholds()
	costly := bufferWrites{Rate: 100, Share: 0.5, PerWrite: 0.004}
	tests := []struct {
		name     string
		f        walBufferFacts
		want     verdict
		wantNext int64
	}{
		{name: "at WALBuffersMax nothing is left to win", f: walBufferFacts{size: 64 * mB}, want: verdictQuiet},
		{name: "rare buffer-full writes", f: walBufferFacts{size: 4 * mB, writes: bufferWrites{Rate: 0.5, Share: 0.5, PerWrite: 0.004}, cost: 0.002},
			want: verdictQuiet},
		{name: "frequent, cost unknown", f: walBufferFacts{size: 4 * mB, writes: bufferWrites{Rate: 100, Share: 0.5}}, want: verdictUnknown},
		{name: "frequent but cheap", f: walBufferFacts{size: 4 * mB, writes: bufferWrites{Rate: 100, Share: 0.5, PerWrite: 0.0001}, cost: 0.01},
			want: verdictQuiet},
		{name: "costly waits alone", f: walBufferFacts{size: 4 * mB, writes: bufferWrites{Rate: 100, Share: 0.5}, hasWaits: true, waitShare: 0.2},
			want: verdictFire, wantNext: 16 * mB},
		{name: "costly, up to one segment", f: walBufferFacts{size: 64 * kB, writes: costly, cost: 0.4}, want: verdictFire, wantNext: 16 * mB},
		{name: "costly beyond a segment, shared_buffers large enough", f: walBufferFacts{size: 16 * mB, writes: costly, cost: 0.4,
			sharedBuffers: 128 * mB, hasSharedBuffers: true}, want: verdictFire, wantNext: 32 * mB},
		{name: "costly beyond a segment, shared_buffers too small: advice", f: walBufferFacts{size: 16 * mB, writes: costly, cost: 0.4,
			sharedBuffers: 64 * mB, hasSharedBuffers: true}, want: verdictAdvise, wantNext: 32 * mB},
		{name: "costly beyond a segment, shared_buffers unknown: advice", f: walBufferFacts{size: 16 * mB, writes: costly, cost: 0.4},
			want: verdictAdvise, wantNext: 32 * mB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next := decideWALBuffers(tt.f, cfg)
			if got != tt.want || got != verdictQuiet && got != verdictUnknown && next != tt.wantNext {
				t.Errorf("decideWALBuffers = %v, %d; want %v, %d", got, next, tt.want, tt.wantNext)
			}
		})
	}
}

func TestDecideWriteback(t *testing.T) {
	cfg := DefaultThresholds()
	tests := []struct {
		name string
		s    StallFacts
		want verdict
	}{
		{name: "a stall behind another writer", s: StallFacts{Seconds: 20, walBytes: 1 << 20, hostBytes: 3 << 30}, want: verdictFire},
		{name: "too short to matter", s: StallFacts{Seconds: 4, walBytes: 1 << 20, hostBytes: 3 << 30}, want: verdictQuiet},
		{name: "the WAL is what the host writes", s: StallFacts{Seconds: 20, walBytes: 2 << 30, hostBytes: 3 << 30}, want: verdictQuiet},
		{name: "nothing written by the host", s: StallFacts{Seconds: 20}, want: verdictQuiet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideWriteback(tt.s, cfg); got != tt.want {
				t.Errorf("decideWriteback = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecideContention(t *testing.T) {
	cfg := DefaultThresholds()
	busy := contentionFacts{active: 16, share: 0.6, flush: 0.001, siblings: 5, hasSiblings: true}
	with := func(f func(c *contentionFacts)) contentionFacts {
		c := busy
		f(&c)
		return c
	}
	tests := []struct {
		name     string
		f        contentionFacts
		want     verdict
		siblings bool
	}{
		{name: "in the measured region", f: busy, want: verdictFire},
		{name: "in the region, other commit_siblings", f: with(func(c *contentionFacts) { c.siblings = 20 }), want: verdictFire, siblings: true},
		{name: "commit_delay already set", f: with(func(c *contentionFacts) { c.delay = 0.0005 }), want: verdictQuiet},
		{name: "fsync off", f: with(func(c *contentionFacts) { c.fsyncOff = true }), want: verdictQuiet},
		{name: "few committers", f: with(func(c *contentionFacts) { c.active = 4 }), want: verdictQuiet},
		{name: "flush time unknown", f: with(func(c *contentionFacts) { c.flush = 0 }), want: verdictUnknown},
		{name: "outside the region: information", f: with(func(c *contentionFacts) { c.flush = 0.004 }), want: verdictAdvise},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideContention(tt.f, cfg)
			if d.verdict != tt.want || d.siblings != tt.siblings {
				t.Errorf("decideContention = %v (siblings %v), want %v (siblings %v)", d.verdict, d.siblings, tt.want, tt.siblings)
			}
		})
	}
}

// measuredMethods are pgbench's images as the compression grid read them, at 14MB/s of images
// before compression: what each method keeps, its CPU s per MB and the CPUs it would take.
func measuredMethods(share, rate float64) []methodFigures {
	mk := func(name string, kept, perMB float64) methodFigures {
		return methodFigures{method: name, kept: kept, cpuPerMB: perMB, saving: share * (1 - kept), cores: rate / (1 << 20) * perMB}
	}
	return []methodFigures{mk("lz4", 0.23, 0.0005), mk("zstd", 0.11, 0.0026), mk("pglz", 0.20, 0.0121)}
}

func TestDecideFullPage(t *testing.T) {
	cfg := DefaultThresholds()
	// dominant: images are 90% of 16MB/s of WAL, the CPUs half idle (1 of 2), backends waiting
	// on WAL writes 30% of the time, checkpoints timed every 5 min, the images measured.
	dominant := fullPageFacts{fullPageWrites: true, walRate: 16 << 20, share: 0.9, compression: "off", accepted: []string{"lz4", "zstd", "pglz"},
		reading: &collector.FullPages{}, methods: measuredMethods(0.9, 0.9*float64(16<<20)), imageRate: 0.9 * float64(16<<20),
		cpuIdle: 0.5, idleCores: 1, hasCPU: true, writeCost: 0.3, hasWriteCost: true, checkpoints: 4, timed: 4, timeout: 300, hasTimeout: true}
	with := func(change func(f *fullPageFacts)) fullPageFacts {
		f := dominant
		change(&f)
		return f
	}
	busy := func(f *fullPageFacts) { f.cpuIdle, f.idleCores = 0.005, 0.01 }
	tests := []struct {
		name        string
		f           fullPageFacts
		want        compressVerdict
		wantTimeout float64
	}{
		{name: "images dominant", f: dominant, want: compressFire},
		{name: "images below FPISavingMin: no method could save enough", f: with(func(f *fullPageFacts) {
			f.share, f.methods = 0.2, measuredMethods(0.2, 0.2*float64(16<<20))
		}), want: compressNone},
		{name: "images below FPIShareMin, no CPU to spare: advice, checkpoints not spaced", f: with(func(f *fullPageFacts) {
			f.share, f.methods, f.cpuIdle, f.idleCores = 0.4, measuredMethods(0.4, 0.4*float64(16<<20)), 0.0005, 0.001
		}), want: compressCPUBusy},
		{name: "images below FPIShareMin, saving enough", f: with(func(f *fullPageFacts) {
			f.share, f.methods = 0.4, measuredMethods(0.4, 0.4*float64(16<<20))
		}), want: compressFire},
		{name: "PostgreSQL 18's sysbench shape: images 37%, pglz keeps 0.98", f: with(func(f *fullPageFacts) {
			f.share, f.walRate, f.accepted = 0.37, 2.28e6, []string{"pglz"}
			f.methods = []methodFigures{{method: "pglz", kept: 0.98, cpuPerMB: 0.0339, saving: 0.37 * 0.02, cores: 0.37 * 2.28e6 / (1 << 20) * 0.0339}}
		}), want: compressLittle},
		{name: "images below FPIShareMin, not read: an estimate alone says nothing", f: with(func(f *fullPageFacts) {
			f.share, f.reading, f.methods = 0.4, nil, nil
		}), want: compressNone},
		{name: "WAL below FPIMinWALRate", f: with(func(f *fullPageFacts) { f.walRate = 512 << 10 }), want: compressNone},
		{name: "full_page_writes off", f: with(func(f *fullPageFacts) { f.fullPageWrites = false }), want: compressNone},
		{name: "compressed: space checkpoints", f: with(func(f *fullPageFacts) { f.compressed, f.compression = true, "lz4" }),
			want: compressNone, wantTimeout: 600},
		{name: "compressed, checkpoints requested: checkpoint-stalls' business",
			f: with(func(f *fullPageFacts) { f.compressed, f.timed, f.requested = true, 1, 3 }), want: compressNone},
		{name: "compressed, timeout at FPISpacingTimeout", f: with(func(f *fullPageFacts) { f.compressed, f.timeout = true, 900 }), want: compressNone},
		{name: "compressed, 10min: capped at FPISpacingTimeout", f: with(func(f *fullPageFacts) { f.compressed, f.timeout = true, 600 }),
			want: compressNone, wantTimeout: 900},
		{name: "no CPU to spare for any method: space checkpoints", f: with(busy), want: compressCPUBusy, wantTimeout: 600},
		{name: "images compress poorly: no spacing either", f: with(func(f *fullPageFacts) {
			f.methods = []methodFigures{{method: "pglz", kept: 0.93, saving: 0.9 * 0.07, cores: 0.4}}
		}), want: compressLittle},
		{name: "CPU unknown", f: with(func(f *fullPageFacts) { f.hasCPU = false }), want: compressFire},
		{name: "write cost unknown", f: with(func(f *fullPageFacts) { f.hasWriteCost = false }), want: compressUnmeasured},
		{name: "writes below FPIWriteCostMin", f: with(func(f *fullPageFacts) { f.writeCost = 0.05 }), want: compressCheap},
		{name: "no method accepted", f: with(func(f *fullPageFacts) { f.accepted = nil }), want: compressNone},
		{name: "images not read: advice to measure", f: with(func(f *fullPageFacts) { f.reading, f.methods = nil, nil }), want: compressUnread},
		{name: "WAL below FPIDeviceShareMin of its device's writes", f: with(func(f *fullPageFacts) { f.hasDisk, f.diskRate = true, f.walRate*5 }),
			want: compressCrowded},
		{name: "WAL most of its device's writes", f: with(func(f *fullPageFacts) { f.hasDisk, f.diskRate = true, f.walRate*1.5 }), want: compressFire},
		{name: "device rate zero: not judged on it", f: with(func(f *fullPageFacts) { f.hasDisk, f.diskRate = true, 0 }), want: compressFire},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := decideFullPage(tt.f, cfg)
			if d.compress != tt.want || d.timeout != tt.wantTimeout {
				t.Errorf("decideFullPage = %+v, want compress %v, timeout %v", d, tt.want, tt.wantTimeout)
			}
		})
	}
}

// TestDecideCompression: the method is chosen by what it saves and costs here, measured.
func TestDecideCompression(t *testing.T) {
	cfg := DefaultThresholds()
	rate := 14.0 * (1 << 20)
	base := fullPageFacts{walRate: 16 << 20, share: 0.9, accepted: []string{"lz4", "zstd", "pglz"}, reading: &collector.FullPages{},
		methods: measuredMethods(0.9, rate), imageRate: rate, cpuIdle: 0.5, idleCores: 1, hasCPU: true, writeCost: 0.3, hasWriteCost: true}
	with := func(change func(f *fullPageFacts)) fullPageFacts {
		f := base
		change(&f)
		return f
	}
	only := func(names ...string) func(f *fullPageFacts) {
		return func(f *fullPageFacts) {
			var ms []methodFigures
			for _, m := range measuredMethods(0.9, rate) {
				if slices.Contains(names, m.method) {
					ms = append(ms, m)
				}
			}
			f.methods = ms
		}
	}
	for _, tt := range []struct {
		name       string
		f          fullPageFacts
		want       compressVerdict
		wantMethod string
	}{
		{"costly writes, idle CPU: the cheapest that saves enough", base, compressFire, "lz4"},
		{"zstd saves FPISavingMin more than lz4: zstd", with(func(f *fullPageFacts) {
			f.methods = []methodFigures{{method: "lz4", cpuPerMB: 0.0005, saving: 0.3}, {method: "zstd", cpuPerMB: 0.0026, saving: 0.55, cores: 0.04}}
		}), compressFire, "zstd"},
		{"zstd saves less than FPISavingMin more: lz4", with(func(f *fullPageFacts) {
			f.methods = []methodFigures{{method: "lz4", cpuPerMB: 0.0005, saving: 0.3}, {method: "zstd", cpuPerMB: 0.0026, saving: 0.54, cores: 0.04}}
		}), compressFire, "lz4"},
		{"already compressed", with(func(f *fullPageFacts) { f.compressed = true }), compressNone, ""},
		{"pglz only, fits in the idle CPUs", with(only("pglz")), compressFire, "pglz"},
		// 14MB/s x 0.0121 s/MB = 0.17 CPUs: more than half of 0.3 idle.
		{"pglz only, 0.3 CPUs idle: too costly", with(func(f *fullPageFacts) { only("pglz")(f); f.idleCores = 0.3 }), compressCPUBusy, "pglz"},
		{"pglz at FPIIdleCPUShare of the idle CPUs", with(func(f *fullPageFacts) { only("pglz")(f); f.idleCores = f.methods[0].cores / 0.5 }), compressFire, "pglz"},
		{"0.05 CPUs idle: lz4 still fits", with(func(f *fullPageFacts) { f.idleCores = 0.05 }), compressFire, "lz4"},
		{"images compress poorly", with(func(f *fullPageFacts) {
			f.methods = []methodFigures{{method: "pglz", kept: 0.93, saving: 0.9 * 0.07, cores: 0.1}, {method: "lz4", kept: 0.87, saving: 0.9 * 0.13}}
		}), compressLittle, "lz4"},
		{"a saving at FPISavingMin", with(func(f *fullPageFacts) { f.methods = []methodFigures{{method: "pglz", saving: 0.25, cores: 0.1}} }), compressFire, "pglz"},
		{"not read", with(func(f *fullPageFacts) { f.reading, f.methods = nil, nil }), compressUnread, ""},
		{"the WAL under FPIDeviceShareMin of its device's writes", with(func(f *fullPageFacts) { f.hasDisk, f.diskRate = true, f.walRate/0.29 }), compressCrowded, "lz4"},
		{"the WAL at FPIDeviceShareMin", with(func(f *fullPageFacts) { f.hasDisk, f.diskRate = true, f.walRate/0.3 }), compressFire, "lz4"},
		{"cost unknown", with(func(f *fullPageFacts) { f.hasWriteCost = false }), compressUnmeasured, "lz4"},
		{"cost below FPIWriteCostMin", with(func(f *fullPageFacts) { f.writeCost = 0.09 }), compressCheap, "lz4"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, m := decideCompression(tt.f, cfg)
			if got != tt.want || m.method != tt.wantMethod {
				t.Errorf("decideCompression = %v, %s; want %v, %s", got, m.method, tt.want, tt.wantMethod)
			}
		})
	}
}

func TestDecideOpenSync(t *testing.T) {
	cfg := DefaultThresholds()
	costly := openSyncFacts{syncsEveryWrite: true, writes: bufferWrites{Rate: 100, Share: 0.5, PerWrite: 0.004}, cost: 0.4}
	with := func(change func(f *openSyncFacts)) openSyncFacts {
		f := costly
		change(&f)
		return f
	}
	for _, tt := range []struct {
		name string
		f    openSyncFacts
		want verdict
	}{
		{"open_* with costly buffer-full writes", costly, verdictFire},
		{"a method that does not sync every write", with(func(f *openSyncFacts) { f.syncsEveryWrite = false }), verdictQuiet},
		{"rare buffer-full writes", with(func(f *openSyncFacts) { f.writes.Rate = cfg.BuffersFullMinRate / 2 }), verdictQuiet},
		{"a small share of the writes", with(func(f *openSyncFacts) { f.writes.Share = cfg.BuffersFullMinShare / 2 }), verdictQuiet},
		{"cost per write unknown", with(func(f *openSyncFacts) { f.writes.PerWrite = 0 }), verdictUnknown},
		{"cheap", with(func(f *openSyncFacts) { f.cost = cfg.BuffersFullCost / 2 }), verdictQuiet},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideOpenSync(tt.f, cfg); got != tt.want {
				t.Errorf("decideOpenSync = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecideWriteCache(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    writeCacheFacts
		want verdict
	}{
		{"syncs faster than the device can persist", writeCacheFacts{verdict: probes.Verdict{Status: probes.VerdictTooFast}}, verdictFire},
		{"unknown verdict, write-back cache", writeCacheFacts{verdict: probes.Verdict{Status: probes.VerdictUnknown}, writeCache: "write back"}, verdictAdvise},
		{"unknown verdict, write-through cache", writeCacheFacts{verdict: probes.Verdict{Status: probes.VerdictUnknown}, writeCache: "write through"}, verdictQuiet},
		{"plausible", writeCacheFacts{verdict: probes.Verdict{Status: probes.VerdictPlausible}, writeCache: "write back"}, verdictQuiet},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideWriteCache(tt.f); got != tt.want {
				t.Errorf("decideWriteCache = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecideCheckpoints(t *testing.T) {
	cfg := DefaultThresholds()
	// walDriven: 6 requested checkpoints of 1GB each at max_wal_size 1GB, sync phases short.
	walDriven := checkpointStallFacts{requested: 6, timed: 1, walRate: 8 << 20, walPerCheckpoint: 1 << 30,
		maxWAL: 1 << 30, hasMaxWAL: true, cct: 0.9, hasCCT: true, timeout: 300, hasTimeout: true}
	with := func(change func(f *checkpointStallFacts)) checkpointStallFacts {
		f := walDriven
		change(&f)
		return f
	}
	for _, tt := range []struct {
		name                          string
		f                             checkpointStallFacts
		walDriven, raise, cct, unexpl bool
	}{
		{"WAL-driven: raise max_wal_size", walDriven, true, true, false, false},
		{"requested but far below the trigger: manual CHECKPOINTs", with(func(f *checkpointStallFacts) { f.walPerCheckpoint = 64 << 20 }),
			false, false, false, false},
		{"timed: nothing", with(func(f *checkpointStallFacts) { f.requested, f.timed = 0, 6 }), false, false, false, false},
		{"slow syncs, low completion target", with(func(f *checkpointStallFacts) {
			f.requested, f.timed, f.cct, f.cp.syncMean = 0, 6, 0.5, 2*cfg.CheckpointSyncSlow.Seconds()
		}), false, false, true, false},
		{"slow syncs, no cause", with(func(f *checkpointStallFacts) {
			f.requested, f.timed, f.cp.syncMean = 0, 6, 2*cfg.CheckpointSyncSlow.Seconds()
		}), false, false, false, true},
		{"slow syncs, flush-after off: flush-after-disabled speaks", with(func(f *checkpointStallFacts) {
			f.requested, f.timed, f.cp.syncMean, f.flushAfterOff = 0, 6, 2*cfg.CheckpointSyncSlow.Seconds(), true
		}), false, false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := decideCheckpoints(tt.f, cfg)
			if d.walDriven != tt.walDriven || d.raiseMaxWAL != tt.raise || d.raiseCompletionTarget != tt.cct || d.unexplained != tt.unexpl {
				t.Errorf("decideCheckpoints = %+v, want walDriven %v, raise max_wal_size %v, raise completion target %v, unexplained %v",
					d, tt.walDriven, tt.raise, tt.cct, tt.unexpl)
			}
			if d.raiseMaxWAL && d.maxWAL <= tt.f.maxWAL {
				t.Errorf("max_wal_size %d recommended, not above %d", d.maxWAL, tt.f.maxWAL)
			}
		})
	}
}

func TestDecideSyncMethod(t *testing.T) {
	cfg := DefaultThresholds()
	for _, tt := range []struct {
		name string
		f    syncMethodFacts
	}{
		{"fsync off: fsync-off speaks", syncMethodFacts{fsyncOff: true, method: "fdatasync", accepted: []string{"fdatasync", "open_datasync"}}},
		{"already the fastest", syncMethodFacts{method: probes.Fdatasync, accepted: []string{probes.Fdatasync, probes.OpenDatasync},
			probe: seed000Probe(), writesPerSync: 1, current: mres(probes.Fdatasync, 1, 4600, 60, 200)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if c, ok := decideSyncMethod(tt.f, cfg); ok {
				t.Errorf("decideSyncMethod = %+v, want no recommendation", c)
			}
		})
	}
	// Seed 000's device: open_sync takes twice fsync's 4.6 ms, so a syncing-once method wins.
	all := []string{probes.Fsync, probes.Fdatasync, probes.OpenSync, probes.OpenDatasync}
	f := syncMethodFacts{method: probes.OpenSync, accepted: all, probe: seed000Probe(), writesPerSync: 1,
		current: mres(probes.OpenSync, 1, 9200, 90, 200)}
	c, ok := decideSyncMethod(f, cfg)
	if !ok || (c.m.Name != probes.Fdatasync && c.m.Name != probes.Fsync) {
		t.Errorf("seed 000: decideSyncMethod = %+v, %v; want fdatasync or fsync", c.m.Name, ok)
	}
}

func TestDecideHAStandbyDiffers(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    haStandbyFacts
		want verdict
	}{
		{"not a repmgr standby", haStandbyFacts{}, verdictQuiet},
		{"the primary unread", haStandbyFacts{Standby: true, Unknown: "connect: refused"}, verdictUnknown},
		{"runs what the primary runs", haStandbyFacts{Standby: true, Address: "10.0.0.1:5432"}, verdictQuiet},
		{"one differs", haStandbyFacts{Standby: true, Differing: []differing{{"wal_buffers", "64kB", "16MB", "postmaster"}}}, verdictFire},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideHAStandbyDiffers(tt.f); got != tt.want {
				t.Errorf("decideHAStandbyDiffers = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDecideHAOverride(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    haOverrideFacts
		want verdict
	}{
		{"no manager", haOverrideFacts{}, verdictQuiet},
		{"configuration unknown", haOverrideFacts{Manager: collector.ManagerPatroni, Unknown: "503"}, verdictUnknown},
		{"nothing shadowed", haOverrideFacts{Manager: collector.ManagerPatroni}, verdictQuiet},
		{"one shadowed", haOverrideFacts{Manager: collector.ManagerPatroni, Shadowed: []shadowed{{"wal_buffers", "16MB", "64kB"}}}, verdictFire},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideHAOverride(tt.f); got != tt.want {
				t.Errorf("decideHAOverride = %v, want %v", got, tt.want)
			}
		})
	}
}
