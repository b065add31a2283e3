// Package postgres reads what PostgreSQL says about its WAL: version, settings, WAL and
// checkpoint statistics, WAL wait events and the WAL directory, over one connection.
//
// A superuser is not needed. The advisor's role needs pg_monitor:
//
//	CREATE ROLE pgwal_advisor LOGIN;
//	GRANT pg_monitor TO pgwal_advisor;
//
// pg_monitor brings pg_read_all_settings (data_directory, hence the WAL directory) and
// pg_read_all_stats (the wait events of other roles' sessions). Without it the collector still
// collects, and its Notes say what it could not see.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// Logger is scoped with collector=postgres; nil logs nothing.
	Logger *zap.Logger
}

// Collector reads collector.Postgres from one server. It holds one connection, opened on first
// use and opened again after a failure. Its methods are safe for concurrent use: Collect and
// SampleWaitEvents typically run from different goroutines.
type Collector struct {
	dsn     string
	timeout time.Duration
	walDir  string
	logger  *zap.Logger

	// sem is a mutex that a caller can stop waiting for when its ctx ends. It guards everything
	// below: the connection and the wait-event tally are shared by Collect and the sampler.
	sem     chan struct{}
	conn    *pgx.Conn
	server  serverInfo
	secrets []string
	waits   waitTally
}

// serverInfo is what a connection learns once, when it is opened.
type serverInfo struct {
	versionNum int
	version    string
	user       string
	// Membership (direct or through pg_monitor) of the roles that unhide data_directory and
	// other roles' activity; superusers have both.
	readAllSettings bool
	readAllStats    bool
}

// New returns a Collector for dsn, a libpq keyword/value string or a postgres:// URL. An empty
// dsn means libpq's defaults: the PG* environment variables and ~/.pgpass, as with psql. New does
// not connect; the first Collect or SampleWaitEvents does.
func New(dsn string, opts Options) *Collector {
	if opts.QueryTimeout <= 0 {
		opts.QueryTimeout = DefaultQueryTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Collector{
		dsn:     dsn,
		timeout: opts.QueryTimeout,
		walDir:  opts.WALDir,
		logger:  logger.With(zap.String("collector", collector.PartPostgres)),
		sem:     make(chan struct{}, 1),
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
	v := c.server.versionNum
	pg.VersionNum, pg.Version = v, c.server.version

	settingsOK := c.step(ctx, pg, "read pg_settings", func(ctx context.Context) error {
		rows, err := c.conn.Query(ctx, settingsQuery(v), collector.SettingNames())
		if err != nil {
			return err
		}
		list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (settingRow, error) {
			var r settingRow
			err := row.Scan(&r.Name, &r.Setting, &r.Unit, &r.Source, &r.Context, &r.PendingRestart, &r.EnumVals, &r.Show)
			return r, err
		})
		if err != nil {
			return err
		}
		pg.Settings = settingsFromRows(list)
		pg.DataDir = pg.Settings[collector.DataDirectory].Value
		return nil
	})

	if q := walStatsQuery(v); q == "" {
		pg.Notes = append(pg.Notes, fmt.Sprintf(
			"WAL statistics need PostgreSQL 14 or later (pg_stat_wal); this server is %s, so only its settings are collected", pg.Version))
	} else {
		c.step(ctx, pg, "read pg_stat_wal", func(ctx context.Context) error {
			var walJSON, ioJSON []byte
			if err := c.conn.QueryRow(ctx, q).Scan(&walJSON, &ioJSON); err != nil {
				return err
			}
			w, err := parseWAL(v, walJSON, ioJSON)
			pg.WAL = w
			return err
		})
	}
	if q := checkpointQuery(v); q != "" {
		view := "pg_stat_bgwriter"
		if v >= checkpointerVersion {
			view = "pg_stat_checkpointer"
		}
		c.step(ctx, pg, "read "+view, func(ctx context.Context) error {
			var row []byte
			if err := c.conn.QueryRow(ctx, q).Scan(&row); err != nil {
				return err
			}
			cp, err := parseCheckpoints(v, row)
			pg.Checkpointer = cp
			return err
		})
	}

	// A standby inserts no WAL (pg_current_wal_insert_lsn() raises an error there).
	if !pg.InRecovery {
		c.step(ctx, pg, "read pg_current_wal_insert_lsn()", func(ctx context.Context) error {
			var text string
			if err := c.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&text); err != nil {
				return err
			}
			lsn, err := parseLSN(text)
			if err == nil {
				pg.WALInsertLSN = &lsn
			}
			return err
		})
	}

	waits, failures, lastErr := c.waits.take()
	pg.WaitEvents = waits
	if failures > 0 {
		pg.Notes = append(pg.Notes, fmt.Sprintf("%d wait-event samples failed since the last snapshot; the last: %s", failures, lastErr))
	}
	if waitEventsQuery(v) != "" && !c.server.readAllStats {
		pg.Notes = append(pg.Notes, fmt.Sprintf(
			"role %s sees only its own sessions in pg_stat_activity, so wait events miss the application's: GRANT pg_monitor TO %s",
			c.server.user, QuoteIdent(c.server.user)))
	}

	c.resolveWALDir(pg, settingsOK)
	return pg, nil
}

// readStatus (re)connects if needed and reads what changes when the server restarts or is
// promoted. It is the first query of a Collect, so it also finds a connection that died since
// the last one (a restart, a network blip) and retries once on a new one.
func (c *Collector) readStatus(ctx context.Context, pg *collector.Postgres) error {
	for {
		fresh, err := c.ensureConn(ctx)
		if err != nil {
			return err
		}
		qctx, cancel := context.WithTimeout(ctx, c.timeout)
		err = c.conn.QueryRow(qctx, "SELECT pg_postmaster_start_time(), pg_is_in_recovery()").Scan(&pg.StartTime, &pg.InRecovery)
		cancel()
		if err == nil {
			return nil
		}
		broken := c.dropIfBroken(err)
		// A new connection that fails, or a server that does not answer in time, is not helped by
		// another attempt.
		if fresh || !broken || isTimeout(err) {
			return c.opErr("read server status", err)
		}
	}
}

// step runs one part of a Collect under the query timeout. A failure becomes a Note, since the
// rest of the snapshot is still worth having; step reports whether the part succeeded.
func (c *Collector) step(ctx context.Context, pg *collector.Postgres, what string, fn func(context.Context) error) bool {
	if c.conn == nil {
		pg.Notes = append(pg.Notes, what+": skipped: the connection to PostgreSQL was lost earlier in this collection")
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := fn(qctx); err != nil {
		c.dropIfBroken(err)
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
	if _, err := c.ensureConn(ctx); err != nil {
		return err
	}
	q := waitEventsQuery(c.server.versionNum)
	if q == "" {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	rows, err := c.conn.Query(qctx, q)
	if err == nil {
		var counts []waitCount
		counts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (waitCount, error) {
			var eventType, event *string
			var w waitCount
			err := row.Scan(&eventType, &event, &w.n)
			if eventType != nil && event != nil {
				w.eventType, w.event = *eventType, *event
			}
			return w, err
		})
		if err == nil {
			c.waits.add(counts)
			return nil
		}
	}
	c.dropIfBroken(err)
	return c.opErr("sample pg_stat_activity", err)
}

// Close closes the connection, if one is open.
func (c *Collector) Close(ctx context.Context) error {
	if err := c.acquire(ctx); err != nil {
		return fmt.Errorf("close the connection to PostgreSQL: %w", err)
	}
	defer c.release()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close(ctx)
	c.conn = nil
	if err != nil {
		return c.opErr("close the connection to PostgreSQL", err)
	}
	return nil
}

// ensureConn opens the connection unless one is open, and reports whether it opened one.
func (c *Collector) ensureConn(ctx context.Context) (bool, error) {
	if c.conn != nil && !c.conn.IsClosed() {
		return false, nil
	}
	c.conn = nil
	c.secrets = DSNSecrets(c.dsn)
	cfg, err := pgx.ParseConfig(c.dsn)
	if err != nil {
		return false, &OpError{Op: "parse --dsn", Err: err, Hint: "use libpq keyword=value form or a postgres:// URL", Secrets: c.secrets}
	}
	// The password may also come from PGPASSWORD or ~/.pgpass.
	c.secrets = append(c.secrets, cfg.Password)
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = applicationName
	}
	// to_jsonb prints timestamps with the session's offset; UTC keeps the parser's input uniform.
	cfg.RuntimeParams["timezone"] = "UTC"
	if cfg.ConnectTimeout <= 0 || cfg.ConnectTimeout > c.timeout {
		cfg.ConnectTimeout = c.timeout
	}
	op := fmt.Sprintf("connect to PostgreSQL at host=%s port=%d user=%s", cfg.Host, cfg.Port, cfg.User)
	if cfg.Database != "" {
		op += " dbname=" + cfg.Database
	}

	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		hint := hintFor(err, cfg.User, c.timeout)
		if hint == "" {
			hint = "check --dsn"
		}
		return false, &OpError{Op: op, Err: err, Hint: hint, Secrets: c.secrets}
	}
	info, err := readServerInfo(cctx, conn)
	if err != nil {
		closeQuietly(conn)
		return false, &OpError{Op: op + ": read the server version", Err: err, Hint: hintFor(err, cfg.User, c.timeout), Secrets: c.secrets}
	}
	c.conn, c.server = conn, info
	c.logger.Info("connected to postgresql",
		zap.String("host", cfg.Host), zap.Uint16("port", cfg.Port), zap.String("user", info.user),
		zap.String("version", info.version), zap.Bool("pg_read_all_settings", info.readAllSettings),
		zap.Bool("pg_read_all_stats", info.readAllStats))
	return true, nil
}

// readServerInfo reads what stays fixed for the life of a connection.
func readServerInfo(ctx context.Context, conn *pgx.Conn) (serverInfo, error) {
	var s serverInfo
	err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, current_setting('server_version'), current_user").
		Scan(&s.versionNum, &s.version, &s.user)
	if err != nil {
		return s, err
	}
	if s.versionNum >= 100000 {
		// pg_has_role is true for superusers too. The roles exist from 10 on.
		err = conn.QueryRow(ctx, "SELECT pg_has_role('pg_read_all_settings', 'USAGE'), pg_has_role('pg_read_all_stats', 'USAGE')").
			Scan(&s.readAllSettings, &s.readAllStats)
	} else {
		err = conn.QueryRow(ctx, "SELECT rolsuper, rolsuper FROM pg_roles WHERE rolname = current_user").
			Scan(&s.readAllSettings, &s.readAllStats)
	}
	return s, err
}

// dropIfBroken closes the connection after a failure that leaves it unusable or suspect, so
// that the next call opens a new one, and reports whether it did. A query cut short by its
// deadline may leave the protocol mid-message: a new connection is cheaper than finding out.
func (c *Collector) dropIfBroken(err error) bool {
	if c.conn == nil {
		return true
	}
	if !c.conn.IsClosed() && !isTimeout(err) && !errors.Is(err, context.Canceled) {
		return false
	}
	closeQuietly(c.conn)
	c.conn = nil
	c.logger.Warn("connection to postgresql lost", zap.String("error", redact(err.Error(), c.secrets)))
	return true
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// closeQuietly closes a connection that has already failed; its error adds nothing.
func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// opErr describes a failed query with what to do about it.
func (c *Collector) opErr(op string, err error) error {
	return &OpError{Op: op, Err: err, Hint: hintFor(err, c.server.user, c.timeout), Secrets: c.secrets}
}

// resolveWALDir sets WALDir: --wal-dir when given, else data_directory/pg_wal with symlinks
// resolved (initdb -X and many installations make pg_wal a symlink to another file system, and
// the storage collector must look at that one). When it cannot, a Note says what to do.
func (c *Collector) resolveWALDir(pg *collector.Postgres, settingsOK bool) {
	if c.walDir != "" {
		dir, err := filepath.EvalSymlinks(c.walDir)
		if err != nil {
			pg.WALDir = c.walDir
			pg.Notes = append(pg.Notes, fmt.Sprintf("cannot resolve --wal-dir: %v", err))
			return
		}
		pg.WALDir = dir
		return
	}
	switch {
	case !settingsOK:
		pg.Notes = append(pg.Notes, "the WAL directory is unknown because the settings could not be read: set --wal-dir")
		return
	case pg.DataDir == "":
		pg.Notes = append(pg.Notes, fmt.Sprintf(
			"data_directory is hidden from role %s, so the WAL directory is unknown: GRANT pg_monitor TO %s (it includes pg_read_all_settings), or set --wal-dir",
			c.server.user, QuoteIdent(c.server.user)))
		return
	}
	sub := "pg_wal"
	if pg.VersionNum < 100000 {
		// Renamed from pg_xlog in 10.
		sub = "pg_xlog"
	}
	p := filepath.Join(pg.DataDir, sub)
	dir, err := filepath.EvalSymlinks(p)
	if err != nil {
		pg.Notes = append(pg.Notes, fmt.Sprintf(
			"cannot resolve the WAL directory: %v: run the advisor on the database host as a user that may read the data directory, or set --wal-dir", err))
		return
	}
	pg.WALDir = dir
}
