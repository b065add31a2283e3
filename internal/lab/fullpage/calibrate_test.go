package fullpage

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

var calibrate = flag.Bool("calibrate", false, "run the wal_compression calibration (minutes) and log its tables")

// TestCompressionCalibration measures what each wal_compression writes for the same load: both
// loads, off, lz4, pglz and zstd interleaved, three rounds. For each run it logs pg_stat_wal's
// counters and pg_waldump's count of the images' bytes, which PostgreSQL 14-18 do not count, so
// that the rule's estimate can be checked against it. The tables it logs are docs/benchmarks.md's
// "Full page images" section:
//
//	go test ./internal/lab/fullpage -run TestCompressionCalibration -v -timeout 60m -args -calibrate
func TestCompressionCalibration(t *testing.T) {
	if !*calibrate {
		t.Skip("a calibration run: pass -args -calibrate")
	}
	settings := Settings()
	settings["wal_keep_size"] = "4GB" // keep each run's WAL for pg_waldump
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: settings})
	ctx := context.Background()
	modes := []string{"off", "lz4", "pglz", "zstd"}
	opts := Options{Clients: 8, Duration: 30 * time.Second}
	t.Logf("| load | round | wal_compression | tps | records | images | WAL bytes | bytes/record | bytes/txn | images' bytes (pg_waldump) | image share | estimate | bound | bytes per image |")
	t.Logf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, load := range []Load{TPCB, Rows} {
		if err := Init(ctx, c, load); err != nil {
			t.Fatal(err)
		}
		for round := 1; round <= 3; round++ {
			for _, mode := range modes {
				r, err := Measure(ctx, c, load, mode, opts)
				if err != nil {
					t.Fatal(err)
				}
				fpiBytes, err := waldumpFPIBytes(ctx, c, r)
				if err != nil {
					t.Fatal(err)
				}
				est := min(max(r.Bytes-r.Records*72, 0), r.FPI*8192)
				t.Logf("| %s | %d | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.3f | %.3f | %.3f | %.0f |", load, round, mode, r.TPS,
					r.Records, r.FPI, r.Bytes, r.BytesPerRecord(), r.BytesPerTxn(), fpiBytes, fpiBytes/r.Bytes, est/r.Bytes,
					min(r.FPI*8192/r.Bytes, 1), fpiBytes/r.FPI)
			}
		}
	}
}

// waldumpFPIBytes is the bytes of the images in the run's WAL, from pg_waldump --stats' Total
// line ("Total  N  record bytes [x%]  FPI bytes [y%]  combined [100%]").
func waldumpFPIBytes(ctx context.Context, c *lab.Cluster, r Run) (float64, error) {
	out, err := c.Command(ctx, "pg_waldump", "--stats", "-p", filepath.Join(c.DataDir(), "pg_wal"), "-s", r.StartLSN, "-e", r.EndLSN).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Total") {
		return 0, fmt.Errorf("pg_waldump: %w: %s", err, out)
	}
	re := regexp.MustCompile(`(?m)^Total\s+\d+\s+(\d+)\s+\[[^]]*\]\s+(\d+)`)
	m := re.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no Total line in pg_waldump's output: %s", out)
	}
	return strconv.ParseFloat(string(m[2]), 64)
}

// TestParseTxns reads pgbench's transaction count, with and without -t's "/M".
func TestParseTxns(t *testing.T) {
	for out, want := range map[string]float64{
		"number of transactions actually processed: 112584\n":        112584,
		"x\nnumber of transactions actually processed: 100/100\ny\n": 100,
	} {
		if got, err := parseTxns([]byte(out)); err != nil || got != want {
			t.Errorf("parseTxns(%q) = %v, %v; want %v", out, got, err, want)
		}
	}
	if _, err := parseTxns([]byte("tps = 1\n")); err == nil {
		t.Error("parseTxns without a count: no error")
	}
}
