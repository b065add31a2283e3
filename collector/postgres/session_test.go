package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

func newSession(t *testing.T, dsn string) *Session {
	t.Helper()
	s := NewSession(dsn, SessionOptions{ApplicationName: "pgwal-advisor-session-test", Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// backendPID is the pid of the session's backend, read through the session.
func backendPID(t *testing.T, s *Session) int {
	t.Helper()
	var pid int
	err := s.Query(context.Background(), func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	})
	if err != nil {
		t.Fatalf("query through the session: %v", err)
	}
	return pid
}

// terminate ends a backend from a connection of its own and waits until it is gone.
func terminate(t *testing.T, cl *lab.Cluster, pid int) {
	t.Helper()
	ctx := context.Background()
	conn, err := cl.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	// With a timeout (milliseconds), pg_terminate_backend waits until the backend has exited.
	if err := conn.QueryRow(ctx, "SELECT pg_terminate_backend($1, 10000)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
}

// A backend terminated by an administrator (or lost in a restart) is noticed by the next query,
// which the session runs again on a new connection: the caller sees no error.
func TestSessionRedialsATerminatedBackend(t *testing.T) {
	t.Parallel()
	cl := lab.NewTestCluster(t, lab.ClusterOptions{})
	// Over a unix socket the next query's write fails (broken pipe); over TCP the write goes
	// through and the read finds the backend's FATAL or the end of the stream.
	for _, tt := range []struct{ name, dsn string }{{"unix socket", cl.DSN()}, {"TCP", cl.URL()}} {
		t.Run(tt.name, func(t *testing.T) {
			s := newSession(t, tt.dsn)
			first := backendPID(t, s)
			if !s.Open() || s.Server().VersionNum < 100000 || s.Server().User != "postgres" || !s.Server().Superuser {
				t.Fatalf("after the first query: open %v, server %+v; want an open connection as superuser postgres", s.Open(), s.Server())
			}
			terminate(t, cl, first)
			second := backendPID(t, s)
			if second == first {
				t.Errorf("backend pid %d after pg_terminate_backend, want a new backend", second)
			}
			if !s.Open() {
				t.Error("the session is not open after the redial")
			}
		})
	}

	// The collector's wait-event sampler and its Collect ride on the same session.
	c := newCollector(t, cl.DSN(), Options{})
	collect(t, c)
	var pid int
	if err := c.session.Query(context.Background(), func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	}); err != nil {
		t.Fatal(err)
	}
	terminate(t, cl, pid)
	if err := c.SampleWaitEvents(context.Background()); err != nil {
		t.Errorf("SampleWaitEvents after pg_terminate_backend: %v", err)
	}
	terminate(t, cl, backendPID(t, c.session))
	if pg := collect(t, c); len(pg.Settings) == 0 || pg.WAL == nil {
		t.Errorf("Collect after pg_terminate_backend = %+v, want settings and WAL statistics", pg)
	}
}

// A stopped server is a failed connect, not a failed query: the error names the connect step
// and what to do, and the target is unreachable.
func TestSessionServerStopped(t *testing.T) {
	t.Parallel()
	cl := lab.NewTestCluster(t, lab.ClusterOptions{})
	s := newSession(t, cl.DSN())
	backendPID(t, s)
	c := newCollector(t, cl.DSN(), Options{})
	collect(t, c)

	// Fast shutdown terminates the sessions' backends; Stop at cleanup sees the server is down.
	if out, err := cl.Command(context.Background(), "pg_ctl", "stop", "-D", cl.DataDir(), "-m", "fast", "-w", "-t", "60").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop: %v: %s", err, out)
	}

	err := s.Query(context.Background(), func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT 1")
		return err
	})
	var opErr *OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("Query on a stopped server = %v (%T), want an *OpError", err, err)
	}
	for _, want := range []string{"connect to PostgreSQL at host=" + cl.SocketDir(), "is the server running?"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if got := s.Err("read something", err, "").Error(); got != err.Error() {
		t.Errorf("Err wrapped a failed connect again: %q", got)
	}
	if s.Open() {
		t.Error("the session is open after the server stopped")
	}

	_, err = c.Collect(context.Background())
	if err == nil {
		t.Fatal("Collect on a stopped server succeeded")
	}
	if !errors.As(err, &opErr) || !strings.Contains(err.Error(), "connect to PostgreSQL") {
		t.Errorf("Collect error = %v, want the failed connect", err)
	}
	if got := c.TargetStatus(err); got != collector.TargetUnreachable {
		t.Errorf("TargetStatus = %q, want %q", got, collector.TargetUnreachable)
	}
}
