// Package postgres reads what PostgreSQL says about its WAL: version, settings, WAL and
// checkpoint statistics, WAL wait events and the WAL directory, over one connection.
//
// A superuser is not needed. The advisor's role needs pg_monitor:
//
//	CREATE ROLE "pgwal-advisor" LOGIN;
//	GRANT pg_monitor TO "pgwal-advisor";
//
// pg_monitor brings pg_read_all_settings (data_directory, hence the WAL directory) and
// pg_read_all_stats (the wait events of other roles' sessions). Without it the collector still
// collects, and its Notes say what it could not see.
//
// Session is the connection both the collector and apply's PostgreSQL actuator use: one set of
// rules for connecting, timeouts, redialing a lost connection and errors that never show the
// DSN's password.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// DefaultQueryTimeout bounds each query and each connection attempt when Options leave it 0.
const DefaultQueryTimeout = 5 * time.Second

// applicationName is what pg_stat_activity shows for the advisor's session, unless the DSN
// (or PGAPPNAME) names it otherwise.
const applicationName = "pgwal-advisor"

// Options configure a Collector.
type Options struct {
	// QueryTimeout bounds every query and every connection attempt, so that a hung server never
	// hangs the collector; 0 means DefaultQueryTimeout.
	QueryTimeout time.Duration
	// WALDir, when set, is the WAL directory instead of data_directory/pg_wal: for roles that
	// may not read data_directory, and for an advisor that sees the server's files under another
	// path (a container).
	WALDir string
	// ProcFS is where /proc is (--path.procfs; "" means /proc): the postmaster's parent tells
	// which HA manager runs the server.
	ProcFS string
	// Logger is scoped with collector=postgres; nil logs nothing.
	Logger *zap.Logger
}

// Collector reads collector.Postgres from one server. It holds one Session, so one connection,
// opened on first use and opened again after a failure. Its methods are safe for concurrent use:
// Collect and SampleWaitEvents typically run from different goroutines.
type Collector struct {
	walDir       string
	procfs       string
	logger       *zap.Logger
	dsn          string
	queryTimeout time.Duration

	// sem is a mutex that a caller can stop waiting for when its ctx ends. It guards everything
	// below: the session and the wait-event tally are shared by Collect and the sampler.
	sem     chan struct{}
	session *Session
	waits   waitTally
	// primary is the session to a repmgr standby's primary (readPrimary), for primaryDSN.
	primary    *Session
	primaryDSN string
}

// New returns a Collector for dsn, a libpq keyword/value string or a postgres:// URL. An empty
// dsn means libpq's defaults: the PG* environment variables and ~/.pgpass, as with psql. New does
// not connect; the first Collect or SampleWaitEvents does.
func New(dsn string, opts Options) *Collector {
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	logger = logger.With(zap.String("collector", collector.PartPostgres))
	procfs := opts.ProcFS
	if procfs == "" {
		procfs = "/proc"
	}
	return &Collector{
		walDir:       opts.WALDir,
		procfs:       procfs,
		logger:       logger,
		dsn:          dsn,
		queryTimeout: opts.QueryTimeout,
		sem:          make(chan struct{}, 1),
		session: NewSession(dsn, SessionOptions{
			QueryTimeout:    opts.QueryTimeout,
			ApplicationName: applicationName,
			// to_jsonb prints timestamps with the session's offset; UTC keeps the parser's input
			// uniform.
			Params: map[string]string{"timezone": "UTC"},
			Logger: logger,
		}),
	}
}

func (c *Collector) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Collector) release() { <-c.sem }

// Collect reads one collector.Postgres. It returns an error only when nothing could be read
// (no connection, or the server does not answer); a part that fails (a view the role may not
// read, say) becomes a Note and the rest is still returned. The wait events are those sampled
// by SampleWaitEvents since the previous Collect.
func (c *Collector) Collect(ctx context.Context) (*collector.Postgres, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, fmt.Errorf("collect from PostgreSQL: %w", err)
	}
	defer c.release()

	pg := &collector.Postgres{}
	if err := c.readStatus(ctx, pg); err != nil {
		return nil, err
	}
	server := c.session.Server()
	v := server.VersionNum
	pg.VersionNum, pg.Version, pg.SystemIdentifier = v, server.Version, server.SystemIdentifier

	settingsOK := c.readSettings(ctx, pg, v)
	c.readHAManager(ctx, pg)
	c.readPrimary(ctx, pg)
	c.readWALStats(ctx, pg, v)
	c.readCheckpoints(ctx, pg, v)
	// A standby inserts no WAL (pg_current_wal_insert_lsn() raises an error there).
	if !pg.InRecovery {
		c.readInsertLSN(ctx, pg)
	}
	c.takeWaitEvents(pg, v, server)
	c.resolveWALDir(pg, settingsOK, server.User)
	return pg, nil
}

// readSettings reads pg_settings' rows of the setting table into pg; it reports whether it
// could, which decides where the WAL directory comes from.
func (c *Collector) readSettings(ctx context.Context, pg *collector.Postgres, v int) bool {
	return c.step(ctx, pg, "read pg_settings", func(ctx context.Context, conn *pgx.Conn) error {
		settings, err := querySettings(ctx, conn, settingsQuery(v))
		if err != nil {
			return err
		}
		pg.Settings = settings
		pg.DataDir = pg.Settings[collector.DataDirectory].Value
		return nil
	})
}

// readHAManager finds the HA manager that runs the server (DetectHAManager).
func (c *Collector) readHAManager(ctx context.Context, pg *collector.Postgres) {
	c.step(ctx, pg, "find the HA manager", func(ctx context.Context, conn *pgx.Conn) error {
		m, err := DetectHAManager(ctx, conn, c.procfs, pg.DataDir)
		if err == nil {
			pg.HAManager = &m
		}
		return err
	})
}

// readWALStats reads the cumulative WAL counters, or notes that the server is too old to have
// them.
func (c *Collector) readWALStats(ctx context.Context, pg *collector.Postgres, v int) {
	q := walStatsQuery(v)
	if q == "" {
		pg.Notes = append(pg.Notes, fmt.Sprintf(
			"WAL statistics need PostgreSQL 14 or later (pg_stat_wal); this server is %s, so only its settings are collected", pg.Version))
		return
	}
	c.step(ctx, pg, "read pg_stat_wal", func(ctx context.Context, conn *pgx.Conn) error {
		var walJSON, ioJSON []byte
		if err := conn.QueryRow(ctx, q).Scan(&walJSON, &ioJSON); err != nil {
			return err
		}
		w, err := parseWAL(v, walJSON, ioJSON)
		pg.WAL = w
		return err
	})
}

// readCheckpoints reads the checkpoint counters from the view of the server's version.
func (c *Collector) readCheckpoints(ctx context.Context, pg *collector.Postgres, v int) {
	q := checkpointQuery(v)
	if q == "" {
		return
	}
	view := "pg_stat_bgwriter"
	if v >= checkpointerVersion {
		view = "pg_stat_checkpointer"
	}
	c.step(ctx, pg, "read "+view, func(ctx context.Context, conn *pgx.Conn) error {
		var row []byte
		if err := conn.QueryRow(ctx, q).Scan(&row); err != nil {
			return err
		}
		cp, err := parseCheckpoints(v, row)
		pg.Checkpointer = cp
		return err
	})
}

// readInsertLSN reads where the server inserts WAL now (a primary only).
func (c *Collector) readInsertLSN(ctx context.Context, pg *collector.Postgres) {
	c.step(ctx, pg, "read pg_current_wal_insert_lsn()", func(ctx context.Context, conn *pgx.Conn) error {
		var text string
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text").Scan(&text); err != nil {
			return err
		}
		lsn, err := parseLSN(text)
		if err == nil {
			pg.WALInsertLSN = &lsn
		}
		return err
	})
}

// takeWaitEvents moves the wait events sampled since the last Collect into pg, with notes on
// failed samples and on a role that sees only its own sessions.
func (c *Collector) takeWaitEvents(pg *collector.Postgres, v int, server ServerInfo) {
	waits, failures, lastErr := c.waits.take()
	pg.WaitEvents = waits
	if failures > 0 {
		pg.Notes = append(pg.Notes, fmt.Sprintf("%d wait-event samples failed since the last snapshot; the last: %s", failures, lastErr))
	}
	if waitEventsQuery(v) != "" && !server.ReadAllStats {
		pg.Notes = append(pg.Notes, fmt.Sprintf(
			"role %s sees only its own sessions in pg_stat_activity, so wait events miss the application's: GRANT pg_monitor TO %s",
			server.User, QuoteIdent(server.User)))
	}
}

// readStatus (re)connects if needed and reads what changes when the server restarts or is
// promoted. It is the first query of a Collect, so it also finds a connection that died since
// the last one (a restart, a network blip), and the session retries once on a new one.
func (c *Collector) readStatus(ctx context.Context, pg *collector.Postgres) error {
	err := c.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_catalog.pg_postmaster_start_time(), pg_catalog.pg_is_in_recovery()").Scan(&pg.StartTime, &pg.InRecovery)
	})
	if err != nil {
		return c.opErr("read server status", err)
	}
	return nil
}

// step runs one part of a Collect under the query timeout, on the connection readStatus used:
// a new one could be to another server (a failover in between), whose answers would not match
// the version and status already read. A failure becomes a Note, since the rest of the snapshot
// is still worth having; step reports whether the part succeeded.
func (c *Collector) step(ctx context.Context, pg *collector.Postgres, what string, fn func(context.Context, *pgx.Conn) error) bool {
	err := c.session.queryOpen(ctx, fn)
	switch {
	case errors.Is(err, errNotOpen):
		pg.Notes = append(pg.Notes, what+": skipped: "+err.Error())
		return false
	case err != nil:
		pg.Notes = append(pg.Notes, c.opErr(what, err).Error())
		return false
	}
	return true
}

// SampleWaitEvents reads pg_stat_activity once and adds the WAL wait events of the active client
// backends to the tally that the next Collect returns. It is meant to run more often than
// Collect (every second): a wait lasts milliseconds, so only frequent samples see it. A failed
// sample is returned and also counted in the next Collect's Notes.
func (c *Collector) SampleWaitEvents(ctx context.Context) error {
	if err := c.acquire(ctx); err != nil {
		return fmt.Errorf("sample wait events: %w", err)
	}
	defer c.release()
	err := c.sampleWaitEvents(ctx)
	if err != nil {
		c.waits.fail(err)
	}
	return err
}

func (c *Collector) sampleWaitEvents(ctx context.Context) error {
	var counts []waitCount
	err := c.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		q := waitEventsQuery(c.session.Server().VersionNum)
		if q == "" {
			return nil
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return err
		}
		counts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (waitCount, error) {
			var eventType, event *string
			var w waitCount
			err := row.Scan(&eventType, &event, &w.n)
			if eventType != nil && event != nil {
				w.eventType, w.event = *eventType, *event
			}
			return w, err
		})
		return err
	})
	if err != nil {
		return c.opErr("sample pg_stat_activity", err)
	}
	c.waits.add(counts)
	return nil
}

// Close closes the connection, if one is open.
func (c *Collector) Close(ctx context.Context) error {
	if err := c.acquire(ctx); err != nil {
		return fmt.Errorf("close the connection to PostgreSQL: %w", err)
	}
	defer c.release()
	c.closePrimary(ctx)
	if err := c.session.Close(ctx); err != nil {
		return c.opErr("close the connection to PostgreSQL", err)
	}
	return nil
}

// opErr describes a failed query with what to do about it.
func (c *Collector) opErr(op string, err error) error {
	return c.session.Err(op, err, c.session.Hint(err))
}

// resolveWALDir sets WALDir: --wal-dir when given, else data_directory/pg_wal with symlinks
// resolved (initdb -X and many installations make pg_wal a symlink to another file system, and
// the storage collector must look at that one). When it cannot, a Note says what to do.
func (c *Collector) resolveWALDir(pg *collector.Postgres, settingsOK bool, user string) {
	problem := func(s string) {
		pg.WALDirProblem = s
		pg.Notes = append(pg.Notes, s)
	}
	if c.walDir != "" {
		dir, err := filepath.EvalSymlinks(c.walDir)
		if err != nil {
			pg.WALDir = c.walDir
			pg.Notes = append(pg.Notes, fmt.Sprintf("cannot resolve --wal-dir: %v", err))
			if errors.Is(err, fs.ErrPermission) {
				// Not even stat works: the storage collector could not read it either.
				pg.WALDir = ""
				problem(searchHint(c.walDir, err))
			}
			return
		}
		pg.WALDir = dir
		return
	}
	switch {
	case !settingsOK:
		problem("the WAL directory is unknown because the settings could not be read: set --wal-dir")
		return
	case pg.DataDir == "":
		problem(fmt.Sprintf(
			"data_directory is hidden from role %s, so the WAL directory is unknown: GRANT pg_monitor TO %s (it includes pg_read_all_settings), or set --wal-dir",
			user, QuoteIdent(user)))
		return
	}
	sub := "pg_wal"
	if pg.VersionNum < 100000 {
		// Renamed from pg_xlog in 10.
		sub = "pg_xlog"
	}
	p := filepath.Join(pg.DataDir, sub)
	dir, err := filepath.EvalSymlinks(p)
	switch {
	case errors.Is(err, fs.ErrPermission):
		problem(searchHint(p, err))
		return
	case err != nil:
		problem(fmt.Sprintf(
			"cannot resolve the WAL directory: %v: run the advisor on the database host (the server's files must be visible to it), or set --wal-dir", err))
		return
	}
	pg.WALDir = dir
}

// searchHint says why the advisor's user may not search the WAL directory p: the modes of the
// directories above it (a data directory is 0700 by default: initdb, Debian's and Ubuntu's
// packages), never the role's privileges, and the two ways to grant it.
func searchHint(p string, err error) string {
	blocked := ""
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		if st, serr := os.Stat(d); serr == nil && st.Mode().Perm()&0o001 == 0 {
			blocked = fmt.Sprintf("%s is mode %04o", d, st.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	if blocked == "" {
		blocked = "a directory above it is not searchable by this user"
	}
	return fmt.Sprintf("the WAL directory %s cannot be searched by uid %d (%v): %s. Grant search, not the role: run the advisor with CAP_DAC_READ_SEARCH "+
		"(the package's unit does: AmbientCapabilities=CAP_DAC_READ_SEARCH), or give the data directory group access "+
		"(chmod 0750, or initdb --allow-group-access) and the advisor's user the server's group; docs/http.md, \"The WAL directory\"",
		p, os.Getuid(), errors.Unwrap(err), blocked)
}
