package simdisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LoopFS is an ext4 file system on a loop device whose backing file lives on a simulated disk.
//
// FUSE writes through, so files on the simulated disk itself never pile up dirty pages in the
// page cache; seed 003 is about exactly that pile. An ext4 loop device in between puts the
// kernel's page cache and writeback above the slow device again (docs/benchmarks.md, "Seed 003
// reproduced"). The loop device uses direct I/O on its backing file so that the pages are not
// cached a second time on the FUSE side.
type LoopFS struct {
	// Device is the loop device, e.g. /dev/loop3.
	Device string
	// File is the sparse backing file on the simulated disk.
	File string
	// Mountpoint is where the ext4 file system is mounted.
	Mountpoint string
	// DirectIO tells whether the kernel really uses direct I/O on the backing file; it falls
	// back to buffered I/O silently when it cannot.
	DirectIO bool

	mounted bool
}

// MountLoopExt4 creates a sparse file of size bytes in backingDir (a directory on a simulated
// disk's mount), attaches it to a free loop device with direct I/O, makes an ext4 file system on
// it and mounts that at mountpoint (an existing directory). Close undoes all of it. Needs root,
// losetup and mkfs.ext4.
func MountLoopExt4(ctx context.Context, backingDir string, size int64, mountpoint string) (_ *LoopFS, err error) {
	if size < 16<<20 {
		return nil, fmt.Errorf("loop file system size %d: want at least 16 MiB", size)
	}
	l := &LoopFS{Mountpoint: mountpoint}
	defer func() {
		if err != nil {
			// Undo what was done; the first error is the one worth reporting.
			_ = l.Close()
		}
	}()

	f, err := os.CreateTemp(backingDir, "simdisk-loop-*.img")
	if err != nil {
		return nil, fmt.Errorf("create loop backing file: %w", err)
	}
	l.File = f.Name()
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("size loop backing file %s: %w", l.File, err)
	}

	out, err := run(ctx, "losetup", "--direct-io=on", "--find", "--show", l.File)
	if err != nil {
		return nil, err
	}
	l.Device = strings.TrimSpace(out)
	if dio, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(l.Device), "loop", "dio")); err == nil {
		l.DirectIO = strings.TrimSpace(string(dio)) == "1"
	}

	// nodiscard: discarding the fresh, sparse file is pointless. lazy_*_init=0: write the inode
	// tables and journal now rather than from a kernel thread after mounting, which would add
	// background writes to the slow device in the middle of a benchmark.
	if _, err := run(ctx, "mkfs.ext4", "-q", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0", l.Device); err != nil {
		return nil, err
	}
	if err := unix.Mount(l.Device, mountpoint, "ext4", 0, ""); err != nil {
		return nil, fmt.Errorf("mount %s at %s: %w", l.Device, mountpoint, err)
	}
	l.mounted = true
	return l, nil
}

// Close unmounts the file system (lazily if it stays busy), detaches the loop device and
// removes the backing file.
func (l *LoopFS) Close() error {
	var errs []error
	if l.mounted {
		if err := unmountRetry(l.Mountpoint); err != nil {
			errs = append(errs, err)
		}
		l.mounted = false
	}
	if l.Device != "" {
		// Not tied to any caller's context: cleaning up must run even when that is cancelled.
		if _, err := run(context.Background(), "losetup", "--detach", l.Device); err != nil {
			errs = append(errs, err)
		}
		l.Device = ""
	}
	if l.File != "" {
		if err := os.Remove(l.File); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove loop backing file: %w", err))
		}
		l.File = ""
	}
	return errors.Join(errs...)
}

// unmountRetry unmounts, retrying while busy (a process may be closing its last file, and the
// kernel releases it after close returns), and detaches lazily when it stays busy, so that no
// mount is left behind.
func unmountRetry(mountpoint string) error {
	delay := 10 * time.Millisecond
	for range 5 {
		err := unix.Unmount(mountpoint, 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount %s: %w", mountpoint, err)
		}
		time.Sleep(delay)
		delay *= 2
	}
	if err := unix.Unmount(mountpoint, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s lazily: %w", mountpoint, err)
	}
	return nil
}

// run runs a command and returns its standard output; its error carries standard error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return "", fmt.Errorf("%s %s: %s: %w", name, strings.Join(args, " "), msg, err)
	}
	return stdout.String(), nil
}
