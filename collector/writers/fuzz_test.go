package writers

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseIO checks the /proc/PID/io reader: no panic, and accepted counters read back from
// the fields they came from.
func FuzzParseIO(f *testing.F) {
	f.Add([]byte("rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 6\ncancelled_write_bytes: 7\n"))
	f.Add([]byte("write_bytes: 18446744073709551615\ncancelled_write_bytes: 0"))
	f.Add([]byte("write_bytes: 18446744073709551616\ncancelled_write_bytes: 0\n"))
	f.Add([]byte("write_bytes: 1\nwrite_bytes: 2\ncancelled_write_bytes: 0\n"))
	f.Add([]byte("write_bytes:-1\ncancelled_write_bytes: 0\n"))
	f.Add([]byte(""))
	if b, err := os.ReadFile("/proc/self/io"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseIO(b)
		if err != nil {
			return
		}
		back, err := parseIO([]byte("write_bytes: " + strconv.FormatUint(c.write, 10) +
			"\ncancelled_write_bytes: " + strconv.FormatUint(c.cancelled, 10) + "\n"))
		if err != nil || back != c {
			t.Fatalf("parseIO(%q) = %+v; its own figures read back as %+v, %v", b, c, back, err)
		}
	})
}

// FuzzParseCgroup checks the /proc/PID/cgroup reader and what the collector builds from it: no
// panic, every path it keeps is absolute, a unit is a component of its path, and no cgroup
// directory built from a path leaves the hierarchy's mount.
func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("0::/system.slice/backup.service\n"))
	f.Add([]byte("12:blkio:/system.slice/a:b.service\n11:memory:/\n1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n0::/\n"))
	f.Add([]byte("0::/../../escape\n7:blkio:/..\n"))
	f.Add([]byte("0::/dead.scope (deleted)\n"))
	f.Add([]byte("::\n0:\n:blkio:x\n"))
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		f.Add(b)
	}
	const mount = "/sys/fs/cgroup/blkio"
	f.Fuzz(func(t *testing.T, b []byte) {
		cg := parseCgroup(b)
		for _, p := range []string{cg.v2, cg.blkio, cg.memory, cg.systemd} {
			if p != "" && !strings.HasPrefix(p, "/") {
				t.Fatalf("parseCgroup(%q) kept relative path %q", b, p)
			}
			if u := unitOf(p); u != "" && !strings.Contains(p, u) {
				t.Fatalf("unitOf(%q) = %q, not in the path", p, u)
			}
			if dir, ok := cgroupDir(mount, p); ok && dir != mount && !strings.HasPrefix(dir, mount+"/") {
				t.Fatalf("cgroupDir(%q) = %q: outside the mount", p, dir)
			}
		}
	})
}

// FuzzParseCgroupStat checks the io.stat and blkio readers: no panic, every device a valid
// MAJ:MIN, none twice, at most maxDevices.
func FuzzParseCgroupStat(f *testing.F) {
	for _, tree := range []string{"v2/sys/fs/cgroup/system.slice/backup.service/io.stat",
		"v1/sys/fs/cgroup/blkio/blkio.throttle.io_service_bytes"} {
		if b, err := os.ReadFile(filepath.Join("testdata", tree)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("8:0 wbytes=1 wbytes=2\n8:0 wbytes=3\n08:0 wbytes=4\n4096:0 wbytes=5\n"))
	f.Add([]byte("8:0 Write 18446744073709551616\n8:0 Write 1\nTotal 3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, devs := range [][]string{devices(parseIOStat(b)), devices(parseBlkio(b))} {
			if len(devs) > maxDevices {
				t.Fatalf("%d devices from %q", len(devs), b)
			}
			seen := map[string]bool{}
			for _, d := range devs {
				if !isDevice(d) || seen[d] {
					t.Fatalf("device %q (seen before: %v) from %q", d, seen[d], b)
				}
				seen[d] = true
			}
		}
	})
}

// FuzzParseStat checks the /proc/PID/stat reader: no panic, and what it accepts came from the
// input (comm between the first '(' and the last ')').
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4711 (dd) S 4700 4711 4711 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 80010 10000000 500\n"))
	f.Add([]byte("1 ()) (x) S 0 1 1 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 2 10000000 500\n"))
	f.Add([]byte(")( S 1"))
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err != nil {
			return
		}
		if st.ppid < 0 || !strings.Contains(string(b), "("+st.comm+")") {
			t.Fatalf("parseStat(%q) = %+v", b, st)
		}
	})
}

// FuzzParseMounts checks the mountinfo reader: no panic, and only known v1 controllers, each once.
func FuzzParseMounts(f *testing.F) {
	for _, tree := range []string{"v1", "v2", "hybrid", "none"} {
		if b, err := os.ReadFile(filepath.Join("testdata", tree, "proc", "self", "mountinfo")); err == nil {
			f.Add(b)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMounts(bytes.NewReader(b), "/proc")
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, c := range m.v1 {
			if !slices.Contains(v1Controllers, c) || seen[c] {
				t.Fatalf("v1 controllers %v from %q", m.v1, b)
			}
			seen[c] = true
		}
		_ = layoutOf(m)
	})
}
