package writers

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Bounds of mountinfo: a host with thousands of mounts (a Kubernetes node) has a file of a few
// hundred kB; overlay's option lists make long lines.
const (
	maxMountinfo     = 16 << 20
	maxMountinfoLine = 1 << 20
)

// v1Controllers are the cgroup v1 controllers (cgroups(7)); any other super option of a v1
// mount (rw, name=systemd, clone_children...) is not a controller.
var v1Controllers = []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb",
	"memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma"}

// mounts are the mounts the collector uses: the cgroup hierarchies and procfs.
type mounts struct {
	v2          string   // the first cgroup2 mount point, "" when none
	v1          []string // controllers on v1 hierarchies
	blkio       string   // the v1 blkio hierarchy's mount point
	procOptions []string // super options of the proc mount at the procfs root
}

// parseMounts reads mountinfo (proc(5)) for cgroup, cgroup2 and proc mounts:
//
//	41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
//	(1)(2)(3) (4) (5)                   (6)         (7)(8)  (9)     (10)
//
// Field 7 is zero or more optional fields ended by "-". Lines of another shape are skipped.
func parseMounts(r io.Reader, procMount string) (mounts, error) {
	var m mounts
	sc := bufio.NewScanner(io.LimitReader(r, maxMountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), maxMountinfoLine)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		point, fsType, opts := unescapeMount(f[4]), f[sep+1], strings.Split(f[sep+3], ",")
		switch fsType {
		case "cgroup2":
			if m.v2 == "" {
				m.v2 = point
			}
		case "cgroup":
			for _, o := range opts {
				if slices.Contains(v1Controllers, o) && !slices.Contains(m.v1, o) {
					m.v1 = append(m.v1, o)
				}
				if o == "blkio" {
					m.blkio = point
				}
			}
		case "proc":
			if point == procMount {
				m.procOptions = opts
			}
		}
	}
	if err := sc.Err(); err != nil {
		return mounts{}, err
	}
	slices.Sort(m.v1)
	return m, nil
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// layoutOf classifies the mounts. A v1 hierarchy without controllers (name=systemd alone)
// does not make a host hybrid: nothing can be limited through it.
func layoutOf(m mounts) string {
	switch {
	case m.v2 != "" && len(m.v1) > 0:
		return collector.CgroupHybrid
	case m.v2 != "":
		return collector.CgroupV2
	case len(m.v1) > 0:
		return collector.CgroupV1
	}
	return collector.CgroupNone
}

// hidePID returns the proc mount's hidepid= value when it hides other users' processes
// (hidepid=1/noaccess hides their files, 2/invisible and 4/ptraceable the processes; systemd's
// ProtectProc= sets it on a unit's private /proc), "" otherwise.
func hidePID(opts []string) string {
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "hidepid="); ok && v != "0" && v != "off" {
			return v
		}
	}
	return ""
}

// DetectLayout reads how cgroups are mounted: mountinfo from the procfs root, the unified
// hierarchy's root controllers from the sysfs root, and whether pid 1 is systemd. Mount
// points under /sys are read under sysfs (a host's /sys mounted elsewhere; a testdata tree).
func DetectLayout(procfs, sysfs string) (collector.CgroupLayout, error) {
	l, _, err := detect(procfs, sysfs)
	return l, err
}

// detect is DetectLayout that also returns the mounts, for the collector's cgroup reads.
func detect(procfs, sysfs string) (collector.CgroupLayout, mounts, error) {
	f, err := os.Open(filepath.Join(procfs, "self", "mountinfo"))
	if err != nil {
		return collector.CgroupLayout{}, mounts{}, fmt.Errorf("read mounts (%s): %w", procfsHint, err)
	}
	defer f.Close()
	m, err := parseMounts(f, procfs)
	if err != nil {
		return collector.CgroupLayout{}, mounts{}, fmt.Errorf("read mounts from %s: %w", f.Name(), err)
	}
	l := collector.CgroupLayout{Version: layoutOf(m), V2Mount: m.v2, V1Controllers: m.v1}
	if dir := hostPath(sysfs, m.v2); dir != "" {
		var buf []byte
		l.V2Controllers = readControllers(filepath.Join(dir, "cgroup.controllers"), buf)
		l.V2SubtreeControl = readControllers(filepath.Join(dir, "cgroup.subtree_control"), buf)
	}
	if b, err := readBounded(filepath.Join(procfs, "1", "comm"), nil, maxProcFile); err == nil {
		l.Systemd = parseComm(b) == "systemd"
	}
	return l, m, nil
}

// hostPath is where a mount point of the host is read: under the sysfs root for a point under
// /sys, as it is when sysfs is the host's own /sys; "" when it cannot be read here.
func hostPath(sysfs, point string) string {
	switch {
	case point == "":
		return ""
	case point == "/sys" || strings.HasPrefix(point, "/sys/"):
		return filepath.Join(sysfs, strings.TrimPrefix(point, "/sys"))
	case filepath.Clean(sysfs) == "/sys":
		return point
	}
	return ""
}

// readControllers reads a cgroup.controllers or cgroup.subtree_control file: controller names
// separated by spaces. Names that are not plain lower-case words are dropped; a file that
// cannot be read gives none.
func readControllers(name string, buf []byte) []string {
	b, err := readBounded(name, buf, maxProcFile)
	if err != nil {
		return nil
	}
	var names []string
	for _, n := range strings.Fields(string(b)) {
		if isControllerName(n) && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

func isControllerName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}
