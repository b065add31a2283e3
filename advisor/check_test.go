package advisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func newTestSampler(t *testing.T, c *lab.Cluster) *Sampler {
	t.Helper()
	pg := postgres.New(c.DSN(), postgres.Options{Logger: zaptest.NewLogger(t)})
	t.Cleanup(func() { pg.Close(context.Background()) })
	return &Sampler{Postgres: pg, Kernel: kernel.New("/proc"), Storage: storage.New("/proc", "/sys")}
}

func findingFor(fs []rules.Finding, rule string) (rules.Finding, bool) {
	for _, f := range fs {
		if f.Rule == rule {
			return f, true
		}
	}
	return rules.Finding{}, false
}

func quickCheck(window time.Duration) CheckConfig {
	return CheckConfig{Window: window, Interval: time.Second, WaitInterval: 200 * time.Millisecond, ProbeBudget: 2 * time.Second}
}

func TestCheckFsyncOffIsCritical(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"fsync": "off"}})
	res, err := Check(context.Background(), newTestSampler(t, c), quickCheck(2*time.Second), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := findingFor(res.Findings, "fsync-off")
	if !ok || f.Severity != rules.Critical {
		t.Fatalf("fsync=off: finding %+v (present %v), want fsync-off critical; all: %+v", f, ok, res.Findings)
	}
	if f.Action != rules.ActionNeverAuto {
		t.Errorf("fsync-off action = %q, want never-auto", f.Action)
	}
	if res.MaxSeverity() != rules.Critical {
		t.Errorf("MaxSeverity = %v, want critical", res.MaxSeverity())
	}
}

func TestCheckWALOnTmpfsIsCritical(t *testing.T) {
	shm := lab.SharedTempDir(t, "/dev/shm")
	c := lab.NewTestCluster(t, lab.ClusterOptions{WALDir: filepath.Join(shm, "wal")})
	res, err := Check(context.Background(), newTestSampler(t, c), quickCheck(2*time.Second), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := findingFor(res.Findings, "wal-on-volatile-storage")
	if !ok || f.Severity != rules.Critical {
		t.Fatalf("WAL on tmpfs: finding %+v (present %v), want wal-on-volatile-storage critical; all: %+v", f, ok, res.Findings)
	}
}

// TestCheckSeed001 reproduces seed 001's start on the simulated 4 ms disk: wal_buffers=64kB and
// open_datasync under a bulk insert. The advisor must recommend fdatasync and larger WAL buffers.
func TestCheckSeed001(t *testing.T) {
	lab.RequireServer(t)
	disk := simdisk.MountForTest(t, simdisk.Options{Latency: 4 * time.Millisecond})
	mnt := disk.Mountpoint()
	ctx := context.Background()
	probeDir := filepath.Join(mnt, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered after the disk's cleanup, so the cluster stops before the disk is unmounted.
	c := lab.NewTestCluster(t, lab.ClusterOptions{
		WALDir:   filepath.Join(mnt, "wal"),
		Settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"},
	})

	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() {
		// Batches, because pg_stat_wal counts a backend's WAL only at transaction end.
		_, err := c.BatchedLoad(loadCtx, "foo", 10000000, 20000)
		loadDone <- err
	}()
	cfg := quickCheck(32 * time.Second) // the measured rules need 30 s of history (Thresholds.MinSpan)
	cfg.ProbeDir = probeDir
	cfg.ProbeBudget = 4 * time.Second
	res, err := Check(ctx, newTestSampler(t, c), cfg, zaptest.NewLogger(t))
	stopLoad()
	<-loadDone
	if err != nil {
		t.Fatal(err)
	}
	if res.Probe == nil {
		t.Fatalf("no probe report: %s", res.ProbeSkipped)
	}
	for _, m := range res.Probe.Methods {
		t.Logf("probe %s x%d: p50 %.0f us, mean %.0f us, n=%d", m.Name, m.WritesPerSync, m.LatencyUS.P50, m.LatencyUS.Mean, m.Samples)
	}
	var sawFdatasync, sawBuffers bool
	for _, f := range res.Findings {
		t.Logf("%s %s %s: %s -> %s (%s)", f.Severity, f.Rule, f.Setting, f.Current, f.Recommended, f.Action)
		if f.Setting == "wal_sync_method" && f.Recommended == "fdatasync" && f.Severity >= rules.Warning {
			sawFdatasync = true
		}
		if f.Rule == "wal-buffers-small" && f.Recommended != "" && f.Severity >= rules.Warning {
			sawBuffers = true
		}
	}
	for id, why := range res.NotEnoughData {
		t.Logf("not enough data: %s: %s", id, why)
	}
	if !sawFdatasync {
		t.Errorf("seed 001: no warning recommending wal_sync_method=fdatasync")
	}
	if !sawBuffers {
		t.Errorf("seed 001: no wal-buffers-small warning recommending larger wal_buffers")
	}
	// However many rules recommend wal_sync_method, check recommends it once.
	seen := map[string]bool{}
	for _, r := range res.Recommendations {
		t.Logf("recommendation %s=%s because %d rule(s), %d overruled", r.Setting, r.Recommended, len(r.Because), len(r.Overruled))
		if seen[r.Setting] {
			t.Errorf("seed 001: two recommendations for %s", r.Setting)
		}
		seen[r.Setting] = true
	}
	if !seen["wal_sync_method"] || !seen["wal_buffers"] {
		t.Errorf("seed 001: recommendations for %v, want wal_sync_method and wal_buffers", seen)
	}
}

// TestCheckDefaultClusterNoFalseAlarm: a default cluster under pgbench on this machine's plain
// disk must give no warning or critical finding about PostgreSQL settings.
func TestCheckDefaultClusterNoFalseAlarm(t *testing.T) {
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()
	if out, err := c.Command(ctx, "pgbench", "-i", "-q", "-s", "2").CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v: %s", err, out)
	}
	probeDir := lab.SharedTempDir(t, "")
	loadCtx, stopLoad := context.WithCancel(ctx)
	load := c.Command(loadCtx, "pgbench", "-n", "-c", "4", "-j", "2", "-T", "60")
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	cfg := quickCheck(32 * time.Second) // the measured rules need 30 s of history (Thresholds.MinSpan)
	cfg.ProbeDir = probeDir
	res, err := Check(ctx, newTestSampler(t, c), cfg, zaptest.NewLogger(t))
	stopLoad()
	_ = load.Wait()
	if err != nil {
		t.Fatal(err)
	}
	pgSettings := map[string]bool{}
	for _, r := range rules.All() {
		for _, s := range r.Settings {
			if !strings.HasPrefix(s, "vm.") && !strings.Contains(s, ".") && s != "write_cache" && s != "wal_file_system" && s != "mount_options" {
				pgSettings[s] = true
			}
		}
	}
	for _, f := range res.Findings {
		t.Logf("%s %s %s: %s -> %s", f.Severity, f.Rule, f.Setting, f.Current, f.Recommended)
		if f.Severity >= rules.Warning && pgSettings[f.Setting] {
			t.Errorf("false alarm on a default cluster: %s %s (%s): %s", f.Severity, f.Rule, f.Setting, f.Summary)
		}
	}
}

func TestMinCheckWindow(t *testing.T) {
	th := rules.DefaultThresholds() // MinSpan 30s
	tests := []struct {
		interval, want time.Duration
	}{
		{time.Second, 30 * time.Second},
		{5 * time.Second, 30 * time.Second},
		{7 * time.Second, 35 * time.Second},
		{time.Minute, time.Minute},
		{0, 30 * time.Second},
	}
	for _, tt := range tests {
		if got := MinCheckWindow(tt.interval, th); got != tt.want {
			t.Errorf("MinCheckWindow(%v) = %v, want %v", tt.interval, got, tt.want)
		}
	}
}
