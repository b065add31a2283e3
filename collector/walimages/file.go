package walimages

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxRead bounds what is read of one segment: 16MB is the default segment, and a larger one's
// first 64MB hold images enough.
const maxRead = 64 << 20

// ErrNotYet is Recent's answer when no segment it could read begins at or after notBefore: the
// server has not yet finished a WAL file since then.
var ErrNotYet = errors.New("no WAL file begun since the position given is complete yet")

// Recent reads the newest complete segment before insertLSN (pg_current_wal_insert_lsn()) in
// walDir: the one that ends at or before the segment holding insertLSN, and that one itself
// when no earlier segment is left (a fresh cluster). Only a segment that begins at or after
// notBefore is read (ErrNotYet when none does): a reader that must describe what the server
// wrote since some moment passes the insert position of that moment. It returns the segment's
// file name too.
func Recent(walDir string, insertLSN, notBefore uint64, blockSize, versionNum int) (Segment, string, error) {
	names, segSize, err := segmentFiles(walDir)
	if err != nil {
		return Segment{}, "", err
	}
	cur := insertLSN / segSize
	for _, n := range []uint64{cur - 1, cur} {
		if n > cur { // cur was 0
			continue
		}
		name, ok := newestTimeline(names, n, segSize)
		if !ok {
			continue
		}
		if n*segSize < notBefore {
			return Segment{}, name, ErrNotYet
		}
		b, err := readSegment(filepath.Join(walDir, name), segSize)
		if err != nil {
			return Segment{}, name, err
		}
		s, err := Decode(b, blockSize, versionNum)
		if err != nil {
			return Segment{}, name, fmt.Errorf("WAL file %s: %w", name, err)
		}
		s.Start = n * segSize
		return s, name, nil
	}
	return Segment{}, "", fmt.Errorf("no WAL file in %s for the insert position %X/%X or the segment before it", walDir, insertLSN>>32, uint32(insertLSN))
}

// segmentFiles lists walDir's segment file names (24 hexadecimal digits) and the segment size,
// which every segment file has.
func segmentFiles(walDir string) ([]string, uint64, error) {
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return nil, 0, fmt.Errorf("list the WAL directory: %w (the advisor reads WAL files to measure full-page images: run it as root or as the server's user)", err)
	}
	var names []string
	for _, e := range entries {
		if isSegmentName(e.Name()) && e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, 0, fmt.Errorf("no WAL segment file in %s", walDir)
	}
	sort.Strings(names)
	fi, err := os.Lstat(filepath.Join(walDir, names[len(names)-1]))
	if err != nil {
		return nil, 0, fmt.Errorf("WAL file size: %w", err)
	}
	size := uint64(fi.Size())
	if size < 1<<20 || size > 1<<30 || size&(size-1) != 0 {
		return nil, 0, fmt.Errorf("WAL file %s is %d bytes: not a segment size (a power of two from 1MB to 1GB)", names[len(names)-1], size)
	}
	return names, size, nil
}

func isSegmentName(n string) bool {
	if len(n) != 24 {
		return false
	}
	for _, c := range n {
		if (c < '0' || c > '9') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// newestTimeline finds segment number n's file of the highest timeline: PostgreSQL names a
// segment TTTTTTTTXXXXXXXXYYYYYYYY, the timeline, then n split at 2^32 bytes of WAL.
func newestTimeline(names []string, n, segSize uint64) (string, bool) {
	perID := (uint64(1) << 32) / segSize
	suffix := fmt.Sprintf("%08X%08X", n/perID, n%perID)
	best, bestTLI := "", uint64(0)
	for _, name := range names {
		if name[8:] != suffix {
			continue
		}
		tli, err := strconv.ParseUint(name[:8], 16, 32)
		if err == nil && tli >= bestTLI {
			best, bestTLI = name, tli
		}
	}
	return best, best != ""
}

// readSegment reads a segment file without following a link, as a regular file of the
// expected size.
func readSegment(path string, segSize uint64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open WAL file %s: %w", filepath.Base(path), err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat WAL file: %w", err)
	}
	if !fi.Mode().IsRegular() || uint64(fi.Size()) != segSize {
		return nil, fmt.Errorf("WAL file %s is not a regular file of %d bytes", filepath.Base(path), segSize)
	}
	b := make([]byte, min(segSize, maxRead))
	if _, err := io.ReadFull(f, b); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("read WAL file %s: %w", filepath.Base(path), err)
	}
	return b, nil
}
