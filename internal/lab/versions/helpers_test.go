package versions

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// collectOnce runs collect --format json once and decodes it.
func collectOnce(t *testing.T, bin string, dsn []string) map[string]any {
	t.Helper()
	out, stderr, code := advisor(t, bin, append([]string{"collect", "--format", "json"}, dsn...)...)
	if code != 0 {
		t.Fatalf("collect exited %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("collect printed no JSON: %v\n%s", err, out)
	}
	if notes, ok := lookup(doc, ".postgres.notes"); ok {
		// A note is what the collector could not read: on a superuser's connection to a version
		// it supports there must be none.
		t.Errorf("collect has notes: %v", notes)
	}
	return doc
}

// lookup reads a dotted path from decoded JSON; a JSON null counts as absent.
func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, key := range strings.Split(strings.TrimPrefix(path, "."), ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[key]; !ok {
			return nil, false
		}
	}
	return cur, cur != nil
}

func number(t *testing.T, doc map[string]any, path string) float64 {
	t.Helper()
	v, ok := lookup(doc, path)
	f, isNum := v.(float64)
	if !ok || !isNum {
		t.Errorf("%s = %v (present %v), want a number", path, v, ok)
	}
	return f
}

// checkContract checks every path README lists for collect --format json.
func checkContract(t *testing.T, doc map[string]any, major int, walDir string) {
	t.Helper()
	if v := int(number(t, doc, ".postgres.version_num")); v/10000 != major {
		t.Errorf(".postgres.version_num = %d, want %d.x", v, major)
	}
	for path, want := range map[string]any{
		".postgres.settings.wal_buffers.value":     "64kB",
		".postgres.settings.wal_buffers.bytes":     float64(65536),
		".postgres.settings.wal_sync_method.value": "open_datasync",
		".postgres.settings.fsync.value":           "on",
		".postgres.wal_dir":                        walDir,
	} {
		if got, _ := lookup(doc, path); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	for _, knob := range []string{"dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes", "dirty_expire_centisecs", "dirty_writeback_centisecs"} {
		number(t, doc, ".kernel.vm."+knob)
	}
	number(t, doc, ".kernel.meminfo.dirty_bytes")
	if fs, _ := lookup(doc, ".wal_storage.fs_type"); fs == "" || fs == nil {
		t.Errorf(".wal_storage.fs_type is empty")
	}
	if opts, _ := lookup(doc, ".wal_storage.mount_options"); opts == nil {
		t.Errorf(".wal_storage.mount_options is missing")
	}
	// Unknown on a FUSE file system (no block device), so present but null or empty.
	for _, key := range []string{"rotational", "write_cache"} {
		if m, _ := doc["wal_storage"].(map[string]any); m != nil {
			if _, ok := m[key]; !ok {
				t.Errorf(".wal_storage.%s is missing", key)
			}
		}
	}
}

// checkWALCounters checks collect's writes, syncs and buffers-full against the view's counters
// read just before and after it; all must be positive but syncs under open_datasync.
func checkWALCounters(t *testing.T, doc map[string]any, view string, before, after [3]int64, openDatasync bool) {
	t.Helper()
	for i, name := range []string{"writes", "syncs", "buffers_full"} {
		got := int64(number(t, doc, ".postgres.wal."+name))
		if got < before[i] || got > after[i] {
			t.Errorf(".postgres.wal.%s = %d, want it within %s's %d..%d read around it", name, got, view, before[i], after[i])
		}
		if got <= 0 && !(name == "syncs" && openDatasync) {
			t.Errorf(".postgres.wal.%s = %d under load, want it positive", name, got)
		}
	}
}

// readWALCounters reads writes, syncs and buffers-full straight from the view the version keeps
// them in: pg_stat_wal up to 17; from 18 writes and syncs are pg_stat_io's object 'wal', context
// 'normal' (what 14-17 counted; 'init' is new-segment zero-filling).
func readWALCounters(t *testing.T, c *lab.Cluster, major int) [3]int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	q := "SELECT wal_write, wal_sync, wal_buffers_full FROM pg_stat_wal"
	if major >= walIOMajor {
		q = "SELECT sum(writes)::bigint, sum(fsyncs)::bigint, (SELECT wal_buffers_full FROM pg_stat_wal) FROM pg_stat_io WHERE object = 'wal' AND context = 'normal'"
	}
	var v [3]int64
	if err := conn.QueryRow(ctx, q).Scan(&v[0], &v[1], &v[2]); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// readRequestedCheckpoints reads the requested checkpoints from pg_stat_bgwriter (up to 16) or
// pg_stat_checkpointer (17+).
func readRequestedCheckpoints(t *testing.T, c *lab.Cluster, major int) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	q := "SELECT checkpoints_req FROM pg_stat_bgwriter"
	if major >= checkpointerMajor {
		q = "SELECT num_requested FROM pg_stat_checkpointer"
	}
	var n int64
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitNames records the IO wait events of client backends as the server names them.
type waitNames struct {
	mu   sync.Mutex
	seen map[string]bool
}

// sample polls pg_stat_activity until ctx ends.
func (w *waitNames) sample(ctx context.Context, t *testing.T, c *lab.Cluster) {
	conn, err := c.Connect(ctx)
	if err != nil {
		if ctx.Err() == nil {
			t.Errorf("wait-event sampler: %v", err)
		}
		return
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rows, err := conn.Query(ctx, "SELECT wait_event FROM pg_stat_activity WHERE backend_type = 'client backend' AND wait_event_type = 'IO' AND pid <> pg_backend_pid()")
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("wait-event sampler: %v", err)
			}
			return
		}
		for rows.Next() {
			var name string
			if rows.Scan(&name) == nil {
				w.mu.Lock()
				w.seen[name] = true
				w.mu.Unlock()
			}
		}
		rows.Close()
	}
}

func (w *waitNames) has(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[name]
}

func (w *waitNames) names() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for n := range w.seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// checkFixtures compares the columns of the collector's test fixtures for this version
// (collector/postgres/testdata/pg<major>, most of them written from the documentation) with the
// columns the server's views really have, so that the parser tests run on rows a server of that
// version could return.
func checkFixtures(t *testing.T, c *lab.Cluster, major int) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "..", "collector", "postgres", "testdata", fmt.Sprintf("pg%d", major), "*.json"))
	if len(files) == 0 {
		t.Fatalf("no collector fixtures for PostgreSQL %d", major)
	}
	ctx := context.Background()
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, f := range files {
		view := strings.TrimSuffix(filepath.Base(f), ".json")
		q := fmt.Sprintf("SELECT to_jsonb(v) FROM %s v LIMIT 1", view)
		if view == "pg_stat_io_wal" {
			q = "SELECT to_jsonb(v) FROM pg_stat_io v WHERE v.object = 'wal' LIMIT 1"
		}
		var live map[string]any
		if err := conn.QueryRow(ctx, q).Scan(&live); err != nil {
			t.Errorf("%s: %v", q, err)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if json.Unmarshal(b, &rows) != nil {
			var row map[string]any
			if err := json.Unmarshal(b, &row); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			rows = []map[string]any{row}
		}
		want := slices.Sorted(maps.Keys(live))
		for i, row := range rows {
			if got := slices.Sorted(maps.Keys(row)); !slices.Equal(got, want) {
				t.Errorf("fixture %s (row %d) has the columns %v; PostgreSQL %d's %s has %v", f, i, got, major, view, want)
			}
		}
	}
}

// checkFullPageImages: full-page-images judges on every version of the matrix, from
// pg_stat_wal's wal_records, wal_fpi and wal_bytes (all in 14-18; 18 moved the write and sync
// counters to pg_stat_io, not these). Under seed 001's bulk insert images are few, so it judges
// without a finding or with one; a recommendation of wal_compression names a value the version
// takes: on for 14's boolean, a method for 15+.
func checkFullPageImages(t *testing.T, res checkResult, major int) {
	t.Helper()
	// The binary is built from this tree: with the rule in its set, a rule absent from
	// not_enough_data judged.
	if !slices.ContainsFunc(rules.All(), func(r rules.Rule) bool { return r.ID == "full-page-images" }) {
		t.Fatal("full-page-images is not in rules.All()")
	}
	if why, ok := res.NotEnoughData["full-page-images"]; ok {
		t.Errorf("full-page-images did not judge on PostgreSQL %d: %s", major, why)
	}
	for _, f := range res.Findings {
		if f.Rule != "full-page-images" || f.Setting != "wal_compression" {
			continue
		}
		want := []string{"lz4", "zstd", "pglz"}
		if major < compressionEnumMajor {
			want = []string{"on"}
		}
		if !slices.Contains(want, f.Recommended) {
			t.Errorf("PostgreSQL %d: full-page-images recommends wal_compression=%s, want one of %v", major, f.Recommended, want)
		}
	}
}

// checkCompressionSetting: collect reports wal_compression with the values the server accepts
// (pg_settings.enumvals): none on 14, whose setting is a boolean; pglz and off from 15 (lz4 and
// zstd only where the build has them), which is what full-page-images picks its method from.
func checkCompressionSetting(t *testing.T, doc map[string]any, major int) {
	t.Helper()
	if v, _ := lookup(doc, ".postgres.settings.wal_compression.value"); v != "off" {
		t.Errorf(".postgres.settings.wal_compression.value = %v, want off", v)
	}
	vals, _ := lookup(doc, ".postgres.settings.wal_compression.enumvals")
	list, _ := vals.([]any)
	if major < compressionEnumMajor {
		if len(list) != 0 {
			t.Errorf("PostgreSQL %d: wal_compression enumvals = %v, want none (a boolean)", major, list)
		}
		return
	}
	if !slices.Contains(list, any("pglz")) || !slices.Contains(list, any("off")) {
		t.Errorf("PostgreSQL %d: wal_compression enumvals = %v, want pglz and off among them", major, list)
	}
}
