package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestThroughTransactionPooler: with --dsn through Debian's PgBouncer in transaction pooling,
// collect reads the server and the daemon (collector and apply, two connections) becomes ready
// and stays free of prepared-statement clashes; the pooler's refusal of the session parameters
// is said once, with what to do. On b4517f4 the daemon stayed unready: `prepared statement
// "stmtcache_..." already exists`.
func TestThroughTransactionPooler(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	dsn := lab.NewTestPgBouncer(t, c, "transaction")
	out, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, `"version_num"`) {
		t.Fatalf("collect through the pooler exited %d:\n%s\n%s", code, out, stderr)
	}
	if !strings.Contains(stderr, "pooler refuses the advisor's session parameters") || !strings.Contains(stderr, "point --dsn at PostgreSQL itself") {
		t.Errorf("collect through the pooler does not say that the pooler refused the session parameters:\n%s", stderr)
	}
	dir := t.TempDir()
	d := startRun(t, "--dsn", dsn, "--interval", "1s", "--apply", "on", "--apply.settings", "bgwriter_flush_after",
		"--apply.journal", filepath.Join(dir, "apply.journal"), "--apply.sysctl-file", sysctlFileIn(t, dir))
	waitFor(t, 20*time.Second, "/readyz 200 through the pooler", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == 200
	})
	// A few more rounds of the collector, the wait-event sampler and apply's reads, beside a
	// second client on the same two server connections.
	for range 5 {
		if _, stderr, code := runCLI(t, "collect", "--dsn", dsn); code != 0 {
			t.Errorf("a second client's collect through the pooler exited %d: %s", code, stderr)
		}
		time.Sleep(time.Second)
	}
	if code, _ := d.stop(); code != 0 {
		t.Errorf("run exited %d", code)
	}
	if s := d.stderr.String(); strings.Contains(s, "prepared statement") {
		t.Errorf("the daemon met prepared statements of another connection through the pooler:\n%s", s)
	}
}

// TestRoleSessionTimeouts: a role whose own settings would cut every query short
// (statement_timeout 1ms) or end the connection between two samples (idle_session_timeout 300ms)
// does not reach the advisor, which sets its own at connect: collect reads everything and the
// daemon neither loses its connection nor stops being ready. On b4517f4 the target was
// "unreachable", or the daemon reconnected and warned once a second while /readyz said ready.
func TestRoleSessionTimeouts(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE ROLE advisor LOGIN", "GRANT pg_monitor TO advisor",
		"ALTER ROLE advisor SET statement_timeout = '1ms'", "ALTER ROLE advisor SET lock_timeout = '1ms'",
		"ALTER ROLE advisor SET idle_session_timeout = '300ms'", "ALTER ROLE advisor SET idle_in_transaction_session_timeout = '1ms'",
	} {
		if err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	dsn := c.DSN() + " user=advisor"
	out, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", dsn)
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil {
		t.Fatalf("collect as a role with 1ms timeouts exited %d (%v):\n%s\n%s", code, err, out, stderr)
	}
	if notes, ok := jsonPath(t, doc, ".postgres").(map[string]any)["notes"]; ok {
		t.Errorf("collect as a role with 1ms timeouts could not read everything: %v", notes)
	}
	d := startRun(t, "--dsn", dsn, "--interval", "1s")
	waitFor(t, 15*time.Second, "/readyz 200", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == 200
	})
	time.Sleep(4 * time.Second)
	if code, body := d.get(t, "/readyz"); code != 200 {
		t.Errorf("/readyz %d after 4s: %s", code, body)
	}
	// Read before the stop: stopping cancels the query in flight, which is logged as a lost
	// connection and is not the role's timeouts.
	s := d.stderr.String()
	d.stop()
	if strings.Contains(s, "connection to postgresql lost") || strings.Count(s, "connected to postgresql") > 1 {
		t.Errorf("the daemon lost its connection to the role's timeouts:\n%s", s)
	}
}
