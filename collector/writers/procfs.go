package writers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Bounds of the files read. A /proc/PID/io is about 150 bytes, stat about 300, comm 16; a
// cgroup file lists one line per hierarchy, each a path of a few hundred bytes at most (a
// Kubernetes pod's is about 200). Anything longer is not the kernel's file and is refused.
const (
	maxProcFile   = 4 << 10
	maxCgroupFile = 16 << 10
	// maxStatFile bounds a cgroup's io.stat or blkio file: one line (or five) per device.
	maxStatFile = 64 << 10
)

// errTooLong is a file longer than its bound.
var errTooLong = errors.New("longer than the kernel writes it")

// readBounded reads at most limit bytes of name into buf (grown as needed) and returns them;
// a longer file is errTooLong. It makes as few system calls as it can, since it runs for
// thousands of processes: the raw calls (os.Open would also try to register each /proc file
// with the poller), and a short read ends the file, as it does for the kernel's generated files
// (seq_file hands out what fits in one read), saving the read that would return 0.
func readBounded(name string, buf []byte, limit int) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	if cap(buf) < limit+1 {
		buf = make([]byte, 0, limit+1)
	}
	buf = buf[:0]
	for len(buf) <= limit {
		n, err := unix.Read(fd, buf[len(buf):limit+1])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		want := limit + 1 - len(buf)
		buf = buf[:len(buf)+max(n, 0)]
		if n < want {
			return buf, nil
		}
	}
	return nil, fmt.Errorf("%s: %w", name, errTooLong)
}

// vanished reports whether err means the process ended while it was being read: its /proc
// directory is gone (ENOENT) or the task is being torn down (ESRCH).
func vanished(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
}

// ioCounters are the two /proc/PID/io fields the collector uses.
type ioCounters struct {
	write, cancelled uint64
}

// parseIO reads /proc/PID/io ("write_bytes: N" and "cancelled_write_bytes: N" among other
// "name: value" lines, proc(5)). Both fields must be there exactly once, as decimal numbers.
func parseIO(b []byte) (ioCounters, error) {
	var c ioCounters
	var haveWrite, haveCancelled bool
	for line := range bytes.Lines(b) {
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\n"), []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		var seen *bool
		switch string(name) {
		case "write_bytes":
			dst, seen = &c.write, &haveWrite
		case "cancelled_write_bytes":
			dst, seen = &c.cancelled, &haveCancelled
		default:
			continue
		}
		if *seen {
			return ioCounters{}, fmt.Errorf("%s twice", name)
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(value)), 10, 64)
		if err != nil {
			return ioCounters{}, fmt.Errorf("%s: %w", name, err)
		}
		*dst, *seen = v, true
	}
	if !haveWrite || !haveCancelled {
		return ioCounters{}, errors.New("no write_bytes or cancelled_write_bytes")
	}
	return c, nil
}

// procStat holds the /proc/PID/stat fields the collector uses.
type procStat struct {
	comm string
	ppid int
	// start is the process's start time in clock ticks after boot: with the pid, it names one
	// process, where a pid alone can be reused.
	start uint64
	// kthread is the PF_KTHREAD flag: a kernel thread (a loop device's worker writes what its
	// device's users wrote).
	kthread bool
}

// pfKthread is PF_KTHREAD in the flags of /proc/PID/stat (include/linux/sched.h).
const pfKthread = 0x00200000

// parseStat reads /proc/PID/stat: "pid (comm) state ppid ... flags ... starttime ..." (proc(5):
// ppid is field 4, flags field 9, starttime field 22). comm may hold spaces and parentheses, so
// it ends at the last ')'.
func parseStat(b []byte) (procStat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procStat{}, errors.New("no (comm)")
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("%d fields after comm, want at least 20", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid < 0 {
		return procStat{}, fmt.Errorf("ppid %q", f[1])
	}
	flags, err := strconv.ParseUint(f[6], 10, 32)
	if err != nil {
		return procStat{}, fmt.Errorf("flags %q", f[6])
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("starttime %q", f[19])
	}
	return procStat{comm: string(b[open+1 : end]), ppid: ppid, start: start, kthread: flags&pfKthread != 0}, nil
}

// parseComm reads /proc/PID/comm: the name and a newline, at most 15 bytes (TASK_COMM_LEN).
func parseComm(b []byte) string {
	s := strings.TrimSuffix(string(b), "\n")
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// cgroups are a process's cgroup paths.
type cgroups struct {
	// v2 is the unified hierarchy's path ("0::"); blkio, memory and systemd the v1 paths of the
	// hierarchies carrying those controllers (systemd: the named hierarchy name=systemd).
	v2, blkio, memory, systemd string
}

// parseCgroup reads /proc/PID/cgroup: one "hierarchy-ID:controller-list:path" line per
// hierarchy (cgroups(7)); the unified hierarchy's has ID 0 and no controllers. A path may hold
// colons, so a line splits at its first two. Paths must be absolute; lines that are not this
// shape are skipped.
func parseCgroup(b []byte) cgroups {
	var cg cgroups
	for line := range bytes.Lines(b) {
		f := strings.SplitN(strings.TrimRight(string(line), "\n"), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		id, controllers, p := f[0], f[1], f[2]
		if id == "0" && controllers == "" {
			cg.v2 = p
			continue
		}
		for _, c := range strings.Split(controllers, ",") {
			switch c {
			case "blkio":
				cg.blkio = p
			case "memory":
				cg.memory = p
			case "name=systemd":
				cg.systemd = p
			}
		}
	}
	return cg
}

// unit names the systemd unit of the process: from its unified hierarchy's path where systemd
// keeps its units there (v2, hybrid), else from the v1 name=systemd hierarchy.
func (cg cgroups) unit() string {
	if u := unitOf(cg.v2); u != "" {
		return u
	}
	return unitOf(cg.systemd)
}

// unitOf names the systemd unit of a cgroup path: its last *.service or *.scope component
// (systemd.unit(5): a service's processes live in <slice>/<name>.service, a scope's in
// <name>.scope; a delegated unit may have sub-cgroups below it).
func unitOf(cgroupPath string) string {
	for p := path.Clean(cgroupPath); p != "/" && p != "."; p = path.Dir(p) {
		if base := path.Base(p); strings.HasSuffix(base, ".service") || strings.HasSuffix(base, ".scope") {
			return base
		}
	}
	return ""
}

// cgroupDir joins a cgroup path under a hierarchy's mount directory, and refuses a path that
// would leave it: a process in another cgroup namespace shows as "/../..".
func cgroupDir(mount, cgroupPath string) (string, bool) {
	if mount == "" || strings.Contains(cgroupPath, "..") || strings.ContainsRune(cgroupPath, 0) {
		return "", false
	}
	return path.Join(mount, path.Clean("/"+cgroupPath)), true
}

// listPIDs lists the numeric entries of procfs: the processes (thread group leaders).
func listPIDs(procfs string) ([]int, error) {
	d, err := os.Open(procfs)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var pids []int
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		switch {
		case err == io.EOF && len(pids) == 0:
			return nil, fmt.Errorf("no process in %s", procfs)
		case err == io.EOF:
			return pids, nil
		case err != nil:
			return nil, err
		}
	}
}
