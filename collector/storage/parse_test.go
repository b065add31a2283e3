package storage

import (
	"reflect"
	"strings"
	"testing"

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
