package simdisk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// undoBlock is the granularity at which the volatile cache saves persisted data before it is
// overwritten. Any size is exact (saving more old data than was overwritten restores the same
// bytes); 16 KiB keeps both the extra read of a small WAL write and the map small.
const undoBlock = 16 << 10

// fileID names a backing file across renames: a power cut restores a file's data wherever the
// file now lives.
type fileID struct {
	dev, ino uint64
}

func fileIDOf(st *unix.Stat_t) fileID {
	return fileID{dev: uint64(st.Dev), ino: st.Ino}
}

// volatileCache models a drive write cache that acknowledges syncs without persisting.
//
// Writes go to the backing file at once, so reads, mmap and everything else in the loopback
// behave as usual. What the cache adds is an undo log: before a file's data is first changed
// after the last true persist, the cache saves what the persisted state was (the size, the
// old contents of every block about to change, or that the file did not exist). A true
// persist (flush) drops the undo log; a power cut applies it. Appending to a file, the common
// case for WAL, saves nothing: truncating back to the persisted size undoes it.
type volatileCache struct {
	// mu orders data changes against persist points. A change (save the undo data, then write)
	// holds it shared; flush and power cut hold it exclusively, so every change is wholly
	// before or wholly after a persist point.
	mu sync.RWMutex

	recMu sync.Mutex
	recs  map[fileID]*undoRecord
}

// undoRecord is what one file looked like at the last true persist, as far as it has changed
// since.
type undoRecord struct {
	mu    sync.Mutex
	f     *os.File  // the backing file, read-write, held open so renames do not lose it
	inode *fs.Inode // to drop the kernel's cached pages and attributes after a power cut
	size  int64     // size at the last persist
	saved map[int64][]byte
	// created marks a file that did not exist at the last persist: a power cut removes it.
	created bool
	path    string // the backing path it was created under
}

func newVolatileCache() *volatileCache {
	return &volatileCache{recs: make(map[fileID]*undoRecord)}
}

// record returns the undo record of a file, creating it from the file's current state, which
// is its persisted state: every change goes through record first. open opens the backing file
// read-write; it is called only when the record is new. Callers hold c.mu shared.
func (c *volatileCache) record(id fileID, inode *fs.Inode, open func() (*os.File, error)) (*undoRecord, error) {
	c.recMu.Lock()
	defer c.recMu.Unlock()
	if r, ok := c.recs[id]; ok {
		return r, nil
	}
	f, err := open()
	if err != nil {
		return nil, fmt.Errorf("open backing file for the cache's undo log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat backing file for the cache's undo log: %w", err)
	}
	r := &undoRecord{f: f, inode: inode, size: fi.Size(), saved: make(map[int64][]byte)}
	c.recs[id] = r
	return r, nil
}

// created records a file that the last persist did not see. Callers hold c.mu shared.
func (c *volatileCache) created(id fileID, inode *fs.Inode, path string, open func() (*os.File, error)) error {
	r, err := c.record(id, inode, open)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created = true
	r.path = path
	r.size = 0
	return nil
}

// preserve saves the persisted contents of [off, end) before they change. Bytes at or beyond
// the persisted size need nothing: a power cut truncates them away.
func (r *undoRecord) preserve(off, end int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.created {
		return nil
	}
	end = min(end, r.size)
	for b := max(off, 0) / undoBlock; b*undoBlock < end; b++ {
		if _, ok := r.saved[b]; ok {
			continue
		}
		start := b * undoBlock
		buf := make([]byte, min(undoBlock, r.size-start))
		n, err := r.f.ReadAt(buf, start)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("save persisted block at %d: %w", start, err)
		}
		// A short read means the file is already shorter than its persisted size (truncated
		// without going through us); the missing tail was zeros or is gone either way.
		r.saved[b] = buf[:n]
	}
	return nil
}

// flush makes everything written so far persistent: the drive has written its cache.
func (c *volatileCache) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recMu.Lock()
	defer c.recMu.Unlock()
	for id, r := range c.recs {
		r.f.Close()
		delete(c.recs, id)
	}
}

// invalidation is a kernel cache entry that must be dropped after a power cut changed a file
// behind the kernel's back. It is sent after the cache's lock is released: dropping pages waits
// for page locks that an in-flight write holds while it waits for that lock.
type invalidation struct {
	inode  *fs.Inode // drop cached pages and attributes
	parent *fs.Inode // drop the directory entry name (a removed file)
	name   string
}

// powerCut restores every changed file to its persisted state and returns the kernel cache
// entries to invalidate.
func (c *volatileCache) powerCut() ([]invalidation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recMu.Lock()
	defer c.recMu.Unlock()
	var (
		inval []invalidation
		errs  []error
	)
	for id, r := range c.recs {
		inv, err := r.restore(id)
		if err != nil {
			errs = append(errs, err)
		}
		inval = append(inval, inv)
		r.f.Close()
		delete(c.recs, id)
	}
	return inval, errors.Join(errs...)
}

func (r *undoRecord) restore(id fileID) (invalidation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inv := invalidation{inode: r.inode}
	if r.created {
		// Remove the file only if its creation name still names it; a file renamed since is
		// kept, empty, under its new name (namespace changes are not modelled).
		var st unix.Stat_t
		if err := unix.Lstat(r.path, &st); err == nil && fileIDOf(&st) == id {
			if err := os.Remove(r.path); err != nil {
				return inv, fmt.Errorf("power cut: remove never persisted %s: %w", r.path, err)
			}
			if r.inode != nil {
				inv.name, inv.parent = r.inode.Parent()
			}
			return inv, nil
		}
		if err := r.f.Truncate(0); err != nil {
			return inv, fmt.Errorf("power cut: empty never persisted %s: %w", r.f.Name(), err)
		}
		return inv, nil
	}
	for b, data := range r.saved {
		if _, err := r.f.WriteAt(data, b*undoBlock); err != nil {
			return inv, fmt.Errorf("power cut: restore %s at %d: %w", r.f.Name(), b*undoBlock, err)
		}
	}
	if err := r.f.Truncate(r.size); err != nil {
		return inv, fmt.Errorf("power cut: truncate %s to its persisted size: %w", r.f.Name(), err)
	}
	return inv, nil
}
