package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// userHZ is the unit of /proc/stat's CPU times: USER_HZ, which the kernel keeps at 100 for user
// space on every architecture whatever its internal HZ (proc(5), "/proc/stat").
const userHZ = 100

// cpuFields are the "cpu" line's columns summed into TotalSeconds, in /proc/stat's order (guest
// and guest_nice follow them and are already counted in user and nice).
const cpuFields = 8

// readCPU reads the host's CPU time from procfs/stat. A root without a stat file gives nil: the
// CPU figures are optional to the rules, and the dirty-page facts stand without them.
func (c *Collector) readCPU() (*collector.CPU, error) {
	path := filepath.Join(c.procfs, "stat")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s (%s): %w", path, procfsHint, err)
	}
	cpu, err := parseStat(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return &cpu, nil
}

// parseStat reads the aggregate "cpu" line, the per-CPU "cpuN" lines (counted) and btime of a
// /proc/stat. Kernels before 2.6.11 have fewer columns than cpuFields; the missing ones count 0.
// A file without the aggregate line, a CPU count or btime is not a /proc/stat.
func parseStat(text string) (collector.CPU, error) {
	var cpu collector.CPU
	var sawTotal, sawBoot bool
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "cpu":
			if sawTotal {
				return cpu, errors.New(`two aggregate "cpu" lines`)
			}
			total, idle, err := cpuSeconds(f[1:])
			if err != nil {
				return cpu, fmt.Errorf(`"cpu" line: %w`, err)
			}
			cpu.TotalSeconds, cpu.IdleSeconds, sawTotal = total, idle, true
		case strings.HasPrefix(f[0], "cpu"):
			if _, err := strconv.ParseUint(f[0][3:], 10, 16); err == nil {
				cpu.CPUs++
			}
		case f[0] == "btime" && len(f) == 2:
			sec, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || sec <= 0 || sec > math.MaxInt64/int64(time.Second) {
				return cpu, fmt.Errorf("btime %q is not a time in seconds since 1970", f[1])
			}
			cpu.BootTime, sawBoot = time.Unix(sec, 0).UTC(), true
		}
	}
	switch {
	case !sawTotal:
		return cpu, errors.New(`no aggregate "cpu" line`)
	case cpu.CPUs == 0:
		return cpu, errors.New(`no per-CPU "cpuN" line`)
	case !sawBoot:
		return cpu, errors.New("no btime line")
	}
	return cpu, nil
}

// cpuSeconds sums the first cpuFields columns into the total and idle + iowait (columns 4 and 5)
// into idle, in seconds.
func cpuSeconds(cols []string) (total, idle float64, err error) {
	if len(cols) < 4 {
		return 0, 0, fmt.Errorf("%d columns, want at least user, nice, system and idle", len(cols))
	}
	for i, col := range cols[:min(len(cols), cpuFields)] {
		ticks, err := strconv.ParseUint(col, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("column %d %q is not a tick count", i+1, col)
		}
		s := float64(ticks) / userHZ
		total += s
		if i == 3 || i == 4 {
			idle += s
		}
	}
	return total, idle, nil
}
