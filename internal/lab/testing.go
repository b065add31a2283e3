package lab

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
)

// RequireServer skips the test under -short (the fast tier runs no PostgreSQL), and when no
// PostgreSQL server is installed, except in CI (CI=true), where a missing server is a broken
// set-up and fails the test.
func RequireServer(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a PostgreSQL cluster: skipped under -short")
	}
	if _, err := FindBinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs PostgreSQL: %v", err)
		}
		t.Skip(err)
	}
}

// RequireTool returns the path of a tool the test runs (promtool, prometheus). It skips the
// test under -short, and when the tool is not on PATH, with the install hint, except in CI
// (CI=true), where the suite must not pass by skipping.
func RequireTool(t testing.TB, name, hint string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs " + name + ": skipped under -short")
	}
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := name + " not found: " + hint
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, so this is a failure")
	}
	t.Skip(msg)
	return ""
}

// PrometheusHint is the install hint for promtool and prometheus.
const PrometheusHint = "install Debian's prometheus package (as root: apt-get install --no-install-recommends prometheus, or make deps)"

// NewTestCluster starts a cluster for a test and stops it (removing everything) when the test
// ends, whether it passed or not.
func NewTestCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	RequireServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, opts)
	if errors.Is(err, ErrNoServer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("start throwaway cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop throwaway cluster: %v", err)
		}
	})
	return c
}

// SharedTempDir makes a temporary directory under parent ("": os.TempDir()) that the server's
// user can traverse, for a WAL directory or a probe file (t.TempDir() is private to the user
// running the test), and removes it when the test ends.
func SharedTempDir(t testing.TB, parent string) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "pgwal-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ReadSetting reads a setting's running value, its source and its source file ("" when
// pg_settings shows none) straight from pg_settings, over a connection of its own.
func ReadSetting(t testing.TB, c *Cluster, name string) (value, source, file string) {
	t.Helper()
	ctx := context.Background()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var f *string
	if err := conn.QueryRow(ctx, "SELECT current_setting(name), source, sourcefile FROM pg_settings WHERE name = $1", name).Scan(&value, &source, &f); err != nil {
		t.Fatal(err)
	}
	if f != nil {
		file = *f
	}
	return value, source, file
}

// RequireVersion returns the bin directory of PostgreSQL major version major (FindVersion). When
// it is missing or does not start the test skips with what to do, except in CI (CI=true), where
// the matrix must not pass by skipping.
func RequireVersion(t testing.TB, major int) string {
	t.Helper()
	dir, err := FindVersion(context.Background(), major)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs every version of the matrix: %v", err)
		}
		t.Skip(err)
	}
	return dir
}
