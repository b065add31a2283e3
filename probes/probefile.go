package probes

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
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

// probeFile is a probe file and the descriptor that holds an exclusive flock(2) on it from its
// creation to its removal, so that another advisor's leftover sweep never removes a live one.
type probeFile struct {
	path string
	lock *os.File
}

// remove deletes the file, then releases the lock (closing the descriptor drops it).
func (p *probeFile) remove() error {
	err := os.Remove(p.path)
	if cerr := p.lock.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close probe file: %w", cerr)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// createProbeFile creates the probe file in dir and fills it with random data, synced, so that
// later writes overwrite allocated blocks (as PostgreSQL overwrites a zero-filled segment) and
// a compressing or deduplicating file system cannot shrink them. On error nothing is left.
func createProbeFile(ctx context.Context, dir string) (_ *probeFile, err error) {
	path := filepath.Join(dir, fmt.Sprintf("%s%d-%08x", filePrefix, os.Getpid(), rand.Uint32()))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create probe file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(path)
			_ = f.Close()
		}
	}()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("lock probe file: %w", err)
	}
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("seed probe data: %w", err)
	}
	src := rand.NewChaCha8(seed)
	buf := make([]byte, fillChunk)
	for off := int64(0); off < FileBytes; off += fillChunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		_, _ = src.Read(buf) // ChaCha8.Read never fails
		if _, err := f.WriteAt(buf, off); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return nil, fmt.Errorf("preallocate the %s probe file in %q: the file system is full (or the quota spent); free space or pick another directory on the WAL's file system: %w",
					mb(FileBytes), dir, err)
			}
			return nil, fmt.Errorf("preallocate probe file: %w", err)
		}
	}
	// Synced now, so that the first measurements do not pay for flushing 16MB of dirty pages.
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync probe file: %w", err)
	}
	return &probeFile{path: path, lock: f}, nil
}

// removeLeftovers removes probe files in dir that a killed advisor left behind: files of the
// probe's name pattern that nobody holds locked and whose PID is gone (or that are older than
// leftoverMinAge, the PID then being someone else's). Only regular files of the exact pattern
// are touched. It returns the paths removed.
func removeLeftovers(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list probe directory: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		pid, ok := probeFilePID(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		gone, err := leftover(path, pid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gone {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// leftover removes path when it is a leftover and says whether it did. The lock is taken
// before the checks and held while removing, so a live owner cannot be in between.
func leftover(path string, pid int) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open probe leftover %q: %w", path, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // a live probe holds it
	}
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat probe leftover %q: %w", path, err)
	}
	if pidAlive(pid) && time.Since(st.ModTime()) < leftoverMinAge {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove probe leftover %q: %w", path, err)
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

// freeBytes is the space left to unprivileged users on the file system under dir.
func freeBytes(dir string) (int64, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return 0, fmt.Errorf("statfs probe directory %q: %w", dir, err)
	}
	return int64(sfs.Bavail) * int64(sfs.Bsize), nil
}
