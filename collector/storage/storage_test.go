package storage

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func ptr[T any](v T) *T { return &v }

// testCollector returns a Collector over the procfs and sysfs trees of testdata/host.txtar.
func testCollector(t *testing.T) *Collector {
	t.Helper()
	root := extractTree(t, filepath.Join("testdata", "host.txtar"))
	return New(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
}

func TestCollectDev(t *testing.T) {
	c := testCollector(t)
	// The stat lines of testdata/host.txtar that several devices share.
	stat17 := &collector.DiskIO{Writes: 203640, WriteBytes: 11842136 * 512, WriteTimeSeconds: 981.204, Flushes: 41830, FlushTimeSeconds: 17.82}
	sda := collector.Disk{Name: "sda", Rotational: true, WriteCache: "write back", Model: "ST2000DM008-2FR1"}
	sdb := collector.Disk{Name: "sdb", Rotational: true, WriteCache: "write back", Model: "WDC WD40EFRX-68N"}
	nvme := collector.Disk{Name: "nvme0n1", WriteCache: "write through", FUA: true, Model: "Samsung SSD 970 EVO Plus 1TB"}
	sdd := collector.Disk{Name: "sdd", WriteCache: "write back", Model: "Samsung SSD 860"}
	xfsOptions := []string{"rw", "attr2", "inode64", "logbufs=8", "logbsize=32k", "noquota"}

	tests := []struct {
		name         string
		path         string
		major, minor uint32
		want         collector.Storage
		// wantNotes are substrings, one per expected note, in order.
		wantNotes []string
	}{
		{
			name: "SATA partition, ext4 data=writeback,nobarrier",
			path: "/opt/pg/wal", major: 8, minor: 1,
			want: collector.Storage{
				Device: "8:1", DeviceName: "sda1",
				MountPoint: "/", FSType: "ext4", MountSource: "/dev/sda1",
				MountOptions: []string{"rw", "relatime", "errors=remount-ro", "data=writeback", "nobarrier"},
				NoBarrier:    true, DataWriteback: true,
				Rotational: ptr(true), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{sda},
				IO:    &collector.DiskIO{Writes: 150000, WriteBytes: 9000000 * 512, WriteTimeSeconds: 800, Flushes: 30000, FlushTimeSeconds: 12},
			},
		},
		{
			name: "virtio disk: rotational and write-back flags are the emulation's",
			path: "/srv/vm/wal", major: 254, minor: 1,
			want: collector.Storage{
				Device: "254:1", DeviceName: "vda1",
				MountPoint: "/srv/vm", FSType: "ext4", MountSource: "/dev/vda1",
				MountOptions: []string{"rw", "relatime"},
				Rotational:   ptr(true), WriteCache: "write back", FUA: ptr(false), Virtual: true,
				Disks: []collector.Disk{{Name: "vda", Rotational: true, WriteCache: "write back", Driver: "virtio_blk", Virtual: true}},
				IO:    &collector.DiskIO{Writes: 200, WriteBytes: 3000 * 512, WriteTimeSeconds: 0.9, Flushes: 20, FlushTimeSeconds: 0.015},
			},
			wantNotes: []string{"virtual disk"},
		},
		{
			name: "ext3 barrier=0",
			path: "/srv/old/pg_wal", major: 8, minor: 2,
			want: collector.Storage{
				Device: "8:2", DeviceName: "sda2",
				MountPoint: "/srv/old", FSType: "ext3", MountSource: "/dev/sda2",
				MountOptions: []string{"rw", "noatime", "barrier=0", "data=ordered"},
				NoBarrier:    true,
				Rotational:   ptr(true), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{sda},
				IO:    &collector.DiskIO{Writes: 200, WriteBytes: 3000 * 512, WriteTimeSeconds: 0.9, Flushes: 20, FlushTimeSeconds: 0.015},
			},
		},
		{
			name: "NVMe partition with FUA, write through; absolute sysfs link",
			path: "/var/lib/postgresql/16/main/pg_wal", major: 259, minor: 1,
			want: collector.Storage{
				Device: "259:1", DeviceName: "nvme0n1p1",
				MountPoint: "/var/lib/postgresql", FSType: "xfs", MountSource: "/dev/nvme0n1p1",
				MountOptions: append([]string{"rw", "noatime"}, xfsOptions[1:]...),
				Rotational:   ptr(false), WriteCache: "write through", FUA: ptr(true),
				Disks: []collector.Disk{nvme},
				IO:    &collector.DiskIO{Writes: 500000, WriteBytes: 64000000 * 512, WriteTimeSeconds: 120, Flushes: 90000, FlushTimeSeconds: 4.5},
			},
		},
		{
			name: "bind mount of a subdirectory wins over the file system's mount point",
			path: "/var/lib/postgresql/15/main/pg_wal", major: 259, minor: 1,
			want: collector.Storage{
				Device: "259:1", DeviceName: "nvme0n1p1",
				MountPoint: "/var/lib/postgresql/15/main", FSType: "xfs", MountSource: "/dev/nvme0n1p1",
				MountOptions: append([]string{"rw", "relatime"}, xfsOptions[1:]...),
				Rotational:   ptr(false), WriteCache: "write through", FUA: ptr(true),
				Disks: []collector.Disk{nvme},
				IO:    &collector.DiskIO{Writes: 500000, WriteBytes: 64000000 * 512, WriteTimeSeconds: 120, Flushes: 90000, FlushTimeSeconds: 4.5},
			},
		},
		{
			name: "LVM volume over a partition of a rotating disk",
			path: "/srv/wal/pg_wal", major: 253, minor: 0,
			want: collector.Storage{
				Device: "253:0", DeviceName: "dm-0",
				MountPoint: "/srv/wal", FSType: "ext4", MountSource: "/dev/mapper/vg0-wal",
				MountOptions: []string{"rw", "relatime", "data=ordered"},
				Rotational:   ptr(true), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{sdb},
				IO:    &collector.DiskIO{Writes: 88000, WriteBytes: 7040000 * 512, WriteTimeSeconds: 61, Flushes: 2100, FlushTimeSeconds: 1.9},
			},
		},
		{
			name: "dm-crypt over md RAID1 over an NVMe and a SATA partition",
			path: "/srv/raid/wal", major: 253, minor: 1,
			want: collector.Storage{
				Device: "253:1", DeviceName: "dm-1",
				MountPoint: "/srv/raid", FSType: "ext4", MountSource: "/dev/mapper/walcrypt",
				MountOptions: []string{"rw", "noatime"},
				// One rotating, caching leg makes the whole mirror so; FUA needs every leg.
				Rotational: ptr(true), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{nvme, sdb},
				IO:    stat17,
			},
		},
		{
			name: "tmpfs: volatile, no block device",
			path: "/mnt/ramwal/pg_wal", major: 0, minor: 23,
			want: collector.Storage{
				Device:     "0:23",
				MountPoint: "/mnt/ramwal", FSType: "tmpfs", MountSource: "tmpfs",
				MountOptions: []string{"rw", "nosuid", "nodev", "relatime", "size=1048576k", "mode=755"},
				Volatile:     true,
			},
			wantNotes: []string{"tmpfs (device 0:23) has no block device"},
		},
		{
			name: "octal-escaped mount point; old kernel without queue/fua and flush counters",
			path: "/mnt/wal disk/pg_wal", major: 8, minor: 33,
			want: collector.Storage{
				Device: "8:33", DeviceName: "sdc1",
				MountPoint: "/mnt/wal disk", FSType: "ext4", MountSource: "/dev/sdc1",
				MountOptions: []string{"rw", "relatime"},
				Rotational:   ptr(true), WriteCache: "write through", FUA: nil,
				Disks: []collector.Disk{{Name: "sdc", Rotational: true, WriteCache: "write through", Model: "OLD DISK"}},
				IO:    &collector.DiskIO{Writes: 4000, WriteBytes: 160000 * 512, WriteTimeSeconds: 25},
			},
			wantNotes: []string{"sdc: no queue/fua in sysfs"},
		},
		{
			name: "btrfs: anonymous device, disk found from the mount source",
			path: "/data/pg_wal", major: 0, minor: 45,
			want: collector.Storage{
				Device: "0:45", DeviceName: "sdd",
				MountPoint: "/data", FSType: "btrfs", MountSource: "/dev/sdd",
				MountOptions: []string{"rw", "relatime", "ssd", "space_cache=v2", "subvolid=5", "subvol=/"},
				Rotational:   ptr(false), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{sdd},
				IO:    &collector.DiskIO{Writes: 70000, WriteBytes: 5600000 * 512, WriteTimeSeconds: 42, Flushes: 6000, FlushTimeSeconds: 3},
			},
			wantNotes: []string{"disks found from the mount source /dev/sdd"},
		},
		{
			name: "btrfs subvolume whose device mountinfo does not list",
			path: "/data/sub/pg_wal", major: 0, minor: 46,
			want: collector.Storage{
				Device: "0:46", DeviceName: "sdd",
				MountPoint: "/data", FSType: "btrfs", MountSource: "/dev/sdd",
				MountOptions: []string{"rw", "relatime", "ssd", "space_cache=v2", "subvolid=5", "subvol=/"},
				Rotational:   ptr(false), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{sdd},
				IO:    &collector.DiskIO{Writes: 70000, WriteBytes: 5600000 * 512, WriteTimeSeconds: 42, Flushes: 6000, FlushTimeSeconds: 3},
			},
			wantNotes: []string{"device 0:46 is not in mountinfo: mount /data (device 0:45) chosen by path alone", "mount source /dev/sdd"},
		},
		{
			name: "FUSE: no block device",
			path: "/mnt/slow/wal", major: 0, minor: 50,
			want: collector.Storage{
				Device:     "0:50",
				MountPoint: "/mnt/slow", FSType: "fuse.slowfs", MountSource: "slowfs",
				MountOptions: []string{"rw", "nosuid", "nodev", "relatime", "user_id=0", "group_id=0", "allow_other"},
			},
			wantNotes: []string{"fuse.slowfs (device 0:50) has no block device"},
		},
		{
			name: "loop device over a file",
			path: "/mnt/loop/wal", major: 7, minor: 0,
			want: collector.Storage{
				Device: "7:0", DeviceName: "loop0",
				MountPoint: "/mnt/loop", FSType: "ext4", MountSource: "/dev/loop0",
				MountOptions: []string{"rw", "relatime"},
				Rotational:   ptr(true), WriteCache: "write back", FUA: ptr(false),
				Disks: []collector.Disk{{Name: "loop0", Rotational: true, WriteCache: "write back"}},
				IO:    stat17,
			},
			wantNotes: []string{"loop0 is a loop device over /srv/images/wal.img"},
		},
		{
			name: "zram: a RAM disk is volatile whatever the file system",
			path: "/mnt/zram/wal", major: 252, minor: 0,
			want: collector.Storage{
				Device: "252:0", DeviceName: "zram0",
				MountPoint: "/mnt/zram", FSType: "ext4", MountSource: "/dev/zram0",
				MountOptions: []string{"rw", "relatime"},
				Volatile:     true,
				Rotational:   ptr(false), WriteCache: "write through", FUA: ptr(false),
				Disks: []collector.Disk{{Name: "zram0", WriteCache: "write through"}},
				IO:    stat17,
			},
			wantNotes: []string{"zram0 is a RAM disk"},
		},
		{
			name: "unknown device: storage still returned, with notes",
			path: "/opt/elsewhere", major: 8, minor: 99,
			want: collector.Storage{
				Device:     "8:99",
				MountPoint: "/", FSType: "ext4", MountSource: "/dev/sda1",
				MountOptions: []string{"rw", "relatime", "errors=remount-ro", "data=writeback", "nobarrier"},
				NoBarrier:    true, DataWriteback: true,
			},
			wantNotes: []string{"device 8:99 is not in mountinfo", "block device 8:99 not found"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.collectDev(context.Background(), tt.path, tt.major, tt.minor)
			if err != nil {
				t.Fatalf("collectDev(%q, %d, %d) error = %v", tt.path, tt.major, tt.minor, err)
			}
			notes := got.Notes
			got.Notes = nil
			want := tt.want
			want.Path = tt.path
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("collectDev(%q, %d, %d)\n got %s\nwant %s", tt.path, tt.major, tt.minor, show(got), show(&want))
			}
			if len(notes) != len(tt.wantNotes) {
				t.Fatalf("notes = %q, want %d notes containing %q", notes, len(tt.wantNotes), tt.wantNotes)
			}
			for i, w := range tt.wantNotes {
				if !strings.Contains(notes[i], w) {
					t.Errorf("note %d = %q, want it to contain %q", i, notes[i], w)
				}
			}
		})
	}
}

// show prints a Storage with its pointers followed, so that a failure shows the values.
func show(s *collector.Storage) string {
	b, err := json.Marshal(s)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func TestCollectDevErrors(t *testing.T) {
	root := extractTree(t, filepath.Join("testdata", "host.txtar"))
	garbage := filepath.Join(t.TempDir(), "proc")
	mkdirAll(t, filepath.Join(garbage, "self"))
	if err := os.WriteFile(filepath.Join(garbage, "self", "mountinfo"), []byte("not\na mountinfo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name         string
		ctx          context.Context
		procfs       string
		sysfs        string
		major, minor uint32
		// wantIn are substrings of the error; nil means no error.
		wantIn []string
	}{
		{
			name:   "procfs without mountinfo",
			procfs: filepath.Join(root, "nonexistent"), sysfs: filepath.Join(root, "sys"),
			major: 8, minor: 1,
			wantIn: []string{"nonexistent/self/mountinfo", "--path.procfs"},
		},
		{
			name:   "mountinfo that is not one",
			procfs: garbage, sysfs: filepath.Join(root, "sys"),
			major: 8, minor: 1,
			wantIn: []string{"self/mountinfo", "no mountinfo lines", "--path.procfs"},
		},
		{
			name:   "sysfs that is not one, block device",
			procfs: filepath.Join(root, "proc"), sysfs: filepath.Join(root, "proc"),
			major: 8, minor: 1,
			wantIn: []string{"proc/dev/block", "--path.sysfs"},
		},
		{
			// tmpfs needs no sysfs: a wrong --path.sysfs must not hide what mountinfo tells.
			name:   "sysfs that is not one, tmpfs",
			procfs: filepath.Join(root, "proc"), sysfs: filepath.Join(root, "proc"),
			major: 0, minor: 23,
		},
		{
			name:   "canceled",
			ctx:    canceled,
			procfs: filepath.Join(root, "proc"), sysfs: filepath.Join(root, "sys"),
			major: 8, minor: 1,
			wantIn: []string{"context canceled"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			got, err := New(tt.procfs, tt.sysfs).collectDev(ctx, "/mnt/ramwal/pg_wal", tt.major, tt.minor)
			if tt.wantIn == nil {
				if err != nil {
					t.Fatalf("collectDev() error = %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("collectDev() = %s, want an error", show(got))
			}
			t.Logf("error: %v", err)
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("collectDev() error = %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestCollectErrors(t *testing.T) {
	c := New("/proc", "/sys")
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	tests := []struct {
		name   string
		walDir string
		wantIn []string
	}{
		{"empty", "", []string{"--wal-dir"}},
		{"missing", missing, []string{missing, "--wal-dir", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.Collect(context.Background(), tt.walDir)
			if err == nil {
				t.Fatalf("Collect(%q) = %s, want an error", tt.walDir, show(got))
			}
			t.Logf("error: %v", err)
			for _, s := range tt.wantIn {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Collect(%q) error = %q, want it to contain %q", tt.walDir, err, s)
				}
			}
		})
	}
}

// TestCollectHost runs against this machine's /proc and /sys, so the real layout is exercised:
// whatever the file system under the temporary directory, its mount must be found.
func TestCollectHost(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skipf("no /proc/self/mountinfo here: %v", err)
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "wal")
	link := filepath.Join(dir, "pg_wal")
	mkdirAll(t, target)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	c := New("/proc", "/sys")
	for _, walDir := range []string{target, link} {
		t.Run(filepath.Base(walDir), func(t *testing.T) {
			got, err := c.Collect(context.Background(), walDir)
			if err != nil {
				t.Fatalf("Collect(%q) error = %v", walDir, err)
			}
			t.Logf("%s", show(got))
			t.Logf("notes: %q", got.Notes)
			if got.Path != walDir {
				t.Errorf("Path = %q, want %q", got.Path, walDir)
			}
			if got.MountPoint == "" || got.FSType == "" {
				t.Errorf("MountPoint = %q, FSType = %q; want both set", got.MountPoint, got.FSType)
			}
			if !under(mustEval(t, walDir), got.MountPoint) {
				t.Errorf("MountPoint = %q, want a prefix of %q", got.MountPoint, walDir)
			}
			if got.TotalBytes == 0 {
				t.Errorf("TotalBytes = 0, want > 0")
			}
			if !strings.HasPrefix(got.Device, "0:") && (got.DeviceName == "" || len(got.Disks) == 0 || got.IO == nil) {
				t.Errorf("block device %s: DeviceName = %q, %d disks, IO = %v; want all found", got.Device, got.DeviceName, len(got.Disks), got.IO)
			}
		})
	}
}

func mustEval(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
