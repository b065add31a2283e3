package storage

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// realMountinfo is a host's mountinfo, with the forms the parser must survive: optional fields,
// escaped spaces, a bind mount, overlay's long options, an empty source.
const realMountinfo = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro,data=writeback
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
25 22 0:6 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=8123456k,nr_inodes=2030864,mode=755
26 22 259:1 / /var/lib/postgresql rw,noatime shared:30 - xfs /dev/nvme0n1p1 rw,attr2,inode64,logbufs=8,noquota
27 26 259:1 /pg15 /var/lib/postgresql/15/main rw,noatime shared:30 - xfs /dev/nvme0n1p1 rw,attr2,inode64,noquota
28 22 8:33 / /mnt/wal\040disk rw,relatime shared:40 master:2 - ext3 /dev/sdc1 rw,barrier=0
29 22 0:45 /@data /data rw,relatime shared:41 - btrfs /dev/sdd rw,ssd,space_cache=v2,subvolid=256,subvol=/@data
30 22 0:23 / /mnt/ramwal rw,nosuid,nodev - tmpfs tmpfs rw,size=1048576k
31 22 0:50 / /mnt/slow rw,nosuid,nodev,relatime - fuse.simdisk simdisk rw,user_id=0,group_id=0
32 22 0:60 / /var/lib/docker/overlay2/abc/merged rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B,upperdir=/u,workdir=/w
33 22 0:61 / /mnt/empty rw,relatime - tmpfs  rw
`

// escapeMount mangles a field as the kernel does for mountinfo (fs/proc_namespace.c): space,
// tab, newline and backslash become \ooo octal.
func escapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			b.WriteString(`\` + strconv.FormatInt(int64(c)+0o1000, 8)[1:])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzParseMountinfo writes a mount line from fuzzed names the way the kernel would, between real
// lines and a line of garbage, and checks that the parser gives back exactly those names and
// options and that neither the fuzzed line nor the garbage costs any real mount.
func FuzzParseMountinfo(f *testing.F) {
	f.Add("/mnt/wal disk", "/dev/my disk", "ext4", "rw,noatime", "rw,data=writeback", "garbage")
	f.Add("/srv/wal", "", "tmpfs", "rw", "rw,size=1g", "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw")
	f.Add("/mnt/\u00a0nbsp\u2003em", "label\x85\xff\xfe", "fuse.x", "ro", "", "1 2 3:4 - x")
	f.Add(`/mnt/a\040b`, `\134`, "xfs", "rw,nobarrier", "rw,,rw", "-")
	f.Add("/", "none", "overlay", "rw", "lowerdir="+strings.Repeat("/l/x:", 100), "\x00\r\n\t")
	base, err := parseMountinfo(strings.NewReader(realMountinfo))
	if err != nil {
		f.Fatalf("parseMountinfo(real) error = %v", err)
	}
	f.Fuzz(func(t *testing.T, point, source, fsType, mountOpts, superOpts, garbage string) {
		// What the kernel cannot write: a relative mount point, an empty type, a comma inside
		// an option (it separates them).
		point = "/" + strings.TrimPrefix(point, "/")
		if fsType == "" {
			return
		}
		line := "40 22 8:17 / " + escapeMount(point) + " " + escapeMount(mountOpts) + " shared:4 - " +
			escapeMount(fsType) + " " + escapeMount(source) + " " + escapeMount(superOpts)
		in := realMountinfo[:strings.Index(realMountinfo, "28 ")] + line + "\n" + garbage + "\n" +
			realMountinfo[strings.Index(realMountinfo, "28 "):]
		got, err := parseMountinfo(strings.NewReader(in))
		if err != nil {
			t.Fatalf("parseMountinfo() error = %v", err)
		}
		i := slices.IndexFunc(got, func(m mount) bool { return m.major == 8 && m.minor == 17 })
		if i < 0 {
			t.Fatalf("the mount of line %q is lost", line)
		}
		m := got[i]
		if m.point != point || m.fsType != fsType || m.source != source {
			t.Fatalf("line %q\n got point %q type %q source %q\nwant point %q type %q source %q",
				line, m.point, m.fsType, m.source, point, fsType, source)
		}
		var want []string
		for _, o := range append(strings.Split(mountOpts, ","), strings.Split(superOpts, ",")...) {
			if o != "" && !slices.Contains(want, o) {
				want = append(want, o)
			}
		}
		if !slices.Equal(m.options, want) {
			t.Fatalf("line %q: options %q, want %q", line, m.options, want)
		}
		// The garbage line may parse as a mount of its own, but every real mount is there, in order.
		rest := slices.Delete(slices.Clone(got), i, i+1)
		j := 0
		for _, g := range rest {
			if j < len(base) && g.point == base[j].point && g.major == base[j].major && g.minor == base[j].minor {
				j++
			}
		}
		if j != len(base) {
			t.Fatalf("garbage %q cost real mounts: got %d of %d", garbage, j, len(base))
		}
	})
}

// FuzzParseMountinfoFile feeds whole files: no panic, an error only when no line is a mount, and
// every mount has a major:minor, an absolute-looking point and a type.
func FuzzParseMountinfoFile(f *testing.F) {
	f.Add([]byte(realMountinfo))
	f.Add([]byte("not\na mountinfo\n"))
	f.Add([]byte("22 1 8:1 / / rw - ext4 /dev/sda1 rw"))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte("22 1 8:1 / / rw - ext4 /dev/sda1 rw\r\n\x00\xff 23 22 0:21 / /proc rw - proc proc rw\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseMountinfo(strings.NewReader(string(b)))
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("parseMountinfo() = %d mounts and error %v", len(got), err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("parseMountinfo() = no mounts and no error")
		}
	})
}

// FuzzUnescape checks that unescape undoes the kernel's mangling and passes through anything the
// kernel could not have written.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{"/mnt/wal disk", `a\b`, "tab\there", "\x00\xff", `\040`, `\777`, `\`, "/plain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := unescape(escapeMount(s)); got != s {
			t.Fatalf("unescape(escapeMount(%q)) = %q", s, got)
		}
		if !strings.Contains(s, `\`) && unescape(s) != s {
			t.Fatalf("unescape(%q) = %q, want it unchanged: no backslash", s, unescape(s))
		}
		if len(unescape(s)) > len(s) {
			t.Fatalf("unescape(%q) = %q is longer", s, unescape(s))
		}
	})
}

// FuzzParseDiskStat checks the stat line reader against the fields it names: writes, sectors as
// bytes without wrapping, ticks as non-negative seconds; old kernels' short lines report no
// flushes.
func FuzzParseDiskStat(f *testing.F) {
	f.Add("   10468     2087   734290    5010   203640   120553 11842136   981204        0   530432  1004410        0        0        0        0    41830    17820")
	f.Add("    3200      100    90000    1200     4000     1500   160000    25000        0     9000    26200")
	f.Add("0 0 0 0 0 0 0 0")
	f.Add("0 0 0 0 1 0 36028797018963968 0 0 0 0 0 0 0 0 0 0")
	f.Add("0 0 0 0 18446744073709551615 0 36028797018963967 18446744073709551615 0 0 0 0 0 0 0 18446744073709551615 18446744073709551615 99 100")
	f.Add("1 2 3 4 -5 6 7 8")
	f.Fuzz(func(t *testing.T, line string) {
		io, err := parseDiskStat("sda", line)
		if err != nil {
			return
		}
		fields := strings.Fields(line)
		field := func(n int) uint64 {
			if n > len(fields) {
				return 0
			}
			v, err := strconv.ParseUint(fields[n-1], 10, 64)
			if err != nil {
				t.Fatalf("parseDiskStat(%q) succeeded with field %d %q", line, n, fields[n-1])
			}
			return v
		}
		if io.Writes != field(5) || io.Flushes != field(16) {
			t.Fatalf("parseDiskStat(%q) writes %d flushes %d, want fields 5 and 16", line, io.Writes, io.Flushes)
		}
		if io.WriteBytes%512 != 0 || io.WriteBytes/512 != field(7) {
			t.Fatalf("parseDiskStat(%q) write bytes %d, want 512 times field 7 (%d)", line, io.WriteBytes, field(7))
		}
		for _, s := range []float64{io.WriteTimeSeconds, io.FlushTimeSeconds} {
			if s < 0 || math.IsInf(s, 0) || math.IsNaN(s) {
				t.Fatalf("parseDiskStat(%q) time %g s", line, s)
			}
		}
		if io.WriteTimeSeconds != float64(field(8))/1000 || io.FlushTimeSeconds != float64(field(17))/1000 {
			t.Fatalf("parseDiskStat(%q) times %g %g, want fields 8 and 17 in ms", line, io.WriteTimeSeconds, io.FlushTimeSeconds)
		}
	})
}

// FuzzQueueAttrs checks that a queue attribute is known only when it holds a value the kernel
// writes, so that garbage in sysfs reads as unknown and never as "no".
func FuzzQueueAttrs(f *testing.F) {
	for _, s := range []string{"0", "1", "2", "", "write back", "write through", "write  back", "Write Back", "1\n", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		flag, known := queueFlag(v)
		if known != (v == "0" || v == "1") || flag != (v == "1") {
			t.Fatalf("queueFlag(%q) = %v, %v", v, flag, known)
		}
		mode, ok := writeCacheMode(v)
		if ok != (v == "write back" || v == "write through") || (ok && mode != v) || (!ok && mode != "") {
			t.Fatalf("writeCacheMode(%q) = %q, %v", v, mode, ok)
		}
	})
}
