package walimages

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// TestRecentRealServers reads a segment each server version wrote under pgbench and checks it
// against the server: on Debian's PostgreSQL its records and images' bytes are pg_waldump's to
// the byte; on every version its images are pg_stat_wal's count of them, and with
// wal_compression=pglz every image is pglz's and smaller than its page.
func TestRecentRealServers(t *testing.T) {
	for _, major := range lab.MatrixVersions() {
		t.Run(fmt.Sprintf("pg%d", major), func(t *testing.T) {
			t.Parallel()
			dir := lab.RequireVersion(t, major)
			c := lab.NewTestCluster(t, lab.ClusterOptions{BinDir: dir, Settings: map[string]string{"autovacuum": "off", "shared_buffers": "16MB"}})
			ctx := context.Background()
			if out, err := c.Command(ctx, "pgbench", "-i", "-q", "-s", "3").CombinedOutput(); err != nil {
				t.Fatalf("pgbench -i: %v: %s", err, out)
			}
			for _, method := range []string{"off", "pglz"} {
				seg, fpi, records := segmentUnderLoad(t, c, major, method)
				if seg.Stop != "end of segment" && seg.Stop != "end of WAL (zeros)" {
					t.Errorf("%s: stopped at %d: %s", method, seg.End, seg.Stop)
				}
				// The switch record and a checkpoint's running-xacts record may fall on either side.
				if d := seg.Records - int(records); d < -3 || d > 3 {
					t.Errorf("%s: %d records, pg_stat_wal counted %d", method, seg.Records, records)
				}
				if len(seg.Images) != int(fpi) || fpi < 100 {
					t.Errorf("%s: %d images, pg_stat_wal counted %d (the load should make hundreds)", method, len(seg.Images), fpi)
				}
				for _, im := range seg.Images {
					want := ""
					if method == "pglz" && im.Method == "" {
						continue // pglz gave up on this page: PostgreSQL wrote it as it is
					}
					if method == "pglz" {
						want = MethodPGLZ
					}
					if im.Method != want || im.Stored > im.Raw || len(im.Data) != im.Stored {
						t.Fatalf("%s: image %+v", method, Image{Method: im.Method, Stored: im.Stored, Raw: im.Raw})
					}
				}
				t.Logf("PostgreSQL %d, wal_compression=%s: %d records, %d images, %d of %d bytes images", major, method,
					seg.Records, len(seg.Images), seg.ImageBytes(), seg.RecordBytes)
			}
		})
	}
}

// segmentUnderLoad switches to a new segment, runs pgbench in it and switches again, and
// returns the segment's reading and pg_stat_wal's images and records over the load.
func segmentUnderLoad(t *testing.T, c *lab.Cluster, major int, method string) (Segment, int64, int64) {
	t.Helper()
	ctx := context.Background()
	value := method
	if major < 15 && method == "pglz" {
		value = "on"
	}
	for _, q := range []string{"ALTER SYSTEM SET wal_compression = '" + value + "'", "SELECT pg_reload_conf()", "CHECKPOINT", "SELECT pg_switch_wal()"} {
		if err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var fpi0, rec0, fpi1, rec1 int64
	var start uint64
	if err := conn.QueryRow(ctx, "SELECT wal_fpi, wal_records, pg_current_wal_insert_lsn() - '0/0' FROM pg_stat_wal").Scan(&fpi0, &rec0, &start); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Command(ctx, "pgbench", "-n", "-c", "2", "-t", "200").CombinedOutput(); err != nil {
		t.Fatalf("pgbench: %v: %s", err, out)
	}
	// The backends report their counters as they exit, after pgbench has returned (and on 14
	// through the statistics collector): read until two readings a second apart agree.
	for i := 0; i < 10; i++ {
		f, r := fpi1, rec1
		if err := conn.QueryRow(ctx, "SELECT wal_fpi, wal_records FROM pg_stat_wal").Scan(&fpi1, &rec1); err != nil {
			t.Fatal(err)
		}
		if i > 0 && f == fpi1 && r == rec1 {
			break
		}
		time.Sleep(time.Second)
	}
	var end uint64
	if err := conn.QueryRow(ctx, "SELECT pg_switch_wal() - '0/0'").Scan(&end); err != nil {
		t.Fatal(err)
	}
	if end/(16<<20) != start/(16<<20) {
		t.Fatalf("the load's WAL (%d bytes) did not fit in one segment", end-start)
	}
	// Recent reads the segment before the one holding the position given: the next one's start.
	next := (start/(16<<20) + 1) * (16 << 20)
	seg, name, err := Recent(filepath.Join(c.DataDir(), "pg_wal"), next, 0, 8192, major*10000)
	if err != nil {
		t.Fatal(err)
	}
	// Only a file begun at or after the position given is read.
	if _, _, err := Recent(filepath.Join(c.DataDir(), "pg_wal"), next, next-(16<<20)+1, 8192, major*10000); !errors.Is(err, ErrNotYet) {
		t.Errorf("a file begun before notBefore: %v, want ErrNotYet", err)
	}
	if _, again, err := Recent(filepath.Join(c.DataDir(), "pg_wal"), next, next-(16<<20), 8192, major*10000); err != nil || again != name {
		t.Errorf("a file begun at notBefore: %s, %v; want %s read", again, err, name)
	}
	if major == 15 {
		checkWaldump(t, c, name, seg)
	}
	return seg, fpi1 - fpi0, rec1 - rec0
}

// checkWaldump compares a segment's reading with pg_waldump --stats over the same file.
func checkWaldump(t *testing.T, c *lab.Cluster, name string, seg Segment) {
	t.Helper()
	out, err := c.Command(context.Background(), "pg_waldump", "--stats", filepath.Join(c.DataDir(), "pg_wal", name)).CombinedOutput()
	m := regexp.MustCompile(`(?m)^Total\s+(\d+)\s+(\d+)\s+\[[^]]*\]\s+(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("pg_waldump: %v: %s", err, out)
	}
	records, _ := strconv.Atoi(string(m[1]))
	recordBytes, _ := strconv.ParseInt(string(m[2]), 10, 64)
	imageBytes, _ := strconv.ParseInt(string(m[3]), 10, 64)
	if records != seg.Records || imageBytes != seg.ImageBytes() || recordBytes+imageBytes != seg.RecordBytes {
		t.Errorf("pg_waldump: %d records, %d record and %d image bytes; read %d records, %d bytes, %d image bytes",
			records, recordBytes, imageBytes, seg.Records, seg.RecordBytes, seg.ImageBytes())
	}
}
