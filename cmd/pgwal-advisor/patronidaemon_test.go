package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestDaemonThroughPatroniPair is issue 31's "done when": on a real Patroni pair with seed 001's
// settings in the DCS (wal_buffers 64kB, open_datasync) and seed 001's insert running on the
// leader, the daemon in apply mode with a restart window open now decides and changes
// wal_sync_method and wal_buffers through the DCS, and Patroni restarts the members; both run
// 16MB and fdatasync with postgresql.auto.conf untouched. The replica's daemon reports the
// cluster's changes as running there. A switchover keeps them; the daemon on the new leader
// takes them into its own journal from the DCS (not "someone else's change"), and `rollback
// --all` there puts the DCS back on both members and removes the advisor's records.
func TestDaemonThroughPatroniPair(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	ms := lab.NewTestPatroniCluster(t, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"}, 2)
	m1, m2 := ms[0], ms[1]
	dir := t.TempDir()
	pw := filepath.Join(dir, "patroni-password")
	if err := os.WriteFile(pw, []byte("restpass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	autoBefore := map[string]string{}
	for _, m := range ms {
		b, _ := os.ReadFile(filepath.Join(m.DataDir, "postgresql.auto.conf"))
		autoBefore[m.Name] = string(b)
	}
	insert := seed001Insert(t, m1)

	// Findings hold for 10 s before they show (the default is two minutes).
	cfgFile := filepath.Join(dir, "pgwal-advisor.yml")
	if err := os.WriteFile(cfgFile, []byte("thresholds:\n  raise_after: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := func(m lab.PatroniMember, journal string) *daemonRun {
		t.Helper()
		d := startRun(t, "--config.file", cfgFile, "--dsn", m.DSN(), "--interval", "1s", "--history.window", "2m", "--probe.dir", t.TempDir(),
			"--apply", "on", "--apply.settings", "wal_sync_method,wal_buffers",
			"--apply.journal", journal, "--apply.sysctl-file", sysctlFileIn(t, filepath.Dir(journal)),
			"--apply.verify-window", "10s", "--apply.cooldown", "1s",
			"--apply.patroni-url", m.RESTURL, "--apply.patroni-user", "patroni", "--apply.patroni-password-file", pw,
			"--apply.restart-window", "* "+time.Now().Add(-time.Hour).Format("15:04")+"-"+time.Now().Add(3*time.Hour).Format("15:04"))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the daemon on %s said:\n%s", m.Name, d.stderr)
			}
		})
		return d
	}
	j1 := filepath.Join(t.TempDir(), "apply.journal")
	j2 := filepath.Join(t.TempDir(), "apply.journal")
	ctx, stopLoad := context.WithCancel(context.Background())
	var loading sync.WaitGroup
	loading.Add(1)
	go func() { defer loading.Done(); seed001Load(ctx, m1.DSN()) }()
	d1 := daemon(m1, j1)
	runs := func(what string, timeout time.Duration, want map[string]string) {
		t.Helper()
		for _, m := range ms {
			waitFor(t, timeout, fmt.Sprintf("%s: %s to run %v", what, m.Name, want), func() bool {
				for k, v := range want {
					if showSetting(m.DSN(), k) != v {
						return false
					}
				}
				return true
			})
		}
	}
	runs("the daemon's changes", 4*time.Minute, map[string]string{"wal_sync_method": "fdatasync", "wal_buffers": "16MB"})
	stopLoad()
	loading.Wait()
	for _, m := range ms {
		if b, _ := os.ReadFile(filepath.Join(m.DataDir, "postgresql.auto.conf")); string(b) != autoBefore[m.Name] {
			t.Errorf("%s's postgresql.auto.conf was written:\n%s", m.Name, b)
		}
	}
	recs, _, err := apply.NewJournal(j1).Read()
	if err != nil {
		t.Fatal(err)
	}
	routed := map[string]bool{}
	for _, r := range recs {
		if r.Kind == apply.KindIntent && r.Origin == apply.OriginDaemon && r.Old != nil && r.Old.Route == apply.RoutePatroni {
			routed[r.Setting] = true
		}
	}
	if !routed["wal_sync_method"] || !routed["wal_buffers"] {
		t.Errorf("the leader's journal holds daemon intents through Patroni for %v, want wal_sync_method and wal_buffers", routed)
	}
	if !strings.Contains(d1.stderr.String(), "asking the HA manager to restart PostgreSQL") {
		t.Errorf("the daemon did not say it asked Patroni for the restart:\n%s", d1.stderr)
	}
	after := seed001Insert(t, m1)

	// The replica's daemon: nothing to apply on a standby, but it says how it runs the
	// cluster's changes.
	d2 := daemon(m2, j2)
	waitFor(t, 30*time.Second, "the replica's daemon to report the cluster's changes running", func() bool {
		_, body := d2.get(t, "/metrics")
		return strings.Contains(body, `pgwal_advisor_apply_cluster_change{setting="wal_buffers",state="running",value="16MB"} 1`) &&
			strings.Contains(body, `pgwal_advisor_apply_cluster_change{setting="wal_sync_method",state="running",value="fdatasync"} 1`)
	})

	switchover(t, m1, m2)
	runs("after the switchover", 30*time.Second, map[string]string{"wal_sync_method": "fdatasync", "wal_buffers": "16MB"})
	switched := seed001Insert(t, m2)

	// The new leader's daemon takes both changes into its journal as the advisor's.
	waitFor(t, 30*time.Second, "the new leader's daemon to take the cluster's changes into its journal", func() bool {
		recs, _, err := apply.NewJournal(j2).Read()
		if err != nil {
			return false
		}
		adopted := map[string]bool{}
		for _, r := range recs {
			if r.Kind == apply.KindOutcome && r.Origin == apply.OriginCluster && r.Outcome == apply.Applied {
				adopted[r.Setting] = true
			}
		}
		return adopted["wal_sync_method"] && adopted["wal_buffers"]
	})
	d2.stop()
	d1.stop()
	if strings.Contains(d2.stderr.String(), "someone else changed it") {
		t.Errorf("the new leader's daemon called the advisor's change someone else's:\n%s", d2.stderr)
	}
	t.Logf("seed 001's insert of 1M rows on the leader (2 runs each): 64kB/open_datasync %v; after the daemon's changes %v; on the new leader after the switchover %v",
		insert, after, switched)

	out, stderr, code := runCLI(t, "rollback", "--all", "--journal", j2, "--dsn", m2.DSN(), "--apply.sysctl-file", sysctlFileIn(t, filepath.Dir(j2)),
		"--apply.patroni-url", m2.RESTURL, "--apply.patroni-user", "patroni", "--apply.patroni-password-file", pw)
	if code != 0 {
		t.Fatalf("rollback --all on the new leader exited %d:\n%s\n%s", code, out, stderr)
	}
	pg := apply.NewPostgres(m2.DSN(), apply.PostgresOptions{})
	defer pg.Close(context.Background())
	route := apply.NewPatroni(apply.PatroniOptions{URL: m2.RESTURL, Username: "patroni", Password: "restpass"}, pg)
	if err := route.RestartPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	runs("after the rollback", 30*time.Second, map[string]string{"wal_sync_method": "open_datasync", "wal_buffers": "64kB"})
	if left, problems, err := route.ClusterChanges(context.Background()); err != nil || len(left)+len(problems) > 0 {
		t.Errorf("after the rollback the DCS holds the advisor's records %+v (%v, %v), want none", left, problems, err)
	}
	for _, m := range ms {
		if b, _ := os.ReadFile(filepath.Join(m.DataDir, "postgresql.auto.conf")); string(b) != autoBefore[m.Name] {
			t.Errorf("%s's postgresql.auto.conf was written:\n%s", m.Name, b)
		}
	}
}

// seed001Load runs seed 001's statement, an INSERT of a million integers into a table with a
// primary key, again and again until ctx ends; errors (a restart by Patroni) are waited out.
func seed001Load(ctx context.Context, dsn string) {
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		for ctx.Err() == nil {
			if _, err = conn.Exec(ctx, "DROP TABLE IF EXISTS seed001_load; CREATE TABLE seed001_load (id integer PRIMARY KEY); "+
				"INSERT INTO seed001_load (id) SELECT generate_series(1, 1000000)"); err != nil {
				break
			}
		}
		conn.Close(context.Background())
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// showSetting is SHOW name on the server, "" while it cannot be read (Patroni restarting it).
func showSetting(dsn, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting($1)", name).Scan(&v); err != nil {
		return ""
	}
	return v
}
