package probes

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// probeFiles lists the probe files left in dir.
func probeFiles(t *testing.T, dir string) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, filePrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// openDir opens dir as the probe does, closed when the test ends.
func openDir(t *testing.T, dir string) *probeDir {
	t.Helper()
	d, err := openProbeDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d
}

func assertNoProbeFile(t *testing.T, dir string) {
	t.Helper()
	if left := probeFiles(t, dir); len(left) > 0 {
		t.Errorf("probe files left behind in %s: %v", dir, left)
	}
}

func TestRunTempDir(t *testing.T) {
	dir, walDir := t.TempDir(), t.TempDir()
	var calls int
	rep, err := Run(context.Background(), Config{Dir: dir, WALDir: walDir, Duration: time.Second, OpenSyncSizes: true},
		func(done, total time.Duration) {
			calls++
			if done < 0 || done > total || total != time.Second {
				t.Errorf("progress(%v, %v): want 0 <= done <= total = 1s", done, total)
			}
		})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertNoProbeFile(t, dir)
	if calls == 0 {
		t.Error("progress was never called")
	}
	if rep.Stop != StopBudget && rep.Stop != StopPrecision && rep.Stop != StopSampleCap {
		t.Errorf("Stop = %q", rep.Stop)
	}

	type key struct {
		name       string
		wps, bytes int
	}
	want := map[key]bool{}
	for _, wps := range []int{1, 2} {
		for _, m := range SyncMethods() {
			want[key{m, wps, BlockBytes}] = m != FsyncWritethrough
		}
	}
	for _, pieces := range []int{1, 2, 4, 8, 16} {
		want[key{OpenSync, pieces, 16 << 10 / pieces}] = true
	}
	want[key{Write, 1, BlockBytes}] = true
	if len(rep.Methods) != len(want) {
		t.Errorf("%d results, want %d (each pattern once)", len(rep.Methods), len(want))
	}
	for _, m := range rep.Methods {
		available, ok := want[key{m.Name, m.WritesPerSync, m.WriteBytes}]
		if !ok {
			t.Errorf("unexpected result %s %d x %d", m.Name, m.WritesPerSync, m.WriteBytes)
			continue
		}
		if m.Available != available {
			t.Errorf("%s %d x %d: Available = %v, want %v", m.Name, m.WritesPerSync, m.WriteBytes, m.Available, available)
		}
		if !available {
			if m.Error != notOnLinux || m.Samples != 0 {
				t.Errorf("%s: Error %q, %d samples; want %q and none", m.Name, m.Error, m.Samples, notOnLinux)
			}
			continue
		}
		l := m.LatencyUS
		if m.Samples < 2 || m.OpsPerSec <= 0 || l.Mean <= 0 || l.P50 <= 0 || l.P99 < l.P50 || l.Max < l.P99 || l.CILow > l.Mean || l.CIHigh < l.Mean {
			t.Errorf("%s %d x %d: implausible figures: %d samples, %.1f ops/s, %+v", m.Name, m.WritesPerSync, m.WriteBytes, m.Samples, m.OpsPerSec, l)
		}
		if wantDirect := m.Name == OpenDatasync || m.Name == OpenSync; m.DirectIO != wantDirect && m.Note == "" {
			t.Errorf("%s: DirectIO = %v without a note, want %v (pg_test_fsync's choice)", m.Name, m.DirectIO, wantDirect)
		}
	}
	if rep.Durability.Status == "" || rep.Durability.Reason == "" {
		t.Errorf("no durability verdict: %+v", rep.Durability)
	}
	if rep.Durability.Facts.FSType == "" {
		t.Error("the file system type was not filled in for the verdict")
	}

	// The JSON contract of `pgwal-advisor probe --format json`.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var doc struct {
		Methods []map[string]any `json:"methods"`
		Durab   map[string]any   `json:"durability"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range doc.Methods {
		for _, f := range []string{"name", "writes_per_sync", "write_bytes", "ops_per_sec", "samples", "latency_us"} {
			if _, ok := m[f]; !ok {
				t.Errorf("method %v lacks %q", m["name"], f)
			}
		}
		lat, _ := m["latency_us"].(map[string]any)
		for _, f := range []string{"p50", "p99"} {
			if _, ok := lat[f]; !ok {
				t.Errorf("method %v lacks latency_us.%s", m["name"], f)
			}
		}
	}
	for _, f := range []string{"status", "reason", "evidence", "facts"} {
		if _, ok := doc.Durab[f]; !ok {
			t.Errorf("durability lacks %q", f)
		}
	}
}

// shmDir returns a directory on /dev/shm, or skips when that is not tmpfs.
func shmDir(t *testing.T) string {
	t.Helper()
	var s unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &s); err != nil || int64(s.Type) != unix.TMPFS_MAGIC {
		t.Skip("/dev/shm is not tmpfs here")
	}
	dir, err := os.MkdirTemp("/dev/shm", "probes-test-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestRunTmpfsIsTooFast(t *testing.T) {
	dir := shmDir(t)
	rep, err := Run(context.Background(), Config{Dir: dir, Duration: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertNoProbeFile(t, dir)
	d := rep.Durability
	if d.Status != VerdictTooFast || d.Facts.FSType != "tmpfs" || !d.Facts.Volatile {
		t.Errorf("verdict %q on %q (volatile %v), want too_fast on volatile tmpfs: %s", d.Status, d.Facts.FSType, d.Facts.Volatile, d.Reason)
	}
}

func TestRunEmulatesServerDirectIO(t *testing.T) {
	tests := []struct {
		name   string
		server ServerIO
	}{
		{"15 replica: no O_DIRECT", ServerIO{VersionNum: 150004, WALLevel: "replica"}},
		{"16 debug_io_direct=wal: O_DIRECT everywhere", ServerIO{VersionNum: 160000, DebugIODirect: "wal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			rep, err := Run(context.Background(), Config{Dir: dir, Duration: 200 * time.Millisecond, Server: tt.server}, nil)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			assertNoProbeFile(t, dir)
			if rep.DirectIOPolicy != tt.server.Describe() {
				t.Errorf("DirectIOPolicy = %q", rep.DirectIOPolicy)
			}
			for _, m := range rep.Methods {
				if !m.Available {
					continue
				}
				want := tt.server.Direct(m.Name)
				if m.DirectIO != want && !(want && m.Note != "") {
					t.Errorf("%s: DirectIO = %v, want %v (note %q)", m.Name, m.DirectIO, want, m.Note)
				}
			}
		})
	}
}

func TestRunCancelledRemovesFile(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel from inside the run, as SIGINT does, once measuring is under way.
	rep, err := Run(ctx, Config{Dir: dir, Duration: time.Minute, Precision: 1e-9}, func(done, total time.Duration) { cancel() })
	if !errors.Is(err, context.Canceled) || rep != nil {
		t.Fatalf("Run = %v, %v; want no report and context.Canceled", rep, err)
	}
	assertNoProbeFile(t, dir)
}

func TestRunPrecisionStopsEarly(t *testing.T) {
	// A loose precision with few samples needed ends the run long before a minute.
	dir := t.TempDir()
	rep, err := Run(context.Background(), Config{Dir: dir, Duration: time.Minute, Precision: 0.9, MinSamples: 3}, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Stop != StopPrecision {
		t.Errorf("Stop = %q, want %q", rep.Stop, StopPrecision)
	}
	assertNoProbeFile(t, dir)
}

// mountTmpfs mounts a small tmpfs for the test, or skips where mounting is not permitted.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

func TestRunRefuses(t *testing.T) {
	base := t.TempDir()
	mkdir := func(parts ...string) string {
		p := filepath.Join(append([]string{base}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := filepath.Join(base, "regular-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mkdir("linked"), link); err != nil {
		t.Fatal(err)
	}
	dataSub := mkdir("data", "probe")
	if err := os.WriteFile(filepath.Join(base, "data", "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	walSub := mkdir("cluster", "pg_wal", "probe")
	walDir := mkdir("walvol")
	insideWAL := mkdir("walvol", "probe")

	tests := []struct {
		name  string
		cfg   func(t *testing.T) Config
		check string // a directory that must hold no probe file afterwards
		want  string
	}{
		{"missing dir", func(*testing.T) Config { return Config{Dir: filepath.Join(base, "nope")} }, base, "does not exist"},
		{"no dir", func(*testing.T) Config { return Config{} }, base, "no probe directory"},
		{"a regular file", func(*testing.T) Config { return Config{Dir: file} }, base, "is not a directory"},
		{"a symbolic link to a directory", func(*testing.T) Config { return Config{Dir: link} }, base, "is a symbolic link"},
		{"inside a data directory", func(*testing.T) Config { return Config{Dir: dataSub} }, dataSub, "inside the PostgreSQL data directory"},
		{"inside pg_wal", func(*testing.T) Config { return Config{Dir: walSub} }, walSub, "inside PostgreSQL's WAL directory"},
		{"inside the given WAL directory", func(*testing.T) Config { return Config{Dir: insideWAL, WALDir: walDir} }, insideWAL, "inside the WAL directory"},
		{"WAL directory missing", func(*testing.T) Config { return Config{Dir: base, WALDir: filepath.Join(base, "nowal")} }, base, "WAL directory"},
		{"tiny duration", func(*testing.T) Config { return Config{Dir: base, Duration: 10 * time.Millisecond} }, base, "too short"},
		{"negative duration", func(*testing.T) Config { return Config{Dir: base, Duration: -time.Second} }, base, "too short"},
		{"unknown method", func(*testing.T) Config { return Config{Dir: base, Methods: []string{"fsync", "o_direct"}} }, base, `unknown sync method "o_direct"`},
		{"bad precision", func(*testing.T) Config { return Config{Dir: base, Precision: 2} }, base, "precision"},
		{"another file system than the WAL", func(t *testing.T) Config {
			return Config{Dir: shmDir(t), WALDir: base}
		}, base, "is not on the file system of the WAL directory"},
		{"read-only file system", func(t *testing.T) Config {
			ro := mountTmpfs(t, "size=32m")
			if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				t.Skipf("cannot remount read-only: %v", err)
			}
			return Config{Dir: ro}
		}, base, "read-only file system"},
		{"too little free space", func(t *testing.T) Config {
			return Config{Dir: mountTmpfs(t, "size=40m")}
		}, base, "free"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg(t)
			rep, err := Run(context.Background(), cfg, nil)
			var ce *ConfigError
			if !errors.As(err, &ce) || rep != nil {
				t.Fatalf("Run = %v, %v; want a ConfigError", rep, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			assertNoProbeFile(t, tt.check)
			if cfg.Dir != "" {
				if st, err := os.Stat(cfg.Dir); err == nil && st.IsDir() {
					assertNoProbeFile(t, cfg.Dir)
				}
			}
		})
	}
}

func TestRunNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes through file modes; the read-only mount case covers refusal as root")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	_, err := Run(context.Background(), Config{Dir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "not writable") {
		t.Errorf("Run = %v, want a not-writable refusal", err)
	}
}

func TestCreateProbeFileDiskFull(t *testing.T) {
	// Smaller than one probe file: the free-space check would refuse first, so call the
	// preallocation directly, as a disk filling up between the check and the write would.
	dir := mountTmpfs(t, "size=8m")
	f, err := createProbeFile(context.Background(), openDir(t, dir))
	if err == nil {
		t.Fatalf("createProbeFile = %q, want ENOSPC", f.path)
	}
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "file system is full") {
		t.Errorf("error %q: want a clear disk-full message wrapping ENOSPC", err)
	}
	assertNoProbeFile(t, dir)
}

func TestCreateProbeFileIsRealData(t *testing.T) {
	dir := t.TempDir()
	f, err := createProbeFile(context.Background(), openDir(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer f.remove()
	path := f.path
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != FileBytes || st.Blocks*512 < FileBytes {
		t.Errorf("probe file: %d bytes in %d blocks; want %d bytes, fully allocated", st.Size, st.Blocks, FileBytes)
	}
	if !strings.HasPrefix(filepath.Base(path), filePrefix) || st.Mode&0o077 != 0 {
		t.Errorf("probe file %s mode %o: want the %s prefix and no group/other access", path, st.Mode&0o777, filePrefix)
	}
}

func TestDirectIORefusedFallsBack(t *testing.T) {
	tests := []struct {
		name string
		when string // where the fake file system refuses O_DIRECT
	}{
		{"refused at open (tmpfs before Linux 6.6)", "open"},
		{"refused at write (an alignment the device does not take)", "write"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			file, err := createProbeFile(context.Background(), openDir(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			defer file.remove()
			direct := map[int]bool{}
			sys := sysCalls{
				open: func(p string, flags int, mode uint32) (int, error) {
					if flags&unix.O_DIRECT != 0 && tt.when == "open" {
						return -1, unix.EINVAL
					}
					fd, err := unix.Open(p, flags&^unix.O_DIRECT, mode)
					direct[fd] = flags&unix.O_DIRECT != 0
					return fd, err
				},
				pwrite: func(fd int, b []byte, off int64) (int, error) {
					if direct[fd] {
						return 0, unix.EINVAL
					}
					return unix.Pwrite(fd, b, off)
				},
			}
			cfg, err := Config{Dir: dir, Methods: []string{OpenDatasync, Fdatasync}}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			m, err := newMeasurer(file, cfg, sys)
			if err != nil {
				t.Fatalf("newMeasurer: %v", err)
			}
			defer m.close()
			if _, err := m.run(context.Background(), runLimits{budget: 100 * time.Millisecond}, nil); err != nil {
				t.Fatalf("run: %v", err)
			}
			for _, r := range m.results() {
				if r.Name != OpenDatasync {
					if r.Note != "" {
						t.Errorf("%s: note %q on a method that never asked for O_DIRECT", r.Name, r.Note)
					}
					continue
				}
				if r.DirectIO || r.Samples == 0 || !strings.Contains(r.Note, "refused O_DIRECT (EINVAL on "+tt.when+")") {
					t.Errorf("%s %d: DirectIO %v, %d samples, note %q; want measured without O_DIRECT, saying so",
						r.Name, r.WritesPerSync, r.DirectIO, r.Samples, r.Note)
				}
			}
		})
	}
}
