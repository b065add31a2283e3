// Package storage finds what is under the WAL directory: its mount (file system type and
// options, from a procfs root's mountinfo) and its block device and whole disks (rotational,
// write cache, FUA, I/O counters, from a sysfs root), because how fast and how safely a WAL
// sync completes depends on them.
package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/shirou/gopsutil/v4/disk"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Hints for the operator when a root does not look like what it should be: in a container the
// usual cause is the container's own /proc or /sys instead of the host's.
const (
	procfsHint = "is --path.procfs the host's procfs?"
	sysfsHint  = "is --path.sysfs the host's sysfs?"
)

// Collector reads the WAL storage part of a snapshot from a procfs and a sysfs root.
type Collector struct {
	procfs, sysfs string
}

// New returns a Collector that reads procfs and sysfs (normally "/proc" and "/sys"; the host's
// when running in a container; testdata trees in tests).
func New(procfs, sysfs string) *Collector {
	if procfs == "" {
		procfs = "/proc"
	}
	if sysfs == "" {
		sysfs = "/sys"
	}
	return &Collector{procfs: procfs, sysfs: sysfs}
}

// Collect describes the storage under walDir. It fails only when walDir cannot be examined or
// a root is wrong; what cannot be determined about the device (an unknown device, a missing
// sysfs attribute) is left unknown and said in Storage.Notes.
func (c *Collector) Collect(ctx context.Context, walDir string) (*collector.Storage, error) {
	if walDir == "" {
		return nil, errors.New("no WAL directory to examine: set --wal-dir")
	}
	// stat follows symlinks: pg_wal is often a link to another file system, and it is the
	// target's device that the WAL is written to.
	var st unix.Stat_t
	if err := unix.Stat(walDir, &st); err != nil {
		return nil, fmt.Errorf("WAL directory %s (set --wal-dir to a directory this user can read): %w", walDir, err)
	}
	// The mount lookup compares the path with mount points, so it needs the link-free path too.
	resolved, err := filepath.EvalSymlinks(walDir)
	if err == nil {
		resolved, err = filepath.Abs(resolved)
	}
	if err != nil {
		return nil, fmt.Errorf("WAL directory %s (set --wal-dir to a directory this user can read): %w", walDir, err)
	}
	dev := uint64(st.Dev) // uint64 on Linux, narrower on some other Unixes x/sys/unix builds for
	s, err := c.collectDev(ctx, resolved, unix.Major(dev), unix.Minor(dev))
	if err != nil {
		return nil, err
	}
	s.Path = walDir
	// Free space comes from statfs(2) on the directory itself: it needs no root, and it is the
	// space PostgreSQL can actually use.
	if u, err := disk.UsageWithContext(ctx, walDir); err == nil {
		s.FreeBytes, s.TotalBytes = u.Free, u.Total
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("free space unknown: %v", err))
	}
	return s, nil
}

// collectDev does the work of Collect for a path already resolved and its device, so that
// tests can run it on testdata trees for devices this machine does not have.
func (c *Collector) collectDev(ctx context.Context, walDir string, major, minor uint32) (*collector.Storage, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("examine WAL directory %s: %w", walDir, err)
	}
	s := &collector.Storage{
		Path:         walDir,
		Device:       fmt.Sprintf("%d:%d", major, minor),
		MountOptions: []string{},
	}
	// self, not 1: the mounts as this process sees them, which is the namespace in which walDir
	// was just resolved (also when procfs is a host's /proc mounted into a container).
	mi := filepath.Join(c.procfs, "self", "mountinfo")
	f, err := os.Open(mi)
	if err != nil {
		return nil, fmt.Errorf("read mounts (%s): %w", procfsHint, err)
	}
	mounts, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read mounts from %s (%s): %w", mi, procfsHint, err)
	}
	m, note := findMount(mounts, walDir, major, minor)
	if note != "" {
		s.Notes = append(s.Notes, note)
	}
	if m != nil {
		fillMount(s, m)
	}
	if err := c.fillDevice(s, major, minor, m); err != nil {
		return nil, err
	}
	return s, nil
}

// fillMount copies what the mount says about durability. Sources: tmpfs(5) and ramfs live in
// page cache only; nobarrier/barrier=0 (ext4(5), btrfs(5)) stop the file system from sending
// cache flushes, so an fsync can return before the data leaves a volatile disk cache;
// data=writeback (ext4(5)) lets file data reach disk after the metadata that points to it.
func fillMount(s *collector.Storage, m *mount) {
	// A path may be any bytes, but what leaves the collector is text: a mount point that is not
	// UTF-8 would be an invalid label value and drop the storage_info series. JSON encoding
	// makes the same replacement, so valid names read the same everywhere.
	s.MountPoint = validText(m.point)
	s.FSType = validText(m.fsType)
	s.MountSource = validText(m.source)
	s.MountOptions = make([]string, len(m.options))
	for i, o := range m.options {
		s.MountOptions[i] = validText(o)
	}
	s.Volatile = m.fsType == "tmpfs" || m.fsType == "ramfs"
	for _, o := range m.options {
		switch o {
		case "nobarrier", "barrier=0":
			s.NoBarrier = true
		case "data=writeback":
			s.DataWriteback = true
		}
	}
}

// validText replaces each byte of s that is not UTF-8 with U+FFFD, as encoding/json does.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		// Ranging over a string yields RuneError for each invalid byte.
		b.WriteRune(r)
	}
	return b.String()
}

// fillDevice finds the block device and its whole disks in sysfs. Only a sysfs root that is not
// one is an error; a device sysfs does not know is a note.
func (c *Collector) fillDevice(s *collector.Storage, major, minor uint32, m *mount) error {
	var dev string
	if major == 0 {
		// Major 0 is an anonymous device: tmpfs, overlay, FUSE, NFS have no block device.
		// btrfs has one but reports an anonymous st_dev; its mount source names the disk.
		if m != nil && strings.HasPrefix(m.source, "/dev/") {
			if d, err := c.resolve(path.Join("class", "block", path.Base(m.source))); err == nil {
				dev = d
				s.Notes = append(s.Notes, fmt.Sprintf("device %s is anonymous: disks found from the mount source %s", s.Device, m.source))
			}
		}
		if dev == "" {
			fsType := "the file system"
			if m != nil {
				fsType = m.fsType
			}
			s.Notes = append(s.Notes, fmt.Sprintf("%s (device %s) has no block device: no disk attributes or I/O counters", fsType, s.Device))
			return nil
		}
	} else {
		if err := c.checkSysfs(); err != nil {
			return err
		}
		d, err := c.resolve(path.Join("dev", "block", s.Device))
		if err != nil {
			// The root was checked above, so this is one device sysfs does not list.
			s.Notes = append(s.Notes, fmt.Sprintf("block device %s not found in %s: disks and I/O counters unknown",
				s.Device, filepath.Join(c.sysfs, "dev", "block")))
			return nil
		}
		dev = d
	}
	s.DeviceName = path.Base(dev)
	if counters, err := c.readIO(dev); err == nil {
		s.IO = counters
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("I/O counters unknown: %v", err))
	}
	var disks []diskInfo
	seen := map[string]bool{}
	for _, d := range c.wholeDisks(s, dev, 0) {
		// Two partitions of one disk under an md or dm device give that disk twice.
		if seen[d] {
			continue
		}
		seen[d] = true
		info := c.readDisk(s, d)
		disks = append(disks, info)
		s.Disks = append(s.Disks, info.Disk)
	}
	summarize(s, disks)
	return nil
}

// checkSysfs tells a wrong --path.sysfs (an error: every device would be unknown) from one
// device that sysfs does not list (a note).
func (c *Collector) checkSysfs() error {
	dir := filepath.Join(c.sysfs, "dev", "block")
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("read block devices (%s): %w", sysfsHint, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("read block devices: %s is not a directory (%s)", dir, sysfsHint)
	}
	return nil
}
