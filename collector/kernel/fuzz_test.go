package kernel

import (
	"context"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// realMeminfo is the head of a 5.15 kernel's /proc/meminfo.
const realMeminfo = `MemTotal:       16318412 kB
MemFree:         1030000 kB
MemAvailable:   12001234 kB
Buffers:          514416 kB
Cached:         10250140 kB
SwapCached:            0 kB
Active:          5102312 kB
Inactive:        8012840 kB
Active(anon):      31244 kB
Inactive(anon):  2400420 kB
Active(file):    5071068 kB
Inactive(file):  5612420 kB
Unevictable:       23096 kB
Mlocked:           20504 kB
SwapTotal:       2097148 kB
SwapFree:        2097148 kB
Dirty:              1292 kB
Writeback:             0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

// FuzzParseKnob checks the vm.dirty_* reader: a value is accepted only inside the kernel's range
// for that knob, and an accepted value reads back from its decimal form.
func FuzzParseKnob(f *testing.F) {
	for _, s := range []string{"10\n", "20", "0", "100", "101", "-1", "twenty", "268435456\n", "3000", " 500 ", "9223372036854775807", "9223372036854775808", "1e3", ""} {
		f.Add(uint8(0), s)
		f.Add(uint8(1), s)
	}
	names := []string{"dirty_ratio", "dirty_bytes", "dirty_background_ratio", "dirty_background_bytes", "dirty_expire_centisecs", "dirty_writeback_centisecs"}
	f.Fuzz(func(t *testing.T, which uint8, text string) {
		name := names[int(which)%len(names)]
		v, err := parseKnob(name, text)
		if err != nil {
			return
		}
		if v < 0 || strings.HasSuffix(name, "_ratio") && v > 100 {
			t.Fatalf("parseKnob(%s, %q) = %d, outside the kernel's range", name, text, v)
		}
		if back, err := parseKnob(name, strconv.FormatInt(v, 10)+"\n"); err != nil || back != v {
			t.Fatalf("parseKnob(%s, %d) = %d, %v", name, v, back, err)
		}
	})
}

// FuzzThresholds checks the dirty thresholds for every knob setting the kernel allows and any
// memory size: never negative, background below foreground (when there is one), a ratio's
// threshold at most the dirtyable memory, and exactly n*ratio/100.
func FuzzThresholds(f *testing.F) {
	f.Add(int64(10), int64(0), int64(20), int64(0), int64(13000000*1024))
	f.Add(int64(0), int64(64<<20), int64(0), int64(256<<20), int64(13000000*1024))
	f.Add(int64(30), int64(0), int64(20), int64(0), int64(1<<40))
	f.Add(int64(100), int64(0), int64(100), int64(0), int64(math.MaxInt64))
	f.Add(int64(0), int64(math.MaxInt64), int64(0), int64(math.MaxInt64), int64(0))
	f.Fuzz(func(t *testing.T, bgRatio, bgBytes, ratio, bytes, dirtyable int64) {
		abs := func(v, mod int64) int64 {
			if v < 0 {
				v = -(v + 1)
			}
			if mod > 0 {
				v %= mod
			}
			return v
		}
		vm := collector.VM{DirtyBackgroundRatio: abs(bgRatio, 101), DirtyBackgroundBytes: abs(bgBytes, 0),
			DirtyRatio: abs(ratio, 101), DirtyBytes: abs(bytes, 0)}
		dirtyable = abs(dirtyable, 0)
		bg, fg := thresholds(vm, dirtyable)
		if bg < 0 || fg < 0 {
			t.Fatalf("thresholds(%+v, %d) = %d, %d: negative", vm, dirtyable, bg, fg)
		}
		if fg > 0 && bg >= fg {
			t.Fatalf("thresholds(%+v, %d) = %d, %d: background not below foreground", vm, dirtyable, bg, fg)
		}
		if vm.DirtyBytes == 0 {
			if want := percentRef(dirtyable, vm.DirtyRatio); fg != want || fg > dirtyable {
				t.Fatalf("thresholds(%+v, %d) foreground = %d, want %d", vm, dirtyable, fg, want)
			}
		}
	})
}

// FuzzMeminfo reads fuzzed meminfo files through the collector (gopsutil and the checks around
// it): no panic, no negative byte count, MemTotal exactly its kB times 1024, and the dirtyable
// memory never wraps.
func FuzzMeminfo(f *testing.F) {
	f.Add([]byte(realMeminfo))
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f.Add(b)
	}
	for _, root := range []string{"ratios", "old-meminfo", "not-meminfo"} {
		if b, err := os.ReadFile(filepath.Join("testdata", root, "meminfo")); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("MemTotal: 18014398509481984 kB\nMemFree: 1 kB\n"))
	f.Add([]byte("MemTotal: 9007199254740991 kB\nMemFree: 9007199254740991 kB\nCached: 9007199254740991 kB\nActive(file): 9007199254740991 kB\n"))
	f.Add([]byte("MemTotal: 18446744073709551615\n"))
	dir := f.TempDir()
	c := New(dir)
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, "meminfo"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		mi, err := c.readMeminfo(context.Background())
		if err != nil {
			return
		}
		for name, v := range map[string]int64{"MemTotal": mi.MemTotalBytes, "MemFree": mi.MemFreeBytes,
			"MemAvailable": mi.MemAvailableBytes, "Active(file)": mi.ActiveFileBytes, "Inactive(file)": mi.InactiveFileBytes,
			"Dirty": mi.DirtyBytes, "Writeback": mi.WritebackBytes} {
			if v < 0 {
				t.Fatalf("%s = %d bytes from %q", name, v, b)
			}
		}
		if d := dirtyableBytes(mi); d < 0 || d < mi.MemFreeBytes {
			t.Fatalf("dirtyable = %d from %+v", d, mi)
		}
		// The last MemTotal line wins in gopsutil; the collector's value is exactly its bytes.
		var totalKB uint64
		for _, line := range strings.Split(string(b), "\n") {
			if k, rest, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "MemTotal" {
				v := strings.TrimSpace(strings.Replace(strings.TrimSpace(rest), " kB", "", -1))
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					totalKB = n
				}
			}
		}
		if uint64(mi.MemTotalBytes) != totalKB*1024 {
			t.Fatalf("MemTotal = %d bytes, want %d kB from %q", mi.MemTotalBytes, totalKB, b)
		}
	})
}

// percentRef is n*p/100 computed in 128 bits, the reference for percent.
func percentRef(n, p int64) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(p))
	q, _ := bits.Div64(hi, lo, 100)
	return int64(q)
}
