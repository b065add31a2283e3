package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStaticTuner(t *testing.T) {
	for _, tc := range []struct {
		mem  int64
		want string
	}{
		{25276059648, "16MB"}, // this lab machine, 23.5 GiB: 3% of RAM/4 is far above 16MB
		{2 << 30, "16MB"},     // 3% of 512MB is 15.4MB: PGTune rounds values above 14MB up to 16MB
		{1 << 30, "7864kB"},   // 3% of 256MB
		{64 << 20, "491kB"},
	} {
		if got := staticTunerFor(tc.mem).Settings["wal_buffers"]; got != tc.want {
			t.Errorf("wal_buffers for %d bytes = %s, want %s", tc.mem, got, tc.want)
		}
	}
	s := staticTunerFor(25276059648)
	if s.Settings["checkpoint_completion_target"] != "0.9" || s.Settings["max_wal_size"] != "4GB" {
		t.Errorf("static settings = %v", s.Settings)
	}
	if _, ok := s.Settings["wal_sync_method"]; ok {
		t.Errorf("static tuners leave wal_sync_method alone")
	}
}

func TestConfigSetMerges(t *testing.T) {
	start := Config{Name: "start", Settings: map[string]string{"wal_sync_method": "open_sync"}, Durable: true}
	set := &configSet{}
	set.add(start.with("open_sync", nil), RoleGrid)
	set.add(start.with("fdatasync", map[string]string{"wal_sync_method": "fdatasync"}), RoleGrid)
	if got := set.add(start, RoleStart); got != "open_sync" {
		t.Errorf("start measured as %q, want the grid's open_sync", got)
	}
	adv := start.with("advisor", map[string]string{"wal_sync_method": "fdatasync"})
	if got := set.add(adv, RoleAdvisor); got != "fdatasync" {
		t.Errorf("advisor measured as %q, want fdatasync", got)
	}
	low := start.with("low dirty", nil)
	low.Kernel = map[string]string{"dirty_bytes": "268435456"}
	set.add(low, RoleGrid)
	if len(set.list) != 3 {
		t.Fatalf("%d configurations, want 3: %+v", len(set.list), set.list)
	}
	if r := set.list[0].Roles; len(r) != 2 || r[1] != RoleStart {
		t.Errorf("open_sync roles = %v, want grid and start", r)
	}
	// with must not share maps with its source.
	if start.Settings["wal_sync_method"] != "open_sync" {
		t.Errorf("with changed its source")
	}
}

// TestVMKnobsRestore emulates the kernel (writing a *_bytes knob zeroes its *_ratio twin and
// the other way round) and checks that restore brings back exactly the original pair.
func TestVMKnobsRestore(t *testing.T) {
	twin := map[string]string{
		"dirty_background_ratio": "dirty_background_bytes", "dirty_background_bytes": "dirty_background_ratio",
		"dirty_ratio": "dirty_bytes", "dirty_bytes": "dirty_ratio",
	}
	for _, tc := range []struct {
		name string
		orig map[string]string
	}{
		{"ratios", map[string]string{"dirty_background_ratio": "10", "dirty_ratio": "20", "dirty_background_bytes": "0", "dirty_bytes": "0",
			"dirty_expire_centisecs": "3000", "dirty_writeback_centisecs": "500"}},
		{"bytes", map[string]string{"dirty_background_ratio": "0", "dirty_ratio": "0", "dirty_background_bytes": "67108864", "dirty_bytes": "536870912",
			"dirty_expire_centisecs": "1500", "dirty_writeback_centisecs": "100"}},
		{"mixed", map[string]string{"dirty_background_ratio": "5", "dirty_ratio": "0", "dirty_background_bytes": "0", "dirty_bytes": "536870912",
			"dirty_expire_centisecs": "3000", "dirty_writeback_centisecs": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procfs := t.TempDir()
			vm := filepath.Join(procfs, "sys", "vm")
			if err := os.MkdirAll(vm, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.orig {
				if err := os.WriteFile(filepath.Join(vm, k), []byte(v+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			k, err := readVMKnobs(procfs)
			if err != nil {
				t.Fatal(err)
			}
			k.writeFile = func(p string, b []byte) error {
				if err := os.WriteFile(p, b, 0o644); err != nil {
					return err
				}
				if twin[filepath.Base(p)] == "" {
					return nil
				}
				return os.WriteFile(filepath.Join(filepath.Dir(p), twin[filepath.Base(p)]), []byte("0"), 0o644)
			}
			if err := k.set(map[string]string{"dirty_background_bytes": "1048576", "dirty_bytes": "4194304", "dirty_expire_centisecs": "500"}); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(vm, "dirty_bytes")); string(b) != "4194304" {
				t.Errorf("vm.dirty_bytes = %s after set, want 4194304", b)
			}
			if err := k.restore(); err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.orig {
				b, _ := os.ReadFile(filepath.Join(vm, name))
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("vm.%s = %s after restore, want %s", name, got, want)
				}
			}
		})
	}
}

func TestWriteMarkdown(t *testing.T) {
	rep := &Report{
		Mode: "full", Command: "pgwal-advisor bench", Machine: Machine{CPUs: 2, MemoryBytes: 24 << 30},
		StaticTuner: staticTunerFor(24 << 30),
		Scenarios: []*ScenarioResult{{
			ID: Seed001, Title: "Seed 001: bulk insert", Workload: "INSERT", Metric: "seconds", Runs: 2,
			Configs: []ConfigResult{
				{Config: Config{Name: "64kB open_datasync", Settings: map[string]string{"wal_buffers": "64kB"}, Roles: []string{RoleGrid, RoleStart}, Durable: true}, Runs: []float64{70, 72}, Value: 71},
				{Config: Config{Name: "16MB fdatasync", Settings: map[string]string{"wal_buffers": "16MB"}, Roles: []string{RoleGrid, RoleAdvisor}, Durable: true}, Runs: []float64{1.4, 1.5}, Value: 1.45},
			},
			GridBest: "16MB fdatasync",
			Targets:  []Target{{Name: "within 1.2x", Got: "1.00x", Met: true, Scored: true}},
		}, {
			ID: Seed003, Title: "Seed 003", Workload: "pgbench", Metric: "worst second / median", HigherIsBetter: true,
			Configs: []ConfigResult{{Config: Config{Name: "start", Roles: []string{RoleStart}, Kernel: map[string]string{"dirty_bytes": "268435456"}},
				Smooth: &Smoothness{Seconds: 3, PerSecond: []float64{600, 26, 590}, MedianTPS: 590, WorstSecond: 26}}},
		}},
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| seed001 | within 1.2x | 1.00x | met |",
		"| 16MB fdatasync | grid (best), advisor | wal_buffers=16MB | **1.45** | 1.40, 1.50 |",
		"vm.dirty_bytes=256MB",
		"- start: 600 26 590",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}
