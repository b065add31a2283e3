// Package simdisk is the lab's simulated disk: a FUSE loopback file system over a source
// directory whose syncs cost a chosen latency, optionally behind a write bandwidth limit, and
// optionally with a volatile write cache that acknowledges syncs it has not persisted.
//
// The machines the lab runs on have a virtual disk whose fsync costs about 0.1 ms, so the
// effects in the seed documents (a 7200 RPM disk: milliseconds per sync) vanish there. Putting
// a throwaway cluster's WAL on this disk brings them back (docs/benchmarks.md has the
// reproduced figures). It is test and demo equipment, not something to run in production.
//
// What costs what:
//   - fsync and fdatasync of a file, and fsync of a directory: the latency plus a jitter drawn
//     uniformly from [0, Jitter).
//   - a write(2) to a file opened with O_SYNC or O_DSYNC: one latency per write(2) call,
//     charged in the FSYNC that the kernel sends FUSE after each such write. O_DIRECT is
//     accepted and not passed to the backing file.
//   - with a bandwidth limit, every write costs its size divided by the bandwidth, and the
//     disk is one serial device: writes and syncs queue and complete one after the other.
//     Without one, writes cost nothing and concurrent syncs do not wait for each other.
//     Options.Queue (QueuePriority) changes the order: syncs and O_SYNC/O_DSYNC writes are
//     served ahead of queued plain writes, as on a device with a write cache and NCQ.
//
// A cost is the device's whole service time, counted from the request's arrival (for an
// O_SYNC/O_DSYNC write(2), from its write's arrival): the backing file's own write and sync
// happen within it, and the operation completes at arrival plus cost, or when the backing file
// is done if that takes longer. The wait is timed to microseconds (wakeClock). What the
// simulator cannot remove is FUSE's round trip between the calling process and this one,
// tens to a couple of hundred microseconds per request on the lab machines, more when the CPUs
// are busy: a program sees a 4 ms sync take about 4.05-4.2 ms, and a buffered write before an
// fdatasync adds its own round trip (docs/probes.md has the measured figures).
//
// The volatile cache (Options.VolatileCache) models the data of regular files: a sync is
// acknowledged at once and persists nothing; FlushCache (or the periodic FlushInterval) is the
// drive writing its cache out; PowerCut returns every file to its contents and size at the last
// flush, and removes files created since. Writes still pay the bandwidth limit. Namespace
// changes (rename, unlink, mkdir, link, symlink, chmod and other metadata) take effect at once
// and survive a power cut; a file created since the last flush and renamed since is kept under
// its new name, empty; O_TMPFILE files are not tracked. Overwriting data that was persisted
// keeps a copy of the old blocks in memory until the next flush; appending costs nothing.
//
// Without the volatile cache the device is honest and write-through: a write is durable when
// it returns (FUSE here has no write-back cache above us), so PowerCut loses nothing.
package simdisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// ErrNoFUSE is matched (errors.Is) by Mount's error when this machine or process cannot mount
// a FUSE file system, so that callers can fall back to a plain directory or skip.
var ErrNoFUSE = errors.New("the simulated disk needs FUSE")

type noFUSEError struct{ reason string }

func (e *noFUSEError) Error() string        { return ErrNoFUSE.Error() + ": " + e.reason }
func (e *noFUSEError) Is(target error) bool { return target == ErrNoFUSE }

// Options configure a simulated disk.
type Options struct {
	// Latency is what every sync costs.
	Latency time.Duration
	// Jitter adds a uniformly distributed [0, Jitter) to each sync.
	Jitter time.Duration
	// BandwidthBytesPerSec limits writes; 0 means unlimited. With a limit the disk is one
	// serial device (Queue says which).
	BandwidthBytesPerSec int64
	// IOPS caps the operations (writes and syncs) the disk starts per second, as a cloud
	// volume's provisioned IOPS do; 0 means no cap. An operation past the cap waits for its slot.
	IOPS int64
	// Queue is how a bandwidth-limited disk orders its work: QueueSerial ("" too), one FIFO
	// queue, or QueuePriority, synchronous work ahead of plain writes.
	Queue QueueModel
	// VolatileCache makes syncs return at once without persisting: only FlushCache (or the
	// FlushInterval) persists, and PowerCut loses everything since.
	VolatileCache bool
	// FlushInterval, with VolatileCache, flushes the cache periodically as a drive eventually
	// writes its cache out; 0 flushes only on FlushCache.
	FlushInterval time.Duration
	// Seed seeds the jitter, so that a run can be repeated.
	Seed int64
}

func (o Options) validate() error {
	switch {
	case o.Latency < 0:
		return fmt.Errorf("latency %v: must not be negative", o.Latency)
	case o.Jitter < 0:
		return fmt.Errorf("jitter %v: must not be negative", o.Jitter)
	case o.BandwidthBytesPerSec < 0:
		return fmt.Errorf("bandwidth %d B/s: must not be negative", o.BandwidthBytesPerSec)
	case o.IOPS < 0:
		return fmt.Errorf("IOPS cap %d: must not be negative", o.IOPS)
	case o.FlushInterval < 0:
		return fmt.Errorf("flush interval %v: must not be negative", o.FlushInterval)
	case o.FlushInterval > 0 && !o.VolatileCache:
		return errors.New("a flush interval needs the volatile cache")
	}
	if _, err := ParseQueueModel(string(o.Queue)); err != nil {
		return err
	}
	return nil
}

// Stats are the disk's counters since it was mounted.
type Stats struct {
	// Syncs counts fsync, fdatasync and directory fsync requests, including the one the kernel
	// sends after each write(2) to an O_SYNC/O_DSYNC file.
	Syncs int64
	// SyncWrites counts write requests to files opened with O_SYNC or O_DSYNC. A write(2)
	// larger than FUSE's max_write (128 KiB) arrives as several requests.
	SyncWrites int64
	// Writes and BytesWritten count all write requests and the bytes they carried.
	Writes       int64
	BytesWritten int64
	// Waited is the total time operations were held by the simulated device (summed over
	// concurrent operations).
	Waited time.Duration
	// CacheFlushes counts true persists of the volatile cache; PowerCuts counts power cuts.
	CacheFlushes int64
	PowerCuts    int64
}

// MarshalLogObject logs the counters with readable durations.
func (s Stats) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddInt64("syncs", s.Syncs)
	enc.AddInt64("sync_writes", s.SyncWrites)
	enc.AddInt64("writes", s.Writes)
	enc.AddInt64("bytes_written", s.BytesWritten)
	enc.AddDuration("waited", s.Waited)
	enc.AddInt64("cache_flushes", s.CacheFlushes)
	enc.AddInt64("power_cuts", s.PowerCuts)
	return nil
}

type counters struct {
	syncs, syncWrites, writes, bytesWritten, waitedNs, cacheFlushes, powerCuts atomic.Int64
}

// Disk is a mounted simulated disk.
type Disk struct {
	source     string
	mountpoint string
	logger     *zap.Logger
	dev        *device
	cache      *volatileCache // nil for an honest device
	server     *fuse.Server
	stats      counters
	clock      wakeClock
	// epoch is when the disk was mounted: operations in flight keep their arrival times as
	// offsets from it, in atomics, without losing the monotonic clock.
	epoch time.Time

	closing     chan struct{} // closed by Close: releases waiting operations, stops the flusher
	flusherDone chan struct{}
	closeOnce   sync.Once
	closeErr    error
}

// Mount mounts a simulated disk over source at mountpoint (both existing directories). ctx is
// checked before mounting (which takes milliseconds); the disk then serves until Close, not
// until ctx is done. It fails with an error matching ErrNoFUSE when FUSE cannot be mounted
// here (no usable /dev/fuse, not root, mounting refused).
func Mount(ctx context.Context, source, mountpoint string, opts Options, logger *zap.Logger) (*Disk, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := checkFUSE("/dev/fuse", os.Geteuid()); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mount simulated disk: %w", err)
	}
	source, err := existingDir(source)
	if err != nil {
		return nil, fmt.Errorf("simulated disk source: %w", err)
	}
	mountpoint, err = existingDir(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("simulated disk mount point: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(source, &st); err != nil {
		return nil, fmt.Errorf("simulated disk source: %w", err)
	}

	d := &Disk{
		source:      source,
		mountpoint:  mountpoint,
		logger:      logger.With(zap.String("mountpoint", mountpoint)),
		dev:         newDevice(opts.Latency, opts.Jitter, opts.BandwidthBytesPerSec, opts.Seed),
		closing:     make(chan struct{}),
		flusherDone: make(chan struct{}),
		epoch:       time.Now(),
	}
	d.dev.setQueue(opts.Queue)
	d.dev.setIOPS(opts.IOPS)
	if opts.VolatileCache {
		d.cache = newVolatileCache()
	}
	loopRoot := &fs.LoopbackRoot{Path: source, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: loopRoot}, disk: d}
	loopRoot.RootNode = root

	// go-fuse's own default when it is given no options; without it every stat and every
	// lseek(SEEK_END) (PostgreSQL sizes relations that way) is a round trip to this process,
	// a cost no real disk has. A power cut invalidates what it changes explicitly.
	timeout := time.Second
	server, err := fs.Mount(mountpoint, root, &fs.Options{
		MountOptions: fuse.MountOptions{
			// As root it mounts without fusermount; allow_other so that the postgres user
			// can use a disk mounted by root.
			DirectMount: true,
			AllowOther:  true,
			// The server runs as root and checks nothing itself: let the kernel apply file
			// modes, as on a real disk shared by root and postgres.
			Options: []string{"default_permissions"},
			FsName:  source,
			Name:    "simdisk",
			Logger:  zap.NewStdLog(d.logger.Named("fuse")),
		},
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
	})
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
			return nil, &noFUSEError{reason: "mount " + mountpoint + ": " + err.Error()}
		}
		return nil, fmt.Errorf("mount simulated disk at %s: %w", mountpoint, err)
	}
	d.server = server

	if d.cache != nil && opts.FlushInterval > 0 {
		go d.flushEvery(opts.FlushInterval)
	} else {
		close(d.flusherDone)
	}
	d.logger.Info("simulated disk mounted",
		zap.String("source", source),
		zap.Duration("latency", opts.Latency),
		zap.Duration("jitter", opts.Jitter),
		zap.Int64("bandwidth_bytes_per_second", opts.BandwidthBytesPerSec),
		zap.String("queue", string(d.dev.queueModel())),
		zap.Bool("volatile_cache", opts.VolatileCache))
	return d, nil
}

// checkFUSE tells whether a FUSE file system can be mounted without fusermount.
func checkFUSE(devFUSE string, euid int) error {
	f, err := os.OpenFile(devFUSE, os.O_RDWR, 0)
	if err != nil {
		return &noFUSEError{reason: err.Error()}
	}
	f.Close()
	if euid != 0 {
		return &noFUSEError{reason: "mounting it directly needs root (running as uid " + fmt.Sprint(euid) + ")"}
	}
	return nil
}

func existingDir(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s: not a directory", abs)
	}
	return abs, nil
}

// Mountpoint returns the absolute path the disk is mounted at.
func (d *Disk) Mountpoint() string { return d.mountpoint }

// Source returns the absolute path of the directory the disk mirrors.
func (d *Disk) Source() string { return d.source }

// SetLatency changes what each sync costs from now on; negative means 0.
func (d *Disk) SetLatency(latency time.Duration) { d.dev.setLatency(latency) }

// SetIOPS changes the cap on operations started per second from now on; 0 or negative: none.
func (d *Disk) SetIOPS(perSec int64) { d.dev.setIOPS(perSec) }

// SetJitter changes the jitter added to each sync from now on; negative means 0.
func (d *Disk) SetJitter(jitter time.Duration) { d.dev.setJitter(jitter) }

// SetBandwidth changes the write bandwidth limit from now on; 0 (or negative) removes it.
func (d *Disk) SetBandwidth(bytesPerSec int64) { d.dev.setBandwidth(bytesPerSec) }

// SetQueueModel changes how a bandwidth-limited disk orders its work from now on ("" is
// QueueSerial). Work already booked keeps its completion time.
func (d *Disk) SetQueueModel(q QueueModel) error {
	q, err := ParseQueueModel(string(q))
	if err != nil {
		return err
	}
	d.dev.setQueue(q)
	return nil
}

// QueueModel returns how the disk orders its work.
func (d *Disk) QueueModel() QueueModel { return d.dev.queueModel() }

// Stats returns the disk's counters.
func (d *Disk) Stats() Stats {
	return Stats{
		Syncs:        d.stats.syncs.Load(),
		SyncWrites:   d.stats.syncWrites.Load(),
		Writes:       d.stats.writes.Load(),
		BytesWritten: d.stats.bytesWritten.Load(),
		Waited:       time.Duration(d.stats.waitedNs.Load()),
		CacheFlushes: d.stats.cacheFlushes.Load(),
		PowerCuts:    d.stats.powerCuts.Load(),
	}
}

// FlushCache persists everything written so far, as a drive does when it writes its volatile
// cache out. On an honest disk everything written is already persistent and it does nothing.
func (d *Disk) FlushCache() {
	if d.cache == nil {
		return
	}
	d.cache.flush()
	d.stats.cacheFlushes.Add(1)
}

// PowerCut loses everything the volatile cache has not persisted: every file returns to its
// data and size at the last flush, and files created since are removed. It models the device
// only: stop what uses the disk first, as a real power cut would. On an honest disk nothing is
// lost.
func (d *Disk) PowerCut() error {
	d.stats.powerCuts.Add(1)
	if d.cache == nil {
		d.logger.Info("power cut: honest device, nothing lost")
		return nil
	}
	inval, err := d.cache.powerCut()
	// The kernel caches pages and sizes of these files: it must not serve what was lost.
	for _, inv := range inval {
		if inv.parent != nil {
			if errno := inv.parent.NotifyEntry(inv.name); errno != 0 {
				d.logger.Debug("cannot invalidate directory entry", zap.String("name", inv.name), zap.Error(errno))
			}
		}
		if inv.parent == nil && inv.inode != nil {
			if errno := inv.inode.NotifyContent(0, 0); errno != 0 {
				d.logger.Debug("cannot invalidate file cache", zap.Error(errno))
			}
		}
	}
	d.logger.Info("power cut: volatile cache lost", zap.Int("files", len(inval)))
	if err != nil {
		return fmt.Errorf("power cut: %w", err)
	}
	return nil
}

// Close unmounts the disk. A busy mount is retried and then detached lazily, so no mount is
// left behind either way; processes that still hold files open keep them until they close
// them. In volatile mode unmounting is a clean shutdown: what was written is kept.
func (d *Disk) Close() error {
	d.closeOnce.Do(func() { d.closeErr = d.close() })
	return d.closeErr
}

func (d *Disk) close() error {
	close(d.closing)
	<-d.flusherDone
	if d.cache != nil {
		// The backing files already hold everything written; dropping the undo log is the
		// cache being written out on a clean unmount.
		d.cache.flush()
	}
	// Unmounted here rather than with go-fuse's Unmount, which falls back to fusermount (not
	// installed here) and gives up on a busy mount.
	if err := unmountRetry(d.mountpoint); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("simulated disk: %w", err)
	}
	// Once unmounted the server's loops end; after a lazy detach they go on serving the files
	// still open, until the last one is closed.
	done := make(chan struct{})
	go func() { d.server.Wait(); close(done) }()
	select {
	case <-done:
		d.logger.Info("simulated disk unmounted", zap.Object("stats", d.Stats()))
	case <-time.After(time.Second):
		d.logger.Warn("simulated disk detached; files still open on it are served until closed", zap.Object("stats", d.Stats()))
	}
	return nil
}

func (d *Disk) flushEvery(interval time.Duration) {
	defer close(d.flusherDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.closing:
			return
		case <-t.C:
			d.FlushCache()
		}
	}
}

// sync runs a sync request that arrived at arrived (for the FSYNC completing an O_SYNC/O_DSYNC
// write(2), when that write arrived): on an honest disk it syncs the backing file and completes
// when the device's sync cost, counted from the arrival, is paid; with the volatile cache it is
// acknowledged at once and persists nothing.
//
// The backing file's own sync runs inside the simulated service time rather than before it:
// otherwise every sync would cost the configured latency plus the real disk's (about 0.1-0.3 ms
// here), and a "4 ms" disk would be measured at 4.5 ms. A backing sync slower than the latency
// is what the sync then costs.
func (d *Disk) sync(arrived time.Time, backing func() syscall.Errno) syscall.Errno {
	d.stats.syncs.Add(1)
	if d.cache != nil {
		return 0
	}
	errno := backing()
	d.waitUntil(d.dev.reserve(arrived, 0, true))
	return errno
}

// waitUntil holds an operation until the device has completed it. FUSE interrupts (a signal to
// the caller) do not cut it short: a device finishes its work whatever happens to the process,
// and PostgreSQL signals its backends often enough that honouring them would make syncs cheap.
func (d *Disk) waitUntil(t time.Time) {
	wait := time.Until(t)
	if wait <= 0 {
		return
	}
	d.stats.waitedNs.Add(int64(wait))
	d.clock.sleepUntil(t, d.closing)
}

// preserve saves a file's persisted data in [off, end) into the volatile cache's undo log
// before it changes. Callers hold the cache's lock shared.
func (d *Disk) preserve(id fileID, inode *fs.Inode, open func() (*os.File, error), off, end int64) syscall.Errno {
	r, err := d.cache.record(id, inode, open)
	if err == nil {
		err = r.preserve(off, end)
	}
	if err != nil {
		d.logger.Warn("volatile cache cannot save persisted data; refusing the write", zap.Error(err))
		return syscall.EIO
	}
	return 0
}
