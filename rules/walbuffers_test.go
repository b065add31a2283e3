package rules

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestWALBuffersSmall(t *testing.T) {
	// bulk is a bulk load under fdatasync: the buffers fill ~200 times a second whatever their
	// size (docs/benchmarks.md, seed 001), each write a cheap page-cache write.
	bulk := func(walBuffers string) scenario {
		return scenario{settings: with(collector.WALBuffers, walBuffers), walBytes: 15 * 20 * float64(mB),
			buffersFull: 15 * 200, writes: 15 * 230, syncs: 15 * 30}
	}
	timedBulk := bulk("64kB")
	timedBulk.settings = with(collector.WALBuffers, "64kB", collector.TrackWALIOTiming, "on")
	timedBulk.writeSec = 15 * 230 * 0.0005 // writes queue behind the WAL writer's syncs
	waiting := bulk("1MB")
	waiting.waits = &collector.WaitEvents{Samples: 15, ActiveBackends: 15 * 4, Counts: map[string]int64{
		collector.EventLWLockWALBufMap: 6, collector.EventIOWALWrite: 6}}
	commitWaits := bulk("4MB")
	commitWaits.buffersFull, commitWaits.writes = 15*20, 15*300 // a share just above the gate
	commitWaits.waits = &collector.WaitEvents{Samples: 15, ActiveBackends: 15 * 16, Counts: map[string]int64{
		collector.EventIOWALWrite: 15 * 8}}
	pending := seed001()
	pending.settings[collector.WALBuffers] = func() collector.Setting {
		s := memSetting("64kB")
		s.PendingRestart = true
		return s
	}()
	pg13 := seed001()
	pg13.noWAL = true

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "healthy: default 4MB, a few buffer-full writes a minute", in: healthy().input(fastDiskProbe())},
		{name: "seed 001: 64kB with open_datasync on a 4 ms device", in: seed001().input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "16MB"}}},
		{name: "bulk load under fdatasync: many buffer-full writes, negligible cost", in: bulk("4MB").input(fastDiskProbe())},
		{name: "bulk load under fdatasync, measured write time shows the cost", in: timedBulk.input(nil),
			want: []wantFinding{{collector.WALBuffers, Warning, "16MB"}}},
		{name: "WAL buffer mapping waits show the cost", in: waiting.input(nil),
			want: []wantFinding{{collector.WALBuffers, Warning, "16MB"}}},
		{name: "WAL write waits of commits are not blamed on the buffers", in: commitWaits.input(nil)},
		{name: "16MB doubles", in: func() Input {
			sc := seed001()
			sc.settings = with(collector.WALBuffers, "16MB", collector.WALSyncMethod, "open_datasync")
			return sc.input(slowDiskProbe())
		}(), want: []wantFinding{{collector.WALBuffers, Warning, "32MB"}}},
		{name: "48MB stops at 64MB", in: func() Input {
			sc := seed001()
			sc.settings = with(collector.WALBuffers, "48MB", collector.WALSyncMethod, "open_datasync")
			return sc.input(slowDiskProbe())
		}(), want: []wantFinding{{collector.WALBuffers, Warning, "64MB"}}},
		{name: "64MB: nothing more to win from the buffers", in: func() Input {
			sc := seed001()
			sc.settings = with(collector.WALBuffers, "64MB", collector.WALSyncMethod, "open_datasync")
			return sc.input(slowDiskProbe())
		}()},
		{name: "a change already pending restart is still reported", in: pending.input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "16MB"}}},
		{name: "cost unknown", in: bulk("64kB").input(nil), notEnough: true},
		{name: "PostgreSQL 13: no pg_stat_wal", in: pg13.input(slowDiskProbe()), notEnough: true},
		{name: "cold start", in: scenario{steps: 2, settings: seed001().settings}.input(slowDiskProbe()), notEnough: true},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalWALBuffersSmall(tt.in), tt.notEnough, tt.want...)
		})
	}
}
