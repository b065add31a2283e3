package writers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func devices(ds []collector.DeviceWrites) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Device)
	}
	return out
}

func TestWriterParseIO(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     ioCounters
		err      bool
	}{
		{"kernel 6", "rchar: 6976\nwchar: 10\nsyscr: 10\nsyscw: 1\nread_bytes: 0\nwrite_bytes: 52441088\ncancelled_write_bytes: 4096\n", ioCounters{52441088, 4096}, false},
		{"no newline at end", "write_bytes: 1\ncancelled_write_bytes: 2", ioCounters{1, 2}, false},
		{"largest counter", "write_bytes: 18446744073709551615\ncancelled_write_bytes: 0\n", ioCounters{1<<64 - 1, 0}, false},
		{"over 64 bits", "write_bytes: 18446744073709551616\ncancelled_write_bytes: 0\n", ioCounters{}, true},
		{"negative", "write_bytes: -1\ncancelled_write_bytes: 0\n", ioCounters{}, true},
		{"twice", "write_bytes: 1\nwrite_bytes: 2\ncancelled_write_bytes: 0\n", ioCounters{}, true},
		{"no cancelled", "write_bytes: 1\n", ioCounters{}, true},
		{"empty (ended while read)", "", ioCounters{}, true},
		{"not io", "MemTotal: 1 kB\n", ioCounters{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseIO([]byte(tc.in))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseIO = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestWriterParseStat(t *testing.T) {
	tail := " S 4700 4711 4711 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 80010 10000000 500\n"
	for _, tc := range []struct {
		name, in string
		want     procStat
		err      bool
	}{
		{"dd", "4711 (dd)" + tail, procStat{"dd", 4700, 80010, false}, false},
		{"comm with parentheses and spaces", "4711 (a) (b c)" + tail, procStat{"a) (b c", 4700, 80010, false}, false},
		{"kernel thread", "20971 (kworker/u8:3-loop0) I 2 0 0 0 -1 69238880 0 0 0 0 0 10 0 0 20 0 1 0 229300 0 0\n",
			procStat{"kworker/u8:3-loop0", 2, 229300, true}, false},
		{"short", "4711 (dd) S 4700 1 2\n", procStat{}, true},
		{"no comm", "4711 dd" + tail, procStat{}, true},
		{"bad ppid", "4711 (dd) S x 4711 4711 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 80010\n", procStat{}, true},
		{"bad starttime", "4711 (dd) S 1 4711 4711 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 -5\n", procStat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.in))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseStat = %+v, %v; want %+v, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestCgroupParseProcFile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     cgroups
		unit     string
	}{
		{"v2", "0::/system.slice/backup.service\n", cgroups{v2: "/system.slice/backup.service"}, "backup.service"},
		{"v1 falls back to name=systemd", "11:blkio:/system.slice/backup.service\n10:memory:/m\n4:cpu,cpuacct:/c\n1:name=systemd:/system.slice/backup.service\n0::/\n",
			cgroups{v2: "/", blkio: "/system.slice/backup.service", memory: "/m", systemd: "/system.slice/backup.service"}, "backup.service"},
		{"combined controllers", "3:blkio,memory:/x.scope\n", cgroups{blkio: "/x.scope", memory: "/x.scope"}, ""},
		{"colon in path", "0::/a:b.service/sub\n", cgroups{v2: "/a:b.service/sub"}, "a:b.service"},
		{"scope", "0::/user.slice/user-1000.slice/session-3.scope\n", cgroups{v2: "/user.slice/user-1000.slice/session-3.scope"}, "session-3.scope"},
		{"relative path skipped", "0::relative\n7:blkio:\n", cgroups{}, ""},
		{"junk", "hello\n\n:::\n", cgroups{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseCgroup([]byte(tc.in))
			if got != tc.want {
				t.Errorf("parseCgroup = %+v, want %+v", got, tc.want)
			}
			if u := got.unit(); u != tc.unit {
				t.Errorf("unit = %q, want %q", u, tc.unit)
			}
		})
	}
}

func TestCgroupDirStaysInMount(t *testing.T) {
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"/system.slice/backup.service", "/m/system.slice/backup.service", true},
		{"/", "/m", true},
		{"/../../etc", "", false},
		{"/a/..", "", false},
	} {
		if got, ok := cgroupDir("/m", tc.path); got != tc.want || ok != tc.ok {
			t.Errorf("cgroupDir(%q) = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCgroupParseStatFiles(t *testing.T) {
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	io := parseIOStat(read("v2/sys/fs/cgroup/system.slice/backup.service/io.stat"))
	want := []collector.DeviceWrites{{Device: "8:0", WriteBytes: 4096}, {Device: "254:0", WriteBytes: 3145728000}}
	if !slices.Equal(io, want) {
		t.Errorf("io.stat = %+v, want %+v", io, want)
	}
	blk := parseBlkio(read("v1/sys/fs/cgroup/blkio/blkio.throttle.io_service_bytes"))
	if want := []collector.DeviceWrites{{Device: "254:0", WriteBytes: 3145728000}}; !slices.Equal(blk, want) {
		t.Errorf("blkio = %+v, want %+v", blk, want)
	}
	if got := parseIOStat([]byte("8:0 rbytes=1\nsda wbytes=2\n")); len(got) != 0 {
		t.Errorf("io.stat without a device's wbytes = %+v, want none", got)
	}
	if got := devices(parseBlkio([]byte("08:00 Write 1\n8:0 Write x\n8:1 Write 5\n"))); !slices.Equal(got, []string{"8:1"}) {
		t.Errorf("blkio devices = %v, want [8:1]", got)
	}
}

func TestCgroupLayoutFixtures(t *testing.T) {
	for _, tc := range []struct {
		tree string
		want collector.CgroupLayout
		// throttle is whether a cgroup limit can throttle a buffered writer's write-back there.
		throttle bool
	}{
		{"v2", collector.CgroupLayout{Version: collector.CgroupV2, V2Mount: "/sys/fs/cgroup",
			V2Controllers:    []string{"cpu", "cpuset", "hugetlb", "io", "memory", "misc", "pids", "rdma"},
			V2SubtreeControl: []string{"cpu", "io", "memory", "pids"}, Systemd: true}, true},
		{"v1", collector.CgroupLayout{Version: collector.CgroupV1, V1Controllers: []string{"blkio", "cpu", "cpuacct", "memory"}, Systemd: true}, false},
		{"hybrid", collector.CgroupLayout{Version: collector.CgroupHybrid, V2Mount: "/sys/fs/cgroup/unified",
			V1Controllers: []string{"blkio", "memory", "pids"}, Systemd: true}, false},
		{"none", collector.CgroupLayout{Version: collector.CgroupNone}, false},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			root := filepath.Join("testdata", tc.tree)
			got, err := DetectLayout(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
			if err != nil {
				t.Fatal(err)
			}
			if !layoutEqual(got, tc.want) {
				t.Errorf("DetectLayout = %+v\nwant %+v", got, tc.want)
			}
			if got.WritebackThrottle() != tc.throttle {
				t.Errorf("WritebackThrottle = %v, want %v", got.WritebackThrottle(), tc.throttle)
			}
		})
	}
	if _, err := DetectLayout(t.TempDir(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "--path.procfs") {
		t.Errorf("DetectLayout without mountinfo: %v, want an error naming --path.procfs", err)
	}
}

func layoutEqual(a, b collector.CgroupLayout) bool {
	return a.Version == b.Version && a.V2Mount == b.V2Mount && a.Systemd == b.Systemd &&
		slices.Equal(a.V2Controllers, b.V2Controllers) && slices.Equal(a.V2SubtreeControl, b.V2SubtreeControl) &&
		slices.Equal(a.V1Controllers, b.V1Controllers)
}

func TestCgroupMountsHidePID(t *testing.T) {
	for _, tc := range []struct {
		opts, want string
	}{
		{"rw", ""},
		{"rw,hidepid=invisible", "invisible"},
		{"rw,hidepid=2", "2"},
		{"rw,hidepid=0", ""},
		{"rw,hidepid=ptraceable,subset=pid", "ptraceable"},
	} {
		mi := "22 1 0:21 / /proc rw,nosuid - proc proc " + tc.opts + "\n" +
			"23 1 0:22 / /srv/other\\040proc rw - proc proc rw,hidepid=2\n"
		m, err := parseMounts(strings.NewReader(mi), "/proc")
		if err != nil {
			t.Fatal(err)
		}
		if got := hidePID(m.procOptions); got != tc.want {
			t.Errorf("hidepid of %q = %q, want %q", tc.opts, got, tc.want)
		}
	}
}

// TestCgroupLayoutThisMachine detects the layout of the machine the test runs on. The
// development machine and CI are hybrid (v1 blkio and memory, an unified hierarchy without
// them), and the test asserts that; on a host that is v2 only, it asserts v2 and says so.
func TestCgroupLayoutThisMachine(t *testing.T) {
	l, err := DetectLayout("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("this machine: %+v", l)
	want := collector.CgroupHybrid
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		// The unified hierarchy is mounted at /sys/fs/cgroup itself: a v2-only host.
		want = collector.CgroupV2
		t.Logf("/sys/fs/cgroup is the unified hierarchy: expecting v2 here, not the development machine's hybrid")
	}
	if l.Version != want {
		t.Fatalf("layout %q, want %q", l.Version, want)
	}
	if want == collector.CgroupHybrid && (l.WritebackThrottle() || !slices.Contains(l.V1Controllers, "blkio")) {
		t.Errorf("hybrid layout %+v: want blkio on v1 and no write-back throttle", l)
	}
}
