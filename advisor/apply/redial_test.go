package apply

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// The actuator's connection is a postgres.Session: a backend terminated between two calls is
// replaced without an error, and a stopped server is a failed connect that says what to do.
func TestPostgresRedial(t *testing.T) {
	t.Parallel()
	cl := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()
	// TCP: the next query's write goes through and only the read finds the backend gone.
	p := newPostgres(t, cl.URL())
	if _, err := p.Read(ctx, collector.WALBuffers); err != nil {
		t.Fatal(err)
	}

	conn, err := cl.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	// With a timeout (milliseconds), pg_terminate_backend waits until the backend has exited.
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
		WHERE application_name = 'pgwal-advisor-apply'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminate the actuator's backend: %d terminated, %v; want 1", n, err)
	}
	v, err := p.Read(ctx, collector.WALBuffers)
	if err != nil {
		t.Fatalf("Read after pg_terminate_backend: %v", err)
	}
	if want, _, _ := lab.ReadSetting(t, cl, collector.WALBuffers); v.Value != want {
		t.Errorf("Read = %q, want %q", v.Value, want)
	}
	if err := p.Writable(ctx, collector.WALBuffers); err != nil {
		t.Errorf("Writable after the redial: %v", err)
	}

	if out, err := cl.Command(ctx, "pg_ctl", "stop", "-D", cl.DataDir(), "-m", "fast", "-w", "-t", "60").CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl stop: %v: %s", err, out)
	}
	_, err = p.Read(ctx, collector.WALBuffers)
	var opErr *postgres.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("Read on a stopped server = %v (%T), want a *postgres.OpError", err, err)
	}
	for _, want := range []string{"connect to PostgreSQL at host=127.0.0.1", "to apply settings", "is the server running?"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
