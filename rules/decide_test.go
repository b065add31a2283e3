package rules

import "testing"

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

func TestDecideFullPage(t *testing.T) {
	cfg := DefaultThresholds()
	// dominant: images are 90% of 16MB/s of WAL, the CPUs half idle, backends waiting on WAL
	// writes 30% of the time, checkpoints timed every 5 min.
	dominant := fullPageFacts{fullPageWrites: true, walRate: 16 << 20, share: 0.9, compression: "off", method: "lz4",
		cpuIdle: 0.5, hasCPU: true, writeCost: 0.3, hasWriteCost: true, checkpoints: 4, timed: 4, timeout: 300, hasTimeout: true}
	with := func(change func(f *fullPageFacts)) fullPageFacts {
		f := dominant
		change(&f)
		return f
	}
	tests := []struct {
		name        string
		f           fullPageFacts
		want        compressVerdict
		wantTimeout float64
	}{
		{name: "images dominant", f: dominant, want: compressFire},
		{name: "images below FPIShareMin", f: with(func(f *fullPageFacts) { f.share = 0.4 }), want: compressNone},
		{name: "WAL below FPIMinWALRate", f: with(func(f *fullPageFacts) { f.walRate = 512 << 10 }), want: compressNone},
		{name: "full_page_writes off", f: with(func(f *fullPageFacts) { f.fullPageWrites = false }), want: compressNone},
		{name: "compressed: space checkpoints", f: with(func(f *fullPageFacts) { f.compressed, f.compression = true, "lz4" }),
			want: compressNone, wantTimeout: 600},
		{name: "compressed, checkpoints requested: checkpoint-stalls' business",
			f: with(func(f *fullPageFacts) { f.compressed, f.timed, f.requested = true, 1, 3 }), want: compressNone},
		{name: "compressed, timeout at FPISpacingTimeout", f: with(func(f *fullPageFacts) { f.compressed, f.timeout = true, 900 }), want: compressNone},
		{name: "compressed, 10min: capped at FPISpacingTimeout", f: with(func(f *fullPageFacts) { f.compressed, f.timeout = true, 600 }),
			want: compressNone, wantTimeout: 900},
		{name: "CPU below FPIIdleMin: space checkpoints", f: with(func(f *fullPageFacts) { f.cpuIdle = 0.1 }), want: compressCPUBusy, wantTimeout: 600},
		{name: "pglz needs twice FPIIdleMin", f: with(func(f *fullPageFacts) { f.method, f.cpuIdle = "pglz", 0.3 }), want: compressCPUBusy, wantTimeout: 600},
		{name: "CPU unknown", f: with(func(f *fullPageFacts) { f.hasCPU = false }), want: compressFire},
		{name: "write cost unknown", f: with(func(f *fullPageFacts) { f.hasWriteCost = false }), want: compressUnmeasured},
		{name: "writes below FPIWriteCostMin", f: with(func(f *fullPageFacts) { f.writeCost = 0.05 }), want: compressCheap},
		{name: "no method accepted", f: with(func(f *fullPageFacts) { f.method = "" }), want: compressNone},
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
