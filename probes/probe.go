package probes

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// How the measuring loop runs. Methods take turns in batches of batchOps operations, so that
// whatever else the machine does hits every method alike instead of whichever ran at that
// moment (identical runs differed by up to 12% and 21%: docs/benchmarks.md, seed 000 and seed
// 001 tables; so sequential blocks are not comparable). A batch rather than single operations
// keeps the cost of switching between files (page-cache invalidation by the next O_DIRECT
// write) on one operation in batchOps.
const (
	batchOps = 4
	// warmupOps are each pattern's first operations, discarded: the first write to a freshly
	// opened descriptor pays for page-cache state the previous pattern left.
	warmupOps = 2
	// maxSamples bounds each pattern's samples (and the memory they take, 1MB each): on tmpfs
	// a long budget would otherwise collect millions of microsecond samples.
	maxSamples = 1 << 17
	// progressEvery throttles the progress callback.
	progressEvery = 100 * time.Millisecond
	// fillChunk is the size of each write that fills the probe file.
	fillChunk = 1 << 20
	// filePrefix names probe files; the pid and a random suffix follow.
	filePrefix = ".pgwal-advisor-probe-"
)

// notOnLinux is fsync_writethrough's reason: PostgreSQL offers it only on Windows and macOS
// (F_FULLFSYNC).
const notOnLinux = "not available on Linux"

// Run measures every configured sync method on a preallocated 16MB file in cfg.Dir until each
// one's mean is known to cfg.Precision or cfg.Duration is spent, judges durability with
// cfg.Facts and returns the report. The file is removed on every return, including when ctx is
// cancelled (the CLI cancels it on SIGINT, SIGTERM and SIGHUP); a file that someone else
// removed or replaced meanwhile makes Run return an error. progress, if not nil, is called
// from Run's goroutine with the measuring time spent and the budget.
func Run(ctx context.Context, cfg Config, progress func(done, total time.Duration)) (rep *Report, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dir, err := openProbeDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer dir.close()
	// Leftovers of a killed run go first: they would count against the free-space headroom.
	_, _ = dir.removeLeftovers() // checkDir says what is wrong with a directory it cannot list
	if err := checkDir(cfg, dir); err != nil {
		return nil, err
	}
	started := time.Now()
	file, err := createProbeFile(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if rmErr := file.remove(); rmErr != nil && err == nil {
			rep, err = nil, fmt.Errorf("remove probe file: %w", rmErr)
		}
	}()
	m, err := newMeasurer(file, cfg, linuxCalls())
	if err != nil {
		return nil, err
	}
	defer m.close()
	stop, err := m.run(ctx, runLimits{
		budget:     cfg.Duration,
		adaptive:   true,
		minSamples: cfg.MinSamples,
		precision:  cfg.Precision,
		maxOps:     cfg.MaxOpsPerSec,
	}, progress)
	if err != nil {
		return nil, err
	}
	// A file someone removed or replaced meanwhile harmed nothing (it was never reopened by
	// name), but the run is not one to report as if nothing happened.
	if err := file.check(); err != nil {
		return nil, err
	}
	finished := time.Now()
	rep = &Report{
		Dir:            cfg.Dir,
		Started:        started,
		Finished:       finished,
		WallSeconds:    finished.Sub(started).Seconds(),
		BudgetSeconds:  cfg.Duration.Seconds(),
		Precision:      cfg.Precision,
		Stop:           stop,
		DirectIOPolicy: cfg.Server.Describe(),
		Methods:        m.results(),
	}
	rep.Durability = Judge(rep, factsFor(cfg))
	return rep, nil
}

// factsFor returns cfg.Facts, with the file system type filled in from statfs when the caller
// knows nothing of the device.
func factsFor(cfg Config) DeviceFacts {
	f := cfg.Facts
	if f.FSType == "" {
		f.FSType, f.Volatile = fsType(cfg.Dir)
	}
	return f
}

// fsType names the file system under dir from statfs(2)'s magic number, and says whether it
// lives in memory.
func fsType(dir string) (name string, volatile bool) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return "", false
	}
	switch int64(s.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs", true
	case unix.RAMFS_MAGIC:
		return "ramfs", true
	case unix.EXT4_SUPER_MAGIC:
		return "ext2/ext3/ext4", false
	case unix.XFS_SUPER_MAGIC:
		return "xfs", false
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs", false
	case unix.F2FS_SUPER_MAGIC:
		return "f2fs", false
	case unix.NFS_SUPER_MAGIC:
		return "nfs", false
	case unix.FUSE_SUPER_MAGIC:
		return "fuse", false
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay", false
	case 0x2fc12fc1:
		return "zfs", false
	}
	return fmt.Sprintf("0x%x", s.Type), false
}

// sysCalls are the calls whose refusals the measurer handles, replaceable so that tests can
// play a file system that refuses O_DIRECT.
type sysCalls struct {
	open   func(path string, flags int, mode uint32) (int, error)
	pwrite func(fd int, p []byte, off int64) (int, error)
}

func linuxCalls() sysCalls { return sysCalls{open: unix.Open, pwrite: unix.Pwrite} }

// pattern is one method and write pattern being measured, with its own descriptor.
type pattern struct {
	res     MethodResult
	flags   int // open flags, O_DIRECT excluded
	fd      int
	sync    func(fd int) error
	warm    int
	acc     running
	samples []float64 // microseconds
}

// measurer owns the patterns' descriptors of the probe file for one run or burst.
type measurer struct {
	sys      sysCalls
	file     *probeFile
	buf      []byte // pieceBytes of random data, aligned for O_DIRECT
	patterns []*pattern
}

// newMeasurer opens a descriptor of file per pattern, with the flags the configured server
// would use.
func newMeasurer(file *probeFile, cfg Config, sys sysCalls) (*measurer, error) {
	m := &measurer{sys: sys, file: file, buf: alignedRandom(pieceBytes)}
	has := func(name string, wps, bytes int) bool {
		return slices.ContainsFunc(m.patterns, func(p *pattern) bool {
			return p.res.Name == name && p.res.WritesPerSync == wps && p.res.WriteBytes == bytes
		})
	}
	add := func(name string, wps, bytes int) {
		if has(name, wps, bytes) {
			return
		}
		p := &pattern{
			res: MethodResult{Name: name, WritesPerSync: wps, WriteBytes: bytes, Available: true},
			fd:  -1,
		}
		switch name {
		case OpenDatasync:
			p.flags = unix.O_DSYNC
		case OpenSync:
			p.flags = unix.O_SYNC
		case Fdatasync:
			p.sync = unix.Fdatasync
		case Fsync:
			p.sync = unix.Fsync
		case FsyncWritethrough:
			p.res.Available, p.res.Error = false, notOnLinux
		}
		p.res.DirectIO = p.res.Available && cfg.Server.Direct(name)
		m.patterns = append(m.patterns, p)
	}
	for _, wps := range []int{1, 2} {
		for _, name := range cfg.Methods {
			add(name, wps, BlockBytes)
		}
	}
	if cfg.OpenSyncSizes {
		// 2 x 8kB is the same operation as open_sync's two-writes pattern, measured once.
		for _, pieces := range []int{1, 2, 4, 8, 16} {
			add(OpenSync, pieces, pieceBytes/pieces)
		}
	}
	add(Write, 1, BlockBytes)
	for _, p := range m.patterns {
		if !p.res.Available {
			continue
		}
		if err := m.open(p); err != nil {
			m.close()
			return nil, err
		}
	}
	return m, nil
}

// open opens p's descriptor. Where the file system refuses O_DIRECT (EINVAL: tmpfs before
// Linux 6.6; ext4 with data=journal, as pg_test_fsync warns), the method is measured without it
// and the result says so: pg_test_fsync prints n/a* there, but a figure with a note serves the
// rules better.
func (m *measurer) open(p *pattern) error {
	flags := unix.O_RDWR | unix.O_CLOEXEC | p.flags
	if p.res.DirectIO {
		fd, err := m.file.reopen(m.sys.open, flags|unix.O_DIRECT)
		if err == nil {
			p.fd = fd
			return nil
		}
		if !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("open probe file for %s: %w", p.label(), err)
		}
		m.noDirect(p, "open")
	}
	fd, err := m.file.reopen(m.sys.open, flags)
	if err != nil {
		return fmt.Errorf("open probe file for %s: %w", p.label(), err)
	}
	p.fd = fd
	return nil
}

// noDirect records that O_DIRECT was refused for p.
func (m *measurer) noDirect(p *pattern, when string) {
	p.res.DirectIO = false
	p.res.Note = fmt.Sprintf("the file system refused O_DIRECT (EINVAL on %s): measured without it, so the server would not see this figure (it could not open its WAL this way)", when)
}

func (m *measurer) close() {
	for _, p := range m.patterns {
		if p.fd >= 0 {
			_ = unix.Close(p.fd)
			p.fd = -1
		}
	}
}

// runLimits say when a measuring run ends.
type runLimits struct {
	budget     time.Duration
	adaptive   bool // stop early once every synced pattern reaches precision
	minSamples int
	precision  float64
	maxOps     float64 // timed operations per second; 0 for no limit
}

// run measures round-robin until the budget is spent, precision is reached (if adaptive) or a
// pattern fills maxSamples, and returns why it stopped.
func (m *measurer) run(ctx context.Context, lim runLimits, progress func(done, total time.Duration)) (string, error) {
	var active []*pattern
	for _, p := range m.patterns {
		if p.res.Available {
			active = append(active, p)
		}
	}
	start := time.Now()
	deadline := start.Add(lim.budget)
	lastProgress := start
	report := func(now time.Time) {
		if progress != nil {
			progress(min(now.Sub(start), lim.budget), lim.budget)
		}
	}
	var ops int64
	for {
		for _, p := range active {
			for range batchOps {
				d, err := m.once(p)
				if err != nil {
					return "", err
				}
				ops++
				if p.warm < warmupOps {
					p.warm++
					continue
				}
				p.acc.add(us(d))
				p.samples = append(p.samples, us(d))
			}
			if p.res.Name == Write {
				// The unsynced baseline leaves a dirty page; flush it untimed so that the next
				// method's sync does not pay for it.
				if err := retryEINTR(func() error { return unix.Fdatasync(p.fd) }); err != nil {
					return "", fmt.Errorf("flush after %s: %w", p.label(), err)
				}
			}
			if err := pace(ctx, start, ops, lim.maxOps, deadline); err != nil {
				return "", err
			}
			if err := ctx.Err(); err != nil {
				return "", err
			}
			now := time.Now()
			if !now.Before(deadline) {
				report(now)
				return StopBudget, nil
			}
			if now.Sub(lastProgress) >= progressEvery {
				report(now)
				lastProgress = now
			}
		}
		if slices.ContainsFunc(active, func(p *pattern) bool { return len(p.samples) >= maxSamples }) {
			report(time.Now())
			return StopSampleCap, nil
		}
		if lim.adaptive && precise(active, lim.minSamples, lim.precision) {
			report(time.Now())
			return StopPrecision, nil
		}
	}
}

// precise reports whether every synced pattern has minSamples and a 95% interval within
// ±precision of its mean. The unsynced baseline does not count: it is evidence for the
// verdict, where its order of magnitude is what matters, and its microsecond samples with
// rare millisecond stalls would otherwise hold every run to the full budget.
func precise(active []*pattern, minSamples int, precision float64) bool {
	for _, p := range active {
		if p.res.Name == Write {
			continue
		}
		if p.acc.n < minSamples || p.acc.relHalfWidth() > precision {
			return false
		}
	}
	return true
}

// pace sleeps until ops operations fit the rate limit, but not past the deadline.
func pace(ctx context.Context, start time.Time, ops int64, maxOps float64, deadline time.Time) error {
	if maxOps <= 0 {
		return nil
	}
	due := start.Add(time.Duration(float64(ops) / maxOps * float64(time.Second)))
	if due.After(deadline) {
		due = deadline
	}
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// once performs one timed operation of p: its writes at offset 0 (and on), as PostgreSQL
// rewrites the current WAL page, then its sync if it has one. A write refused with EINVAL
// under O_DIRECT (an alignment the device does not take) reopens p without it.
func (m *measurer) once(p *pattern) (time.Duration, error) {
	d, err := m.timed(p)
	if err != nil && p.res.DirectIO && errors.Is(err, unix.EINVAL) {
		_ = unix.Close(p.fd)
		p.fd = -1
		m.noDirect(p, "write")
		if err := m.open(p); err != nil {
			return 0, err
		}
		d, err = m.timed(p)
	}
	if err != nil {
		return 0, fmt.Errorf("measure %s: %w", p.label(), err)
	}
	return d, nil
}

func (m *measurer) timed(p *pattern) (time.Duration, error) {
	buf := m.buf[:p.res.WriteBytes]
	start := time.Now()
	for w := range p.res.WritesPerSync {
		off := int64(w * p.res.WriteBytes)
		var n int
		err := retryEINTR(func() (err error) { n, err = m.sys.pwrite(p.fd, buf, off); return err })
		if err != nil {
			return 0, err
		}
		if n != len(buf) {
			return 0, io.ErrShortWrite
		}
	}
	if p.sync != nil {
		if err := retryEINTR(func() error { return p.sync(p.fd) }); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// retryEINTR repeats a system call interrupted by a signal (the Go runtime's own signals can
// interrupt a sync that blocks long on a slow device).
func retryEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// results summarizes every pattern, in the order measured.
func (m *measurer) results() []MethodResult {
	out := make([]MethodResult, 0, len(m.patterns))
	for _, p := range m.patterns {
		out = append(out, result(p.res, p.samples))
	}
	return out
}

// result fills r's statistics from samples (microseconds).
func result(r MethodResult, samples []float64) MethodResult {
	r.Samples = len(samples)
	r.LatencyUS = Summarize(samples)
	r.OpsPerSec = 0
	if r.LatencyUS.Mean > 0 {
		r.OpsPerSec = 1e6 / r.LatencyUS.Mean
	}
	return r
}

func (p *pattern) label() string {
	return fmt.Sprintf("%s (%d x %d bytes)", p.res.Name, p.res.WritesPerSync, p.res.WriteBytes)
}

// alignedRandom returns n random bytes starting on a 4kB boundary, which O_DIRECT needs on
// every common device (the logical block size is 512 bytes or 4kB). Go's heap does not move
// objects, so the alignment holds.
func alignedRandom(n int) []byte {
	const align = 4096
	raw := make([]byte, n+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) % align); r != 0 {
		off = align - r
	}
	buf := raw[off : off+n : off+n]
	_, _ = crand.Read(buf)
	return buf
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
