package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// RepmgrHint is how to get repmgr.
const RepmgrHint = "install Debian's repmgr package (postgresql-N-repmgr beside the server: apt-get install repmgr, or make deps)"

// RequireRepmgr skips the test when the server binaries have no repmgr beside them (it fails
// under CI, where make deps installs it), and returns the binary's path.
func RequireRepmgr(t testing.TB, c *Cluster) string {
	t.Helper()
	p := filepath.Join(c.binDir, "repmgr")
	if isExecutable(p) {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no repmgr beside the server binaries in %s: %s", c.binDir, RepmgrHint)
	}
	t.Skipf("no repmgr beside the server binaries in %s: %s", c.binDir, RepmgrHint)
	return ""
}

// RegisterRepmgr registers c as node id of a repmgr cluster (repmgr primary register or standby
// register), with a repmgr.conf of its own in its base directory: what repmgr's quick start does
// after the extension's library is in shared_preload_libraries. The primary's registration
// creates the repmgr extension (its schema and the nodes table) in the postgres database.
func RegisterRepmgr(t testing.TB, c *Cluster, id int, primary bool) {
	t.Helper()
	RequireRepmgr(t, c)
	conf := filepath.Join(c.baseDir, "repmgr.conf")
	body := fmt.Sprintf("node_id=%d\nnode_name='node%d'\nconninfo='host=%s port=%d user=postgres dbname=postgres connect_timeout=2'\ndata_directory='%s'\n",
		id, id, c.sockDir, c.port, c.dataDir)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.chown(conf); err != nil {
		t.Fatal(err)
	}
	role := "standby"
	if primary {
		role = "primary"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"-f", conf, role, "register"}
	if !primary {
		// The standby's registration waits for the primary's record to reach it. --force: a
		// standby made by pg_basebackup (not repmgr standby clone) streams under the walreceiver's
		// application_name, not its node name, so repmgr cannot find it in pg_stat_replication.
		args = append(args, "--wait-sync=30", "--force")
	}
	if out, err := c.command(ctx, "repmgr", args...).CombinedOutput(); err != nil {
		t.Fatalf("repmgr %s register (node %s): %v: %s", role, strconv.Itoa(id), err, out)
	}
}
