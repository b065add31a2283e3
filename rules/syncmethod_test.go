package rules

import (
	"math"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// seed001 is seed 001's start (docs/benchmarks.md): shared_buffers 256MB, wal_buffers 64kB,
// open_datasync, a bulk INSERT ... SELECT generate_series on the 4 ms device. Nearly every WAL
// write is a buffer-full write, about 100 a second.
func seed001() scenario {
	return scenario{
		settings:    with(collector.WALBuffers, "64kB", collector.WALSyncMethod, "open_datasync", collector.SharedBuffers, "256MB"),
		walBytes:    15 * 0.8 * float64(mB),
		buffersFull: 15 * 100, writes: 15 * 106, syncs: 0,
	}
}

// seed000Probe is seed 000's device as the brief states it: fsync 4.6 ms, open_sync twice that.
func seed000Probe() *probes.Report {
	return probeAt(
		mres(probes.Fsync, 1, 4600, 60, 200), mres(probes.Fdatasync, 1, 4600, 60, 200),
		mres(probes.OpenSync, 1, 9200, 90, 200), mres(probes.OpenDatasync, 1, 9100, 90, 200),
		mres(probes.Write, 1, 20, 2, 200),
	)
}

// replace returns p with results replaced or added.
func replace(p *probes.Report, results ...probes.MethodResult) *probes.Report {
	c := *p
	c.Methods = append([]probes.MethodResult(nil), p.Methods...)
	for _, r := range results {
		found := false
		for i, m := range c.Methods {
			if m.Name == r.Name && m.WritesPerSync == r.WritesPerSync {
				c.Methods[i], found = r, true
			}
		}
		if !found {
			c.Methods = append(c.Methods, r)
		}
	}
	return &c
}

func TestSyncMethodSlow(t *testing.T) {
	commits := func(method string) scenario {
		return scenario{settings: with(collector.WALSyncMethod, method), walBytes: 15 * float64(mB), buffersFull: 0, writes: 15 * 300, syncs: 15 * 300}
	}
	noFdatasync := with(collector.WALSyncMethod, "open_sync")
	ws := noFdatasync[collector.WALSyncMethod]
	ws.EnumVals = []string{"fsync", "open_sync", "open_datasync"}
	noFdatasync[collector.WALSyncMethod] = ws
	unavailable := mres(probes.Fdatasync, 1, 4600, 60, 200)
	unavailable.Available, unavailable.Error = false, "EINVAL"
	flaggedProbe := replace(seed000Probe())
	flaggedProbe.Durability = probes.Verdict{Status: probes.VerdictTooFast, Evidence: map[string]float64{"fdatasync_p50_us": 150}}
	pg13 := commits("open_sync")
	pg13.noWAL = true

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "healthy: fdatasync on a fast disk, differences within 20%", in: healthy().input(fastDiskProbe())},
		{name: "seed 000: open_sync twice fsync's 4.6 ms", in: commits("open_sync").input(seed000Probe()),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fdatasync"}}},
		{name: "seed 001: bulk load compares two writes per flush", in: seed001().input(slowDiskProbe()),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fdatasync"}}},
		{name: "open_datasync with commits only: one write per flush costs the same", in: commits("open_datasync").input(slowDiskProbe())},
		{name: "25% faster but within noise", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 4000, 1500, 12), mres(probes.Fsync, 1, 3000, 1500, 12)))},
		{name: "significant but only 10% faster", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 4000, 20, 500), mres(probes.Fsync, 1, 3600, 20, 500)))},
		{name: "two candidates within 20% of each other: the default, even when the other is significantly faster",
			in: commits("open_sync").input(probeAt(
				mres(probes.OpenSync, 1, 9100, 90, 38), mres(probes.Fdatasync, 1, 4780, 50, 38),
				mres(probes.Fsync, 1, 4590, 50, 38), mres(probes.Write, 1, 20, 2, 38))),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fdatasync"}}},
		{name: "two candidates: the faster one when it clears the bar",
			in: commits("open_sync").input(probeAt(
				mres(probes.OpenSync, 1, 9100, 90, 38), mres(probes.Fdatasync, 1, 6000, 50, 38),
				mres(probes.Fsync, 1, 4500, 50, 38), mres(probes.Write, 1, 20, 2, 38))),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fsync"}}},
		{name: "too few samples", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 4000, 20, 5), mres(probes.Fsync, 1, 2000, 20, 5)))},
		{name: "only accepted methods: no fdatasync in enumvals", in: scenario{settings: noFdatasync, writes: 15 * 300, syncs: 15 * 300}.input(seed000Probe()),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fsync"}}},
		{name: "only methods the probe could use", in: commits("open_sync").input(replace(seed000Probe(), unavailable)),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fsync"}}},
		{name: "never a method the probe flagged", in: commits("open_sync").input(flaggedProbe),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fsync"}}},
		{name: "never a method that does not sync", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 4600, 60, 200), mres(probes.OpenDatasync, 1, 22, 2, 200), mres(probes.Write, 1, 20, 2, 200)))},
		{name: "an open_* method that would hurt bulk loads", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 4600, 60, 200), mres(probes.Fdatasync, 2, 4700, 60, 200),
			mres(probes.OpenDatasync, 1, 3000, 60, 200), mres(probes.OpenDatasync, 2, 6000, 60, 200)))},
		{name: "an open_* method faster in both patterns", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 4600, 60, 200), mres(probes.Fdatasync, 2, 4700, 60, 200),
			mres(probes.OpenDatasync, 1, 3000, 60, 200), mres(probes.OpenDatasync, 2, 4600, 60, 200))),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "open_datasync"}}},
		{name: "tiny absolute gain on a very fast device", in: commits("fdatasync").input(probeAt(
			mres(probes.Fdatasync, 1, 60, 2, 500), mres(probes.Fsync, 1, 30, 2, 500)))},
		{name: "PostgreSQL 13: commits assumed", in: pg13.input(seed000Probe()),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fdatasync"}}},
		{name: "fsync off: nothing to compare", in: scenario{settings: with(collector.Fsync, "off", collector.WALSyncMethod, "open_sync")}.input(seed000Probe())},
		{name: "no probe", in: commits("open_sync").input(nil), notEnough: true},
		{name: "probe lacks the configured method", in: commits("open_sync").input(probeAt(mres(probes.Fsync, 1, 4600, 60, 200))), notEnough: true},
		{name: "cold start", in: scenario{steps: 2, settings: with(collector.WALSyncMethod, "open_sync")}.input(seed000Probe()), notEnough: true},
		{name: "no history", in: Input{Now: t0(), Probe: seed000Probe()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalSyncMethodSlow(tt.in), tt.notEnough, tt.want...)
		})
	}

	t.Run("seed 001: evidence", func(t *testing.T) {
		f := evalSyncMethodSlow(seed001().input(slowDiskProbe())).Findings[0]
		for name, want := range map[string]float64{
			"writes_per_sync": 2, "current_flush_seconds": 0.0092, "recommended_flush_seconds": 0.0047,
		} {
			if got, ok := evidence(f, name); !ok || math.Abs(got-want) > 1e-9 {
				t.Errorf("%s = %v, %v; want %v", name, got, ok, want)
			}
		}
		if got, _ := evidence(f, "improvement_ratio"); got < 0.45 || got > 0.5 {
			t.Errorf("improvement_ratio = %v, want about 0.49", got)
		}
		// open_datasync leaves wal_sync at 0: each flush is two of the 106 writes a second.
		if want := (0.0092 - 0.0047) * 106 / 2; f.Prediction == nil || math.Abs(f.Prediction.SavedSecondsPerSecond-want) > 1e-6 {
			t.Errorf("prediction = %+v, want %.3f s saved per second", f.Prediction, want)
		}
	})

	t.Run("prediction: saved per flush times flushes per second", func(t *testing.T) {
		f := evalSyncMethodSlow(commits("open_sync").input(seed000Probe())).Findings[0]
		// open_sync 9.2 ms -> fdatasync 4.6 ms, 300 flushes a second.
		if f.Prediction == nil || math.Abs(f.Prediction.SavedSecondsPerSecond-0.0046*300) > 1e-6 {
			t.Errorf("prediction = %+v, want 1.38 s saved per second", f.Prediction)
		}
	})
}

func TestOpenSyncWithSmallBuffers(t *testing.T) {
	timed := seed001()
	timed.settings = with(collector.WALBuffers, "64kB", collector.WALSyncMethod, "open_datasync", collector.TrackWALIOTiming, "on")
	timed.writeSec = 15 * 106 * 0.0046
	fastBulk := seed001()
	fastBulk.buffersFull, fastBulk.writes = 15*2, 15*3
	noFdatasync := seed001()
	noFdatasync.settings = with(collector.WALBuffers, "64kB", collector.WALSyncMethod, "open_sync")
	ws := noFdatasync.settings[collector.WALSyncMethod]
	ws.EnumVals = []string{"fsync", "open_sync", "open_datasync"}
	noFdatasync.settings[collector.WALSyncMethod] = ws
	fdatasyncBulk := seed001()
	fdatasyncBulk.settings = with(collector.WALBuffers, "64kB")
	pg13 := seed001()
	pg13.noWAL = true
	quiet := seed001()
	quiet.buffersFull, quiet.writes = 0.25, 15*300

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "seed 001: 64kB, open_datasync, bulk insert on a 4 ms device", in: seed001().input(slowDiskProbe()),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fdatasync"}}},
		{name: "measured write time instead of the probe", in: timed.input(nil),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fdatasync"}}},
		{name: "fdatasync: buffer-full writes are page-cache writes", in: fdatasyncBulk.input(slowDiskProbe())},
		{name: "open_datasync with a few buffer-full writes a minute", in: quiet.input(slowDiskProbe())},
		{name: "open_datasync on a fast device: cost negligible", in: fastBulk.input(fastDiskProbe())},
		{name: "fsync when the server has no fdatasync", in: noFdatasync.input(slowDiskProbe()),
			want: []wantFinding{{collector.WALSyncMethod, Warning, "fsync"}}},
		{name: "cost unknown: no probe, no timing", in: seed001().input(nil), notEnough: true},
		{name: "PostgreSQL 13: no pg_stat_wal", in: pg13.input(slowDiskProbe()), notEnough: true},
		{name: "cold start", in: scenario{steps: 2, settings: seed001().settings}.input(slowDiskProbe()), notEnough: true},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalOpenSyncWithSmallBuffers(tt.in), tt.notEnough, tt.want...)
		})
	}

	t.Run("seed 001: cost is about 0.46 s per second", func(t *testing.T) {
		f := evalOpenSyncWithSmallBuffers(seed001().input(slowDiskProbe())).Findings[0]
		if got, _ := evidence(f, "buffers_full_cost"); math.Abs(got-0.46) > 0.01 {
			t.Errorf("buffers_full_cost = %v, want 0.46 (100/s x 4.6 ms)", got)
		}
		if f.Prediction == nil || math.Abs(f.Prediction.SavedSecondsPerSecond-0.46) > 0.01 {
			t.Errorf("prediction = %+v, want the 0.46 s per second of buffer-full writes", f.Prediction)
		}
	})
}
