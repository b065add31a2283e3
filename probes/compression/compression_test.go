package compression

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/walimages"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// imagesUnder runs pgbench on a fresh PostgreSQL 15 (Debian's, built with lz4 and zstd) with
// wal_compression = method and returns the images of the segment it wrote.
func imagesUnder(t *testing.T, method string) []walimages.Image {
	t.Helper()
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"autovacuum": "off", "shared_buffers": "16MB"}})
	ctx := context.Background()
	if out, err := c.Command(ctx, "pgbench", "-i", "-q", "-s", "3").CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v: %s", err, out)
	}
	for _, q := range []string{"ALTER SYSTEM SET wal_compression = '" + method + "'", "SELECT pg_reload_conf()", "CHECKPOINT", "SELECT pg_switch_wal()"} {
		if err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := c.Command(ctx, "pgbench", "-n", "-c", "2", "-t", "200").CombinedOutput(); err != nil {
		t.Fatalf("pgbench: %v: %s", err, out)
	}
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var end uint64
	if err := conn.QueryRow(ctx, "SELECT pg_switch_wal() - '0/0'").Scan(&end); err != nil {
		t.Fatal(err)
	}
	seg, _, err := walimages.Recent(filepath.Join(c.DataDir(), "pg_wal"), (end/(16<<20)+1)*(16<<20), 0, 8192, 150000)
	if err != nil {
		t.Fatal(err)
	}
	if len(seg.Images) < 100 {
		t.Fatalf("%d images: the load should make hundreds", len(seg.Images))
	}
	return seg.Images
}

// TestPGLZMatchesPostgreSQL compresses again every image PostgreSQL wrote with
// wal_compression=pglz: the Go compressor's output is the server's, byte for byte, and where
// the server gave up (an image written as it is), so does it.
func TestPGLZMatchesPostgreSQL(t *testing.T) {
	images := imagesUnder(t, "pglz")
	var st pglzState
	dst := make([]byte, 9000)
	compressed, asIs := 0, 0
	for i, im := range images {
		if im.Method == "" {
			// Written as it is: either pglz failed, or it saved no more than the header.
			extra := 0
			if im.Raw < 8192 {
				extra = 2
			}
			if n := st.compress(im.Data, dst); n >= 0 && n+extra < len(im.Data) {
				t.Fatalf("image %d: the server wrote it as it is; the Go pglz compresses it to %d of %d bytes", i, n, len(im.Data))
			}
			asIs++
			continue
		}
		raw, err := pglzDecompress(im.Data, im.Raw)
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		n := st.compress(raw, dst)
		if n != len(im.Data) || !bytes.Equal(dst[:n], im.Data) {
			t.Fatalf("image %d: the Go pglz wrote %d bytes, the server %d (equal: %v)", i, n, len(im.Data), n == len(im.Data) && bytes.Equal(dst[:n], im.Data))
		}
		compressed++
	}
	t.Logf("%d images compressed as the server did, %d written as they are by both", compressed, asIs)
}

// TestMeasureRealImages measures the three methods on the server's own uncompressed images and
// on images the server compressed with lz4 (expanded first): pgbench's pages keep two fifths of
// their bytes or less with every method, and lz4 is the cheapest.
func TestMeasureRealImages(t *testing.T) {
	for _, written := range []string{"off", "lz4"} {
		t.Run(written, func(t *testing.T) {
			images := imagesUnder(t, written)
			fp, err := measure(walimages.Segment{Images: images, Records: 1}, "seg", 8192, []string{"pglz", "lz4", "zstd"}, 200)
			if err != nil {
				t.Fatal(err)
			}
			if fp.Sampled < 100 || len(fp.Methods) != 3 {
				t.Fatalf("sampled %d images, %d methods", fp.Sampled, len(fp.Methods))
			}
			for _, m := range fp.Methods {
				t.Logf("written %s: %s keeps %.3f (%d failed), %.4f CPU s/MB", written, m.Method, m.Kept, m.Failed, m.CPUSecondsPerMB)
				if m.Kept <= 0 || m.Kept > 0.4 || m.CPUSecondsPerMB <= 0 {
					t.Errorf("%s: kept %.3f, %.4f s/MB: pgbench's pages compress well, at some cost", m.Method, m.Kept, m.CPUSecondsPerMB)
				}
			}
			if w := fp.Written; written == "lz4" && (len(w) == 0 || w[len(w)-1].Method != "lz4") {
				t.Errorf("written: %+v, want lz4 images", w)
			}
		})
	}
}

// TestMeasureShapes: random bytes do not compress (every method writes them as they are), a
// blank page nearly vanishes, and what is kept never exceeds the input.
func TestMeasureShapes(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 8192)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	digits := make([]byte, 8192)
	for i := range digits {
		digits[i] = '0' + byte(rnd.IntN(10))
	}
	for _, tc := range []struct {
		name     string
		page     []byte
		min, max float64
	}{
		{"random bytes", random, 1, 1},
		{"zeros", make([]byte, 8192), 0, 0.02},
		{"random digits", digits, 0.3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			costs, err := Measure([][]byte{tc.page, tc.page[:4096]}, []bool{false, true}, []string{"pglz", "lz4", "zstd"})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range costs {
				if c.Kept < tc.min || c.Kept > tc.max {
					t.Errorf("%s keeps %.3f, want %.2f..%.2f", c.Method, c.Kept, tc.min, tc.max)
				}
			}
		})
	}
	if _, err := Measure(nil, nil, []string{"pglz"}); err == nil {
		t.Error("no images: no error")
	}
}

// TestPGLZRoundTrip: what the Go pglz writes expands back to its input.
func TestPGLZRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	var st pglzState
	dst := make([]byte, 9000)
	for i := 0; i < 200; i++ {
		n := 32 + rnd.IntN(8161)
		src := make([]byte, n)
		alphabet := 1 + rnd.IntN(255)
		for j := range src {
			src[j] = byte(rnd.IntN(alphabet)) + 0x70
		}
		m := st.compress(src, dst)
		if m < 0 {
			continue
		}
		back, err := pglzDecompress(dst[:m], n)
		if err != nil || !bytes.Equal(back, src) {
			t.Fatalf("case %d (%d bytes, alphabet %d): round trip failed: %v", i, n, alphabet, err)
		}
	}
}

// TestSourceStandbyAndCache: a standby has no WAL of its own to read; a reading is kept for
// the interval.
func TestSourceStandbyAndCache(t *testing.T) {
	s := &Source{}
	if fp, err := s.Collect(context.Background(), "/nonexistent", &collector.Postgres{InRecovery: true}); fp != nil || err != nil {
		t.Errorf("standby: %v, %v", fp, err)
	}
	if _, err := s.Collect(context.Background(), "", nil); err == nil {
		t.Error("no server: no error")
	}
	lsn := uint64(1 << 24)
	dir := t.TempDir()
	_, err := s.Collect(context.Background(), dir, &collector.Postgres{WALInsertLSN: &lsn})
	if err == nil {
		t.Fatal("an empty WAL directory: no error")
	}
	// The failure is kept for the interval: the directory is not listed again every snapshot.
	if err := os.WriteFile(filepath.Join(dir, "000000010000000000000001"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, again := s.Collect(context.Background(), dir, &collector.Postgres{WALInsertLSN: &lsn}); again == nil || again.Error() != err.Error() {
		t.Errorf("within the interval: %v, want the kept %v", again, err)
	}
}

// FuzzPGLZDecompress: a compressed image read from the WAL is input; any bytes expand to
// exactly the raw length asked for or fail, without a panic.
func FuzzPGLZDecompress(f *testing.F) {
	var st pglzState
	dst := make([]byte, 9000)
	src := bytes.Repeat([]byte("pgbench "), 100)
	f.Add(dst[:st.compress(src, dst)], len(src))
	f.Add([]byte{0xff, 0x0f, 0x01, 0x02}, 100)
	f.Fuzz(func(t *testing.T, b []byte, raw int) {
		if raw < 0 || raw > 65536 {
			return
		}
		out, err := pglzDecompress(b, raw)
		if err == nil && len(out) != raw {
			t.Fatalf("%d bytes for %d", len(out), raw)
		}
	})
}

// TestSourceReadsOnlyWALWrittenSinceItStarted: on a real server, the first reading waits for a
// WAL file begun after the Source first saw the server, so that pgbench -i's index builds (or a
// restore, or last night's bulk load) are never measured as the load's images; then it reads
// the load's own.
func TestSourceReadsOnlyWALWrittenSinceItStarted(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"autovacuum": "off", "shared_buffers": "16MB"}})
	ctx := context.Background()
	if out, err := c.Command(ctx, "pgbench", "-i", "-q", "-s", "3").CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v: %s", err, out)
	}
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Files are read at least Gather/MaxFiles (5 s) apart: the clock moves 10 s a snapshot
	// unless a step says otherwise.
	clock, step := time.Now(), 10*time.Second
	s := &Source{MaxImages: 100, Gather: 40 * time.Second, Now: func() time.Time { return clock }}
	collect := func() (*collector.FullPages, error) {
		clock = clock.Add(step)
		var lsn uint64
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		return s.Collect(ctx, filepath.Join(c.DataDir(), "pg_wal"), &collector.Postgres{WALInsertLSN: &lsn, VersionNum: 150000})
	}
	exec := func(q string) {
		if err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if fp, err := collect(); fp != nil || err != nil {
		t.Fatalf("right after pgbench -i: %+v, %v; want no reading yet (the WAL written so far is pgbench -i's)", fp, err)
	}
	// A switch ends the file the Source started in, which began before it: still nothing.
	exec("SELECT pg_switch_wal()")
	if fp, err := collect(); fp != nil || err != nil {
		t.Fatalf("after the first switch: %+v, %v; want no reading yet", fp, err)
	}
	exec("CHECKPOINT")
	if out, err := c.Command(ctx, "pgbench", "-n", "-c", "2", "-t", "200").CombinedOutput(); err != nil {
		t.Fatalf("pgbench: %v: %s", err, out)
	}
	exec("SELECT pg_switch_wal()")
	fp, err := collect()
	if err != nil || fp == nil {
		t.Fatalf("after the load's file: %+v, %v; want a reading", fp, err)
	}
	pglz, ok := fp.Cost("pglz")
	if fp.Images < 100 || !ok || pglz.Kept > 0.4 || fp.Files != 1 {
		t.Errorf("reading of %s: %d images, pglz %+v; want the load's images, which compress well, from one file", fp.Where(), fp.Images, pglz)
	}
	// The next file the load completes is added to the reading, each file sampled in part.
	if out, err := c.Command(ctx, "pgbench", "-n", "-c", "2", "-t", "200").CombinedOutput(); err != nil {
		t.Fatalf("pgbench: %v: %s", err, out)
	}
	exec("SELECT pg_switch_wal()")
	two, err := collect()
	if err != nil || two == nil || two.Files != 2 || two.Images <= fp.Images || two.Sampled > 100 || two.FirstSegment != fp.Segment || two.Segment == fp.Segment {
		t.Fatalf("after a second file: %+v, %v; want two files read, the first and a newer one", two, err)
	}
	// Nothing new completed: the same reading.
	if again, err := collect(); err != nil || again != two {
		t.Errorf("no file completed since: %+v, %v; want the same reading", again, err)
	}
	// A file completed sooner than Gather/MaxFiles after the last one read waits.
	exec("SELECT pg_switch_wal()")
	exec("CREATE TABLE filler AS SELECT g FROM generate_series(1, 1000) g")
	exec("SELECT pg_switch_wal()")
	clock, step = clock.Add(-step), time.Second
	if soon, err := collect(); err != nil || soon != two {
		t.Errorf("a file 1 s after the last read: %+v, %v; want it left for later", soon, err)
	}
}

// TestMergeWeighsBySample: a reading of several files keeps what each method kept weighted by
// the bytes sampled from each file, and adds up the counts.
func TestMergeWeighsBySample(t *testing.T) {
	a := &collector.FullPages{Segment: "A", Records: 10, RecordBytes: 100, ImageBytes: 80, Images: 2, Sampled: 2, SampledBytes: 1000,
		Written: []collector.WrittenImages{{Images: 2, Bytes: 80, RawBytes: 80}},
		Methods: []collector.CompressionCost{{Method: "pglz", Kept: 0.3, CPUSecondsPerMB: 0.02, Failed: 1}, {Method: "lz4", Kept: 0.5, CPUSecondsPerMB: 0.001}}}
	b := &collector.FullPages{Segment: "B", Records: 30, RecordBytes: 300, ImageBytes: 200, Images: 5, Sampled: 3, SampledBytes: 3000,
		Written: []collector.WrittenImages{{Images: 5, Bytes: 200, RawBytes: 200}},
		Methods: []collector.CompressionCost{{Method: "pglz", Kept: 0.1, CPUSecondsPerMB: 0.01}}}
	m := merge(merge(nil, a), b)
	pglz, _ := m.Cost("pglz")
	if m.Files != 2 || m.FirstSegment != "A" || m.Segment != "B" || m.Images != 7 || m.Records != 40 || m.SampledBytes != 4000 ||
		len(m.Written) != 1 || m.Written[0].Images != 7 || math.Abs(pglz.Kept-0.15) > 1e-9 || math.Abs(pglz.CPUSecondsPerMB-0.0125) > 1e-9 || pglz.Failed != 1 {
		t.Errorf("merged: %+v, pglz %+v", m, pglz)
	}
	if _, ok := m.Cost("lz4"); ok {
		t.Error("lz4, measured on one file only, kept in the merged reading")
	}
	if m.Where() != "2 WAL files, A to B" {
		t.Errorf("Where() = %q", m.Where())
	}
}
