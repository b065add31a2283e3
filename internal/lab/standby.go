package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// ErrNoBasebackup is returned where the server binaries have no pg_basebackup (the npm builds of
// other major versions ship the server alone).
var ErrNoBasebackup = errors.New("no pg_basebackup beside the server binaries: a standby needs Debian's postgresql package")

// StartStandby makes a streaming standby of primary with pg_basebackup -R and starts it on a port
// of its own. Stop it like any cluster: it removes everything.
func StartStandby(ctx context.Context, primary *Cluster) (c *Cluster, err error) {
	if !isExecutable(filepath.Join(primary.binDir, "pg_basebackup")) {
		return nil, ErrNoBasebackup
	}
	base, err := os.MkdirTemp(filepath.Dir(primary.baseDir), "pgwal-lab-standby-")
	if err != nil {
		return nil, fmt.Errorf("make standby directory: %w", err)
	}
	c = &Cluster{
		binDir:  primary.binDir,
		baseDir: base,
		dataDir: filepath.Join(base, "data"),
		sockDir: filepath.Join(base, "sock"),
		logFile: filepath.Join(base, "server.log"),
		cred:    primary.cred,
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	if err := os.Mkdir(c.sockDir, 0o700); err != nil {
		return c, fmt.Errorf("make socket directory: %w", err)
	}
	if err := c.chown(base, c.sockDir); err != nil {
		return c, err
	}
	// --checkpoint=fast: the default spread checkpoint paces its writes over most of
	// checkpoint_timeout, and a test waited up to a minute and a half for it.
	out, err := c.command(ctx, "pg_basebackup", "-D", c.dataDir, "-R", "-X", "stream", "--no-sync", "--checkpoint=fast",
		"-h", primary.sockDir, "-p", strconv.Itoa(primary.port), "-U", "postgres").CombinedOutput()
	if err != nil {
		return c, fmt.Errorf("pg_basebackup: %w: %s", err, lastLines(out, 5))
	}
	if c.port, err = freePort(); err != nil {
		return c, err
	}
	return c, c.start(ctx)
}

// NewTestStandby is StartStandby for a test: it skips without pg_basebackup and stops the
// standby when the test ends.
func NewTestStandby(t testing.TB, primary *Cluster) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartStandby(ctx, primary)
	if errors.Is(err, ErrNoBasebackup) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("start a standby: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the standby: %v", err)
		}
	})
	return c
}
