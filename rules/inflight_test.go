package rules

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// singleInsert is seed 001's shape as it runs: one INSERT ... SELECT generate_series on the 4 ms
// device with wal_buffers=64kB and open_datasync. Its WAL moves the insert LSN by 2MB a second,
// but pg_stat_wal counts a backend's WAL only when its transaction ends, so until then only the
// WAL writer's few writes show there. The one active backend is in IO WALWrite in 90% of the
// samples. With commitAt > 0 the statement commits at that step: pg_stat_wal then receives the
// whole transaction, which began ten steps before the window.
func singleInsert(commitAt int) scenario {
	const (
		perStep = 15 * 2 * float64(mB)
		before  = 10 // steps the transaction ran before the window began
		base    = 1000.0
	)
	sc := seed001()
	sc.walBytes, sc.buffersFull, sc.writes, sc.syncs = 0, 0, 15*5, 0
	sc.insertLSN = perStep
	running := collector.WaitEvents{Samples: 20, ActiveBackends: 20, Counts: map[string]int64{collector.EventIOWALWrite: 18}}
	idle := collector.WaitEvents{Samples: 20, Counts: map[string]int64{}}
	sc.mutate = func(i int, s *collector.Snapshot) {
		pg := s.Postgres
		if i > 0 {
			w := running
			if commitAt > 0 && i > commitAt {
				w = idle
			}
			pg.WaitEvents = &w
		}
		if commitAt <= 0 {
			return
		}
		ran := min(i, commitAt)
		lsn := uint64(base + float64(ran)*perStep)
		pg.WALInsertLSN = &lsn
		if i >= commitAt {
			tx := float64(commitAt+before) * perStep
			full := int64(tx / float64(64*kB))
			pg.WAL.Bytes += int64(tx)
			pg.WAL.BuffersFull += full
			pg.WAL.Writes += full
		}
	}
	return sc
}

func TestInFlightWAL(t *testing.T) {
	// An idle server under the seed's settings: a little WAL (hint bits, autovacuum), its LSN
	// moving 1kB a second, no backend waiting on WAL.
	idle := seed001()
	idle.walBytes, idle.buffersFull, idle.writes = 0, 0, 15
	idle.insertLSN = 15 * float64(kB)
	idle.waits = &collector.WaitEvents{Samples: 20, ActiveBackends: 2, Counts: map[string]int64{}}
	// The same, with a session stuck in IO WALWrite: too little WAL for buffer-full writes.
	idleWaiting := idle
	idleWaiting.waits = &collector.WaitEvents{Samples: 20, ActiveBackends: 20, Counts: map[string]int64{collector.EventIOWALWrite: 18}}
	healthyLSN := healthy()
	healthyLSN.insertLSN = healthy().walBytes
	// A standby reads no insert LSN: it falls back to pg_stat_wal, which shows nothing here.
	standby := singleInsert(0)
	standby.insertLSN = 0
	standby.mutate = func(i int, s *collector.Snapshot) {
		s.Postgres.InRecovery = true
		if i > 0 {
			w := collector.WaitEvents{Samples: 20, ActiveBackends: 20, Counts: map[string]int64{collector.EventIOWALWrite: 18}}
			s.Postgres.WaitEvents = &w
		}
	}
	// A standby whose pg_stat_wal counts buffer-full writes is judged from them, as before.
	standbyCounted := seed001()
	standbyCounted.mutate = func(_ int, s *collector.Snapshot) { s.Postgres.InRecovery = true }
	// The same INSERT under fdatasync: buffer-full writes are page-cache writes, but the backend
	// is seen in IO WALWrite doing them, so they are estimated as under open_*; only
	// wal-buffers-small has something to say.
	fdatasync := singleInsert(0)
	fdatasync.settings = with(collector.WALBuffers, "64kB", collector.WALSyncMethod, "fdatasync", collector.SharedBuffers, "256MB")
	// Under fdatasync with the backend seldom in IO WALWrite: nothing is estimated.
	fdatasyncQuiet := fdatasync
	fdatasyncQuiet.mutate = func(i int, s *collector.Snapshot) {
		fdatasync.mutate(i, s)
		if i > 0 {
			s.Postgres.WaitEvents = &collector.WaitEvents{Samples: 20, ActiveBackends: 20, Counts: map[string]int64{collector.EventIOWALWrite: 1}}
		}
	}

	// The long INSERT beside a small writer that commits a buffer-full write's worth of WAL
	// every snapshot: pg_stat_wal counts those, and the long statement is still estimated.
	beside := singleInsert(0)
	beside.walBytes, beside.buffersFull = 64*float64(kB), 1

	buffers := wantFinding{collector.WALBuffers, Warning, "16MB"}
	method := wantFinding{collector.WALSyncMethod, Warning, "fdatasync"}
	tests := []struct {
		name                   string
		in                     Input
		walBuffers, open, slow []wantFinding
		estimated              bool
		wantBytes, wantRate    float64
	}{
		{name: "single uncommitted INSERT: LSN moves, pg_stat_wal flat, 90% IO WALWrite",
			in: singleInsert(0).input(slowDiskProbe()), estimated: true,
			walBuffers: []wantFinding{buffers}, open: []wantFinding{method}, slow: []wantFinding{method},
			wantBytes: 20 * 30 * float64(mB), wantRate: 2 * float64(mB) / float64(64*kB)},
		{name: "the same INSERT after commit: pg_stat_wal caught up, counted once",
			in:         singleInsert(15).input(slowDiskProbe()),
			walBuffers: []wantFinding{buffers}, open: []wantFinding{method}, slow: []wantFinding{method},
			wantBytes: 25 * 30 * float64(mB), wantRate: 25 * 30 * float64(mB) / float64(64*kB) / 300},
		{name: "single INSERT beside small commits that pg_stat_wal counts: estimated on top of them",
			in: beside.input(slowDiskProbe()), estimated: true,
			walBuffers: []wantFinding{buffers}, open: []wantFinding{method}, slow: []wantFinding{method},
			wantBytes: 20 * 30 * float64(mB), wantRate: 2 * float64(mB) / float64(64*kB)},
		{name: "idle server, LSN moving slowly", in: idle.input(slowDiskProbe()), wantBytes: 20 * 15 * float64(kB)},
		{name: "idle server, LSN moving slowly, a backend in IO WALWrite", in: idleWaiting.input(slowDiskProbe()),
			estimated: true, wantBytes: 20 * 15 * float64(kB), wantRate: float64(kB) / float64(64*kB)},
		{name: "healthy cluster with its LSN", in: healthyLSN.input(fastDiskProbe()),
			wantBytes: 20 * healthy().walBytes, wantRate: 1.0 / 15},
		{name: "standby: no LSN, pg_stat_wal flat", in: standby.input(slowDiskProbe())},
		{name: "standby: no LSN, pg_stat_wal counts", in: standbyCounted.input(slowDiskProbe()),
			walBuffers: []wantFinding{buffers}, open: []wantFinding{method}, slow: []wantFinding{method},
			wantBytes: 20 * seed001().walBytes, wantRate: 100},
		{name: "fdatasync, the backend in IO WALWrite: estimated, wal_buffers only", in: fdatasync.input(slowDiskProbe()), estimated: true,
			walBuffers: []wantFinding{buffers}, wantBytes: 20 * 30 * float64(mB), wantRate: 2 * float64(mB) / float64(64*kB)},
		{name: "fdatasync, the backend seldom in IO WALWrite: nothing estimated", in: fdatasyncQuiet.input(slowDiskProbe()),
			wantBytes: 20 * 30 * float64(mB)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			latest, _ := in.History.Latest()
			s := settings(latest.Postgres.Settings)
			method, _ := s.value(collector.WALSyncMethod)
			b, ok := measureBufferWrites(sinceWindow(in, in.Config.Window), s, method, in.Probe, in.Config)
			if !ok {
				t.Fatalf("measureBufferWrites: no interval")
			}
			if b.Estimated != tt.estimated || !near(b.Bytes, tt.wantBytes) || !near(b.Rate, tt.wantRate) {
				t.Errorf("measureBufferWrites = estimated %v, %.0f bytes, %.3f/s; want estimated %v, %.0f bytes, %.3f/s",
					b.Estimated, b.Bytes, b.Rate, tt.estimated, tt.wantBytes, tt.wantRate)
			}
			checkResult(t, evalWALBuffersSmall(in), false, tt.walBuffers...)
			checkResult(t, evalOpenSyncWithSmallBuffers(in), false, tt.open...)
			checkResult(t, evalSyncMethodSlow(in), false, tt.slow...)
			if tt.estimated && len(tt.walBuffers) > 0 {
				f := evalWALBuffersSmall(in).Findings[0]
				if v, ok := evidence(f, "buffers_full_estimated_from_lsn"); !ok || v != 1 {
					t.Errorf("wal-buffers-small evidence %v lacks buffers_full_estimated_from_lsn", f.Evidence)
				}
			}
		})
	}
}

// near compares figures computed two ways to a part in a million.
func near(a, b float64) bool {
	d := a - b
	return d*d <= 1e-12*max(a*a, b*b, 1)
}

// TestInsertLSNGoingBack checks that an insert LSN that goes down (another server behind the
// same address) is a reset, not a negative amount of WAL.
func TestInsertLSNGoingBack(t *testing.T) {
	sc := scenario{steps: 3, insertLSN: 1000}
	sc.mutate = func(i int, s *collector.Snapshot) {
		if i == 2 {
			lsn := uint64(10)
			s.Postgres.WALInsertLSN = &lsn
		}
	}
	c := sc.history().Change(WALInsertBytes)
	if c.Delta != 1000 || c.Intervals != 1 || c.Skipped != 1 {
		t.Errorf("Change(WALInsertBytes) = %+v, want delta 1000 over 1 interval, 1 skipped", c)
	}
}
