package rules

import (
	"math"
	"strings"
	"testing"
	"time"

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
	// at is seed 001's load still costly at a larger wal_buffers under open_datasync.
	at := func(walBuffers, sharedBuffers string) scenario {
		sc := seed001()
		sc.settings = with(collector.WALBuffers, walBuffers, collector.WALSyncMethod, "open_datasync", collector.SharedBuffers, sharedBuffers)
		return sc
	}
	// restarted puts the snapshots before step i under an earlier server start with
	// wal_buffers=4MB: the restart that brought today's value in.
	restarted := func(sc scenario, i int) scenario {
		before := with(collector.WALBuffers, "4MB", collector.WALSyncMethod, "open_datasync", collector.SharedBuffers, "1GB")
		sc.mutate = func(j int, s *collector.Snapshot) {
			if j < i {
				s.Postgres.StartTime = s.Postgres.StartTime.Add(-time.Hour)
				s.Postgres.Settings = before
			} else {
				s.Postgres.StartTime = t0().Add(time.Duration(i)*15*time.Second - time.Second)
			}
		}
		return sc
	}

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
		// run is the wal_buffers_run_seconds the finding must cite (0: not checked).
		run float64
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
		{name: "16MB with cost, shared_buffers 1GB: 32MB", in: at("16MB", "1GB").input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "32MB"}}},
		{name: "32MB with cost, shared_buffers 2GB: 64MB", in: at("32MB", "2GB").input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "64MB"}}},
		{name: "48MB stops at 64MB", in: at("48MB", "4GB").input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "64MB"}}},
		{name: "64MB: nothing more to win from the buffers", in: at("64MB", "8GB").input(slowDiskProbe())},
		{name: "16MB, restarted with it 20 s ago: not judged yet", in: restarted(at("16MB", "1GB"), 19).input(slowDiskProbe()),
			notEnough: true},
		{name: "16MB, restarted with it 2.5 min ago: judged on that run", in: restarted(at("16MB", "1GB"), 10).input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "32MB"}}, run: 150},
		{name: "16MB, shared_buffers 64MB: advice, nothing recommended", in: at("16MB", "64MB").input(slowDiskProbe()),
			want: []wantFinding{{"", Info, "wal_buffers=32MB only with shared_buffers of at least 128MB"}}},
		{name: "32MB, shared_buffers 128MB: advice, nothing recommended", in: at("32MB", "128MB").input(slowDiskProbe()),
			want: []wantFinding{{"", Info, "wal_buffers=64MB only with shared_buffers of at least 256MB"}}},
		// Seed 001's shared_buffers: the lab measured 64MB faster there (docs/benchmarks.md).
		{name: "16MB with cost, shared_buffers 256MB: 32MB", in: at("16MB", "256MB").input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "32MB"}}},
		{name: "32MB with cost, shared_buffers 256MB: 64MB", in: at("32MB", "256MB").input(slowDiskProbe()),
			want: []wantFinding{{collector.WALBuffers, Warning, "64MB"}}},
		{name: "16MB, shared_buffers unknown: advice", in: func() Input {
			sc := at("16MB", "1GB")
			delete(sc.settings, collector.SharedBuffers)
			return sc.input(slowDiskProbe())
		}(), want: []wantFinding{{"", Info, "wal_buffers=32MB only with shared_buffers of at least 128MB"}}},
		{name: "16MB under fdatasync: cheap buffer-full writes, nothing", in: func() Input {
			sc := at("16MB", "2GB")
			sc.settings[collector.WALSyncMethod] = plain("fdatasync")
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
			res := evalWALBuffersSmall(tt.in)
			checkResult(t, res, tt.notEnough, tt.want...)
			for _, f := range res.Findings {
				if got, _ := evidence(f, "wal_buffers_run_seconds"); tt.run != 0 && got != tt.run {
					t.Errorf("wal_buffers_run_seconds = %v, want %v", got, tt.run)
				}
				if f.Action != ActionRestart {
					continue
				}
				checkPredicted(t, f)
				cur, _ := collector.ParseMemory(f.Current)
				next, _ := collector.ParseMemory(f.Recommended)
				// Modelled, the buffer-full writes' cost shrinks by cur/next up to one WAL
				// segment and by the measured walBuffersDoublingKeep per doubling beyond it;
				// measured, it falls by no more than that.
				p := f.Predicted
				if p == nil {
					continue
				}
				keep := float64(cur) / float64(next)
				if cur >= 16*mB {
					keep = math.Pow(walBuffersDoublingKeep, math.Log2(float64(next)/float64(cur)))
				}
				if modelled := strings.HasPrefix(p.Basis, "modelled"); modelled && math.Abs(p.Value-p.Current*keep) > 1e-9 ||
					!modelled && !(p.Value < p.Current && p.Value >= p.Current*keep-1e-12) {
					t.Errorf("predicted %+v, want current x %.3f when modelled, between that and current when measured", *p, keep)
				}
				if next > 16*mB {
					sb, ok := evidence(f, "shared_buffers_bytes")
					if !ok || int64(sb)/walBuffersShare < next {
						t.Errorf("stepped to %s with shared_buffers %v (evidence %v)", f.Recommended, sb, ok)
					}
				}
			}
		})
	}
}
