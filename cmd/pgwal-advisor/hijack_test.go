package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// hijackSQL is what a database user without privileges writes to make the advisor run their code
// (issue 33, rows 1 and 2): functions, views and operators in public that match the advisor's
// calls better than pg_catalog's (an exact row type beats to_jsonb(anyelement); public.= (name,
// text) ties pg_catalog's and wins where public comes first in the search_path). Each records the
// call in public.hijack_log and, when its caller is a superuser, makes the user superuser too;
// pg_is_in_recovery() says false, which would let apply write a standby's configuration.
const hijackSQL = `
CREATE TABLE public.hijack_log (fn text);
GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC;
CREATE FUNCTION public.hijack(fn text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
	-- A standby can be written neither: there the functions only lie (pg_is_in_recovery).
	IF pg_catalog.pg_is_in_recovery() THEN
		RETURN true;
	END IF;
	INSERT INTO public.hijack_log VALUES (fn);
	IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
		EXECUTE 'ALTER ROLE mallory SUPERUSER';
	END IF;
	RETURN true;
END $f$;
CREATE FUNCTION public.pg_has_role(text, text) RETURNS boolean LANGUAGE sql AS
	$f$ SELECT public.hijack('pg_has_role') AND pg_catalog.pg_has_role($1::pg_catalog.name, $2) $f$;
CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE sql AS
	$f$ SELECT CASE WHEN public.hijack('current_setting') THEN pg_catalog.current_setting($1) END $f$;
CREATE FUNCTION public.pg_is_in_recovery() RETURNS boolean LANGUAGE sql AS
	$f$ SELECT NOT public.hijack('pg_is_in_recovery') $f$;
CREATE FUNCTION public.pg_postmaster_start_time() RETURNS timestamptz LANGUAGE sql AS
	$f$ SELECT CASE WHEN public.hijack('pg_postmaster_start_time') THEN pg_catalog.pg_postmaster_start_time() END $f$;
CREATE FUNCTION public.pg_current_wal_insert_lsn() RETURNS pg_lsn LANGUAGE sql AS
	$f$ SELECT CASE WHEN public.hijack('pg_current_wal_insert_lsn') THEN pg_catalog.pg_current_wal_insert_lsn() END $f$;
CREATE FUNCTION public.pg_backend_pid() RETURNS integer LANGUAGE sql AS
	$f$ SELECT CASE WHEN public.hijack('pg_backend_pid') THEN pg_catalog.pg_backend_pid() END $f$;
CREATE FUNCTION public.pg_conf_load_time() RETURNS timestamptz LANGUAGE sql AS
	$f$ SELECT CASE WHEN public.hijack('pg_conf_load_time') THEN pg_catalog.pg_conf_load_time() END $f$;
CREATE FUNCTION public.pg_reload_conf() RETURNS boolean LANGUAGE sql AS
	$f$ SELECT public.hijack('pg_reload_conf') AND pg_catalog.pg_reload_conf() $f$;
CREATE FUNCTION public.has_function_privilege(text, text) RETURNS boolean LANGUAGE sql AS
	$f$ SELECT public.hijack('has_function_privilege') AND pg_catalog.has_function_privilege($1, $2) $f$;
CREATE FUNCTION public.hijack_eq(name, text) RETURNS boolean LANGUAGE sql AS
	$f$ SELECT public.hijack('=(name,text)') AND $1::pg_catalog.text OPERATOR(pg_catalog.=) $2 $f$;
CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = text, FUNCTION = public.hijack_eq);
CREATE FUNCTION public.hijack_eq(text, text) RETURNS boolean LANGUAGE sql AS
	$f$ SELECT public.hijack('=(text,text)') AND $1 OPERATOR(pg_catalog.=) $2 $f$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.hijack_eq);
DO $d$
DECLARE v text;
BEGIN
	FOREACH v IN ARRAY ARRAY['pg_stat_wal', 'pg_stat_bgwriter', 'pg_stat_checkpointer', 'pg_stat_io'] LOOP
		IF pg_catalog.to_regclass('pg_catalog.' || v) IS NOT NULL THEN
			EXECUTE pg_catalog.format('CREATE FUNCTION public.to_jsonb(pg_catalog.%I) RETURNS jsonb LANGUAGE sql AS '
				'$f$ SELECT CASE WHEN public.hijack(%L) THEN pg_catalog.to_jsonb($1) END $f$', v, 'to_jsonb(' || v || ')');
		END IF;
	END LOOP;
	FOREACH v IN ARRAY ARRAY['pg_settings', 'pg_file_settings', 'pg_stat_activity', 'pg_roles', 'pg_stat_wal'] LOOP
		EXECUTE pg_catalog.format('CREATE VIEW public.%I AS SELECT * FROM pg_catalog.%I WHERE public.hijack(%L)', v, v, v);
	END LOOP;
	IF pg_catalog.current_setting('server_version_num')::int >= 150000 THEN
		CREATE FUNCTION public.has_parameter_privilege(text, text) RETURNS boolean LANGUAGE sql AS
			$f$ SELECT public.hijack('has_parameter_privilege') AND pg_catalog.has_parameter_privilege($1, $2) $f$;
	END IF;
END $d$;
`

// hijacked is a cluster whose database user mallory planted hijackSQL where the advisor looks.
type hijacked struct {
	c  *lab.Cluster
	db string
}

// plantHijack makes the plain LOGIN role mallory and runs hijackSQL as mallory in db: in
// postgres as it is, where public is writable by every user (PostgreSQL 14 and older), or in a
// database mallory owns, which also sets its search_path to put public first (any version).
func plantHijack(t *testing.T, c *lab.Cluster, ownDB bool) hijacked {
	t.Helper()
	ctx := context.Background()
	h := hijacked{c: c, db: "postgres"}
	if err := c.Exec(ctx, "CREATE ROLE mallory LOGIN"); err != nil {
		t.Fatal(err)
	}
	if ownDB {
		h.db = "app"
		if err := c.Exec(ctx, "CREATE DATABASE app OWNER mallory"); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, c.DSN()+" user=mallory dbname="+h.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, hijackSQL); err != nil {
		t.Fatalf("plant the hijack as mallory in %s: %v", h.db, err)
	}
	if ownDB {
		if _, err := conn.Exec(ctx, "ALTER DATABASE app SET search_path = public, pg_catalog"); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// dsn is the advisor's connection: the superuser postgres, in mallory's database.
func (h hijacked) dsn() string { return h.c.DSN() + " dbname=" + h.db }

// check fails the test when any of mallory's code ran or mallory became superuser.
func (h hijacked) check(t *testing.T, after string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, h.c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var super bool
	var calls []string
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'mallory'").Scan(&super); err != nil {
		t.Fatal(err)
	}
	logConn, err := pgx.Connect(ctx, h.c.DSN()+" dbname="+h.db+" options='-c search_path=pg_catalog'")
	if err != nil {
		t.Fatal(err)
	}
	defer logConn.Close(ctx)
	rows, err := logConn.Query(ctx, "SELECT DISTINCT fn FROM public.hijack_log ORDER BY 1")
	if err == nil {
		calls, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if super || len(calls) > 0 {
		t.Errorf("after %s: mallory superuser %v; mallory's code ran as the advisor's role: %v", after, super, calls)
	}
}

// TestSearchPathHijack: a database user's functions, views and operators that shadow the catalog
// are never called by collect, check, apply or the daemon in apply mode, and nobody's role
// changes: on PostgreSQL 14 by a plain LOGIN role in the postgres database (public writable by
// all), and on 14, 15 and 16 by the owner of the DSN's database who puts public first in its
// search_path. It failed on b4517f4: mallory became superuser through to_jsonb and pg_has_role.
func TestSearchPathHijack(t *testing.T) {
	lab.RequireServer(t)
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	for _, tc := range []struct {
		major    int
		ownDB    bool
		checkToo bool
	}{{14, false, true}, {14, true, false}, {15, true, false}, {16, true, true}} {
		t.Run(fmt.Sprintf("pg%d/own-db=%v", tc.major, tc.ownDB), func(t *testing.T) {
			t.Parallel()
			bin := lab.RequireVersion(t, tc.major)
			c := lab.NewTestCluster(t, lab.ClusterOptions{BinDir: bin, Settings: map[string]string{"bgwriter_flush_after": "0"}})
			h := plantHijack(t, c, tc.ownDB)
			dir := t.TempDir()
			journal := filepath.Join(dir, "apply.journal")
			// Only the one PostgreSQL setting: the host's kernel settings stay as they are.
			common := []string{"--dsn", h.dsn(), "--apply.journal", journal, "--apply.settings", "bgwriter_flush_after",
				"--apply.sysctl-file", sysctlFileIn(t, dir)}
			if _, stderr, code := runCLI(t, "collect", "--dsn", h.dsn()); code != 0 {
				t.Errorf("collect exited %d: %s", code, stderr)
			}
			h.check(t, "collect")
			if tc.checkToo {
				// check reads through the same collector as run below, for 30 s: twice is enough.
				if _, stderr, code := runCLI(t, "check", "--dsn", h.dsn(), "--window", "30s", "--interval", "1s"); code != 0 && code != 1 {
					t.Errorf("check exited %d: %s", code, stderr)
				}
				h.check(t, "check")
			}
			out, stderr, code := runCLI(t, append([]string{"apply", "--yes", "--window", "2s", "--interval", "1s"}, common...)...)
			if code != 0 || !strings.Contains(out, "bgwriter_flush_after") {
				t.Errorf("apply --yes exited %d (want 0, changing bgwriter_flush_after):\n%s\n%s", code, out, stderr)
			}
			h.check(t, "apply --yes")
			if _, stderr, code := runCLI(t, "rollback", "--all", "--journal", journal, "--dsn", h.dsn()); code != 0 {
				t.Errorf("rollback --all exited %d: %s", code, stderr)
			}
			h.check(t, "rollback --all")
			d := startRun(t, append([]string{"--apply", "on", "--interval", "1s"}, common...)...)
			time.Sleep(8 * time.Second)
			if code, _ := d.stop(); code != 0 {
				t.Errorf("run exited %d:\n%s", code, d.stderr)
			}
			h.check(t, "run --apply on for 8s")
		})
	}
}

// TestStandbyRefusalHijack: on a real standby whose database owner made pg_is_in_recovery()
// return false and shadowed pg_settings (issue 33, row 2), apply still refuses: exit 3 naming the
// standby, and nothing written into the standby's postgresql.auto.conf.
func TestStandbyRefusalHijack(t *testing.T) {
	// Waits on servers more than it computes: beside the other tests that do.
	t.Parallel()
	primary := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"bgwriter_flush_after": "0"}})
	h := plantHijack(t, primary, true)
	standby := lab.NewTestStandby(t, primary)
	dsn := standby.DSN() + " dbname=app"
	dir := t.TempDir()
	journal := filepath.Join(dir, "apply.journal")
	out, stderr, code := runCLI(t, "apply", "--yes", "--dsn", dsn, "--window", "2s", "--interval", "1s",
		"--apply.journal", journal, "--apply.sysctl-file", sysctlFileIn(t, dir))
	if code != 3 || !strings.Contains(stderr, "standby (in recovery)") {
		t.Errorf("apply --yes on a hijacked standby: exit %d, stderr %q; want 3 naming the standby\n%s", code, stderr, out)
	}
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("apply on a standby wrote the journal (%v)", err)
	}
	if b, _ := os.ReadFile(filepath.Join(standby.DataDir(), "postgresql.auto.conf")); strings.Contains(string(b), "bgwriter_flush_after") {
		t.Errorf("the standby's postgresql.auto.conf was written:\n%s", b)
	}
	out, stderr, code = runCLI(t, "collect", "--format", "json", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, `"in_recovery": true`) {
		t.Errorf("collect on the hijacked standby: exit %d, want in_recovery true:\n%s\n%s", code, out, stderr)
	}
	h.check(t, "apply and collect on the standby")
}
