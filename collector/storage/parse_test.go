package storage

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestParseMountinfoLine(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		want   mount
		wantOK bool
	}{
		{
			name:   "proc(5) example, options merged without duplicates",
			line:   "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue",
			want:   mount{major: 98, minor: 0, point: "/mnt/parent", fsType: "ext3", source: "/dev/root", options: []string{"rw", "noatime", "errors=continue"}},
			wantOK: true,
		},
		{
			name:   "no optional fields",
			line:   "28 22 0:23 / /mnt/ramwal rw,nosuid - tmpfs tmpfs rw,size=1048576k",
			want:   mount{major: 0, minor: 23, point: "/mnt/ramwal", fsType: "tmpfs", source: "tmpfs", options: []string{"rw", "nosuid", "size=1048576k"}},
			wantOK: true,
		},
		{
			name:   "several optional fields",
			line:   "40 22 8:17 / /srv rw shared:4 master:2 propagate_from:1 - xfs /dev/sdb1 rw,noquota",
			want:   mount{major: 8, minor: 17, point: "/srv", fsType: "xfs", source: "/dev/sdb1", options: []string{"rw", "noquota"}},
			wantOK: true,
		},
		{
			name:   "escaped space, tab and backslash",
			line:   `41 22 8:18 / /mnt/a\040b\011c\134d rw - ext4 /dev/my\040disk rw`,
			want:   mount{major: 8, minor: 18, point: "/mnt/a b\tc\\d", fsType: "ext4", source: "/dev/my disk", options: []string{"rw"}},
			wantOK: true,
		},
		{
			name:   "no super options",
			line:   "42 22 0:60 / /x rw - fuse.x x",
			want:   mount{major: 0, minor: 60, point: "/x", fsType: "fuse.x", source: "x", options: []string{"rw"}},
			wantOK: true,
		},
		{
			// The kernel escapes only space, tab, newline and backslash: a no-break space, an em
			// space or NEL is part of a name, and so are bytes that are not UTF-8.
			name:   "unicode spaces and non-UTF-8 bytes are not separators",
			line:   "43 22 8:19 / /mnt/wal\u00a0a\u2003b\u0085c rw - ext4 /dev/disk/by-label/\xff\xfe rw",
			want:   mount{major: 8, minor: 19, point: "/mnt/wal\u00a0a\u2003b\u0085c", fsType: "ext4", source: "/dev/disk/by-label/\xff\xfe", options: []string{"rw"}},
			wantOK: true,
		},
		{
			name:   "empty source",
			line:   "44 22 0:61 / /mnt/empty rw,relatime - tmpfs  rw,size=4k",
			want:   mount{major: 0, minor: 61, point: "/mnt/empty", fsType: "tmpfs", source: "", options: []string{"rw", "relatime", "size=4k"}},
			wantOK: true,
		},
		{
			name:   "an escape above \\377 is no byte: kept as written",
			line:   `45 22 8:20 / /mnt/\777x rw - ext4 /dev/sdb4 rw`,
			want:   mount{major: 8, minor: 20, point: `/mnt/\777x`, fsType: "ext4", source: "/dev/sdb4", options: []string{"rw"}},
			wantOK: true,
		},
		{name: "no separator", line: "36 35 98:0 /mnt1 /mnt/parent rw,noatime ext3 /dev/root rw"},
		{name: "bad device", line: "36 35 98-0 /mnt1 /mnt/parent rw - ext3 /dev/root rw"},
		{name: "empty", line: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseMountinfoLine(tt.line)
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseMountinfoLine(%q)\n got %+v, %v\nwant %+v, %v", tt.line, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseMountinfoSkipsOddLines(t *testing.T) {
	in := "a line a future kernel might write\n22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
	got, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatalf("parseMountinfo() error = %v", err)
	}
	if len(got) != 1 || got[0].point != "/" {
		t.Errorf("parseMountinfo() = %+v, want the one mount on /", got)
	}
}

func TestParseMountinfoLongLine(t *testing.T) {
	long := "23 22 0:60 / /merged rw - overlay overlay rw,lowerdir=" + strings.Repeat("/l/x:", maxMountinfoLine/5)
	tests := []struct {
		name string
		in   string
	}{
		{"a line too long between two mounts", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + long + "\n24 22 0:21 / /proc rw - proc proc rw\n"},
		{"a last line without a newline", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n" + long + "\n24 22 0:21 / /proc rw - proc proc rw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("parseMountinfo() error = %v, want the long line skipped", err)
			}
			var points []string
			for _, m := range got {
				points = append(points, m.point)
			}
			if !reflect.DeepEqual(points, []string{"/", "/proc"}) {
				t.Errorf("parseMountinfo() mounts on %.200q, want the mounts on / and /proc", points)
			}
		})
	}
}

func TestParseDiskStat(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		wantBytes uint64
		wantErr   string
	}{
		{name: "5.5+ with flushes", line: "10468 2087 734290 5010 203640 120553 11842136 981204 0 530432 1004410 0 0 0 0 41830 17820", wantBytes: 11842136 * 512},
		{name: "largest sector count a byte counter holds", line: "0 0 0 0 1 0 36028797018963967 0", wantBytes: 36028797018963967 * 512},
		{name: "sectors whose bytes would wrap", line: "0 0 0 0 1 0 36028797018963968 0", wantErr: "field 7"},
		{name: "negative", line: "0 0 0 0 -1 0 0 0", wantErr: "field 5"},
		{name: "short", line: "0 0 0", wantErr: "3 fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDiskStat("sda", tt.line)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseDiskStat(%q) = %+v, %v; want an error naming %q", tt.line, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.WriteBytes != tt.wantBytes {
				t.Fatalf("parseDiskStat(%q) = %+v, %v; want %d write bytes", tt.line, got, err, tt.wantBytes)
			}
		})
	}
}

func TestQueueAttrs(t *testing.T) {
	for _, tt := range []struct {
		in          string
		flag, known bool
	}{{"0", false, true}, {"1", true, true}, {"2", false, false}, {"yes", false, false}, {"", false, false}} {
		if flag, known := queueFlag(tt.in); flag != tt.flag || known != tt.known {
			t.Errorf("queueFlag(%q) = %v, %v; want %v, %v", tt.in, flag, known, tt.flag, tt.known)
		}
	}
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{{"write back", "write back", true}, {"write through", "write through", true}, {"write around", "", false}, {"", "", false}} {
		if got, ok := writeCacheMode(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("writeCacheMode(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestValidText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"/mnt/wal", "/mnt/wal"},
		{"/mnt/\u00e9t\u00e9", "/mnt/\u00e9t\u00e9"},
		// One replacement per invalid byte, as encoding/json writes it.
		{"/mnt/\xff\xfe", "/mnt/\ufffd\ufffd"},
	} {
		if got := validText(tt.in); got != tt.want {
			t.Errorf("validText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFindMount(t *testing.T) {
	mounts := []mount{
		{major: 8, minor: 1, point: "/"},
		{major: 8, minor: 2, point: "/var/lib"},
		{major: 8, minor: 3, point: "/var/lib"}, // mounted over the previous one: it is on top
		{major: 8, minor: 1, point: "/var/lib/pg"},
	}
	tests := []struct {
		name         string
		path         string
		major, minor uint32
		wantPoint    string
		wantDev      uint32 // minor of the mount found
		wantNote     bool
	}{
		{"root", "/opt/wal", 8, 1, "/", 1, false},
		{"prefix must end at a path component", "/var/library/wal", 8, 1, "/", 1, false},
		{"mount point itself", "/var/lib", 8, 3, "/var/lib", 3, false},
		{"device decides between mounts that hold the path", "/var/lib/x", 8, 2, "/var/lib", 2, false},
		{"longest prefix of the same device", "/var/lib/pg/15/pg_wal", 8, 1, "/var/lib/pg", 1, false},
		{"by path alone, the later of two mounts on one point", "/var/lib/x", 0, 99, "/var/lib", 3, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, note := findMount(mounts, tt.path, tt.major, tt.minor)
			if m == nil {
				t.Fatalf("findMount(%q, %d:%d) = nil, %q", tt.path, tt.major, tt.minor, note)
			}
			if m.point != tt.wantPoint || m.minor != tt.wantDev || (note != "") != tt.wantNote {
				t.Errorf("findMount(%q, %d:%d) = %s (8:%d), note %q; want %s (8:%d), note %v",
					tt.path, tt.major, tt.minor, m.point, m.minor, note, tt.wantPoint, tt.wantDev, tt.wantNote)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	disk := func(rot, rotKnown bool, cache string, fua, fuaKnown bool) diskInfo {
		return diskInfo{Disk: collector.Disk{Rotational: rot, WriteCache: cache, FUA: fua}, rotationalKnown: rotKnown, fuaKnown: fuaKnown}
	}
	tests := []struct {
		name           string
		disks          []diskInfo
		wantRotational *bool
		wantWriteCache string
		wantFUA        *bool
	}{
		{"no disks: unknown", nil, nil, "", nil},
		{"one SSD with FUA", []diskInfo{disk(false, true, "write through", true, true)}, ptr(false), "write through", ptr(true)},
		{"mirror of SSD and HDD", []diskInfo{
			disk(false, true, "write through", true, true),
			disk(true, true, "write back", false, true),
		}, ptr(true), "write back", ptr(false)},
		{"FUA unknown on one disk, true on the other: unknown", []diskInfo{
			disk(false, true, "write through", true, true),
			disk(false, true, "write through", false, false),
		}, ptr(false), "write through", nil},
		{"FUA unknown on one disk, false on the other: false", []diskInfo{
			disk(false, true, "write back", false, true),
			disk(false, true, "write back", false, false),
		}, ptr(false), "write back", ptr(false)},
		{"rotational unknown on one disk, false on the other: unknown", []diskInfo{
			disk(false, true, "", true, true),
			disk(false, false, "write through", true, true),
		}, nil, "", ptr(true)},
		{"rotational unknown on one disk, true on the other: true", []diskInfo{
			disk(true, true, "write through", true, true),
			disk(false, false, "", true, true),
		}, ptr(true), "", ptr(true)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s collector.Storage
			summarize(&s, tt.disks)
			if !reflect.DeepEqual(s.Rotational, tt.wantRotational) || s.WriteCache != tt.wantWriteCache || !reflect.DeepEqual(s.FUA, tt.wantFUA) {
				t.Errorf("summarize() = rotational %s, write cache %q, FUA %s; want %s, %q, %s",
					boolStr(s.Rotational), s.WriteCache, boolStr(s.FUA), boolStr(tt.wantRotational), tt.wantWriteCache, boolStr(tt.wantFUA))
			}
		})
	}
}

func boolStr(p *bool) string {
	if p == nil {
		return "unknown"
	}
	if *p {
		return "true"
	}
	return "false"
}

// A mount point that is not UTF-8 must not leave the collector as such: it would be an invalid
// label value and cost the storage_info series.
func TestFillMountValidText(t *testing.T) {
	m, ok := parseMountinfoLine("46 22 8:21 / /mnt/wal\xff rw,noatime - ext4 /dev/sd\xfe rw,nobarrier,label=\xc3")
	if !ok {
		t.Fatal("line not parsed")
	}
	var s collector.Storage
	fillMount(&s, &m)
	if s.MountPoint != "/mnt/wal\ufffd" || s.MountSource != "/dev/sd\ufffd" || !s.NoBarrier {
		t.Errorf("fillMount() = point %q source %q nobarrier %v", s.MountPoint, s.MountSource, s.NoBarrier)
	}
	for _, o := range s.MountOptions {
		if !utf8.ValidString(o) {
			t.Errorf("option %q is not UTF-8", o)
		}
	}
}
