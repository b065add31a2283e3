package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// The integration tests start throwaway clusters (internal/lab): each test function has its
// own and they run in parallel; TestIntegration shares one cluster among its subtests.

func newCollector(t *testing.T, dsn string, opts Options) *Collector {
	t.Helper()
	opts.Logger = zaptest.NewLogger(t)
	c := New(dsn, opts)
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func collect(t *testing.T, c *Collector) *collector.Postgres {
	t.Helper()
	pg, err := c.Collect(context.Background())
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return pg
}

// roleDSN connects to the cluster's unix socket as role.
func roleDSN(cl *lab.Cluster, role string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable", cl.SocketDir(), cl.Port(), role)
}

func sizeBytes(t *testing.T, cl *lab.Cluster, setting string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := cl.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var b int64
	// pg_size_bytes parses SHOW's form on the server: an independent check of the collector's units.
	if err := conn.QueryRow(ctx, "SELECT pg_size_bytes(current_setting($1))", setting).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

func hasNote(pg *collector.Postgres, parts ...string) bool {
	for _, n := range pg.Notes {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(n, p)
		}
		if all {
			return true
		}
	}
	return false
}

func TestIntegration(t *testing.T) {
	t.Parallel()
	cl := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()

	t.Run("superuser", func(t *testing.T) {
		c := newCollector(t, cl.DSN(), Options{})
		pg := collect(t, c)
		if pg.VersionNum < 140000 || pg.Version == "" {
			t.Errorf("version = %d %q, want 14 or later", pg.VersionNum, pg.Version)
		}
		if pg.InRecovery || time.Since(pg.StartTime) > 10*time.Minute || time.Since(pg.StartTime) < 0 {
			t.Errorf("in recovery %v, started %s; want a primary started just now", pg.InRecovery, pg.StartTime)
		}
		// The insert LSN moves with WAL inserted by a transaction that has not ended yet.
		if pg.WALInsertLSN == nil || *pg.WALInsertLSN == 0 {
			t.Fatalf("wal_insert_lsn = %v on a primary, want a position", pg.WALInsertLSN)
		}
		if err := cl.Exec(ctx, "CREATE TABLE lsn_probe AS SELECT generate_series(1, 10000) AS i"); err != nil {
			t.Fatal(err)
		}
		if after := collect(t, c).WALInsertLSN; after == nil || *after <= *pg.WALInsertLSN {
			t.Errorf("wal_insert_lsn %v after writing WAL, want more than %d", after, *pg.WALInsertLSN)
		}
		for _, name := range collector.SettingNames() {
			if _, ok := pg.Settings[name]; !ok && name != collector.DebugIODirect { // debug_io_direct is 16+
				t.Errorf("setting %s missing", name)
			}
		}
		for _, name := range []string{collector.SharedBuffers, collector.WALBuffers, collector.MaxWALSize, collector.WALWriterFlushAfter} {
			s := pg.Settings[name]
			if want := sizeBytes(t, cl, name); s.Bytes == nil || *s.Bytes != want {
				t.Errorf("%s = %q: Bytes %v, want %d", name, s.Value, deref(s.Bytes), want)
			}
		}
		if s := pg.Settings[collector.CheckpointTimeout]; s.Seconds == nil || *s.Seconds != 300 || s.Value != "5min" {
			t.Errorf("checkpoint_timeout = %q, %v seconds; want 5min, 300", s.Value, deref(s.Seconds))
		}
		if s := pg.Settings[collector.WALWriterDelay]; s.Seconds == nil || *s.Seconds != 0.2 {
			t.Errorf("wal_writer_delay = %v seconds, want 0.2", deref(s.Seconds))
		}
		if s := pg.Settings[collector.WALSyncMethod]; !slices.Contains(s.EnumVals, s.Value) || !slices.Contains(s.EnumVals, "open_datasync") {
			t.Errorf("wal_sync_method = %q, accepted %v", s.Value, s.EnumVals)
		}
		if s := pg.Settings[collector.WALBuffers]; s.Context != "postmaster" || s.Source == "" || s.Unit != "8kB" {
			t.Errorf("wal_buffers = %+v, want context postmaster, a source and unit 8kB", s)
		}
		wantData, _ := filepath.EvalSymlinks(cl.DataDir())
		gotData, _ := filepath.EvalSymlinks(pg.DataDir)
		if gotData != wantData {
			t.Errorf("DataDir = %q, want %q", pg.DataDir, cl.DataDir())
		}
		if want := filepath.Join(wantData, "pg_wal"); pg.WALDir != want {
			t.Errorf("WALDir = %q, want %q", pg.WALDir, want)
		}
		if pg.WAL == nil || pg.WAL.Records == 0 || pg.WAL.Bytes == 0 {
			t.Errorf("WAL = %+v, want counters", pg.WAL)
		}
		if pg.Checkpointer == nil || pg.Checkpointer.Done != nil {
			t.Errorf("Checkpointer = %+v, want pg_stat_bgwriter's counters", pg.Checkpointer)
		}
		if pg.WaitEvents != nil {
			t.Errorf("WaitEvents = %+v without sampling, want nil", pg.WaitEvents)
		}
		if len(pg.Notes) > 0 {
			t.Errorf("Notes = %q, want none for a superuser", pg.Notes)
		}
	})

	t.Run("wal dir override", func(t *testing.T) {
		dir := t.TempDir()
		pg := collect(t, newCollector(t, cl.DSN(), Options{WALDir: dir}))
		if want, _ := filepath.EvalSymlinks(dir); pg.WALDir != want {
			t.Errorf("WALDir = %q, want --wal-dir %q", pg.WALDir, want)
		}
	})

	if err := cl.Exec(ctx, "CREATE ROLE advisor LOGIN; GRANT pg_monitor TO advisor; CREATE ROLE nopriv LOGIN"); err != nil {
		t.Fatal(err)
	}

	t.Run("pg_monitor role", func(t *testing.T) {
		c := newCollector(t, roleDSN(cl, "advisor"), Options{})
		if err := c.SampleWaitEvents(ctx); err != nil {
			t.Fatalf("SampleWaitEvents: %v", err)
		}
		pg := collect(t, c)
		if pg.DataDir == "" || pg.WALDir == "" || pg.WAL == nil || pg.Checkpointer == nil || pg.WaitEvents == nil {
			t.Errorf("got %+v, want everything", pg)
		}
		if _, ok := pg.Settings[collector.DataDirectory]; !ok {
			t.Error("data_directory missing")
		}
		if len(pg.Notes) > 0 {
			t.Errorf("Notes = %q, want none with pg_monitor", pg.Notes)
		}
	})

	t.Run("role without pg_monitor", func(t *testing.T) {
		c := newCollector(t, roleDSN(cl, "nopriv"), Options{})
		if err := c.SampleWaitEvents(ctx); err != nil {
			t.Fatalf("SampleWaitEvents: %v", err)
		}
		pg := collect(t, c)
		if pg.WAL == nil || pg.Checkpointer == nil || pg.Settings[collector.WALBuffers].Bytes == nil {
			t.Errorf("got %+v, want the statistics and settings that are public", pg)
		}
		if pg.DataDir != "" || pg.WALDir != "" {
			t.Errorf("DataDir %q, WALDir %q: want them hidden", pg.DataDir, pg.WALDir)
		}
		if !hasNote(pg, "data_directory is hidden", "GRANT pg_monitor TO nopriv", "--wal-dir") {
			t.Errorf("Notes = %q, want one about data_directory, pg_monitor and --wal-dir", pg.Notes)
		}
		if !hasNote(pg, "only its own sessions", "GRANT pg_monitor TO nopriv") {
			t.Errorf("Notes = %q, want one about pg_stat_activity", pg.Notes)
		}

		// --wal-dir stands in for data_directory.
		dir := t.TempDir()
		pg = collect(t, newCollector(t, roleDSN(cl, "nopriv"), Options{WALDir: dir}))
		if want, _ := filepath.EvalSymlinks(dir); pg.WALDir != want || hasNote(pg, "data_directory is hidden") {
			t.Errorf("WALDir = %q, Notes %q; want %q and no data_directory note", pg.WALDir, pg.Notes, want)
		}
	})

	t.Run("permission denied is partial", func(t *testing.T) {
		if err := cl.Exec(ctx, "REVOKE SELECT ON pg_catalog.pg_stat_wal, pg_catalog.pg_stat_activity FROM PUBLIC"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := cl.Exec(ctx, "GRANT SELECT ON pg_catalog.pg_stat_wal, pg_catalog.pg_stat_activity TO PUBLIC"); err != nil {
				t.Error(err)
			}
		})
		c := newCollector(t, roleDSN(cl, "nopriv"), Options{})
		err := c.SampleWaitEvents(ctx)
		if err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "GRANT pg_monitor TO nopriv") {
			t.Errorf("SampleWaitEvents = %v, want permission denied with the GRANT to run", err)
		}
		pg := collect(t, c)
		if pg.WAL != nil || pg.Checkpointer == nil || len(pg.Settings) == 0 {
			t.Errorf("got WAL %+v, Checkpointer %+v, %d settings; want only WAL missing", pg.WAL, pg.Checkpointer, len(pg.Settings))
		}
		if !hasNote(pg, "read pg_stat_wal", "permission denied", "GRANT pg_monitor TO nopriv") {
			t.Errorf("Notes = %q, want one about pg_stat_wal", pg.Notes)
		}
		if !hasNote(pg, "1 wait-event samples failed", "pg_stat_activity") {
			t.Errorf("Notes = %q, want one about the failed sample", pg.Notes)
		}
	})

	t.Run("bad roles and databases", func(t *testing.T) {
		tests := []struct {
			name, dsn, want string
		}{
			{"unknown user", roleDSN(cl, "nosuchuser"), "check the user/password in --dsn or ~/.pgpass"},
			{"unknown database", fmt.Sprintf("host=%s port=%d user=postgres dbname=nosuchdb", cl.SocketDir(), cl.Port()), "check dbname in --dsn"},
		}
		for _, tt := range tests {
			_, err := newCollector(t, tt.dsn, Options{}).Collect(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: Collect = %v, want an error saying %q", tt.name, err, tt.want)
			}
		}
	})

	t.Run("password authentication", func(t *testing.T) {
		hba := filepath.Join(cl.DataDir(), "pg_hba.conf")
		old, err := os.ReadFile(hba)
		if err != nil {
			t.Fatal(err)
		}
		// pg_hba.conf is read top down: this line wins for pwuser over TCP.
		if err := os.WriteFile(hba, append([]byte("host all pwuser 127.0.0.1/32 scram-sha-256\n"), old...), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := cl.Exec(ctx, "CREATE ROLE pwuser LOGIN PASSWORD 'right-pass'; GRANT pg_monitor TO pwuser"); err != nil {
			t.Fatal(err)
		}
		if err := cl.Reload(ctx); err != nil {
			t.Fatal(err)
		}
		tcp := fmt.Sprintf("host=127.0.0.1 port=%d user=pwuser dbname=postgres sslmode=disable", cl.Port())

		for _, dsn := range []string{
			tcp + " password=sekrit",
			fmt.Sprintf("postgres://pwuser:sekrit@127.0.0.1:%d/postgres?sslmode=disable", cl.Port()),
		} {
			_, err := newCollector(t, dsn, Options{}).Collect(ctx)
			if err == nil || !strings.Contains(err.Error(), "check the user/password in --dsn or ~/.pgpass") {
				t.Errorf("Collect = %v, want an authentication failure", err)
			}
			if err != nil && strings.Contains(err.Error(), "sekrit") {
				t.Errorf("error %q contains the password", err)
			}
		}

		// A password file (~/.pgpass by default) supplies the password, as with psql.
		passfile := filepath.Join(t.TempDir(), "pgpass")
		if err := os.WriteFile(passfile, fmt.Appendf(nil, "127.0.0.1:%d:*:pwuser:right-pass\n", cl.Port()), 0o600); err != nil {
			t.Fatal(err)
		}
		pg := collect(t, newCollector(t, tcp+" passfile="+passfile, Options{}))
		if pg.WAL == nil {
			t.Errorf("WAL = nil with the password from the password file")
		}
	})

	t.Run("wait events under load", func(t *testing.T) {
		if err := cl.Exec(ctx, "CREATE TABLE commits (id bigserial PRIMARY KEY, v int)"); err != nil {
			t.Fatal(err)
		}
		c := newCollector(t, roleDSN(cl, "advisor"), Options{})
		loadCtx, stop := context.WithTimeout(ctx, 2*time.Second)
		defer stop()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				conn, err := cl.Connect(loadCtx)
				if err != nil {
					return
				}
				defer conn.Close(context.Background())
				for loadCtx.Err() == nil {
					_, _ = conn.Exec(loadCtx, "INSERT INTO commits (v) VALUES (1)")
				}
			})
		}
		// The sampler and Collect run from different goroutines, as in the daemon.
		var total collector.WaitEvents
		wg.Go(func() {
			for loadCtx.Err() == nil {
				if err := c.SampleWaitEvents(loadCtx); err != nil && loadCtx.Err() == nil {
					t.Errorf("SampleWaitEvents: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		add := func(pg *collector.Postgres) {
			if w := pg.WaitEvents; w != nil {
				total.Samples += w.Samples
				total.ActiveBackends += w.ActiveBackends
				if total.Counts == nil {
					total.Counts = map[string]int64{}
				}
				for k, n := range w.Counts {
					total.Counts[k] += n
				}
			}
		}
		for loadCtx.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			add(collect(t, c))
		}
		wg.Wait()
		add(collect(t, c))
		t.Logf("wait events: %+v", total)
		if total.Samples == 0 || total.ActiveBackends == 0 {
			t.Errorf("wait events = %+v, want samples that saw active backends", total)
		}
		if pg := collect(t, c); pg.WaitEvents != nil {
			t.Errorf("WaitEvents = %+v after the tally was taken, want nil", pg.WaitEvents)
		}
	})

	// The 17 and 18 queries run through pgx against stand-ins for the views this server lacks
	// (pg_stat_checkpointer, pg_stat_io), with those versions' columns: this checks their SQL and
	// the jsonb scanning end to end; TestStatsByVersion checks the parsing of full rows.
	t.Run("17 and 18 queries against stand-in views", func(t *testing.T) {
		err := cl.Exec(ctx, `
CREATE VIEW public.pg_stat_checkpointer AS SELECT 100::bigint AS num_timed, 7::bigint AS num_requested,
  90::bigint AS num_done, 0::bigint AS restartpoints_timed, 0::bigint AS restartpoints_req, 0::bigint AS restartpoints_done,
  1500.5::float8 AS write_time, 20::float8 AS sync_time, 4242::bigint AS buffers_written, 3::bigint AS slru_written,
  now() AS stats_reset;
CREATE VIEW public.pg_stat_io AS SELECT * FROM (VALUES
  ('client backend', 'wal', 'normal', 10::bigint, 1.5::float8, 4::bigint, 2.5::float8),
  ('client backend', 'wal', 'init', 2::bigint, 7::float8, 2::bigint, 9::float8),
  ('walwriter', 'wal', 'normal', 30::bigint, 0.5::float8, 20::bigint, NULL::float8),
  ('client backend', 'relation', 'normal', 99::bigint, 99::float8, 99::bigint, 99::float8)
) AS v(backend_type, object, context, writes, write_time, fsyncs, fsync_time), LATERAL (SELECT now() AS stats_reset) r`)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := cl.Exec(ctx, "DROP VIEW public.pg_stat_checkpointer, public.pg_stat_io"); err != nil {
				t.Error(err)
			}
		})
		conn, err := cl.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)

		// The queries name pg_catalog's views; the stand-ins live in public.
		standIn := strings.NewReplacer("pg_catalog.pg_stat_checkpointer", "public.pg_stat_checkpointer", "pg_catalog.pg_stat_io", "public.pg_stat_io").Replace
		for _, v := range []int{170000, 180000} {
			var row []byte
			if err := conn.QueryRow(ctx, standIn(checkpointQuery(v))).Scan(&row); err != nil {
				t.Fatalf("checkpointQuery(%d): %v", v, err)
			}
			cp, err := parseCheckpoints(v, row)
			if err != nil || cp.Timed != 100 || cp.BuffersWritten != 4242 || cp.WriteTimeSeconds != 1.5005 || cp.StatsReset.IsZero() {
				t.Errorf("parseCheckpoints(%d) = %+v, %v", v, cp, err)
			}
			if v >= 180000 && (cp.Done == nil || *cp.Done != 90) {
				t.Errorf("version %d: Done = %v, want 90", v, deref(cp.Done))
			}
		}

		// On 18 pg_stat_wal has no wal_write; this server's extra columns are ignored.
		var walRow, ioRows []byte
		if err := conn.QueryRow(ctx, standIn(walStatsQuery(180000))).Scan(&walRow, &ioRows); err != nil {
			t.Fatalf("walStatsQuery(180000): %v", err)
		}
		w, err := parseWAL(180000, walRow, ioRows)
		if err != nil || w.Writes != 40 || w.Syncs != 24 || w.WriteTimeSeconds != 0.002 || w.SyncTimeSeconds != 0.0025 || w.Records == 0 {
			t.Errorf("parseWAL(18) = %+v, %v; want writes 40, syncs 24, 2ms, 2.5ms", w, err)
		}
	})

	// Last: it restarts the server.
	t.Run("reconnect after restart", func(t *testing.T) {
		c := newCollector(t, cl.DSN(), Options{})
		before := collect(t, c)
		if err := cl.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		after := collect(t, c)
		if !after.StartTime.After(before.StartTime) {
			t.Errorf("start time %s after a restart, was %s", after.StartTime, before.StartTime)
		}
	})
}

func TestIntegrationWALOnTmpfs(t *testing.T) {
	t.Parallel()
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("no /dev/shm")
	}
	parent, err := os.MkdirTemp("/dev/shm", "pgwal-test-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the cluster's cleanup, so it runs after the server has stopped.
	t.Cleanup(func() { os.RemoveAll(parent) })
	// The postgres user must traverse it.
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	walDir := filepath.Join(parent, "wal")
	cl := lab.NewTestCluster(t, lab.ClusterOptions{WALDir: walDir})

	pg := collect(t, newCollector(t, cl.DSN(), Options{}))
	want, err := filepath.EvalSymlinks(walDir)
	if err != nil {
		t.Fatal(err)
	}
	if pg.WALDir != want {
		t.Errorf("WALDir = %q, want the tmpfs directory %q (pg_wal is a symlink to it)", pg.WALDir, want)
	}
}

func TestIntegrationFsyncOff(t *testing.T) {
	t.Parallel()
	cl := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"fsync": "off"}})
	pg := collect(t, newCollector(t, cl.DSN(), Options{}))
	if s := pg.Settings[collector.Fsync]; s.Value != "off" || s.Source != "configuration file" {
		t.Errorf("fsync = %+v, want off from the configuration file", s)
	}
}

func TestIntegrationWALBuffersFull(t *testing.T) {
	t.Parallel()
	cl := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"wal_buffers": "64kB"}})
	ctx := context.Background()
	if _, err := cl.BulkInsert(ctx, "bulk", 200_000); err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, cl.DSN(), Options{})
	// The inserting backend flushes its statistics as it exits, a moment after its connection closed.
	var pg *collector.Postgres
	for deadline := time.Now().Add(10 * time.Second); ; {
		pg = collect(t, c)
		if pg.WAL != nil && pg.WAL.BuffersFull > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s := pg.Settings[collector.WALBuffers]; s.Bytes == nil || *s.Bytes != 64<<10 || s.Value != "64kB" {
		t.Errorf("wal_buffers = %+v, want 64kB", s)
	}
	if w := pg.WAL; w == nil || w.BuffersFull == 0 || w.Writes == 0 || w.Bytes == 0 {
		t.Errorf("WAL = %+v, want buffers_full, writes and bytes after a bulk insert", w)
	}
}
