package simdisk

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// toEnd is an end offset past the end of any file.
const toEnd = 1 << 62

// node is a loopback node whose files are served by the simulated device. Everything not
// defined here is go-fuse's loopback, unchanged.
type node struct {
	*fs.LoopbackNode
	disk *Disk
}

var (
	_ fs.NodeWrapChilder     = (*node)(nil)
	_ fs.NodeOpener          = (*node)(nil)
	_ fs.NodeCreater         = (*node)(nil)
	_ fs.NodeTmpfiler        = (*node)(nil)
	_ fs.NodeSetattrer       = (*node)(nil)
	_ fs.NodeCopyFileRanger  = (*node)(nil)
	_ fs.NodeOpendirHandler  = (*node)(nil)
	_ fs.FileWriter          = (*handle)(nil)
	_ fs.FileFsyncer         = (*handle)(nil)
	_ fs.FileAllocater       = (*handle)(nil)
	_ fs.FilePassthroughFder = (*handle)(nil)
	_ fs.FileFsyncdirer      = (*dirHandle)(nil)
)

// WrapChild makes every node the loopback creates (lookup, create, mkdir, ...) one of ours.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), disk: n.disk}
}

// backingPath is the node's path in the source directory.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(nil))
}

// openFlags returns the flags to open the backing file with. O_DIRECT is dropped: the kernel
// already sends O_DIRECT I/O to us uncached, and the backing file system may refuse it (tmpfs
// before Linux 6.6), as may its alignment rules. O_SYNC and O_DSYNC are dropped too: the
// kernel follows every write(2) to such a file with an FSYNC request, which syncs the backing
// file within the device's simulated service time (Disk.sync). Passed on, they would make the
// backing write itself synchronous, before that time starts, and a synchronous write would
// cost the configured latency plus the real disk's sync.
func openFlags(flags uint32) (backing uint32, syncWrites bool) {
	// O_SYNC includes the O_DSYNC bit.
	return flags &^ (syscall.O_DIRECT | unix.O_SYNC | unix.O_DSYNC), flags&unix.O_DSYNC != 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	flags, syncWrites := openFlags(flags)
	c := n.disk.cache
	if c != nil && flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		// Truncating on open changes data: save it first. (go-fuse does not negotiate
		// atomic O_TRUNC, so the kernel normally sends a SETATTR instead; this covers both.)
		c.mu.RLock()
		defer c.mu.RUnlock()
		if errno := n.preserveByPath(0, toEnd); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.disk.newHandle(fh, n.EmbeddedInode(), syncWrites)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	flags, syncWrites := openFlags(flags)
	c := n.disk.cache
	path := filepath.Join(n.backingPath(), name)
	existed := false
	if c != nil {
		c.mu.RLock()
		defer c.mu.RUnlock()
		var st unix.Stat_t
		existed = unix.Lstat(path, &st) == nil
		if existed && flags&syscall.O_TRUNC != 0 {
			if errno := n.disk.preserve(fileIDOf(&st), nil, openPath(path), 0, toEnd); errno != 0 {
				return nil, nil, 0, errno
			}
		}
	}
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.disk.newHandle(fh, inode, syncWrites)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if c != nil && !existed {
		if err := c.created(h.id, inode, path, h.reopen); err != nil {
			n.disk.logger.Warn("cannot track created file", zap.String("path", path), zap.Error(err))
			h.Release(ctx)
			return nil, nil, 0, syscall.EIO
		}
	}
	return inode, h, fuseFlags, 0
}

// Tmpfile wraps O_TMPFILE files like any other, so that they pay the device's costs. They have
// no name, and the loopback cannot link them into the tree, so the volatile cache ignores them.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	flags, syncWrites := openFlags(flags)
	inode, fh, fuseFlags, errno := n.LoopbackNode.Tmpfile(ctx, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.disk.newHandle(fh, inode, syncWrites)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h.untracked = true
	return inode, h, fuseFlags, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok && n.disk.cache != nil {
		c := n.disk.cache
		c.mu.RLock()
		defer c.mu.RUnlock()
		var errno syscall.Errno
		switch h, _ := f.(*handle); {
		case h == nil:
			errno = n.preserveByPath(int64(size), toEnd)
		case !h.untracked:
			errno = n.disk.preserve(h.id, h.inode, h.reopen, int64(size), toEnd)
		}
		if errno != 0 {
			return errno
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// CopyFileRange is refused so that the kernel falls back to reads and writes, which pay the
// device's bandwidth and go through the volatile cache's bookkeeping.
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// loopbackDir is the method set of go-fuse's loopback directory stream, which it returns
// only as an interface.
type loopbackDir interface {
	fs.DirStream
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
	fs.FileFsyncdirer
}

// dirHandle makes a directory fsync cost a sync: on a journaling file system it is a journal
// commit, and PostgreSQL issues one after creating or renaming a WAL segment.
type dirHandle struct {
	loopbackDir
	disk *Disk
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, fuseFlags, errno
	}
	if ld, ok := fh.(loopbackDir); ok {
		return &dirHandle{loopbackDir: ld, disk: n.disk}, fuseFlags, 0
	}
	return fh, fuseFlags, 0
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.disk.sync(time.Now(), func() syscall.Errno { return d.loopbackDir.Fsyncdir(ctx, flags) })
}

// preserveByPath saves the node's persisted data in [off, end) when no file handle is at hand.
// Callers hold the cache's lock shared.
func (n *node) preserveByPath(off, end int64) syscall.Errno {
	path := n.backingPath()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0
	}
	return n.disk.preserve(fileIDOf(&st), n.EmbeddedInode(), openPath(path), off, end)
}

func openPath(path string) func() (*os.File, error) {
	return func() (*os.File, error) { return os.OpenFile(path, os.O_RDWR, 0) }
}

// handle is an open file on the simulated disk.
type handle struct {
	*fs.LoopbackFile
	disk       *Disk
	inode      *fs.Inode
	id         fileID
	fd         int
	syncWrites bool // opened with O_SYNC or O_DSYNC
	untracked  bool // not in the volatile cache's undo log (an O_TMPFILE file)
	// syncWriteArrived is when the first write request of a write(2) to an O_SYNC/O_DSYNC file
	// arrived, as nanoseconds since the disk's epoch, until the FSYNC that completes that
	// write(2) takes it; 0 when no such write is pending.
	syncWriteArrived atomic.Int64
}

// newHandle wraps a loopback file handle; on failure it releases it.
func (d *Disk) newHandle(fh fs.FileHandle, inode *fs.Inode, syncWrites bool) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		if r, ok := fh.(fs.FileReleaser); ok {
			r.Release(context.Background())
		}
		return nil, syscall.EIO
	}
	// LoopbackFile exposes its descriptor only through PassthroughFd; it stays owned by lf.
	fd, ok := lf.PassthroughFd()
	if !ok {
		lf.Release(context.Background())
		return nil, syscall.EBADF
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	return &handle{LoopbackFile: lf, disk: d, inode: inode, id: fileIDOf(&st), fd: fd, syncWrites: syncWrites}, 0
}

// PassthroughFd declines FUSE passthrough: with it (kernel 6.9+, root) the kernel would read
// and write the backing file itself, and no write would pay the device's cost.
func (h *handle) PassthroughFd() (int, bool) {
	return -1, false
}

// reopen opens the handle's backing file read-write, whatever mode the handle has, for the
// volatile cache's undo log (which must read the old data of a write-only file).
func (h *handle) reopen() (*os.File, error) {
	return os.OpenFile("/proc/self/fd/"+strconv.Itoa(h.fd), os.O_RDWR, 0)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	// The transfer is timed from the request's arrival, as a sync is (Disk.sync): the backing
	// write happens within the simulated transfer time, not before it.
	arrived := time.Now()
	d := h.disk
	var (
		n     uint32
		errno syscall.Errno
	)
	if c := d.cache; c != nil && !h.untracked {
		c.mu.RLock()
		errno = d.preserve(h.id, h.inode, h.reopen, off, off+int64(len(data)))
		if errno == 0 {
			n, errno = h.LoopbackFile.Write(ctx, data, off)
		}
		c.mu.RUnlock()
	} else {
		n, errno = h.LoopbackFile.Write(ctx, data, off)
	}
	d.stats.writes.Add(1)
	d.stats.bytesWritten.Add(int64(n))
	if h.syncWrites {
		// The sync itself is charged in Fsync: after each write(2) to an O_SYNC/O_DSYNC file
		// the kernel sends FUSE an FSYNC (generic_write_sync in fs/fuse/file.c). Charging it
		// here as well would count every synchronous write twice, and a write larger than
		// max_write (128 KiB), which reaches us in pieces, several times. That FSYNC is timed
		// from this write's arrival: for the device a synchronous write is one operation, and
		// the FUSE round trip between the two requests is no part of it. Only the first
		// piece of a write(2) sets the time.
		d.stats.syncWrites.Add(1)
		if errno == 0 {
			h.syncWriteArrived.CompareAndSwap(0, max(int64(arrived.Sub(d.epoch)), 1))
		}
	}
	// A synchronous write's transfer is synchronous work for the priority queue model.
	d.waitUntil(d.dev.book(arrived, int64(n), false, h.syncWrites))
	return n, errno
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	arrived := time.Now()
	if w := h.syncWriteArrived.Swap(0); w != 0 {
		arrived = h.disk.epoch.Add(time.Duration(w))
	}
	return h.disk.sync(arrived, func() syscall.Errno { return h.LoopbackFile.Fsync(ctx, flags) })
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if c := h.disk.cache; c != nil && !h.untracked {
		c.mu.RLock()
		defer c.mu.RUnlock()
		// Plain preallocation changes no data, and the size it may add is undone by truncating
		// to the persisted size: the record alone is enough.
		var start, end int64
		switch {
		case mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0:
			start, end = int64(off), toEnd // everything after off moves
		case mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0:
			start, end = int64(off), int64(off+size)
		}
		if errno := h.disk.preserve(h.id, h.inode, h.reopen, start, end); errno != 0 {
			return errno
		}
	}
	return h.LoopbackFile.Allocate(ctx, off, size, mode)
}
