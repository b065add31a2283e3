package probes

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// probeFile is the probe file, held by one descriptor from its creation to its removal: the
// descriptor also holds an exclusive flock(2), so that another advisor's leftover sweep never
// removes a live file. The file is never opened again by its name, which another user able to
// write the directory could point at a file of root's: the patterns' descriptors are opened
// through /proc/self/fd (reopen), and the name is only unlinked while it still is this file.
type probeFile struct {
	dir      *os.File // the probe directory (a descriptor of its own)
	dirPath  string
	name     string
	path     string // dirPath/name, for messages
	f        *os.File
	fd       int
	dev, ino uint64
}

// createProbeFile creates the probe file in d and fills it with random data, synced, so that
// later writes overwrite allocated blocks (as PostgreSQL overwrites a zero-filled segment) and
// a compressing or deduplicating file system cannot shrink them. On error nothing is left.
func createProbeFile(ctx context.Context, d *probeDir) (_ *probeFile, err error) {
	name := fmt.Sprintf("%s%d-%08x", filePrefix, os.Getpid(), rand.Uint32())
	dirFD, err := unix.FcntlInt(uintptr(d.fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("probe directory %q: %w", d.path, err)
	}
	// O_NOFOLLOW as well as O_EXCL: O_EXCL alone already fails on a link, but says "exists".
	fd, err := unix.Openat(dirFD, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		_ = unix.Close(dirFD)
		return nil, fmt.Errorf("create probe file in %q: %w", d.path, err)
	}
	p := &probeFile{
		dir: os.NewFile(uintptr(dirFD), d.path), dirPath: d.path, name: name, path: filepath.Join(d.path, name),
		f: os.NewFile(uintptr(fd), filepath.Join(d.path, name)), fd: fd,
	}
	defer func() {
		if err != nil {
			_ = p.remove()
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat probe file: %w", err)
	}
	p.dev, p.ino = st.Dev, st.Ino
	if err := p.checkOwn(&st); err != nil {
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("lock probe file: %w", err)
	}
	if err := p.fill(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// checkOwn refuses a descriptor that is not a regular file of the advisor's user with one link:
// what O_CREAT|O_EXCL|O_NOFOLLOW makes, unless someone got in between.
func (p *probeFile) checkOwn(st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("probe file %s is not a regular file", p.path)
	case int(st.Uid) != os.Geteuid():
		// NFS with root_squash, for one, hands root's new files to another user.
		return refuse("probe file %s was created owned by uid %d, not the advisor's uid %d: the file system maps owners; use a directory on a local file system the advisor's user can write",
			p.path, st.Uid, os.Geteuid())
	case st.Nlink != 1:
		return p.tampered(fmt.Sprintf("has %d links", st.Nlink))
	}
	return nil
}

// fill writes FileBytes of random data and syncs them.
func (p *probeFile) fill(ctx context.Context) error {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return fmt.Errorf("seed probe data: %w", err)
	}
	src := rand.NewChaCha8(seed)
	buf := make([]byte, fillChunk)
	for off := int64(0); off < FileBytes; off += fillChunk {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, _ = src.Read(buf) // ChaCha8.Read never fails
		if _, err := p.f.WriteAt(buf, off); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return fmt.Errorf("preallocate the %s probe file in %q: the file system is full (or the quota spent); free space or pick another directory on the WAL's file system: %w",
					mb(FileBytes), p.dirPath, err)
			}
			return fmt.Errorf("preallocate probe file: %w", err)
		}
	}
	// Synced now, so that the first measurements do not pay for flushing 16MB of dirty pages.
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("sync probe file: %w", err)
	}
	return nil
}

// reopen opens the probe file anew with flags, which differ by pattern: O_DSYNC and O_SYNC
// cannot be set on an open descriptor. It goes through /proc/self/fd, whose link refers to the
// descriptor's inode rather than to a name in the directory, and checks that the descriptor it
// got is that inode. open is the measurer's (tests replace it).
func (p *probeFile) reopen(open func(path string, flags int, mode uint32) (int, error), flags int) (int, error) {
	fd, err := open(fmt.Sprintf("/proc/self/fd/%d", p.fd), flags&^(unix.O_CREAT|unix.O_NOFOLLOW), 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("stat the reopened probe file: %w", err)
	}
	if st.Dev != p.dev || st.Ino != p.ino {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("reopening probe file %s through /proc/self/fd gave another file (inode %d, want %d): the probe needs the real procfs on /proc", p.path, st.Ino, p.ino)
	}
	return fd, nil
}

// check reports, from the descriptor and without following the name, whether the file is still
// the advisor's alone under its name: not removed, moved, linked elsewhere or replaced.
func (p *probeFile) check() error {
	var st, named unix.Stat_t
	if err := unix.Fstat(p.fd, &st); err != nil {
		return fmt.Errorf("stat probe file %s: %w", p.path, err)
	}
	nameErr := unix.Fstatat(int(p.dir.Fd()), p.name, &named, unix.AT_SYMLINK_NOFOLLOW)
	if nameErr != nil && !errors.Is(nameErr, unix.ENOENT) {
		return fmt.Errorf("stat probe file %s: %w", p.path, nameErr)
	}
	replaced := nameErr == nil && (named.Dev != p.dev || named.Ino != p.ino)
	switch {
	case st.Nlink == 0 && replaced:
		return p.tampered("was removed and its name given to " + describe(&named))
	case st.Nlink == 0:
		return p.tampered("was removed")
	case replaced:
		return p.tampered("was moved away and its name given to " + describe(&named))
	case nameErr != nil:
		return p.tampered("was moved away")
	case st.Nlink > 1:
		return p.tampered(fmt.Sprintf("was linked elsewhere (%d links)", st.Nlink))
	}
	return nil
}

// tampered is the error of a probe file someone else changed: whoever did it can write the
// directory, and the advisor's figures from that file are not to be trusted.
func (p *probeFile) tampered(what string) error {
	return fmt.Errorf("probe file %s %s by someone else while the probe held it: another user can write %q; the probe never writes through the name, but use a directory only the advisor's user and group can write (or set its sticky bit)",
		p.path, what, p.dirPath)
}

// freeBytes is the space left on the file's file system.
func (p *probeFile) freeBytes() (int64, error) {
	free, err := freeBytes(p.fd)
	if err != nil {
		return 0, fmt.Errorf("probe directory %q: %w", p.dirPath, err)
	}
	return free, nil
}

// remove deletes the name if it is still this file, then releases the lock (closing the
// descriptor drops it) and the directory.
func (p *probeFile) remove() error {
	d := probeDir{path: p.dirPath, f: p.dir}
	err := d.unlinkIfSame(p.name, p.dev, p.ino)
	if cerr := p.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close probe file: %w", cerr)
	}
	d.close()
	return err
}
