package compression

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

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
	seg, _, err := walimages.Recent(filepath.Join(c.DataDir(), "pg_wal"), (end/(16<<20)+1)*(16<<20), 8192, 150000)
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
			s := &Source{MaxImages: 200}
			fp, err := s.measure(walimages.Segment{Images: images, Records: 1}, "seg", 8192, []string{"pglz", "lz4", "zstd"})
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
