package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// SessionOptions configure a Session.
type SessionOptions struct {
	// QueryTimeout bounds every query and every connection attempt, so that a hung server never
	// hangs the caller; 0 means DefaultQueryTimeout.
	QueryTimeout time.Duration
	// ApplicationName is what pg_stat_activity shows, unless the DSN (or PGAPPNAME) names it.
	ApplicationName string
	// Params are run-time parameters set on every connection (timezone, say); the DSN's win
	// only where these leave a name out.
	Params map[string]string
	// Purpose ends the connect step's text ("connect to PostgreSQL at ... to apply settings"),
	// so that an operator can tell which of the advisor's connections failed; "" adds nothing.
	Purpose string
	// Logger logs connects and lost connections; nil logs nothing.
	Logger *zap.Logger
}

// ServerInfo is what a connection learns once, when it is opened.
type ServerInfo struct {
	VersionNum int
	Version    string
	User       string
	Superuser  bool
	// Membership (direct or through pg_monitor) of the roles that unhide data_directory and
	// other roles' activity; superusers have both.
	ReadAllSettings bool
	ReadAllStats    bool
	// SystemIdentifier is pg_control_system()'s system_identifier: initdb draws it, and a
	// physical standby shares its primary's. DataDirectory is data_directory, "" where the role
	// may not see it (without pg_read_all_settings). Together they tell one server from another.
	SystemIdentifier string
	DataDirectory    string
}

// Session is one connection to one PostgreSQL server, opened on first use and opened again
// after a failure, with one set of rules for the collector and for apply: every query and the
// connect run under the query timeout; a connection that a failure leaves dead or suspect is
// dropped; errors are OpErrors that never carry the DSN's password.
//
// A Session is not safe for concurrent use: its owner serializes the calls (the collector with
// a semaphore its callers can stop waiting for, apply with a mutex).
type Session struct {
	dsn    string
	opts   SessionOptions
	logger *zap.Logger

	conn    *pgx.Conn
	server  ServerInfo
	secrets []string
}

// NewSession returns a Session for dsn, a libpq keyword/value string or a postgres:// URL. An
// empty dsn means libpq's defaults: the PG* environment variables and ~/.pgpass, as with psql.
// It does not connect until first used.
func NewSession(dsn string, opts SessionOptions) *Session {
	if opts.QueryTimeout <= 0 {
		opts.QueryTimeout = DefaultQueryTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	// Until a connect parses the DSN, an error can only quote what it holds as written.
	return &Session{dsn: dsn, opts: opts, logger: logger, secrets: DSNSecrets(dsn)}
}

// Server is what the current connection learned when it was opened; the zero value when no
// connection has been opened yet. It stays after the connection is lost, until the next one.
func (s *Session) Server() ServerInfo { return s.server }

// Open reports whether a connection is open (as far as the client knows: a server that went
// away is only noticed by the next query).
func (s *Session) Open() bool { return s.conn != nil && !s.conn.IsClosed() }

// Connect opens the connection unless one is open: for a caller that needs Server before its
// first query.
func (s *Session) Connect(ctx context.Context) error {
	_, err := s.connect(ctx)
	return err
}

// Query runs fn on the connection under the query timeout, connecting first if none is open.
// When a connection that was already open turns out to be dead (a restart, a terminated
// backend, a network blip since the last use), it is dropped and fn runs once more on a new
// one; so fn must be safe to run twice: a read, or a statement whose repetition changes nothing
// (ALTER SYSTEM SET x = v, pg_reload_conf()). A timeout is not retried: a server that does not
// answer in time is not helped by a second wait. A failed connect returns an *OpError; fn's
// error is returned as it is, for the caller to name its step (Err).
func (s *Session) Query(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	return s.query(ctx, true, fn)
}

// queryOpen runs fn once on the open connection, and never connects: for the steps of a Collect
// that must see the server its first step saw. It returns errNotOpen when no connection is open.
func (s *Session) queryOpen(ctx context.Context, fn func(context.Context, *pgx.Conn) error) error {
	if !s.Open() {
		return errNotOpen
	}
	return s.query(ctx, false, fn)
}

var errNotOpen = errors.New("the connection to PostgreSQL was lost earlier in this collection")

func (s *Session) query(ctx context.Context, redial bool, fn func(context.Context, *pgx.Conn) error) error {
	for attempt := 0; ; attempt++ {
		fresh, err := s.connect(ctx)
		if err != nil {
			return err
		}
		qctx, cancel := context.WithTimeout(ctx, s.opts.QueryTimeout)
		err = fn(qctx, s.conn)
		cancel()
		if err == nil {
			return nil
		}
		broken := s.dropIfBroken(err)
		// A new connection that fails is not helped by another, unless the server saw nothing
		// of the query (pgconn.SafeToRetry: it failed before anything was sent).
		retry := redial && attempt == 0 && broken && !isTimeout(err) && ctx.Err() == nil &&
			(!fresh || pgconn.SafeToRetry(err))
		if !retry {
			return err
		}
	}
}

// Err is the failed step op with its cause and hint, its text free of the DSN's password. A
// failed connect is returned as it is: it already names its own step, and wrapping it again
// would name two.
func (s *Session) Err(op string, err error, hint string) error {
	var opErr *OpError
	if errors.As(err, &opErr) && opErr.connect {
		return err
	}
	return &OpError{Op: op, Err: err, Hint: hint, Secrets: s.secrets}
}

// Hint says what an operator can do about err, for the role this session connects as.
func (s *Session) Hint(err error) string {
	return hintFor(err, s.server.User, s.opts.QueryTimeout)
}

// Close closes the connection, if one is open.
func (s *Session) Close(ctx context.Context) error {
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close(ctx)
	s.conn = nil
	return err
}

// connect opens the connection unless one is open, and reports whether it opened one.
func (s *Session) connect(ctx context.Context) (bool, error) {
	if s.Open() {
		return false, nil
	}
	s.conn = nil
	s.secrets = DSNSecrets(s.dsn)
	cfg, err := pgx.ParseConfig(s.dsn)
	if err != nil {
		return false, &OpError{Op: "parse --dsn", Err: err, Hint: "use libpq keyword=value form or a postgres:// URL", Secrets: s.secrets, connect: true}
	}
	// The password may also come from PGPASSWORD or ~/.pgpass.
	s.secrets = append(s.secrets, cfg.Password)
	if _, ok := cfg.RuntimeParams["application_name"]; !ok && s.opts.ApplicationName != "" {
		cfg.RuntimeParams["application_name"] = s.opts.ApplicationName
	}
	for k, v := range s.opts.Params {
		cfg.RuntimeParams[k] = v
	}
	// The advisor's own parameters win over the DSN's, the role's and the database's: a
	// client's startup parameter outranks ALTER ROLE and ALTER DATABASE ... SET.
	for k, v := range advisorParams(s.opts.QueryTimeout) {
		cfg.RuntimeParams[k] = v
	}
	timeout := s.opts.QueryTimeout
	if cfg.ConnectTimeout <= 0 || cfg.ConnectTimeout > timeout {
		cfg.ConnectTimeout = timeout
	}
	op := fmt.Sprintf("connect to PostgreSQL at host=%s port=%d user=%s", cfg.Host, cfg.Port, cfg.User)
	if cfg.Database != "" {
		op += " dbname=" + cfg.Database
	}
	if s.opts.Purpose != "" {
		op += " " + s.opts.Purpose
	}

	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := s.dial(cctx, cfg)
	if err != nil {
		hint := hintFor(err, cfg.User, timeout)
		if hint == "" {
			hint = "check --dsn"
		}
		return false, &OpError{Op: op, Err: err, Hint: hint, Secrets: s.secrets, connect: true}
	}
	info, err := readServerInfo(cctx, conn)
	if err != nil {
		closeQuietly(conn)
		return false, &OpError{Op: op + ": read the server version and role", Err: err, Hint: hintFor(err, cfg.User, timeout), Secrets: s.secrets, connect: true}
	}
	s.conn, s.server = conn, info
	s.logger.Info("connected to postgresql",
		zap.String("host", cfg.Host), zap.Uint16("port", cfg.Port), zap.String("user", info.User),
		zap.String("version", info.Version), zap.Bool("superuser", info.Superuser),
		zap.Bool("pg_read_all_settings", info.ReadAllSettings), zap.Bool("pg_read_all_stats", info.ReadAllStats),
		zap.String("system_identifier", info.SystemIdentifier), zap.String("data_directory", info.DataDirectory))
	return true, nil
}

// SearchPath is the search_path of every connection the advisor opens: pg_catalog alone, and
// pg_temp named last, where it hides nothing (PostgreSQL docs, "Writing SECURITY DEFINER
// Functions Safely"). Left to the server, the search_path is what the role, the database's owner
// or a schema named like the role makes it, and a function there with a better-matching
// signature than pg_catalog's (public.to_jsonb(pg_stat_bgwriter)) would run as the advisor's
// role, often a superuser (docs/security.md). Every query also names pg_catalog's objects and
// operators with their schema (TestSQLNamesCatalogObjects), which holds where a pooler drops
// startup parameters.
const SearchPath = "pg_catalog, pg_temp"

// idleSessionTimeout is the one parameter advisorParams sets that older servers lack.
const idleSessionTimeout = "idle_session_timeout"

// advisorParams are the session parameters the advisor's queries rely on, whatever the role or
// database sets: the search_path above; a statement and lock timeout no longer than the
// client's query timeout (a role's statement_timeout of 1ms would fail every query, one of an
// hour would hold locks after the client gave up); and no idle timeouts, which would end the
// connection between two samples and make the daemon reconnect every second.
func advisorParams(queryTimeout time.Duration) map[string]string {
	ms := strconv.FormatInt(max(queryTimeout.Milliseconds(), 1), 10)
	return map[string]string{
		"search_path":                         SearchPath,
		"statement_timeout":                   ms,
		"lock_timeout":                        ms,
		"idle_in_transaction_session_timeout": "0",
		idleSessionTimeout:                    "0",
	}
}

// dial connects with the advisor's parameters, leaving out what the other end refuses: a server
// before PostgreSQL 14 has no idle_session_timeout, and a connection pooler (PgBouncer) refuses
// every startup parameter it does not track. Behind a pooler the queries still name pg_catalog
// (SearchPath), and the client's deadline still bounds them.
func (s *Session) dial(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	// Without a statement cache: a transaction pooler hands each query to whichever server
	// connection is free, where a prepared statement of another client's may or may not exist
	// ("prepared statement stmtcache_... already exists"). The advisor sends a few queries a
	// second; preparing them saves nothing it would notice.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if isUnknownParam(err, idleSessionTimeout) {
		delete(cfg.RuntimeParams, idleSessionTimeout)
		conn, err = pgx.ConnectConfig(ctx, cfg)
	}
	if isPoolerRefusal(err) {
		for k := range advisorParams(0) {
			delete(cfg.RuntimeParams, k)
		}
		if conn, err = pgx.ConnectConfig(ctx, cfg); err == nil {
			s.logger.Warn("the connection pooler refuses the advisor's session parameters; connected without them",
				zap.String("left_out", "search_path, statement_timeout, lock_timeout, idle timeouts"),
				zap.String("hint", "the advisor reads one server's figures: point --dsn at PostgreSQL itself, not a pooler"))
		}
	}
	return conn, err
}

// isPoolerRefusal reports whether a connect failed because a pooler does not take a startup
// parameter (PgBouncer: "unsupported startup parameter: search_path", 08P01).
func isPoolerRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "08P01" && strings.Contains(pgErr.Message, "unsupported startup parameter")
}

// isUnknownParam reports whether a connect failed because the server does not know the
// run-time parameter name (42704, "unrecognized configuration parameter").
func isUnknownParam(err error, name string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704" && strings.Contains(pgErr.Message, `"`+name+`"`)
}

// readServerInfo reads what stays fixed for the life of a connection.
func readServerInfo(ctx context.Context, conn *pgx.Conn) (ServerInfo, error) {
	var s ServerInfo
	err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4, pg_catalog.current_setting('server_version'),
		current_user, (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user)`).
		Scan(&s.VersionNum, &s.Version, &s.User, &s.Superuser)
	if err != nil {
		return s, err
	}
	if s.VersionNum >= 100000 {
		// pg_has_role is true for superusers too. The roles exist from 10 on.
		err = conn.QueryRow(ctx, "SELECT pg_catalog.pg_has_role('pg_read_all_settings', 'USAGE'), pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE')").
			Scan(&s.ReadAllSettings, &s.ReadAllStats)
	} else {
		s.ReadAllSettings, s.ReadAllStats = s.Superuser, s.Superuser
	}
	if err != nil {
		return s, err
	}
	// pg_control_system() is executable by every role (9.6 and later).
	err = conn.QueryRow(ctx, "SELECT system_identifier::pg_catalog.text FROM pg_catalog.pg_control_system()").Scan(&s.SystemIdentifier)
	if err == nil && s.ReadAllSettings {
		err = conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('data_directory')").Scan(&s.DataDirectory)
	}
	return s, err
}

// dropIfBroken closes the connection after a failure that leaves it unusable or suspect, so
// that the next call opens a new one, and reports whether it did. A query cut short by its
// deadline may leave the protocol mid-message: a new connection is cheaper than finding out.
func (s *Session) dropIfBroken(err error) bool {
	if s.conn == nil {
		return true
	}
	if !s.conn.IsClosed() && !isTimeout(err) && !errors.Is(err, context.Canceled) && !pgconn.SafeToRetry(err) {
		return false
	}
	closeQuietly(s.conn)
	s.conn = nil
	s.logger.Warn("connection to postgresql lost", zap.String("error", redact(err.Error(), s.secrets)))
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
