package rules

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Layouts of the collector's fixtures (collector/writers/testdata).
var (
	layoutV2 = collector.CgroupLayout{Version: collector.CgroupV2, V2Mount: "/sys/fs/cgroup",
		V2Controllers: []string{"cpu", "io", "memory", "pids"}, V2SubtreeControl: []string{"cpu", "io", "memory", "pids"}, Systemd: true}
	layoutV1     = collector.CgroupLayout{Version: collector.CgroupV1, V1Controllers: []string{"blkio", "memory"}, Systemd: true}
	layoutHybrid = collector.CgroupLayout{Version: collector.CgroupHybrid, V2Mount: "/sys/fs/cgroup/unified",
		V1Controllers: []string{"blkio", "memory"}, Systemd: true}
)

func TestThrottle(t *testing.T) {
	const rate = 80 << 20 // the lab's device: 80 MB/s
	backup := ThrottleInput{Layout: layoutV2, Unit: "backup.service", Cgroup: "/system.slice/backup.service",
		Device: "254:0", DevicePath: "/dev/vda", DeviceWriteRate: rate, Comm: "dd"}
	with := func(f func(*ThrottleInput)) ThrottleInput {
		in := backup
		f(&in)
		return in
	}
	for _, tc := range []struct {
		name    string
		in      ThrottleInput
		kind    string
		command string
		// text holds phrases the advice must say.
		text []string
	}{
		{"v2, systemd unit", backup, ThrottleSystemd,
			`systemctl set-property --runtime backup.service IOWriteBandwidthMax="/dev/vda 40M"`,
			[]string{"40MB/s", "half the 80MB/s", "charges write-back"}},
		{"v2, unit without a device path", with(func(in *ThrottleInput) { in.DevicePath = "" }), ThrottleSystemd,
			`systemctl set-property --runtime backup.service IOWriteBandwidthMax="/dev/block/254:0 40M"`, nil},
		{"v2, memory not handed down", with(func(in *ThrottleInput) { in.Layout.V2SubtreeControl = []string{"io"} }), ThrottleSystemd,
			`systemctl set-property --runtime backup.service MemoryAccounting=yes IOWriteBandwidthMax="/dev/vda 40M"`, nil},
		{"v2, no unit", with(func(in *ThrottleInput) { in.Unit, in.Cgroup = "", "/backup" }), ThrottleIOMax,
			`echo "254:0 wbps=41943040" > /sys/fs/cgroup/backup/io.max`, []string{"cgroup /backup"}},
		{"v2, not systemd", with(func(in *ThrottleInput) { in.Layout.Systemd = false }), ThrottleIOMax,
			`echo "254:0 wbps=41943040" > /sys/fs/cgroup/system.slice/backup.service/io.max`, nil},
		{"v2, a user manager's unit", with(func(in *ThrottleInput) {
			in.Unit, in.Cgroup = "tar.service", "/user.slice/user-1000.slice/user@1000.service/app.slice/tar.service"
		}), ThrottleIOMax,
			`echo "254:0 wbps=41943040" > /sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/tar.service/io.max`, nil},
		{"v2, subtree without io", with(func(in *ThrottleInput) { in.Unit, in.Layout.V2SubtreeControl = "", nil }), ThrottleIOMax,
			`echo "254:0 wbps=41943040" > /sys/fs/cgroup/system.slice/backup.service/io.max`, []string{"+io +memory"}},
		{"v2 without the io controller", with(func(in *ThrottleInput) { in.Layout.V2Controllers = []string{"cpu", "memory"} }),
			ThrottleOwnLimit, "dd oflag=direct", []string{"lacks the io or the memory controller"}},
		{"v2, rate not measured", with(func(in *ThrottleInput) { in.DeviceWriteRate = 0 }), ThrottleNone, "",
			[]string{"not measured", "--max-rate"}},
		{"v2, no device", with(func(in *ThrottleInput) { in.Device = "" }), ThrottleOwnLimit, "dd oflag=direct",
			[]string{"block device is unknown"}},
		{"v1, dd", with(func(in *ThrottleInput) { in.Layout = layoutV1 }), ThrottleOwnLimit, "dd oflag=direct",
			[]string{"v1", "blkio.throttle limits only direct and synchronous writes", "pv -L 40M", "device of its own"}},
		{"hybrid, pg_basebackup", with(func(in *ThrottleInput) { in.Layout, in.Comm = layoutHybrid, "pg_basebackup" }),
			ThrottleOwnLimit, "pg_basebackup --max-rate=40M", []string{"hybrid", "root cgroup"}},
		{"hybrid, rsync", with(func(in *ThrottleInput) { in.Layout, in.Comm = layoutHybrid, "rsync" }),
			ThrottleOwnLimit, "rsync --bwlimit=40960", []string{"KiB/s"}},
		{"hybrid, pv", with(func(in *ThrottleInput) { in.Layout, in.Comm = layoutHybrid, "pv" }), ThrottleOwnLimit, "pv -L 40M", nil},
		{"hybrid, a writer without a known option", with(func(in *ThrottleInput) { in.Layout, in.Comm = layoutHybrid, "tar" }),
			ThrottleNone, "", []string{"about 40MB/s", "pv -L 40M", "device of its own"}},
		{"no cgroups", with(func(in *ThrottleInput) { in.Layout = collector.CgroupLayout{Version: collector.CgroupNone} }),
			ThrottleOwnLimit, "dd oflag=direct", []string{"mounts no cgroups"}},
		{"unknown layout", with(func(in *ThrottleInput) { in.Layout = collector.CgroupLayout{} }), ThrottleOwnLimit, "dd oflag=direct",
			[]string{"unknown"}},
		{"slow device: pg_basebackup's floor", with(func(in *ThrottleInput) {
			in.Layout, in.Comm, in.DeviceWriteRate = layoutV1, "pg_basebackup", 40<<10
		}), ThrottleOwnLimit, "pg_basebackup --max-rate=32k", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Throttle(tc.in)
			if got.Kind != tc.kind || got.Command != tc.command {
				t.Errorf("Throttle = %s `%s`\nwant %s `%s`", got.Kind, got.Command, tc.kind, tc.command)
			}
			for _, s := range tc.text {
				if !strings.Contains(got.Text, s) {
					t.Errorf("text does not say %q:\n%s", s, got.Text)
				}
			}
			if got.Command != "" && !strings.Contains(got.Text, got.Command) {
				t.Errorf("text does not carry the command:\n%s", got.Text)
			}
			if !strings.Contains(got.Basis, "docs/benchmarks.md, neighbour table") {
				t.Errorf("basis %q does not cite the neighbour table", got.Basis)
			}
		})
	}
}

// TestThrottleQuotesNamesFromProc: a cgroup or unit name is whatever created it chose (a user
// may create cgroups in a delegated subtree), and the command goes to a root shell: it must
// arrive as one word, never as shell syntax.
func TestThrottleQuotesNamesFromProc(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to check the quoting with")
	}
	evil := `/user.slice/x'; touch pwned; echo '$(touch pwned2)` + "`touch pwned3`"
	for _, in := range []ThrottleInput{
		{Layout: layoutV2, Cgroup: evil, Device: "8:0", DeviceWriteRate: 1 << 30},
		{Layout: layoutV2, Unit: "a;b.service", Cgroup: "/a;b.service", Device: "8:0", DeviceWriteRate: 1 << 30},
		{Layout: layoutV2, Unit: "-x.service", Cgroup: "/-x.service", Device: "8:0", DeviceWriteRate: 1 << 30},
		{Layout: layoutV2, Unit: "backup.service", Cgroup: "/backup.service", Device: "8:0", DevicePath: "/dev/$(id)", DeviceWriteRate: 1 << 30},
		{Layout: layoutV2, Cgroup: "/x", Device: `8:0" $(id) "`, DeviceWriteRate: 1 << 30},
	} {
		a := Throttle(in)
		if a.Kind == ThrottleSystemd && !unitName(in.Unit) {
			t.Errorf("unit %q became a systemctl argument: %s", in.Unit, a.Command)
		}
		if a.Command == "" {
			continue
		}
		// Print the words the shell would pass instead of running the command.
		dir := t.TempDir()
		script := "set -- " + strings.Replace(strings.Replace(a.Command, "echo ", "", 1), " > ", " ", 1) + `; printf '%s\n' "$@"`
		cmd := exec.Command(sh, "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v: %s", a.Command, err, out)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("the command %s ran shell syntax: made %v", a.Command, entries)
		}
		if strings.Contains(string(out), "uid=") {
			t.Errorf("the command %s expanded $(id): %s", a.Command, out)
		}
		if in.Cgroup == evil && !strings.Contains(string(out), strings.TrimPrefix(evil, "/")) {
			t.Errorf("the cgroup path did not stay one word: %s", out)
		}
	}
}

// TestThrottleCitation keeps the figure the advice stands on where it cites it: the neighbour
// table's row of the writer limited to half the device's bandwidth, with no stall.
func TestThrottleCitation(t *testing.T) {
	b, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Neighbour")
	if start < 0 {
		t.Fatal("docs/benchmarks.md has no neighbour section")
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	if !strings.Contains(section, "80 MB/s") {
		t.Error("the neighbour section no longer says the device's 80 MB/s")
	}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| writer limited to 40 MB/s") {
			if !strings.Contains(line, "| 0.00 (0, 0) |") {
				t.Errorf("the limited writer's row no longer shows no stall: %s", line)
			}
			return
		}
	}
	t.Error("the neighbour table has no row of the writer limited to 40 MB/s")
}
