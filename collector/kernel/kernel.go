// Package kernel reads the kernel's dirty-page knobs (vm.dirty_*), memory state (/proc/meminfo)
// and CPU time (/proc/stat) from a procfs root, and derives the thresholds at which the kernel
// starts background writeback and throttles writers.
package kernel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/shirou/gopsutil/v4/common"
	"github.com/shirou/gopsutil/v4/mem"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// procfsHint tells the operator what to check when a procfs read fails: a wrong root (for
// instance a container's own /proc instead of the host's) is the usual cause.
const procfsHint = "is --path.procfs the host's procfs?"

// Collector reads the kernel part of a snapshot from one procfs root.
type Collector struct {
	procfs string
}

// New returns a Collector that reads procfs (normally "/proc"; a host's procfs mounted
// elsewhere when running in a container; a testdata tree in tests).
func New(procfs string) *Collector {
	// An empty root would make the vm.dirty_* reads relative to the working directory while
	// gopsutil fell back to /proc: default it once here so both read the same tree.
	if procfs == "" {
		procfs = "/proc"
	}
	return &Collector{procfs: procfs}
}

// Collect reads vm.dirty_*, /proc/meminfo and /proc/stat. Every vm.dirty_* file exists on any
// kernel this tool supports (2.6.29+), so a missing one means the root is wrong and is an error;
// meminfo fields a kernel does not have are left at zero, and a missing stat leaves CPU nil.
func (c *Collector) Collect(ctx context.Context) (*collector.Kernel, error) {
	vm, err := c.readVM()
	if err != nil {
		return nil, err
	}
	mi, err := c.readMeminfo(ctx)
	if err != nil {
		return nil, err
	}
	cpu, err := c.readCPU()
	if err != nil {
		return nil, err
	}
	k := &collector.Kernel{VM: vm, Meminfo: mi, CPU: cpu}
	k.DirtyBackgroundThresholdBytes, k.DirtyThresholdBytes = thresholds(vm, dirtyableBytes(mi))
	return k, nil
}

func (c *Collector) readVM() (collector.VM, error) {
	var vm collector.VM
	knobs := []struct {
		name string
		dst  *int64
	}{
		{"dirty_background_ratio", &vm.DirtyBackgroundRatio},
		{"dirty_background_bytes", &vm.DirtyBackgroundBytes},
		{"dirty_ratio", &vm.DirtyRatio},
		{"dirty_bytes", &vm.DirtyBytes},
		{"dirty_expire_centisecs", &vm.DirtyExpireCentisecs},
		{"dirty_writeback_centisecs", &vm.DirtyWritebackCentisecs},
	}
	for _, k := range knobs {
		path := filepath.Join(c.procfs, "sys", "vm", k.name)
		b, err := os.ReadFile(path)
		if err != nil {
			return vm, fmt.Errorf("read vm.%s (%s): %w", k.name, procfsHint, err)
		}
		v, err := parseKnob(k.name, string(b))
		if err != nil {
			return vm, fmt.Errorf("parse %s: %w", path, err)
		}
		*k.dst = v
	}
	return vm, nil
}

// parseKnob reads a vm.dirty_* file. The kernel's sysctl table (kernel/sysctl.c,
// mm/page-writeback.c) keeps the ratios within 0..100 and the others at 0 or more; a value
// outside that is not the kernel's, and the thresholds computed from it would be nonsense.
func parseKnob(name, text string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return 0, err
	}
	limit := int64(math.MaxInt64)
	if strings.HasSuffix(name, "_ratio") {
		limit = 100
	}
	if v < 0 || v > limit {
		return 0, fmt.Errorf("%d is outside the kernel's range 0..%d", v, limit)
	}
	return v, nil
}

// ReadMeminfo reads the meminfo of the procfs root as Collect does, without the vm.dirty_*
// knobs: for callers that sample the memory state often (the lab samples Dirty and Writeback
// every second while a benchmark runs).
func ReadMeminfo(ctx context.Context, procfs string) (collector.Meminfo, error) {
	return New(procfs).readMeminfo(ctx)
}

// readMeminfo uses gopsutil, which honours the procfs root through the context (HOST_PROC).
// VirtualMemoryWithContext gives MemTotal, MemFree, MemAvailable, Dirty and Writeback; only its
// Linux extension gives Active(file) and Inactive(file), and that is a second read of the file.
// The two reads are a few microseconds apart, which is nothing next to how fast these counters
// move; the thresholds they feed are approximations anyway.
func (c *Collector) readMeminfo(ctx context.Context) (collector.Meminfo, error) {
	// gopsutil multiplies kB by 1024 in a uint64: check the values first, or a broken file's
	// huge one would wrap to a plausible size. Its own errors (a missing file) come below.
	if b, err := os.ReadFile(filepath.Join(c.procfs, "meminfo")); err == nil {
		if err := checkMeminfo(b); err != nil {
			return collector.Meminfo{}, fmt.Errorf("read meminfo %s: %w", filepath.Join(c.procfs, "meminfo"), err)
		}
	}
	ctx = context.WithValue(ctx, common.EnvKey, common.EnvMap{common.HostProcEnvKey: c.procfs})
	vm, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return collector.Meminfo{}, fmt.Errorf("read meminfo (%s): %w", procfsHint, pathError(err))
	}
	ex, err := mem.NewExLinux().VirtualMemoryWithContext(ctx)
	if err != nil {
		return collector.Meminfo{}, fmt.Errorf("read meminfo (%s): %w", procfsHint, pathError(err))
	}
	// A file without MemTotal is not a meminfo (gopsutil skips lines it does not know and would
	// return zeros): every threshold derived from it would be wrong.
	if vm.Total == 0 {
		return collector.Meminfo{}, fmt.Errorf("read meminfo: no MemTotal in %s (%s)",
			filepath.Join(c.procfs, "meminfo"), procfsHint)
	}
	// Sums such as gopsutil's MemAvailable estimate (MemFree + Cached) can still pass int64.
	for _, v := range []uint64{vm.Total, vm.Free, vm.Available, ex.ActiveFile, ex.InactiveFile, vm.Dirty, vm.WriteBack} {
		if v > math.MaxInt64 {
			return collector.Meminfo{}, fmt.Errorf("read meminfo %s: %d bytes is more than a counter holds",
				filepath.Join(c.procfs, "meminfo"), v)
		}
	}
	return collector.Meminfo{
		MemTotalBytes:     int64(vm.Total),
		MemFreeBytes:      int64(vm.Free),
		MemAvailableBytes: int64(vm.Available),
		ActiveFileBytes:   int64(ex.ActiveFile),
		InactiveFileBytes: int64(ex.InactiveFile),
		DirtyBytes:        int64(vm.Dirty),
		WritebackBytes:    int64(vm.WriteBack),
	}, nil
}

// meminfoKeys are the fields whose bytes the collector uses or gopsutil derives them from
// (MemAvailable's estimate on kernels before 3.14).
var meminfoKeys = []string{"MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "Active(file)",
	"Inactive(file)", "Dirty", "Writeback", "SReclaimable"}

// checkMeminfo refuses a meminfo whose used fields hold more kB than an int64 holds bytes.
func checkMeminfo(b []byte) error {
	for _, line := range strings.Split(string(b), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(meminfoKeys, strings.TrimSpace(key)) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		// What does not parse is gopsutil's to report.
		if v, err := strconv.ParseUint(f[0], 10, 64); err == nil && v > math.MaxInt64/1024 {
			return fmt.Errorf("%s: %d kB is more bytes than a counter holds", strings.TrimSpace(key), v)
		}
	}
	return nil
}

// pathError returns the *fs.PathError inside err when there is one: gopsutil wraps it as
// "couldn't read X: open X: ...", which would name the path twice in the operator's one line.
func pathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}

// dirtyableBytes approximates the memory the kernel lets fill with dirty pages. The kernel's
// global_dirtyable_memory() (mm/page-writeback.c) counts free pages less totalreserve_pages,
// plus the active and inactive file LRU lists, less highmem unless vm.highmem_is_dirtyable.
// /proc/meminfo shows neither the reserve nor (on 64-bit) any highmem, so this is MemFree +
// Active(file) + Inactive(file): slightly above the kernel's figure, by the reserves (typically
// tens of MB; see the zones' "high" watermarks and "protection" in /proc/zoneinfo).
// Documentation/admin-guide/sysctl/vm.rst calls this "total available memory that contains free
// pages and reclaimable pages".
func dirtyableBytes(mi collector.Meminfo) int64 {
	sum := int64(0)
	for _, v := range []int64{mi.MemFreeBytes, mi.ActiveFileBytes, mi.InactiveFileBytes} {
		// Each is at most MaxInt64 (readMeminfo checks); their sum may not be.
		if v > math.MaxInt64-sum {
			return math.MaxInt64
		}
		sum += v
	}
	return sum
}

// thresholds returns the effective background and foreground dirty thresholds in bytes, as the
// kernel's domain_dirty_limits() (mm/page-writeback.c) computes them for the global domain:
// a *_bytes knob wins when non-zero (writing one zeroes its ratio twin, vm.rst), else the ratio
// is a percentage of dirtyable memory; and a background threshold at or above the foreground one
// is cut to half of it, so background writeback always starts before writers are throttled.
// The kernel rounds *_bytes up to whole pages; that difference is ignored here.
func thresholds(vm collector.VM, dirtyable int64) (background, foreground int64) {
	foreground = vm.DirtyBytes
	if foreground == 0 {
		foreground = percent(dirtyable, vm.DirtyRatio)
	}
	background = vm.DirtyBackgroundBytes
	if background == 0 {
		background = percent(dirtyable, vm.DirtyBackgroundRatio)
	}
	if background >= foreground {
		background = foreground / 2
	}
	return background, foreground
}

// percent is n*p/100 rounded down, for n >= 0 and p within 0..100, without the overflow of
// n*p: n = 100q + r gives q*p + r*p/100.
func percent(n, p int64) int64 {
	return n/100*p + n%100*p/100
}
