package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestRepmgrStandbyDiffers (issue 31): on a real repmgr 5 pair (Debian's repmgr; the primary
// and a pg_basebackup standby registered with repmgr, its library preloaded), seed 001's fix made
// with ALTER SYSTEM on the primary - what the apply mode does under repmgr - is not on the
// standby, which would lose it at a failover. The standby's daemon reads its primary from
// primary_conninfo and names both settings with both values and the statements; once the
// standby runs them too, the finding clears.
func TestRepmgrStandbyDiffers(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	ctx := context.Background()
	primary := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{
		"shared_preload_libraries": "repmgr", "wal_buffers": "64kB", "wal_sync_method": "open_datasync",
		"wal_level": "replica", "max_wal_senders": "4", "hot_standby": "on",
	}})
	lab.RegisterRepmgr(t, primary, 1, true)
	standby := lab.NewTestStandby(t, primary)
	lab.RegisterRepmgr(t, standby, 2, false)

	out, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", standby.DSN())
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("collect on the standby exited %d (%v): %s", code, err, stderr)
	}
	if got := jsonPath(t, doc, ".postgres.ha_manager.name"); got != "repmgr" {
		t.Errorf(".postgres.ha_manager.name = %v, want repmgr", got)
	}
	if got, _ := jsonPath(t, doc, ".postgres.primary.address").(string); !strings.HasSuffix(got, ":"+itoa(primary.Port())) {
		t.Errorf(".postgres.primary.address = %q, want the primary's port %d (from primary_conninfo)", got, primary.Port())
	}

	// Seed 001's fix on the primary only, as the apply mode makes it there.
	for _, sql := range []string{"ALTER SYSTEM SET wal_sync_method = 'fdatasync'", "ALTER SYSTEM SET wal_buffers = '16MB'"} {
		if err := primary.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	d := startRun(t, "--dsn", standby.DSN(), "--interval", "1s")
	waitFor(t, 30*time.Second, "the standby's ha-standby-differs finding", func() bool {
		_, body := d.get(t, "/api/v1/findings")
		return strings.Contains(body, `"ha-standby-differs"`) &&
			strings.Contains(body, "wal_buffers = 64kB here, 16MB on the primary") &&
			strings.Contains(body, "wal_sync_method = open_datasync here, fdatasync on the primary") &&
			strings.Contains(body, "ALTER SYSTEM SET wal_buffers = '16MB';")
	})

	// What the finding says, on the standby: ALTER SYSTEM works there (a file, not WAL).
	for _, sql := range []string{"ALTER SYSTEM SET wal_sync_method = 'fdatasync'", "ALTER SYSTEM SET wal_buffers = '16MB'"} {
		if err := standby.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := standby.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the finding to clear once the standby runs the primary's settings", func() bool {
		_, body := d.get(t, "/api/v1/findings")
		return !strings.Contains(body, `"ha-standby-differs"`) && strings.Contains(body, `"findings"`)
	})
	d.stop()
}

func itoa(n int) string { return strconv.Itoa(n) }
