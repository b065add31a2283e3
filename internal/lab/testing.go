package lab

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// RequireServer skips the test when no PostgreSQL server is installed, except in CI (CI=true),
// where a missing server is a broken set-up and fails the test.
func RequireServer(t testing.TB) {
	t.Helper()
	if _, err := FindBinDir(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs PostgreSQL: %v", err)
		}
		t.Skip(err)
	}
}

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
