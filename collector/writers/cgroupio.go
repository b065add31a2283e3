package writers

import (
	"bytes"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// maxDevices bounds the devices kept per cgroup: io.stat lists every device the cgroup did I/O
// on, one line each.
const maxDevices = 64

// parseIOStat reads a cgroup v2 io.stat: one line per device,
//
//	8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0
//
// (admin-guide/cgroup-v2, "IO Interface Files") and returns each device's wbytes. Lines without
// a MAJ:MIN device or a wbytes are skipped; so is a device listed twice.
func parseIOStat(b []byte) []collector.DeviceWrites {
	var out []collector.DeviceWrites
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) < 2 || !isDevice(f[0]) {
			continue
		}
		for _, kv := range f[1:] {
			if v, ok := strings.CutPrefix(kv, "wbytes="); ok {
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					out = addDevice(out, f[0], n)
				}
				break
			}
		}
	}
	return out
}

// parseBlkio reads a cgroup v1 blkio.throttle.io_service_bytes: five lines per device
// ("8:0 Read N", "8:0 Write N", "8:0 Sync N", "8:0 Async N", "8:0 Total N") and a last
// "Total N" (admin-guide/cgroup-v1/blkio-controller), and returns each device's Write.
func parseBlkio(b []byte) []collector.DeviceWrites {
	var out []collector.DeviceWrites
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		if len(f) != 3 || f[1] != "Write" || !isDevice(f[0]) {
			continue
		}
		if n, err := strconv.ParseUint(f[2], 10, 64); err == nil {
			out = addDevice(out, f[0], n)
		}
	}
	return out
}

func addDevice(out []collector.DeviceWrites, dev string, n uint64) []collector.DeviceWrites {
	if len(out) >= maxDevices || slices.ContainsFunc(out, func(d collector.DeviceWrites) bool { return d.Device == dev }) {
		return out
	}
	return append(out, collector.DeviceWrites{Device: dev, WriteBytes: n})
}

// isDevice checks a "MAJ:MIN" block device number: two decimal numbers that fit the kernel's
// dev_t (12 bits of major, 20 of minor).
func isDevice(s string) bool {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	a, err1 := strconv.ParseUint(maj, 10, 32)
	b, err2 := strconv.ParseUint(min, 10, 32)
	return err1 == nil && err2 == nil && a < 1<<12 && b < 1<<20 && strconv.FormatUint(a, 10) == maj && strconv.FormatUint(b, 10) == min
}

// cgroupReader reads the write counters of the cgroups of the listed processes, each once.
type cgroupReader struct {
	v2Dir, blkioDir string // where the hierarchies are read; "" when not
	systemd         bool   // the host's init is systemd: name the units
	buf             []byte
	seen            map[string]bool
	out             []collector.CgroupWrites
}

// maxCgroups bounds the cgroups read per collection: those of the listed processes.
const maxCgroups = 32

func newCgroupReader(sysfs string, m mounts, layout collector.CgroupLayout) *cgroupReader {
	r := &cgroupReader{seen: map[string]bool{}, systemd: layout.Systemd}
	// On a hybrid host the unified hierarchy has no io controller (v1 took it): no io.stat.
	if layout.Version == collector.CgroupV2 {
		r.v2Dir = hostPath(sysfs, m.v2)
	}
	r.blkioDir = hostPath(sysfs, m.blkio)
	return r
}

// add reads the counters of a process's cgroups. A cgroup without the file (no io controller
// enabled for it, or gone) is left out.
func (r *cgroupReader) add(p collector.ProcessWrites) {
	r.read(collector.HierarchyV2, r.v2Dir, p.Cgroup, "io.stat", parseIOStat)
	r.read(collector.HierarchyBlkio, r.blkioDir, p.BlkioCgroup, "blkio.throttle.io_service_bytes", parseBlkio)
}

func (r *cgroupReader) read(hierarchy, mount, cgroupPath, file string, parse func([]byte) []collector.DeviceWrites) {
	key := hierarchy + ":" + cgroupPath
	if cgroupPath == "" || r.seen[key] || len(r.seen) >= maxCgroups {
		return
	}
	r.seen[key] = true
	dir, ok := cgroupDir(mount, cgroupPath)
	if !ok {
		return
	}
	b, err := readBounded(filepath.Join(dir, file), r.buf, maxStatFile)
	if err != nil {
		return
	}
	r.buf = b
	if devs := parse(b); len(devs) > 0 {
		cw := collector.CgroupWrites{Hierarchy: hierarchy, Path: cgroupPath, Devices: devs}
		if r.systemd {
			cw.Unit = unitOf(cgroupPath)
		}
		r.out = append(r.out, cw)
	}
}
