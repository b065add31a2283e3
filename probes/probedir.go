package probes

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// leftoverMinAge is how old an unlocked probe file must be before another process removes it
// although its PID is alive: a file is locked right after it is created, so only a file in that
// instant is unlocked and young, and PIDs are reused, so an alive PID alone proves nothing.
const leftoverMinAge = time.Minute

// packageProbeDir is the probe directory the package installs (mode 0770, owned by the
// advisor's user and group): what a refusal suggests instead of a directory others can write.
const packageProbeDir = "/var/lib/pgwal-advisor/probe"

// probeDir is the probe directory, opened once without following a symbolic link. Its mode,
// file system and free space are checked on that descriptor, and the probe file is created,
// checked and removed relative to it, so that what was checked is where the file is, whatever
// is done to the path meanwhile.
type probeDir struct {
	path string
	f    *os.File
}

// openProbeDir opens the probe directory and refuses one that is missing, not a directory (a
// symbolic link to one included) or writable by other users who could replace the probe file.
func openProbeDir(path string) (*probeDir, error) {
	if path == "" {
		return nil, refuse("no probe directory given: name a directory on the WAL's file system, outside pg_wal and the data directory")
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, refuse("probe directory %q does not exist: create it on the WAL's file system, outside pg_wal and the data directory", path)
	case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, refuse("probe directory %q is a symbolic link: the probe does not follow links; name the directory it points to", path)
		}
		return nil, refuse("probe directory %q is not a directory", path)
	case err != nil:
		return nil, fmt.Errorf("open probe directory %q: %w", path, err)
	}
	d := &probeDir{path: path, f: os.NewFile(uintptr(fd), path)}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		d.close()
		return nil, fmt.Errorf("stat probe directory %q: %w", path, err)
	}
	if err := checkDirMode(path, &st); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *probeDir) fd() int { return int(d.f.Fd()) }

func (d *probeDir) close() { _ = d.f.Close() }

// checkDirMode refuses a directory in which users other than the advisor's could remove or
// rename the probe file and put something else (a symbolic link to a file of root's) under its
// name. The sticky bit stops them (only a file's owner may then remove it), and the advisor's
// own group is trusted as its user is; a directory owned by another user is that user's to
// keep safe. The file is never reopened by its name, so this is a second line, not the first.
func checkDirMode(path string, st *unix.Stat_t) error {
	mode := st.Mode & 0o7777
	const fix = "or use a directory only the advisor can write, like the package's %s (mode 0770, owned by the advisor's user and group)"
	switch {
	case mode&unix.S_ISVTX != 0:
		return nil
	case mode&0o002 != 0:
		return refuse("probe directory %q (mode %04o) is writable by every user without the sticky bit: any of them could replace the probe file; "+
			"set the sticky bit (chmod +t %s), take their write access away (chmod o-w %s), "+fix,
			path, mode, path, path, packageProbeDir)
	case mode&0o020 != 0 && int(st.Gid) != os.Getegid():
		return refuse("probe directory %q (mode %04o) is writable by group %s, not the advisor's group %s, without the sticky bit: its members could replace the probe file; "+
			"set the sticky bit (chmod +t %s), take the group's write access away (chmod g-w %s), "+fix,
			path, mode, groupName(st.Gid), groupName(uint32(os.Getegid())), path, path, packageProbeDir)
	}
	return nil
}

// groupName names a group for a message: its name and gid, or the gid alone.
func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return fmt.Sprintf("%s (gid %s)", g.Name, id)
	}
	return "gid " + id
}

// checkDir refuses a probe directory that is inside pg_wal or a data directory, not writable,
// on another file system than the WAL, or short of space; openProbeDir has checked the rest.
func checkDir(c Config, d *probeDir) error {
	if err := checkNotPostgres(c.Dir, c.WALDir); err != nil {
		return err
	}
	// access(2) rather than a trial file: it answers for the caller's credentials and for a
	// read-only mount without creating anything that would have to be cleaned up.
	switch err := unix.Faccessat(d.fd(), ".", unix.W_OK, 0); {
	case errors.Is(err, unix.EROFS):
		return refuse("probe directory %q is on a read-only file system: the probe has to write", c.Dir)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return refuse("probe directory %q is not writable by this user (uid %d)", c.Dir, os.Geteuid())
	case err != nil:
		return fmt.Errorf("check probe directory %q is writable: %w", c.Dir, err)
	}
	if c.WALDir != "" {
		if err := checkSameFS(d, c.WALDir); err != nil {
			return err
		}
	}
	free, err := freeBytes(d.fd())
	if err != nil {
		return fmt.Errorf("probe directory %q: %w", c.Dir, err)
	}
	if need := int64(FileBytes) + c.MinFreeBytes; free < need {
		return refuse("probe directory %q has %s free; the probe needs %s for its file and leaves at least %s free",
			c.Dir, mb(free), mb(FileBytes), mb(c.MinFreeBytes))
	}
	return nil
}

// checkNotPostgres refuses a directory inside pg_wal or a data directory: PostgreSQL owns
// what is there (a stray file in pg_wal confuses archiving tools, and a full disk there stops
// the server), and an operator would not expect the advisor to write there.
func checkNotPostgres(dir, walDir string) error {
	abs, err := realPath(dir)
	if err != nil {
		return fmt.Errorf("resolve probe directory %q: %w", dir, err)
	}
	if walDir != "" {
		if wal, err := realPath(walDir); err == nil && within(abs, wal) {
			return refuse("probe directory %q is inside the WAL directory %q: use a directory beside it on the same file system", dir, walDir)
		}
	}
	for d := abs; ; d = filepath.Dir(d) {
		if b := filepath.Base(d); b == "pg_wal" || b == "pg_xlog" {
			return refuse("probe directory %q is inside PostgreSQL's WAL directory %q: use a directory beside it on the same file system", dir, d)
		}
		// Every data directory (and each database and tablespace directory in it) holds a
		// PG_VERSION file.
		if _, err := os.Stat(filepath.Join(d, "PG_VERSION")); err == nil {
			return refuse("probe directory %q is inside the PostgreSQL data directory %q (it holds PG_VERSION): use a directory outside it on the WAL's file system", dir, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// checkSameFS refuses a probe directory on another file system than the WAL directory. st_dev
// is what tells; on btrfs each subvolume has its own st_dev, which errs on the safe side.
func checkSameFS(d *probeDir, walDir string) error {
	var ds, ws unix.Stat_t
	if err := unix.Fstat(d.fd(), &ds); err != nil {
		return fmt.Errorf("stat probe directory %q: %w", d.path, err)
	}
	switch err := unix.Stat(walDir, &ws); {
	case errors.Is(err, unix.ENOENT):
		return refuse("WAL directory %q does not exist", walDir)
	case err != nil:
		return fmt.Errorf("stat WAL directory %q: %w", walDir, err)
	}
	if ds.Dev != ws.Dev {
		return refuse("probe directory %q (device %d:%d) is not on the file system of the WAL directory %q (device %d:%d): "+
			"a probe there would measure another device; %s",
			d.path, unix.Major(ds.Dev), unix.Minor(ds.Dev), walDir, unix.Major(ws.Dev), unix.Minor(ws.Dev), probeDirSuggestion(walDir, ws.Dev))
	}
	return nil
}

// probeDirSuggestion names a directory to create on the WAL's file system, at the top of it
// (its mount point), which is outside pg_wal and, on every packaged layout, the data directory,
// with the commands that make it the probe directory of the package's unit.
func probeDirSuggestion(walDir string, dev uint64) string {
	var pkg unix.Stat_t
	if unix.Stat(packageProbeDir, &pkg) == nil && pkg.Dev == dev {
		return fmt.Sprintf("the package's %s is on the WAL's file system: --probe.dir=%s", packageProbeDir, packageProbeDir)
	}
	top := walDir
	for d := filepath.Dir(walDir); d != top; d = filepath.Dir(d) {
		var st unix.Stat_t
		if unix.Stat(d, &st) != nil || st.Dev != dev {
			break
		}
		top = d
	}
	dir := filepath.Join(top, "pgwal-advisor-probe")
	if top == walDir || within(dir, filepath.Dir(walDir)) {
		return "pick a directory on the WAL's file system, outside pg_wal and the data directory"
	}
	u, g := "pgwal-advisor", "pgwal-advisor"
	return fmt.Sprintf("create one there: install -d -o %s -g %s -m 0770 %s, then --probe.dir=%s "+
		"(the package: PGWAL_ADVISOR_ARGS in /etc/default/pgwal-advisor, and the path in the unit's ReadWritePaths=)", u, g, dir, dir)
}

func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// freeBytes is the space left to unprivileged users on the file system of the open file fd.
func freeBytes(fd int) (int64, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return 0, fmt.Errorf("statfs: %w", err)
	}
	return int64(sfs.Bavail) * int64(sfs.Bsize), nil
}

// unlinkIfSame removes name from the directory when it still is the file (dev, ino). When the
// name is gone it does nothing; when it names something else now, someone replaced the file,
// and what is there is not the advisor's to remove: it is left alone and the error says so.
// (Between the check and the unlink only the directory's writers could swap the name again,
// and openProbeDir lets only the advisor's user and group, or a sticky directory, have them.)
func (d *probeDir) unlinkIfSame(name string, dev, ino uint64) error {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return fmt.Errorf("stat %q in probe directory %q: %w", name, d.path, err)
	case st.Dev != dev || st.Ino != ino:
		return fmt.Errorf("%s in probe directory %q is no longer the probe's file but %s: someone replaced it; it was left alone (check who can write the directory)",
			name, d.path, describe(&st))
	}
	if err := unix.Unlinkat(d.fd(), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %q from probe directory %q: %w", name, d.path, err)
	}
	return nil
}

// describe names what a directory entry is, for a message about a replaced file.
func describe(st *unix.Stat_t) string {
	kind := "a file"
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		kind = "a symbolic link"
	case unix.S_IFDIR:
		kind = "a directory"
	case unix.S_IFREG:
		kind = "another regular file"
	}
	return fmt.Sprintf("%s owned by uid %d", kind, st.Uid)
}

// removeLeftovers removes probe files that a killed advisor left behind: files of the probe's
// name pattern that nobody holds locked and whose PID is gone (or that are older than
// leftoverMinAge, the PID then being someone else's). Only regular files of the exact pattern
// are touched. It returns the paths removed.
func (d *probeDir) removeLeftovers() ([]string, error) {
	if _, err := d.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("list probe directory %q: %w", d.path, err)
	}
	entries, err := d.f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list probe directory %q: %w", d.path, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		pid, ok := probeFilePID(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		gone, err := d.leftover(e.Name(), pid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gone {
			removed = append(removed, filepath.Join(d.path, e.Name()))
		}
	}
	return removed, errors.Join(errs...)
}

// leftover removes name when it is a leftover and says whether it did. The lock is taken
// before the checks and held while removing, so a live owner cannot be in between. It is
// opened without following a link and without blocking (a FIFO swapped in would block a
// plain open).
func (d *probeDir) leftover(name string, pid int) (bool, error) {
	fd, err := unix.Openat(d.fd(), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open probe leftover %q in %q: %w", name, d.path, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // a live probe holds it
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("stat probe leftover %q in %q: %w", name, d.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, nil
	}
	if pidAlive(pid) && time.Since(time.Unix(st.Mtim.Unix())) < leftoverMinAge {
		return false, nil
	}
	if err := d.unlinkIfSame(name, st.Dev, st.Ino); err != nil {
		return false, fmt.Errorf("remove probe leftover: %w", err)
	}
	return true, nil
}

// probeFilePID parses the PID from a probe file name: filePrefix, the PID, '-', 8 hex digits.
func probeFilePID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return 0, false
	}
	pidText, suffix, ok := strings.Cut(rest, "-")
	if !ok || len(suffix) != 8 {
		return 0, false
	}
	if _, err := strconv.ParseUint(suffix, 16, 32); err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// pidAlive reports whether a process with pid exists (kill(2) with signal 0; EPERM means it
// exists under another user).
func pidAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// CheckDir runs every check the probe runs on its directory before it writes (exists, not a
// link, not writable by others, outside PostgreSQL's directories, writable by this user, on the
// WAL's file system, room for the file), without writing anything: for `pgwal-advisor doctor`.
func CheckDir(cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	dir, err := openProbeDir(cfg.Dir)
	if err != nil {
		return err
	}
	defer dir.close()
	return checkDir(cfg, dir)
}
