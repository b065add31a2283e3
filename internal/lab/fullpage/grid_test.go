package fullpage

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/probes/compression"
)

var (
	gridPart    = flag.String("grid", "", "run the compression grid's part: methods, spacing (an hour or more; issue 34)")
	gridDevices = flag.String("grid.devices", "cloud,hdd", "the grid's devices (fullpage.Devices' names, or slow: 1 ms and 40 MB/s)")
	gridData    = flag.String("grid.data", "pgbench,sysbench", "the grid's loads")
	gridCPU     = flag.String("grid.cpu", "0,1,2", "CPU-bound neighbours per cell")
	gridSecs    = flag.Int("grid.secs", 30, "seconds a run")
	gridRounds  = flag.Int("grid.rounds", 2, "interleaved runs of each configuration")
	gridMajor   = flag.Int("grid.major", 15, "PostgreSQL major version (15: Debian's, with lz4 and zstd; others: npm builds, pglz only)")
)

// gridDevice finds a device profile by name: the matrix's, or slow, issue 34's 1 ms, 40 MB/s.
func gridDevice(name string) (Device, bool) {
	if name == "slow" {
		return Device{Name: "slow", Options: simdisk.Options{Latency: time.Millisecond, BandwidthBytesPerSec: 40_000_000}}, true
	}
	for _, d := range Devices() {
		if d.Name == name {
			return d, true
		}
	}
	return Device{}, false
}

// TestCompressionGrid runs a part of the compression grid and logs its rows (docs/benchmarks.md,
// "Compression grid"):
//
//	go test ./internal/lab/fullpage -run TestCompressionGrid -v -timeout 3h -args -grid methods
//	go test ./internal/lab/fullpage -run TestCompressionGrid -v -timeout 3h -args -grid spacing -grid.devices cloud -grid.data pgbench -grid.secs 180
func TestCompressionGrid(t *testing.T) {
	if *gridPart == "" {
		t.Skip("a lab run: pass -args -grid methods (or spacing)")
	}
	bin := lab.RequireVersion(t, *gridMajor)
	ctx := context.Background()
	for _, name := range strings.Split(*gridDevices, ",") {
		dev, ok := gridDevice(name)
		if !ok {
			t.Fatalf("no device %q", name)
		}
		// A subtest per device, so that its stack is torn down before the next one's is set up.
		t.Run(dev.Name, func(t *testing.T) { gridOnDevice(ctx, t, bin, dev) })
	}
}

// loopCluster starts a cluster of bin with settings, its data and WAL on ext4 on a loop device
// over a simulated disk of dev (6 GiB), torn down when the test ends.
func loopCluster(ctx context.Context, t *testing.T, name, bin string, dev Device, settings map[string]string) (*equipment.LoopVolume, *lab.Cluster) {
	eq := equipment.New(nil, t.Logf)
	t.Cleanup(func() {
		if err := eq.Close(); err != nil {
			t.Error(err)
		}
	})
	v, err := eq.LoopVolume(ctx, name, dev.Options, 6<<30)
	if err != nil {
		t.Fatal(err)
	}
	c, err := eq.Cluster(ctx, lab.ClusterOptions{BinDir: bin, BaseDir: v.Mnt, WALDir: filepath.Join(v.Mnt, "wal"), Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	return v, c
}

func gridOnDevice(ctx context.Context, t *testing.T, bin string, dev Device) {
	settings := map[string]string{"shared_buffers": "256MB", "checkpoint_timeout": "60s", "autovacuum": "off"}
	v, c := loopCluster(ctx, t, "grid/"+dev.Name, bin, dev, settings)
	loads := strings.Split(*gridData, ",")
	for _, d := range loads {
		if err := InitData(ctx, c, Data(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := equipment.Checkpoint(ctx, c); err != nil {
		t.Fatal(err)
	}
	v.Throttle(dev.Options)
	methods := serverMethods(ctx, t, c)
	for _, d := range loads {
		for _, n := range strings.Split(*gridCPU, ",") {
			cpu, _ := strconv.Atoi(n)
			switch *gridPart {
			case "methods":
				configs := []map[string]string{}
				for _, m := range append([]string{"off"}, methods...) {
					configs = append(configs, map[string]string{"wal_compression": m})
				}
				gridCell(ctx, t, c, dev.Name, Data(d), cpu, configs)
			case "spacing":
				var configs []map[string]string
				for _, m := range []string{"off", "pglz"} {
					for _, ct := range []string{"1min", "2min"} {
						configs = append(configs, map[string]string{"wal_compression": m, "checkpoint_timeout": ct})
					}
				}
				gridCell(ctx, t, c, dev.Name, Data(d), cpu, configs)
			default:
				t.Fatalf("no grid part %q", *gridPart)
			}
		}
	}
}

// serverMethods lists the server's compression methods (pglz first).
func serverMethods(ctx context.Context, t *testing.T, c *lab.Cluster) []string {
	m, err := CompressionMethods(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gridCell runs configs interleaved (the order reversed every round) beside cpu neighbours,
// after a warm-up run, and logs each run and the advisor's reading of the images.
func gridCell(ctx context.Context, t *testing.T, c *lab.Cluster, dev string, d Data, cpu int, configs []map[string]string) {
	stop, err := Neighbours(cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	secs := time.Duration(*gridSecs) * time.Second
	if _, err := GridMeasure(ctx, c, d, configs[0], min(secs, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	runs := map[string][]GridRun{}
	for round := 0; round < *gridRounds; round++ {
		order := slices.Clone(configs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, cfg := range order {
			r, err := GridMeasure(ctx, c, d, cfg, secs)
			if err != nil {
				t.Fatal(err)
			}
			key := cfgKey(cfg)
			runs[key] = append(runs[key], r)
			reading := ""
			if cfg["wal_compression"] == "off" {
				reading = readImages(ctx, t, c, r)
			}
			t.Logf("RUN | %s | %s | %d | %s | %d | %.0f | %.1f | %.0f | %.0f | %.3f | %d | %s |", dev, d, cpu, key, round+1, r.TPS, r.P99MS,
				r.WALPerTxn, r.WALBytes/r.Seconds/1e6*1e3, r.IdleShare, r.Checkpoints, reading)
		}
	}
	base := runs[cfgKey(configs[0])]
	for _, cfg := range configs {
		rs := runs[cfgKey(cfg)]
		t.Logf("CELL | %s | %s | %d | %s | %s | %s | %s | %s | %s |", dev, d, cpu, cfgKey(cfg), joinRuns(rs, func(r GridRun) float64 { return r.TPS }, "%.0f"),
			change(mean(rs, func(r GridRun) float64 { return r.TPS }), mean(base, func(r GridRun) float64 { return r.TPS })),
			joinRuns(rs, func(r GridRun) float64 { return r.P99MS }, "%.1f"),
			change(mean(rs, func(r GridRun) float64 { return r.WALPerTxn }), mean(base, func(r GridRun) float64 { return r.WALPerTxn })),
			joinRuns(rs, func(r GridRun) float64 { return 100 * r.IdleShare }, "%.0f%%"))
	}
}

func cfgKey(cfg map[string]string) string {
	var parts []string
	for _, k := range []string{"wal_compression", "checkpoint_timeout"} {
		if v, ok := cfg[k]; ok {
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, ", ")
}

// readImages is the advisor's reading of the run's last complete segment: the images' share,
// and what each method keeps and costs.
func readImages(ctx context.Context, t *testing.T, c *lab.Cluster, r GridRun) string {
	conn, err := c.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pg := &collector.Postgres{Settings: map[string]collector.Setting{}}
	var lsn uint64
	var vals []string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, pg_current_wal_insert_lsn() - '0/0', coalesce(enumvals, '{}') FROM pg_settings WHERE name = 'wal_compression'").
		Scan(&pg.VersionNum, &lsn, &vals); err != nil {
		t.Fatal(err)
	}
	pg.WALInsertLSN = &lsn
	pg.Settings[collector.WALCompression] = collector.Setting{EnumVals: vals}
	fp, err := (&compression.Source{}).Collect(ctx, filepath.Join(c.DataDir(), "pg_wal"), pg)
	if err != nil {
		return "reading: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "images %.0f%% of %d records' bytes", 100*float64(fp.ImageBytes)/float64(max(fp.RecordBytes, 1)), fp.Records)
	for _, m := range fp.Methods {
		fmt.Fprintf(&b, "; %s keeps %.2f at %.4f s/MB (%.3f cores)", m.Method, m.Kept, m.CPUSecondsPerMB,
			m.CPUSecondsPerMB*r.WALBytes/r.Seconds/(1<<20)*float64(fp.ImageBytes)/float64(max(fp.RecordBytes, 1)))
	}
	return b.String()
}

func mean(rs []GridRun, f func(GridRun) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	s := 0.0
	for _, r := range rs {
		s += f(r)
	}
	return s / float64(len(rs))
}

func joinRuns(rs []GridRun, f func(GridRun) float64, format string) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf(format, f(r)))
	}
	return strings.Join(parts, ", ")
}

func change(v, base float64) string {
	if base == 0 {
		return "-"
	}
	return fmt.Sprintf("%+.0f%%", 100*(v/base-1))
}
