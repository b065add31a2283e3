package main

import (
	"context"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/collector/writers"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/probes/compression"
)

// closeTimeout bounds closing the connection to PostgreSQL on the way out, when the command's
// own context is usually cancelled already.
const closeTimeout = 2 * time.Second

// newSampler builds the sampler that collect and run share: PostgreSQL from --dsn (or the PG*
// environment, with --query-timeout), the kernel from --path.procfs, the WAL's storage and the
// writers from --path.procfs and --path.sysfs, the WAL's full-page images every
// --full-pages.interval (spread over window, when a one-shot command watches one shorter), and
// --wal-dir when given. Call the returned function when done: it closes the connection to
// PostgreSQL, even after ctx was cancelled.
func newSampler(g *cli.Globals, window time.Duration) (*advisor.Sampler, func(ctx context.Context)) {
	pg := postgres.New(g.DSN, postgres.Options{QueryTimeout: g.QueryTimeout, WALDir: g.WALDir, ProcFS: g.ProcFS, Logger: g.Logger})
	s := &advisor.Sampler{
		Postgres: pg,
		Kernel:   kernel.New(g.ProcFS),
		Storage:  storage.New(g.ProcFS, g.SysFS),
		Writers:  writers.New(g.ProcFS, g.SysFS, writers.Options{}),
		WALDir:   g.WALDir,
	}
	if g.FullPagesInterval > 0 {
		src := &compression.Source{Interval: g.FullPagesInterval}
		if window > 0 && window < g.FullPagesInterval {
			src.Gather = window
		}
		s.FullPages = src
	}
	closeFn := func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		// Nothing to do about a failed close on the way out: the server drops the session.
		_ = pg.Close(ctx)
	}
	return s, closeFn
}
