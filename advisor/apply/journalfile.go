package apply

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The journal's files are input that decides what rollback writes as root, and the daemon
// appends to them as root: whoever can write them or their directory could forge records, or
// put a link in their place and have the daemon create or append to any file. So the
// directory is checked first (its owner, and that no other user may write it unless it is
// sticky), each file is opened relative to it without following a link, and the open file is
// checked (a regular file of the user's own, with one link, that no other user may write).

// openJournalDir opens the journal's directory and checks that no other user can replace what
// is in it. A missing directory is an error that wraps fs.ErrNotExist.
func openJournalDir(journal string) (*os.File, error) {
	dir := filepath.Dir(journal)
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the directory of the apply journal %s: %w (it must exist: see deploy/systemd/apply.conf)", journal, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat the directory of the apply journal %s: %w", journal, err)
	}
	euid := uint32(os.Geteuid())
	switch mode := st.Mode & 0o7777; {
	case st.Uid != euid && st.Uid != 0:
		err = fmt.Errorf("the directory %s of the apply journal %s is owned by uid %d, neither root nor uid %d, which runs pgwal-advisor: its owner could replace the journal; "+
			"keep the journal in a directory of root's or your own (chown %d %s)", dir, journal, st.Uid, euid, euid, dir)
	case mode&(unix.S_IWGRP|unix.S_IWOTH) != 0 && mode&unix.S_ISVTX == 0:
		err = fmt.Errorf("the directory %s of the apply journal %s is mode %04o: other users can write it and could put a link or a file of theirs in the journal's place; "+
			"chmod go-w %s (or chmod +t, if it must stay shared)", dir, journal, mode, dir)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openJournalFile opens path (the journal or its lock), which is in dir, without following a
// link, and checks the file. With create a missing file is created (0600, O_EXCL: never
// through a link planted meanwhile), and created says so. A missing file without create is an
// error that wraps fs.ErrNotExist.
func openJournalFile(dir *os.File, path string, flags int, create bool) (f *os.File, created bool, err error) {
	name := filepath.Base(path)
	// O_NONBLOCK: a FIFO in the file's place must not hang the open; fstat refuses it below.
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, err := unix.Openat(int(dir.Fd()), name, flags, 0)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = unix.Openat(int(dir.Fd()), name, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
		created = err == nil
		if errors.Is(err, unix.EEXIST) {
			fd, err = unix.Openat(int(dir.Fd()), name, flags, 0)
		}
	}
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, false, fmt.Errorf("%s is a symbolic link: the apply journal and its lock are never opened through one (whoever could write %s could point it at any file); "+
			"remove it (rm %s) and give the journal's real path", path, filepath.Dir(path), path)
	case errors.Is(err, unix.EISDIR):
		return nil, false, notRegular(path)
	case err != nil:
		return nil, false, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f = os.NewFile(uintptr(fd), path)
	if err := checkJournalFile(f, path); err != nil {
		f.Close()
		return nil, false, err
	}
	return f, created, nil
}

func notRegular(path string) error {
	return fmt.Errorf("%s is not a regular file: the apply journal and its lock must be; move it aside", path)
}

// checkJournalFile refuses an open journal file that is not the user's own regular file with one
// link, or that another user could write (the mode an older version created, 0600, and 0644
// pass).
func checkJournalFile(f *os.File, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	euid := uint32(os.Geteuid())
	switch mode := st.Mode & 0o7777; {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return notRegular(path)
	case onPseudoFS(f):
		// /proc/self/mem is a regular file of the caller's own with one link, and reads as
		// nothing: a journal there would say "nothing to roll back".
		return fmt.Errorf("%s is on a kernel pseudo file system (proc, sysfs): that is no journal; give the file the apply mode wrote", path)
	case st.Uid != euid:
		return fmt.Errorf("%s is owned by uid %d, not by uid %d, which runs pgwal-advisor: another user could have written its records; "+
			"if its content is yours, chown %d %s (or run pgwal-advisor as its owner)", path, st.Uid, euid, euid, path)
	case st.Nlink != 1:
		return fmt.Errorf("%s has %d hard links: it may be another file under a second name, or change through one; "+
			"give it a file of its own (cp %s %s.new && mv %s.new %s)", path, st.Nlink, path, path, path, path)
	case mode&(unix.S_IWGRP|unix.S_IWOTH) != 0:
		return fmt.Errorf("%s is mode %04o: other users can write it and forge the records rollback acts on; chmod 0600 %s", path, mode, path)
	}
	return nil
}

// stillNamed reports whether f is still the file named path in dir: a compaction by another
// process renames a new journal into place while this one waits for the old one's lock.
func stillNamed(dir, f *os.File, path string) (bool, error) {
	var byName, open unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), filepath.Base(path), &byName, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if err := unix.Fstat(int(f.Fd()), &open); err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	return byName.Dev == open.Dev && byName.Ino == open.Ino, nil
}

// writeFileAtomic replaces name in dir with what fill writes: a new file beside it (0600,
// created exclusively, never through a link), fsynced, renamed over name, and the directory
// fsynced, so that name holds the old content or the new, whole, whatever happens.
func writeFileAtomic(dir *os.File, name string, fill func(w io.Writer) error) error {
	tmp := name + ".new"
	dirPath := dir.Name()
	// A leftover of a crash during an earlier compaction: it was never the journal.
	if err := unix.Unlinkat(int(dir.Fd()), tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", filepath.Join(dirPath, tmp), err)
	}
	fd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", filepath.Join(dirPath, tmp), err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dirPath, tmp))
	w := bufio.NewWriterSize(f, 256<<10)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), name)
	}
	if err != nil {
		unix.Unlinkat(int(dir.Fd()), tmp, 0) //nolint:errcheck // the error that matters is err
		return fmt.Errorf("write %s: %w", filepath.Join(dirPath, name), err)
	}
	return syncDirFile(dir)
}

// syncDirFile fsyncs an open directory, so that a file created or renamed in it survives a
// crash.
func syncDirFile(dir *os.File) error {
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir.Name(), err)
	}
	return nil
}

// syncDir fsyncs a directory by its path, so that a file created or renamed in it survives a
// crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s to fsync it: %w", dir, err)
	}
	defer d.Close()
	return syncDirFile(d)
}

// onPseudoFS reports whether f lies on procfs or sysfs, whose files are the kernel's, not data.
func onPseudoFS(f *os.File) bool {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		return false
	}
	return fs.Type == unix.PROC_SUPER_MAGIC || fs.Type == unix.SYSFS_MAGIC
}

// CheckJournalPath checks, without creating anything, what Append would refuse about the journal
// at path: its directory (present, no other user can replace what is in it) and, when the
// journal exists, the file (a regular file of this user's, one link, no write bit for others).
func CheckJournalPath(path string) error {
	dir, err := openJournalDir(path)
	if err != nil {
		return err
	}
	defer dir.Close()
	f, _, err := openJournalFile(dir, path, unix.O_RDONLY, false)
	if errors.Is(err, fs.ErrNotExist) {
		if err := unix.Faccessat(int(dir.Fd()), ".", unix.W_OK, 0); err != nil {
			return fmt.Errorf("the apply journal %s cannot be created: its directory is not writable by uid %d: %w", path, os.Geteuid(), err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}
