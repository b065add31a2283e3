// Package advisor is the loop: it runs the collectors, the wait-event sampler and the sync
// probes on their schedules, keeps a bounded history of snapshots, evaluates the rules over it
// and holds the current findings for the metrics, the API and the apply mode.
package advisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// PostgresSource reads the server's statistics and settings (collector/postgres).
type PostgresSource interface {
	Collect(ctx context.Context) (*collector.Postgres, error)
	SampleWaitEvents(ctx context.Context) error
}

// targetStatuser is a PostgresSource that classifies its last Collect (collector/postgres
// does): the daemon's readiness and the exit status of check and collect follow it.
type targetStatuser interface {
	TargetStatus(err error) string
}

// KernelSource reads the kernel's dirty-page settings and state (collector/kernel).
type KernelSource interface {
	Collect(ctx context.Context) (*collector.Kernel, error)
}

// StorageSource describes the storage under a directory (collector/storage).
type StorageSource interface {
	Collect(ctx context.Context, walDir string) (*collector.Storage, error)
}

// WritersSource reads which processes wrote since its previous reading (collector/writers): it
// keeps that reading, so one source belongs to one Sampler.
type WritersSource interface {
	Collect(ctx context.Context) (*collector.Writers, error)
}

// FullPagesSource reads the server's recent full-page images from its WAL and measures
// compressing them (probes/compression); it reads the WAL again only every so often and
// returns its last reading in between.
type FullPagesSource interface {
	Collect(ctx context.Context, walDir string, pg *collector.Postgres) (*collector.FullPages, error)
}

// Sampler takes snapshots from its sources; a nil source is not collected. A source that fails
// leaves its part nil and says why in the snapshot's Parts; the others are still collected.
type Sampler struct {
	Postgres PostgresSource
	Kernel   KernelSource
	Storage  StorageSource
	Writers  WritersSource
	// FullPages, when set, reads the WAL's images (after the postgres part, whose insert
	// position and version it needs).
	FullPages FullPagesSource
	// WALDir, when set, overrides the WAL directory the server reports (--wal-dir).
	WALDir string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// errNoWALDir is the storage part's error when the WAL directory is unknown.
// The postgres part says why when the server was read (WALDirProblem); this is the rest: a server
// that could not be read, which then named no directory.
var errNoWALDir = errors.New("WAL directory unknown: PostgreSQL could not be read, so it named none (see the postgres part); --wal-dir names it without the server")

// Sample collects one snapshot.
func (s *Sampler) Sample(ctx context.Context) collector.Snapshot {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	snap := collector.Snapshot{Time: now()}

	if s.Postgres != nil {
		start := time.Now()
		pg, err := s.Postgres.Collect(ctx)
		snap.Postgres = pg
		p := part(collector.PartPostgres, start, err)
		if ts, ok := s.Postgres.(targetStatuser); ok {
			p.Status = ts.TargetStatus(err)
		} else if err != nil {
			p.Status = collector.TargetUnreachable
		}
		snap.Parts = append(snap.Parts, p)
	}
	if s.Kernel != nil {
		start := time.Now()
		k, err := s.Kernel.Collect(ctx)
		snap.Kernel = k
		snap.Parts = append(snap.Parts, part(collector.PartKernel, start, err))
	}
	if s.Storage != nil {
		start := time.Now()
		walDir := s.WALDirOf(snap)
		var st *collector.Storage
		err := errNoWALDir
		if snap.Postgres != nil && snap.Postgres.WALDirProblem != "" {
			err = errors.New("WAL directory unknown: " + snap.Postgres.WALDirProblem)
		}
		if walDir != "" {
			st, err = s.Storage.Collect(ctx, walDir)
		}
		snap.WALStorage = st
		snap.Parts = append(snap.Parts, part(collector.PartWALStorage, start, err))
	}
	if s.Writers != nil {
		start := time.Now()
		w, err := s.Writers.Collect(ctx)
		snap.Writers = w
		snap.Parts = append(snap.Parts, part(collector.PartWriters, start, err))
	}
	if s.FullPages != nil {
		start := time.Now()
		fp, err := s.FullPages.Collect(ctx, s.WALDirOf(snap), snap.Postgres)
		snap.FullPages = fp
		snap.Parts = append(snap.Parts, part(collector.PartFullPages, start, err))
	}
	return snap
}

// WALDirOf is the WAL directory for snap: --wal-dir (WALDir) when given, else the one the
// server reported; "" when neither is known. The storage part, the probes and check all ask
// here, so that they look at the same directory.
func (s *Sampler) WALDirOf(snap collector.Snapshot) string {
	if s.WALDir != "" {
		return s.WALDir
	}
	if snap.Postgres != nil {
		return snap.Postgres.WALDir
	}
	return ""
}

func part(name string, start time.Time, err error) collector.Part {
	p := collector.Part{Name: name, OK: err == nil, DurationSeconds: time.Since(start).Seconds()}
	if err != nil {
		p.Error = fmt.Sprint(err)
	}
	return p
}

// PostgresFailure returns the postgres part of snap when the server could not be reached or
// read, and false when it was read (or the snapshot has no postgres part).
func PostgresFailure(snap collector.Snapshot) (collector.Part, bool) {
	p, ok := snap.Part(collector.PartPostgres)
	if !ok || p.OK {
		return collector.Part{}, false
	}
	return p, true
}

// Every takes a snapshot now and then every interval, count times (count <= 0: until ctx ends),
// sampling wait events every waitInterval in between, and hands each snapshot to fn. It returns
// nil when count snapshots were taken or ctx ended, or fn's error.
func (s *Sampler) Every(ctx context.Context, interval, waitInterval time.Duration, count int, fn func(collector.Snapshot) error) error {
	if interval <= 0 {
		return fmt.Errorf("interval %v: must be positive", interval)
	}
	// One wait-event sample before the first snapshot, so that even a single snapshot says
	// what the backends were waiting on at that moment.
	s.sampleWaits(ctx)
	snapTick := time.NewTicker(interval)
	defer snapTick.Stop()
	var waitC <-chan time.Time
	if waitInterval > 0 && s.Postgres != nil {
		waitTick := time.NewTicker(waitInterval)
		defer waitTick.Stop()
		waitC = waitTick.C
	}
	for taken := 0; ; {
		if err := fn(s.Sample(ctx)); err != nil {
			return err
		}
		taken++
		if count > 0 && taken >= count {
			return nil
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-waitC:
				s.sampleWaits(ctx)
			case <-snapTick.C:
				break wait
			}
		}
	}
}

// sampleWaits takes one wait-event sample. Its errors are not reported here: the next
// snapshot's postgres part reports a broken connection with a better message.
func (s *Sampler) sampleWaits(ctx context.Context) {
	if s.Postgres != nil {
		_ = s.Postgres.SampleWaitEvents(ctx)
	}
}
