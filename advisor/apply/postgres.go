package apply

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// PostgresOptions configure a Postgres actuator.
type PostgresOptions struct {
	// QueryTimeout bounds each query and the connection attempt; 0 means
	// postgres.DefaultQueryTimeout.
	QueryTimeout time.Duration
	// ConfirmTimeout bounds the wait for the running value to match after pg_reload_conf();
	// 0 means DefaultConfirmTimeout.
	ConfirmTimeout time.Duration
	// ProcFS is where /proc is ("" means /proc): it tells which HA manager runs the server.
	ProcFS string
	Logger *zap.Logger
}

// Postgres changes PostgreSQL settings the way an operator would: ALTER SYSTEM, then
// pg_reload_conf(), then SHOW until the running value is the new one. A restart-context setting
// (wal_buffers) is written and left pending_restart: the advisor never restarts the server.
//
// The role needs superuser, or on PostgreSQL 15 and later ALTER SYSTEM on each setting and
// EXECUTE on pg_reload_conf() (docs/apply.md); without them Writable says what to grant.
// It holds one connection of its own (a postgres.Session, the collector's rules for connecting,
// timeouts, redialing and errors), opened on first use and again after a failure; its methods
// are safe for concurrent use. Errors never carry the DSN's password.
type Postgres struct {
	opts   PostgresOptions
	logger *zap.Logger

	mu      sync.Mutex
	session *postgres.Session
}

// NewPostgres returns an actuator for dsn (libpq keywords or a URL; empty: the PG* environment).
// It does not connect until first used.
func NewPostgres(dsn string, opts PostgresOptions) *Postgres {
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = DefaultConfirmTimeout
	}
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	logger = logger.With(zap.String("actuator", "postgres"))
	return &Postgres{opts: opts, logger: logger, session: postgres.NewSession(dsn, postgres.SessionOptions{
		QueryTimeout:    opts.QueryTimeout,
		ApplicationName: "pgwal-advisor-apply",
		Purpose:         "to apply settings",
		Logger:          logger,
	})}
}

// Owns reports whether name is a PostgreSQL setting (not a vm.* kernel knob).
func (p *Postgres) Owns(name string) bool { return !strings.HasPrefix(name, "vm.") }

// Close closes the connection, if one is open.
func (p *Postgres) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.session.Close(ctx); err != nil {
		return p.opErr("close the apply connection to PostgreSQL", err, "")
	}
	return nil
}

// Read returns a setting's live value with its source and what postgresql.auto.conf holds.
func (p *Postgres) Read(ctx context.Context, name string) (Value, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.session.Connect(ctx); err != nil {
		return Value{}, err
	}
	return p.read(ctx, name)
}

// Writable returns nil when the role may change name with ALTER SYSTEM and reload the
// configuration, and otherwise what to grant.
func (p *Postgres) Writable(ctx context.Context, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.session.Connect(ctx); err != nil {
		return err
	}
	if err := p.refuseManaged(ctx, name); err != nil {
		return err
	}
	server := p.session.Server()
	if server.VersionNum >= 170000 {
		// Asked before the privileges: allow_alter_system = off refuses a superuser too.
		var allow string
		err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('allow_alter_system')").Scan(&allow)
		})
		if err != nil {
			return p.opErr("read allow_alter_system", err, "")
		}
		if allow == "off" {
			return fmt.Errorf("%w: %s", ErrAlterSystemRefused, allowAlterSystemOffHint)
		}
	}
	if server.Superuser {
		return nil
	}
	role := postgres.QuoteIdent(server.User)
	if server.VersionNum < 150000 {
		return fmt.Errorf("role %s may not ALTER SYSTEM %s: before PostgreSQL 15 only a superuser can; connect as one in apply mode, or apply the recommendation by hand", role, name)
	}
	var alter, reload bool
	err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_catalog.has_parameter_privilege($1::pg_catalog.text, 'ALTER SYSTEM'), pg_catalog.has_function_privilege('pg_catalog.pg_reload_conf()', 'EXECUTE')", name).Scan(&alter, &reload)
	})
	if err != nil {
		return p.opErr("check the privilege to ALTER SYSTEM "+name, err, "")
	}
	var grants []string
	if !alter {
		grants = append(grants, fmt.Sprintf("GRANT ALTER SYSTEM ON PARAMETER %s TO %s;", name, role))
	}
	if !reload {
		grants = append(grants, fmt.Sprintf("GRANT EXECUTE ON FUNCTION pg_reload_conf() TO %s;", role))
	}
	if len(grants) > 0 {
		return fmt.Errorf("role %s may not change %s: as a superuser, %s", role, name, strings.Join(grants, " "))
	}
	return nil
}

// SegmentBytes returns wal_segment_size in bytes.
func (p *Postgres) SegmentBytes(ctx context.Context) (int64, error) {
	v, err := p.Read(ctx, "wal_segment_size")
	if err != nil {
		return 0, err
	}
	return collector.ParseMemory(v.Value)
}

// Set writes name = value with ALTER SYSTEM, reloads, and waits until the running value is
// value, or for a restart-context setting until the server reports it pending_restart. On any
// failure after the write, the old configuration is restored before Set returns its error.
func (p *Postgres) Set(ctx context.Context, name, value string) (Value, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.session.Connect(ctx); err != nil {
		return Value{}, err
	}
	if err := p.refuseStandby(ctx); err != nil {
		return Value{}, err
	}
	if err := p.refuseManaged(ctx, name); err != nil {
		return Value{}, err
	}
	if strings.ContainsAny(value, "\\\x00\n") {
		return Value{}, fmt.Errorf("%s=%q: a value with a backslash, NUL or newline is not written", name, value)
	}
	old, err := p.read(ctx, name)
	if err != nil {
		return Value{}, err
	}
	switch old.Source {
	case "command line", "override":
		return Value{}, fmt.Errorf("%s is set on the server's %s (pg_settings.source), which ALTER SYSTEM cannot override: change it there by hand", name, old.Source)
	}
	if old.PendingRestart && old.Context == "postmaster" {
		return Value{}, fmt.Errorf("%s already has a change waiting for a restart of PostgreSQL (pending_restart): restart it or undo that change first", name)
	}
	if err := p.exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", pgx.Identifier{name}.Sanitize(), quoteLiteral(value))); err != nil {
		return Value{}, p.alterErr("ALTER SYSTEM SET "+name, name, err)
	}
	live, err := p.reloadAndWait(ctx, name, func(v Value) bool {
		if old.Context == "postmaster" {
			return sameValue(name, v.Value, value) || v.PendingRestart
		}
		return sameValue(name, v.Value, value)
	})
	if err != nil {
		_, undoErr := p.restore(ctx, name, old)
		if undoErr != nil {
			return live, fmt.Errorf("%w; undoing it failed too, restore %s by hand: %w", err, name, undoErr)
		}
		return live, fmt.Errorf("%w (the old configuration was restored)", err)
	}
	p.logger.Info("setting changed", zap.String("setting", name), zap.String("old", old.Value), zap.String("new", value), zap.Bool("pending_restart", live.PendingRestart))
	return live, nil
}

// Restore puts back the configuration recorded in old: ALTER SYSTEM SET the value
// postgresql.auto.conf held, or ALTER SYSTEM RESET when it held nothing, then a reload. A
// restart-context setting the server already runs with the new value is left pending_restart
// (the returned value says so).
func (p *Postgres) Restore(ctx context.Context, name string, old Value) (Value, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.session.Connect(ctx); err != nil {
		return Value{}, err
	}
	if err := p.refuseStandby(ctx); err != nil {
		return Value{}, err
	}
	return p.restore(ctx, name, old)
}

// ErrStandby is the refusal to change a server in recovery: a standby's settings are its
// operator's decision at failover time, and ALTER SYSTEM there writes the standby's own
// postgresql.auto.conf. Every apply path (apply, the daemon, rollback) reaches the server here.
var ErrStandby = errors.New("the server is a standby (in recovery): its settings are its operator's decision at failover time; apply and roll back on the primary")

// ErrAlterSystemRefused is the server refusing ALTER SYSTEM for every setting: allow_alter_system
// is off (PostgreSQL 17+), or it cannot write its postgresql.auto.conf (owner, mode, an
// immutable flag). No GRANT helps and a retry fails the same way until its operator changes
// that, so the manager backs off instead of spending its daily changes (Manager.backOff).
var ErrAlterSystemRefused = errors.New("the server refuses ALTER SYSTEM")

// refuseManaged refuses ALTER SYSTEM on a server that Patroni, CloudNativePG or Stolon runs:
// there it would be a node-local override that shadows the cluster's configuration and is lost
// at a switchover, or it is refused or has no effect (rules.ManagedCommand). It is the server's
// refusal as a whole (ErrAlterSystemRefused): the settings stay advice, with the manager's
// command. Restore is not refused: taking back an earlier override is what the manager wants.
func (p *Postgres) refuseManaged(ctx context.Context, name string) error {
	var m collector.HAManager
	err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		m, err = postgres.DetectHAManager(ctx, conn, p.procfs(), p.session.Server().DataDirectory)
		return err
	})
	if err != nil {
		return p.opErr("find the HA manager", err, "")
	}
	if cmd := rules.ManagedCommand(&m, name, "VALUE"); cmd != "" {
		route := ""
		if m.Name == collector.ManagerPatroni {
			url := m.RESTURL
			if url == "" {
				url = "URL"
			}
			route = fmt.Sprintf("; or let the advisor change it there: --apply.patroni-url %s with --apply.patroni-user and --apply.patroni-password-file (docs/apply.md, \"Under an HA manager\")", url)
		}
		return fmt.Errorf("%w: %s runs this server (%s): ALTER SYSTEM there is a node-local override that the cluster's configuration does not have and a switchover loses; "+
			"change %s for the whole cluster: %s%s", ErrAlterSystemRefused, m.Name, m.Evidence, name, cmd, route)
	}
	return nil
}

func (p *Postgres) procfs() string {
	if p.opts.ProcFS == "" {
		return "/proc"
	}
	return p.opts.ProcFS
}

func (p *Postgres) refuseStandby(ctx context.Context) error {
	var inRecovery bool
	err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery()").Scan(&inRecovery)
	})
	if err != nil {
		return p.opErr("ask whether the server is in recovery", err, "")
	}
	if inRecovery {
		return ErrStandby
	}
	return nil
}

func (p *Postgres) restore(ctx context.Context, name string, old Value) (Value, error) {
	stmt := "ALTER SYSTEM RESET " + pgx.Identifier{name}.Sanitize()
	if old.AutoConf != nil {
		stmt = fmt.Sprintf("ALTER SYSTEM SET %s = %s", pgx.Identifier{name}.Sanitize(), quoteLiteral(*old.AutoConf))
	}
	if err := p.exec(ctx, stmt); err != nil {
		return Value{}, p.alterErr(stmt, name, err)
	}
	live, err := p.reloadAndWait(ctx, name, func(v Value) bool {
		if old.Context == "postmaster" {
			// Either the server still runs the old value and nothing is pending, or it was
			// restarted with the new one and now waits for another restart.
			return sameValue(name, v.Value, old.Value) && !v.PendingRestart || !sameValue(name, v.Value, old.Value) && v.PendingRestart
		}
		return sameValue(name, v.Value, old.Value)
	})
	if err != nil {
		return live, err
	}
	p.logger.Info("setting restored", zap.String("setting", name), zap.String("value", old.Value), zap.Bool("pending_restart", live.PendingRestart))
	return live, nil
}

// reloadAndWait calls pg_reload_conf() and reads the setting until done says the server took
// the configuration, or the confirm timeout passes.
func (p *Postgres) reloadAndWait(ctx context.Context, name string, done func(Value) bool) (Value, error) {
	// pg_conf_load_time() is when this backend last loaded the configuration: the read that
	// confirms a change waits until it has moved, or a read could see the old configuration.
	var ok bool
	var loaded time.Time
	err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_catalog.pg_conf_load_time(), pg_catalog.pg_reload_conf()").Scan(&loaded, &ok)
	})
	if err != nil {
		return Value{}, p.alterErr("pg_reload_conf()", name, err)
	}
	if !ok {
		return Value{}, errors.New("pg_reload_conf() returned false: the server could not be signalled; check the server log")
	}
	deadline := time.Now().Add(p.opts.ConfirmTimeout)
	for {
		// The reload is asynchronous: the postmaster rereads the files, then signals the
		// backends, this one included, which applies it before its next query.
		var now time.Time
		if err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT pg_catalog.pg_conf_load_time()").Scan(&now)
		}); err != nil {
			return Value{}, p.opErr("read pg_conf_load_time()", err, "")
		}
		v, err := p.read(ctx, name)
		if err != nil {
			return Value{}, err
		}
		if now.After(loaded) && done(v) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("%s is %s (pending_restart %v) %s after pg_reload_conf(): is it overridden by a later setting (an include, the command line), or is the configuration invalid (see the server log)?",
				name, v.Value, v.PendingRestart, p.opts.ConfirmTimeout)
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("wait for %s to change: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *Postgres) read(ctx context.Context, name string) (Value, error) {
	var v Value
	var sourceFile *string
	err := p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_catalog.current_setting(name), source, sourcefile, context, pending_restart, coalesce(enumvals, '{}'::pg_catalog.text[])
			FROM pg_catalog.pg_settings WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.text`, name).Scan(&v.Value, &v.Source, &sourceFile, &v.Context, &v.PendingRestart, &v.EnumVals)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("read %s: PostgreSQL %d has no such setting", name, p.session.Server().VersionNum)
	}
	if err != nil {
		return v, p.opErr("read "+name+" from pg_settings", err, "")
	}
	if sourceFile != nil {
		v.SourceFile = *sourceFile
	}
	v.Server = serverOf(p.session.Server())
	// What postgresql.auto.conf holds, including a value that waits for a restart: the view
	// reads the files now. Only superusers may read it by default; pg_settings' sourcefile
	// (pg_read_all_settings) tells as much for a value that is running.
	var auto string
	err = p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT setting FROM pg_catalog.pg_file_settings
			WHERE name OPERATOR(pg_catalog.=) $1::pg_catalog.text AND sourcefile OPERATOR(pg_catalog.~~) '%/postgresql.auto.conf'::pg_catalog.text
			ORDER BY seqno DESC LIMIT 1`, name).Scan(&auto)
	})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		v.AutoConf = &auto
	case errors.Is(err, pgx.ErrNoRows):
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		switch {
		case v.Source == "configuration file" && v.SourceFile == "":
			return v, fmt.Errorf("cannot tell whether %s comes from postgresql.auto.conf: role %s sees neither pg_file_settings nor pg_settings.sourcefile, and rollback needs to know (GRANT pg_read_all_settings TO %s; pg_monitor includes it)",
				name, postgres.QuoteIdent(p.session.Server().User), postgres.QuoteIdent(p.session.Server().User))
		case strings.HasSuffix(v.SourceFile, "postgresql.auto.conf"):
			s := v.Value
			v.AutoConf = &s
		}
	default:
		return v, p.opErr("read "+name+" from pg_file_settings", err, "")
	}
	return v, nil
}

// privilegeHint is what to grant when a statement was refused.
func (p *Postgres) privilegeHint(name string) string {
	role := postgres.QuoteIdent(p.session.Server().User)
	if p.session.Server().VersionNum >= 150000 {
		return fmt.Sprintf("as a superuser: GRANT ALTER SYSTEM ON PARAMETER %s TO %s; GRANT EXECUTE ON FUNCTION pg_reload_conf() TO %s", name, role, role)
	}
	return "before PostgreSQL 15 only a superuser may ALTER SYSTEM"
}

func (p *Postgres) exec(ctx context.Context, sql string) error {
	return p.session.Query(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, sql)
		return err
	})
}

// opErr is a failed step whose text never carries the DSN's password (the collector's error type).
func (p *Postgres) opErr(op string, err error, hint string) error {
	return p.session.Err(op, err, hint)
}

// alterErr is opErr for a statement that changes setting: a refusal (42501) says what to grant.
func (p *Postgres) alterErr(op, setting string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.Contains(pgErr.Message, "not allowed in this environment"):
			// PostgreSQL 17+: allow_alter_system = off. No GRANT helps.
			return fmt.Errorf("%w: %w", ErrAlterSystemRefused, p.opErr(op, err, allowAlterSystemOffHint))
		case strings.Contains(pgErr.Message, "postgresql.auto.conf"):
			// Checked before 42501: a rename onto an immutable file fails with EPERM, which the
			// server reports as insufficient privilege, and no GRANT helps there either.
			return fmt.Errorf("%w: %w", ErrAlterSystemRefused, p.opErr(op, err, autoConfUnwritableHint))
		case pgErr.Code == "42501":
			return p.opErr(op, err, p.privilegeHint(setting))
		}
	}
	return p.opErr(op, err, "")
}

// What to do when the server refuses ALTER SYSTEM for every setting (ErrAlterSystemRefused).
const (
	allowAlterSystemOffHint = "allow_alter_system is off on this server: its settings are managed elsewhere (postgresql.conf, a configuration tool); " +
		"apply the recommendation there, or drop the setting from --apply.settings"
	autoConfUnwritableHint = "the server cannot write its postgresql.auto.conf (owner, mode or an immutable flag): fix the file for the server's user " +
		"(lsattr/chattr -i, chown, chmod), or apply the recommendation in postgresql.conf"
)

// quoteLiteral quotes a value for ALTER SYSTEM, which takes no parameters. The values come from
// the rules and pass the guard's bounds; quoting makes any other value harmless.
func quoteLiteral(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}
