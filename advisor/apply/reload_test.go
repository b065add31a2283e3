package apply

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestReloadConfirmationWaitsForTheReload holds a reload on a real server and checks that the
// actuator's confirmation read waits for it.
//
// The reload is held by stopping the postmaster (SIGSTOP) before the actuator writes: the
// actuator's own backend keeps answering queries, pg_reload_conf() still succeeds (it only
// sends the postmaster SIGHUP), but no process can load the new configuration until the test
// sends SIGCONT, because the postmaster rereads the files first and only then signals the
// backends. Any read before SIGCONT therefore sees the old configuration.
//
// The decisive case is a Restore whose recorded old value is what the server runs now but
// whose postgresql.auto.conf value differs (a journal record cut or forged that way): the
// running value satisfies the confirmation before the reload, the reloaded one never does.
// Without the wait on pg_conf_load_time, Restore would read while the postmaster is stopped,
// see the running value, and return success with that stale value before SIGCONT - the three
// checks below (an error, the reloaded value, not returned before the release) would all
// fail, whatever the machine's speed, since nothing can reload while the postmaster is
// stopped. With the wait, it reads again after the reload and reports what the server runs.
func TestReloadConfirmationWaitsForTheReload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	p := NewPostgres(c.DSN(), PostgresOptions{ConfirmTimeout: 5 * time.Second, Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { p.Close(context.Background()) })
	pid := postmasterPID(t, c)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	// hold stops the postmaster and releases it after a moment; released reports whether it
	// has been released.
	hold := func(t *testing.T) (released func() bool) {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var done atomic.Bool
		go func() {
			time.Sleep(200 * time.Millisecond)
			done.Store(true)
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}()
		return done.Load
	}
	serverLoadTime := func(t *testing.T) time.Time {
		t.Helper()
		conn, err := c.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var at time.Time
		if err := conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}

	// The actuator's connection must exist before the postmaster stops: a new one needs it.
	if _, err := p.Read(ctx, "wal_writer_delay"); err != nil {
		t.Fatal(err)
	}

	// A Set confirms the new value after the reload. (This case alone would pass without the
	// wait too: the old value never satisfies it, so the loop reads until the new one shows.)
	before := serverLoadTime(t)
	released := hold(t)
	live, err := p.Set(ctx, "wal_writer_delay", "250ms")
	if err != nil {
		t.Fatal(err)
	}
	if !released() {
		t.Error("Set returned while the reload was held")
	}
	if live.Value != "250ms" {
		t.Errorf("Set confirmed %s, want 250ms", live.Value)
	}
	if after := serverLoadTime(t); !after.After(before) {
		t.Errorf("pg_conf_load_time %v did not move past %v", after, before)
	}

	// The decisive case: the running value (250ms) is the recorded old value, the auto.conf
	// value restored is another (300ms).
	other := "300ms"
	old := Value{Value: "250ms", Source: "configuration file", Context: "sighup", AutoConf: &other}
	released = hold(t)
	live, err = p.Restore(ctx, "wal_writer_delay", old)
	if !released() {
		t.Error("Restore returned while the reload was held: it confirmed the configuration before the reload")
	}
	if err == nil {
		t.Errorf("Restore confirmed wal_writer_delay = %s although the server now runs %s", old.Value, other)
	} else if !strings.Contains(err.Error(), "is 300ms") {
		t.Errorf("Restore's error %q does not name the value the server runs (300ms)", err)
	}
	if live.Value != other {
		t.Errorf("Restore's last read saw %s, want the reloaded %s", live.Value, other)
	}
	if v, _, _ := lab.ReadSetting(t, c, "wal_writer_delay"); v != other {
		t.Errorf("the server runs wal_writer_delay = %s, want %s", v, other)
	}
}

// postmasterPID reads the cluster's postmaster.pid.
func postmasterPID(t *testing.T, c *lab.Cluster) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
