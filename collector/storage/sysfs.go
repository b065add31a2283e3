package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// maxLinks bounds symlink resolution, as the kernel's MAXSYMLINKS does.
const maxLinks = 40

// maxDepth bounds the walk down dm/md slaves; real stacks (dm-crypt over LVM over md over
// partitions) are a handful deep, so anything deeper is a loop in a broken tree.
const maxDepth = 16

// resolve returns the symlink-free path, relative to the sysfs root ("/devices/..."), that rel
// names. Links are followed inside the root, never outside it: sysfs links are relative
// ("../../devices/..."), and ".." stops at the root; an absolute target (trees copied from a
// host can hold them) is taken from the root, less a leading "/sys". That is what lets
// --path.sysfs name a host's sysfs mounted elsewhere, and tests use testdata trees.
func (c *Collector) resolve(rel string) (string, error) {
	todo := strings.Split(rel, "/")
	done := "/"
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, name)
		full := filepath.Join(c.sysfs, filepath.FromSlash(next))
		fi, err := os.Lstat(full)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s: too many levels of symbolic links", full)
		}
		target, err := os.Readlink(full)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			if target == "/sys" || strings.HasPrefix(target, "/sys/") {
				target = strings.TrimPrefix(target, "/sys")
			}
			done = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}

// readAttr reads a one-line sysfs attribute below dir (a resolved path).
func (c *Collector) readAttr(dir, name string) (string, error) {
	p, err := c.resolve(path.Join(dir, name))
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(c.sysfs, filepath.FromSlash(p)))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (c *Collector) exists(dir, name string) bool {
	_, err := c.resolve(path.Join(dir, name))
	return err == nil
}

// wholeDisks returns the whole disks under the block device at dev (a resolved path): the
// device itself for a disk, its parent for a partition (a partition's directory sits inside its
// disk's: .../block/sda/sda1), and for dm and md devices the disks under each of slaves/,
// recursively (dm-crypt over LVM over md over partitions).
func (c *Collector) wholeDisks(s *collector.Storage, dev string, depth int) []string {
	if depth > maxDepth {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: device stack deeper than %d levels: disks below not followed", path.Base(dev), maxDepth))
		return nil
	}
	if c.exists(dev, "partition") {
		return c.wholeDisks(s, path.Dir(dev), depth+1)
	}
	entries, err := os.ReadDir(filepath.Join(c.sysfs, filepath.FromSlash(dev), "slaves"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: cannot list slaves: %v", path.Base(dev), err))
	}
	if len(entries) == 0 {
		return []string{dev}
	}
	var disks []string
	for _, e := range entries {
		slave, err := c.resolve(path.Join(dev, "slaves", e.Name()))
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: slave %s not found: %v", path.Base(dev), e.Name(), err))
			continue
		}
		disks = append(disks, c.wholeDisks(s, slave, depth+1)...)
	}
	return disks
}

// diskInfo is a Disk and which of its attributes sysfs gave: a kernel may lack queue/fua (the
// attribute is younger than write_cache), and an unknown attribute must not read as "no".
type diskInfo struct {
	collector.Disk
	rotationalKnown, fuaKnown bool
}

// readDisk reads a whole disk's queue attributes; what is missing goes into a note.
func (c *Collector) readDisk(s *collector.Storage, dir string) diskInfo {
	d := diskInfo{Disk: collector.Disk{Name: path.Base(dir)}}
	var missing []string
	// odd notes an attribute whose value the kernel does not write: unknown, not "no".
	odd := func(attr, v string) {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: %s is %.40q, not a value the kernel writes: unknown", d.Name, attr, v))
	}
	if v, err := c.readAttr(dir, "queue/rotational"); err == nil {
		if d.Rotational, d.rotationalKnown = queueFlag(v); !d.rotationalKnown {
			odd("queue/rotational", v)
		}
	} else {
		missing = append(missing, "queue/rotational")
	}
	if v, err := c.readAttr(dir, "queue/write_cache"); err == nil {
		var ok bool
		if d.WriteCache, ok = writeCacheMode(v); !ok {
			odd("queue/write_cache", v)
		}
	} else {
		missing = append(missing, "queue/write_cache")
	}
	if v, err := c.readAttr(dir, "queue/fua"); err == nil {
		if d.FUA, d.fuaKnown = queueFlag(v); !d.fuaKnown {
			odd("queue/fua", v)
		}
	} else {
		missing = append(missing, "queue/fua")
	}
	if len(missing) > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%s: no %s in sysfs (older kernel?): unknown", d.Name, strings.Join(missing, ", ")))
	}
	// Only SCSI/ATA and NVMe disks have a model; virtio, dm and loop devices do not, and that is
	// not worth a note. SCSI pads the model to 16 characters, NVMe to 40.
	if v, err := c.readAttr(dir, "device/model"); err == nil {
		d.Model = v
	}
	if target, err := os.Readlink(filepath.Join(c.sysfs, filepath.FromSlash(dir), "device", "driver")); err == nil {
		d.Driver = path.Base(filepath.ToSlash(target))
	}
	d.Virtual = isVirtual(d.Driver, d.Model)
	if d.Virtual {
		s.Virtual = true
		s.Notes = append(s.Notes, fmt.Sprintf("%s is a virtual disk (%s): its rotational and write-cache flags describe the emulation, not the host's storage", d.Name, orUnknown(d.Driver, d.Model)))
	}
	c.noteMemoryOrFile(s, dir, d.Name)
	return d
}

// isVirtual recognises a hypervisor's or a cloud's virtual disk by its driver or model. Their
// queue flags are set by the emulation (virtio-blk reports rotational=1 by default), and whether
// a flush reaches stable storage depends on the host's cache mode, which the guest cannot see.
func isVirtual(driver, model string) bool {
	switch driver {
	case "virtio_blk", "xen_blkfront", "vbd", "hv_storvsc", "vmw_pvscsi":
		return true
	}
	m := strings.ToLower(model)
	for _, v := range []string{"qemu", "vbox", "virtual disk", "vmware", "amazon elastic block store", "persistentdisk", "virtio"} {
		if strings.Contains(m, v) {
			return true
		}
	}
	return false
}

func orUnknown(driver, model string) string {
	if driver != "" {
		return driver
	}
	return model
}

// noteMemoryOrFile flags disks whose durability is not that of a disk: RAM disks (zram, brd's
// ram0..) lose everything in a power cut as tmpfs does, and a loop device is only as durable as
// the file system under its backing file.
func (c *Collector) noteMemoryOrFile(s *collector.Storage, dir, name string) {
	switch {
	case strings.HasPrefix(name, "zram") || isBRD(name):
		s.Volatile = true
		s.Notes = append(s.Notes, fmt.Sprintf("%s is a RAM disk: volatile", name))
	case strings.HasPrefix(name, "loop"):
		if f, err := c.readAttr(dir, "loop/backing_file"); err == nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s is a loop device over %s: its durability is that of the file system holding that file", name, f))
		}
	}
}

// isBRD reports whether name is a brd RAM disk ("ram0", "ram15").
func isBRD(name string) bool {
	n, ok := strings.CutPrefix(name, "ram")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 32)
	return err == nil
}

// summarize sets the Storage-wide Rotational, WriteCache and FUA from its disks: one rotating
// or caching disk is enough to make the device behave so (a RAID1 commit waits for its slowest
// leg), while FUA helps only when every disk honours it. Unknown attributes leave the summary
// unknown unless a known disk already decides it.
func summarize(s *collector.Storage, disks []diskInfo) {
	if len(disks) == 0 {
		return
	}
	rotational, rotationalAll := false, true
	fua, fuaAll := true, true
	writeBack, writeThroughAll := false, true
	for _, d := range disks {
		rotational = rotational || (d.rotationalKnown && d.Rotational)
		rotationalAll = rotationalAll && d.rotationalKnown
		if d.fuaKnown {
			fua = fua && d.FUA
		} else {
			fuaAll = false
		}
		writeBack = writeBack || d.WriteCache == "write back"
		writeThroughAll = writeThroughAll && d.WriteCache == "write through"
	}
	if rotational || rotationalAll {
		s.Rotational = &rotational
	}
	if !fua || fuaAll {
		s.FUA = &fua
	}
	switch {
	case writeBack:
		s.WriteCache = "write back"
	case writeThroughAll:
		s.WriteCache = "write through"
	}
}

// readIO reads the cumulative counters of the block device at dev from its stat file.
func (c *Collector) readIO(dev string) (*collector.DiskIO, error) {
	line, err := c.readAttr(dev, "stat")
	if err != nil {
		return nil, err
	}
	return parseDiskStat(path.Base(dev), line)
}

// parseDiskStat reads the stat line of the block device name, whose layout is in the kernel's
// Documentation/block/stat.rst: field 5 write I/Os, 7 write sectors (always 512 bytes, whatever
// the device's block size), 8 write ticks (ms), 16 flush I/Os and 17 flush ticks (ms). Fields
// 12-15 (discard) came in 4.18 and 16-17 in 5.5: older kernels report no flushes, which stay 0.
func parseDiskStat(name, line string) (*collector.DiskIO, error) {
	f := strings.Fields(line)
	if len(f) < 8 {
		return nil, fmt.Errorf("%s/stat has %d fields, want at least 8", name, len(f))
	}
	field := func(n int) (uint64, error) {
		if n > len(f) {
			return 0, nil
		}
		v, err := strconv.ParseUint(f[n-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/stat field %d: %w", name, n, err)
		}
		return v, nil
	}
	var v [18]uint64
	for _, n := range []int{5, 7, 8, 16, 17} {
		var err error
		if v[n], err = field(n); err != nil {
			return nil, err
		}
	}
	// A sector count this large is no disk's (8 ZiB written); its byte count would wrap.
	if v[7] > math.MaxUint64/512 {
		return nil, fmt.Errorf("%s/stat field 7: %d sectors is more bytes than a counter holds", name, v[7])
	}
	return &collector.DiskIO{
		Writes:           v[5],
		WriteBytes:       v[7] * 512,
		WriteTimeSeconds: float64(v[8]) / 1000,
		Flushes:          v[16],
		FlushTimeSeconds: float64(v[17]) / 1000,
	}, nil
}

// queueFlag reads a 0/1 queue attribute (rotational, fua); anything else is unknown.
func queueFlag(v string) (flag, known bool) {
	switch v {
	case "0":
		return false, true
	case "1":
		return true, true
	}
	return false, false
}

// writeCacheMode reads queue/write_cache, which the kernel writes as "write back" or "write
// through" (block/blk-sysfs.c); anything else is unknown.
func writeCacheMode(v string) (string, bool) {
	switch v {
	case "write back", "write through":
		return v, true
	}
	return "", false
}
