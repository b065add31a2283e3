package kernel

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

const kB = 1024

// fullDirtyable is MemFree + Active(file) + Inactive(file) of fullMeminfo.
const fullDirtyable = (8000000 + 2000000 + 3000000) * kB

func TestCollect(t *testing.T) {
	// fullMeminfo is testdata/*/meminfo of the ratios, bytes and background-above trees.
	fullMeminfo := collector.Meminfo{
		MemTotalBytes:     16384000 * kB,
		MemFreeBytes:      8000000 * kB,
		MemAvailableBytes: 12000000 * kB,
		ActiveFileBytes:   2000000 * kB,
		InactiveFileBytes: 3000000 * kB,
		DirtyBytes:        123456 * kB,
		WritebackBytes:    789 * kB,
	}
	tests := []struct {
		name string
		root string
		want collector.Kernel
	}{
		{
			name: "kernel defaults: ratios 10/20 of dirtyable memory",
			root: "ratios",
			want: collector.Kernel{
				VM: collector.VM{
					DirtyBackgroundRatio: 10, DirtyRatio: 20,
					DirtyExpireCentisecs: 3000, DirtyWritebackCentisecs: 500,
				},
				DirtyBackgroundThresholdBytes: fullDirtyable * 10 / 100,
				DirtyThresholdBytes:           fullDirtyable * 20 / 100,
				Meminfo:                       fullMeminfo,
			},
		},
		{
			name: "bytes knobs set, ratios zeroed by the kernel",
			root: "bytes",
			want: collector.Kernel{
				VM: collector.VM{
					DirtyBackgroundBytes: 64 << 20, DirtyBytes: 256 << 20,
					DirtyExpireCentisecs: 1500, DirtyWritebackCentisecs: 100,
				},
				DirtyBackgroundThresholdBytes: 64 << 20,
				DirtyThresholdBytes:           256 << 20,
				Meminfo:                       fullMeminfo,
			},
		},
		{
			name: "background ratio above dirty ratio is halved",
			root: "background-above",
			want: collector.Kernel{
				VM: collector.VM{
					DirtyBackgroundRatio: 30, DirtyRatio: 20,
					DirtyExpireCentisecs: 3000, DirtyWritebackCentisecs: 500,
				},
				DirtyBackgroundThresholdBytes: fullDirtyable * 20 / 100 / 2,
				DirtyThresholdBytes:           fullDirtyable * 20 / 100,
				Meminfo:                       fullMeminfo,
			},
		},
		{
			// Kernels before 3.14 have no MemAvailable (gopsutil then estimates it as MemFree +
			// Cached) and before 2.6.28 no Active(file)/Inactive(file): missing fields stay
			// zero instead of failing the collection.
			name: "old meminfo without optional fields",
			root: "old-meminfo",
			want: collector.Kernel{
				VM: collector.VM{
					DirtyBackgroundRatio: 10, DirtyRatio: 20,
					DirtyExpireCentisecs: 3000, DirtyWritebackCentisecs: 500,
				},
				DirtyBackgroundThresholdBytes: 1000000 * kB * 10 / 100,
				DirtyThresholdBytes:           1000000 * kB * 20 / 100,
				Meminfo: collector.Meminfo{
					MemTotalBytes:     4096000 * kB,
					MemFreeBytes:      1000000 * kB,
					MemAvailableBytes: (1000000 + 2000000) * kB,
					DirtyBytes:        4000 * kB,
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New(filepath.Join("testdata", tt.root)).Collect(context.Background())
			if err != nil {
				t.Fatalf("Collect() error = %v", err)
			}
			if *got != tt.want {
				t.Errorf("Collect()\n got %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

func TestCollectErrors(t *testing.T) {
	tests := []struct {
		name string
		root string
		// wantIn are substrings the operator's one line must hold: what failed and what to do.
		wantIn []string
	}{
		{
			name:   "missing root",
			root:   "does-not-exist",
			wantIn: []string{"vm.dirty_background_ratio", "testdata/does-not-exist/sys/vm/dirty_background_ratio", "--path.procfs"},
		},
		{
			name:   "missing vm knob",
			root:   "no-vm-bytes",
			wantIn: []string{"vm.dirty_bytes", "testdata/no-vm-bytes/sys/vm/dirty_bytes", "--path.procfs"},
		},
		{
			name:   "missing meminfo",
			root:   "no-meminfo",
			wantIn: []string{"meminfo", "testdata/no-meminfo/meminfo", "--path.procfs"},
		},
		{
			name:   "unparsable knob",
			root:   "bad-ratio",
			wantIn: []string{"testdata/bad-ratio/sys/vm/dirty_ratio", "twenty"},
		},
		{
			name:   "file that is not meminfo",
			root:   "not-meminfo",
			wantIn: []string{"no MemTotal", "testdata/not-meminfo/meminfo", "--path.procfs"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New(filepath.Join("testdata", tt.root)).Collect(context.Background())
			if err == nil {
				t.Fatalf("Collect() = %+v, want an error", got)
			}
			t.Logf("error: %v", err)
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Collect() error = %q, want it to contain %q", err, s)
				}
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("Collect() error = %q, want one line", err)
			}
		})
	}
}

func TestThresholds(t *testing.T) {
	const dirtyable = 1000 << 20
	tests := []struct {
		name           string
		vm             collector.VM
		wantBackground int64
		wantForeground int64
	}{
		{"ratios", collector.VM{DirtyBackgroundRatio: 10, DirtyRatio: 20}, 100 << 20, 200 << 20},
		{"bytes", collector.VM{DirtyBackgroundBytes: 64 << 20, DirtyBytes: 256 << 20}, 64 << 20, 256 << 20},
		{"background bytes, foreground ratio", collector.VM{DirtyBackgroundBytes: 64 << 20, DirtyRatio: 20}, 64 << 20, 200 << 20},
		{"background ratio, foreground bytes", collector.VM{DirtyBackgroundRatio: 10, DirtyBytes: 512 << 20}, 100 << 20, 512 << 20},
		{"background bytes above foreground bytes", collector.VM{DirtyBackgroundBytes: 512 << 20, DirtyBytes: 256 << 20}, 128 << 20, 256 << 20},
		{"equal ratios", collector.VM{DirtyBackgroundRatio: 20, DirtyRatio: 20}, 100 << 20, 200 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bg, fg := thresholds(tt.vm, dirtyable)
			if bg != tt.wantBackground || fg != tt.wantForeground {
				t.Errorf("thresholds(%+v, %d) = %d, %d; want %d, %d", tt.vm, dirtyable, bg, fg, tt.wantBackground, tt.wantForeground)
			}
		})
	}
}

// TestCollectHost reads this machine's /proc, so the real file layout is exercised too.
func TestCollectHost(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skipf("no /proc/meminfo here: %v", err)
	}
	got, err := New("/proc").Collect(context.Background())
	if err != nil {
		t.Fatalf("Collect() error = %v", err)
	}
	if got.Meminfo.MemTotalBytes <= 0 {
		t.Errorf("MemTotalBytes = %d, want > 0", got.Meminfo.MemTotalBytes)
	}
	if got.DirtyThresholdBytes <= 0 || got.DirtyBackgroundThresholdBytes >= got.DirtyThresholdBytes {
		t.Errorf("thresholds = %d background, %d foreground; want 0 < background < foreground",
			got.DirtyBackgroundThresholdBytes, got.DirtyThresholdBytes)
	}
	if got.VM.DirtyExpireCentisecs <= 0 {
		t.Errorf("DirtyExpireCentisecs = %d, want > 0", got.VM.DirtyExpireCentisecs)
	}
}

func TestParseKnob(t *testing.T) {
	tests := []struct {
		name, text string
		want       int64
		wantErr    bool
	}{
		{"dirty_ratio", "20\n", 20, false},
		{"dirty_ratio", "100", 100, false},
		{"dirty_ratio", "101", 0, true},
		{"dirty_background_ratio", "-1", 0, true},
		{"dirty_bytes", "268435456", 268435456, false},
		{"dirty_bytes", "-4096", 0, true},
		{"dirty_expire_centisecs", "-1", 0, true},
		{"dirty_writeback_centisecs", "twenty", 0, true},
	}
	for _, tt := range tests {
		got, err := parseKnob(tt.name, tt.text)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseKnob(%s, %q) = %d, %v; want %d, error %v", tt.name, tt.text, got, err, tt.want, tt.wantErr)
		}
	}
}

// A meminfo value whose bytes pass int64 wrapped in gopsutil's uint64 product to a plausible
// size, and sums of huge fields went negative as int64.
func TestReadMeminfoOverflow(t *testing.T) {
	tests := []struct {
		name, meminfo, wantIn string
	}{
		{"kB past int64 bytes", "MemTotal: 18014398509481985 kB\nMemFree: 1 kB\n", "MemTotal: 18014398509481985 kB"},
		{"used field past int64 bytes", "MemTotal: 16318412 kB\nMemFree: 1 kB\nDirty: 9007199254740992 kB\n", "Dirty"},
		{"estimated MemAvailable past int64", "MemTotal: 9007199254740991 kB\nMemFree: 9007199254740991 kB\nCached: 9007199254740991 kB\n", "more than a counter holds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "meminfo"), []byte(tt.meminfo), 0o644); err != nil {
				t.Fatal(err)
			}
			mi, err := New(dir).readMeminfo(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("readMeminfo() = %+v, %v; want an error naming %q", mi, err, tt.wantIn)
			}
		})
	}
}

func TestThresholdsLarge(t *testing.T) {
	// 8 EiB of dirtyable memory: dirtyable*ratio overflowed int64 and went negative.
	const dirtyable = 1 << 62
	bg, fg := thresholds(collector.VM{DirtyBackgroundRatio: 10, DirtyRatio: 20}, dirtyable)
	if bg != dirtyable/100*10+dirtyable%100*10/100 || fg != dirtyable/100*20+dirtyable%100*20/100 || bg <= 0 || bg >= fg {
		t.Errorf("thresholds(10%%/20%% of 2^62) = %d, %d", bg, fg)
	}
	mi := collector.Meminfo{MemFreeBytes: 1 << 62, ActiveFileBytes: 1 << 62, InactiveFileBytes: 1 << 62}
	if got := dirtyableBytes(mi); got != math.MaxInt64 {
		t.Errorf("dirtyableBytes(3 * 2^62) = %d, want it to stop at MaxInt64", got)
	}
}

// TestReadMeminfo reads a testdata tree through the exported reader: the same figures as
// Collect, and the same errors for a tree without meminfo.
func TestReadMeminfo(t *testing.T) {
	mi, err := ReadMeminfo(context.Background(), filepath.Join("testdata", "ratios"))
	if err != nil {
		t.Fatal(err)
	}
	if mi.DirtyBytes != 123456*kB || mi.WritebackBytes != 789*kB || mi.MemTotalBytes != 16384000*kB {
		t.Errorf("ReadMeminfo = Dirty %d, Writeback %d, MemTotal %d bytes; want %d, %d, %d",
			mi.DirtyBytes, mi.WritebackBytes, mi.MemTotalBytes, 123456*kB, 789*kB, 16384000*kB)
	}
	if _, err := ReadMeminfo(context.Background(), filepath.Join("testdata", "no-meminfo")); err == nil || !strings.Contains(err.Error(), "--path.procfs") {
		t.Errorf("no meminfo: error %v, want one naming --path.procfs", err)
	}
}
