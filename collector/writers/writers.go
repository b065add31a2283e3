// Package writers reads who writes on the host, for naming the writer behind a write-back
// stall: each process's written bytes between two readings (/proc/PID/io), its cgroups and
// systemd unit, whether it is one of PostgreSQL's own processes, the kernel's per-cgroup write
// counters, and the cgroup layout that decides what can throttle a writer. Every file is
// untrusted: reads are bounded, and a process that ends while it is read is skipped.
package writers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// procfsHint tells the operator what to check when the process list cannot be read.
const procfsHint = "is --path.procfs the host's procfs?"

// Defaults of Options.
const (
	// DefaultMaxProcesses bounds the processes read per collection. Reading one process's
	// counters costs about 10 µs of CPU (BenchmarkCollect), so 8192 processes cost about 80 ms
	// per snapshot; a host with more has them read in turn (Writers.Skipped).
	DefaultMaxProcesses = 8192
	// DefaultMaxListed bounds the writers a snapshot lists.
	DefaultMaxListed = 32
)

// Options tune a Collector; the zero value is the defaults.
type Options struct {
	// MaxProcesses is how many processes are read per collection (0: DefaultMaxProcesses).
	// When there are more, those that wrote last time and the new ones go first, then the rest
	// in turn.
	MaxProcesses int
	// MaxListed is how many writers a snapshot lists, the most bytes first (0: DefaultMaxListed).
	MaxListed int
	// Postmaster is the pid of the target cluster's postmaster when the caller knows it (0: not
	// known). Without it, PostgreSQL's processes are told by their names (see ancestry).
	Postmaster int
}

// Collector reads the writers part of snapshots from a procfs and a sysfs root. It keeps the
// previous reading, so that each Collect returns the writes since the previous one; it is safe
// for concurrent use, but each Collect moves the baseline.
type Collector struct {
	procfs, sysfs string
	opts          Options
	now           func() time.Time

	mu   sync.Mutex
	t    *tracker
	last time.Time
}

// New returns a Collector reading procfs and sysfs (normally "/proc" and "/sys"; the host's
// when running in a container; testdata trees in tests).
func New(procfs, sysfs string, opts Options) *Collector {
	if procfs == "" {
		procfs = "/proc"
	}
	if sysfs == "" {
		sysfs = "/sys"
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	if opts.MaxListed <= 0 {
		opts.MaxListed = DefaultMaxListed
	}
	return &Collector{procfs: filepath.Clean(procfs), sysfs: sysfs, opts: opts, now: time.Now, t: newTracker()}
}

// Collect reads every process's counters (up to the cap) and returns the writes since the
// previous Collect; the first returns the baseline, with no process listed. Only a process
// list that cannot be read is an error; what cannot be seen is counted and said in Notes.
func (c *Collector) Collect(ctx context.Context) (*collector.Writers, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	pids, err := listPIDs(c.procfs)
	if err != nil {
		return nil, fmt.Errorf("list processes (%s): %w", procfsHint, err)
	}
	w := &collector.Writers{Seen: len(pids)}
	layout, m, err := detect(c.procfs, c.sysfs)
	if err != nil {
		w.Notes = append(w.Notes, fmt.Sprintf("cgroup layout unknown: %v", err))
	}
	w.Layout = layout
	if h := hidePID(m.procOptions); h != "" {
		w.Notes = append(w.Notes, fmt.Sprintf("%s is mounted with hidepid=%s: other users' processes are hidden "+
			"(a systemd unit's ProtectProc= does this), so their writes cannot be seen", c.procfs, h))
	}
	first := c.t.round == 0
	read, skipped := c.t.begin(pids, c.opts.MaxProcesses)
	w.Skipped = skipped
	anc := newAncestry(c.procfs, c.opts.Postmaster)
	deltas, err := c.readAll(ctx, read, first, anc, w)
	if err != nil {
		return nil, err
	}
	c.t.end(pids)
	if !first {
		w.IntervalSeconds = now.Sub(c.last).Seconds()
		c.list(deltas, anc, w, newCgroupReader(c.sysfs, m, layout))
	}
	c.last = now
	return w, nil
}

// delta is one process's writes in the interval.
type delta struct {
	pid int
	io  ioCounters
}

// readAll reads the counters of pids and returns the deltas of those that wrote.
func (c *Collector) readAll(ctx context.Context, pids []int, first bool, anc *ancestry, w *collector.Writers) ([]delta, error) {
	var buf []byte
	var out []delta
	malformed := 0
	for i, pid := range pids {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("read processes' counters: %w", ctx.Err())
		}
		b, err := readBounded(filepath.Join(c.procfs, strconv.Itoa(pid), "io"), buf, maxProcFile)
		if err == nil {
			buf = b
		}
		var io ioCounters
		if err == nil {
			io, err = parseIO(b)
			if err != nil {
				malformed++
			}
		} else if !vanished(err) {
			w.Unreadable++
			if w.UnreadableErrno == "" {
				w.UnreadableErrno = errnoName(err)
			}
		}
		if err != nil {
			c.t.failed(pid)
			continue
		}
		w.Read++
		var st *procStat
		if c.t.needsStat(pid, io) {
			st = anc.stat(pid)
		}
		d := c.t.update(pid, io, st, first)
		if d.write > d.cancelled {
			w.NetWriteBytes += d.write - d.cancelled
			out = append(out, delta{pid: pid, io: d})
		}
	}
	if malformed > 0 {
		w.Notes = append(w.Notes, fmt.Sprintf("%d processes' io files did not parse and were skipped", malformed))
	}
	if w.Unreadable > 0 {
		w.Notes = append(w.Notes, unreadableNote(w.Unreadable, w.UnreadableErrno))
	}
	return out, nil
}

// unreadableNote says why writers may be missing, and what would show them.
func unreadableNote(n int, errno string) string {
	what := fmt.Sprintf("%d processes", n)
	if n == 1 {
		what = "1 process"
	}
	s := fmt.Sprintf("the write counters of %s could not be read (%s)", what, errno)
	if errno == "EACCES" || errno == "EPERM" {
		s += ": reading another user's /proc/PID/io needs CAP_SYS_PTRACE (docs/http.md, Security)"
	}
	return s
}

// errnoName names the system error in err ("EACCES"), or says it is not one.
func errnoName(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return "errno " + strconv.Itoa(int(errno))
	}
	if errors.Is(err, errTooLong) {
		return "file too long"
	}
	return "not a system error"
}

// list fills in the writers, the most net bytes first: their names, cgroups, units, whether
// they are PostgreSQL's, and their cgroups' counters.
func (c *Collector) list(deltas []delta, anc *ancestry, w *collector.Writers, cg *cgroupReader) {
	slices.SortFunc(deltas, func(a, b delta) int {
		return cmp.Or(cmp.Compare(b.io.write-b.io.cancelled, a.io.write-a.io.cancelled), cmp.Compare(a.pid, b.pid))
	})
	var buf []byte
	for _, d := range deltas {
		if len(w.Processes) >= c.opts.MaxListed {
			w.OtherProcesses++
			w.OtherNetWriteBytes += d.io.write - d.io.cancelled
			continue
		}
		p, ok := c.describe(d, anc, &buf, w.Layout.Systemd)
		if !ok {
			// It ended since its counters were read; its bytes stay in the totals.
			w.OtherProcesses++
			w.OtherNetWriteBytes += d.io.write - d.io.cancelled
			continue
		}
		w.Processes = append(w.Processes, p)
		if p.Postmaster != 0 && !slices.Contains(w.Postmasters, p.Postmaster) {
			w.Postmasters = append(w.Postmasters, p.Postmaster)
		}
		cg.add(p)
	}
	slices.Sort(w.Postmasters)
	w.Cgroups = cg.out
}

// describe reads a writer's comm, parent and cgroups; false when it ended meanwhile.
func (c *Collector) describe(d delta, anc *ancestry, buf *[]byte, systemd bool) (collector.ProcessWrites, bool) {
	dir := filepath.Join(c.procfs, strconv.Itoa(d.pid))
	st := anc.stat(d.pid)
	b, err := readBounded(filepath.Join(dir, "comm"), *buf, maxProcFile)
	if err != nil || st == nil {
		return collector.ProcessWrites{}, false
	}
	p := collector.ProcessWrites{PID: d.pid, PPID: st.ppid, Comm: parseComm(b), KernelThread: st.kthread,
		WriteBytes: d.io.write, CancelledWriteBytes: d.io.cancelled, NetWriteBytes: d.io.write - d.io.cancelled}
	*buf = b
	if b, err = readBounded(filepath.Join(dir, "cgroup"), b, maxCgroupFile); err == nil {
		*buf = b
		cg := parseCgroup(b)
		p.Cgroup, p.BlkioCgroup, p.MemoryCgroup = cg.v2, cg.blkio, cg.memory
		if systemd {
			p.Unit = cg.unit()
		}
	}
	p.Postmaster = anc.postmasterOf(d.pid)
	return p, true
}
