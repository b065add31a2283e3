package writers

import (
	"cmp"
	"slices"
)

// tracked is what the collector remembers of a process between readings.
type tracked struct {
	// read says io holds the cumulative counters of the last successful reading; an entry
	// without it is a process whose counters could not be read (another user's).
	read bool
	io   ioCounters
	// start is the process's start time from stat, 0 when not read; with the pid it tells a
	// reused pid from the process read before. ppid is its parent then.
	start uint64
	ppid  int
	// round is the collection that last tried to read the process; wrote says its counters
	// grew at the last reading.
	round uint64
	wrote bool
}

// tracker holds the readings between collections and turns them into per-interval deltas.
type tracker struct {
	procs map[int]*tracked
	// listed are the pids /proc listed at the previous collection: a pid not among them is a
	// process started since, all of whose writes fall in the interval.
	listed map[int]bool
	// credit is, per live process, what the processes it reaped had written at their last
	// reading: the kernel adds a reaped child's counters to its parent's (wait_task_zombie in
	// kernel/exit.c), and those bytes were counted for the child already.
	credit map[int]ioCounters
	round  uint64
}

func newTracker() *tracker {
	return &tracker{procs: map[int]*tracked{}, listed: map[int]bool{}, credit: map[int]ioCounters{}}
}

// begin starts a collection over the listed pids: it forgets the processes that ended, credits
// their counters to the nearest live ancestor that would have reaped them, and returns the pids
// to read this time, at most limit of them.
func (t *tracker) begin(pids []int, limit int) (read []int, skipped int) {
	t.round++
	live := make(map[int]bool, len(pids))
	for _, p := range pids {
		live[p] = true
	}
	for pid, tr := range t.procs {
		if !live[pid] && tr.read {
			t.reaped(pid, tr, live)
		}
	}
	for pid := range t.procs {
		if !live[pid] {
			delete(t.procs, pid)
		}
	}
	for pid := range t.credit {
		if !live[pid] {
			delete(t.credit, pid)
		}
	}
	read = t.choose(pids, limit)
	return read, len(pids) - len(read)
}

// reaped credits an ended process's counters, and what it had itself reaped but not yet been
// read after, to its nearest live ancestor as the tracker last knew them.
func (t *tracker) reaped(pid int, tr *tracked, live map[int]bool) {
	c := tr.io
	pending := t.credit[pid]
	c.write += pending.write
	c.cancelled += pending.cancelled
	parent := tr.ppid
	for i := 0; i < maxAncestors && parent > 0 && !live[parent]; i++ {
		up, ok := t.procs[parent]
		if !ok {
			return
		}
		parent = up.ppid
	}
	if parent <= 0 || !live[parent] {
		return
	}
	cr := t.credit[parent]
	cr.write += c.write
	cr.cancelled += c.cancelled
	t.credit[parent] = cr
}

// choose picks the pids to read when there are more than limit: first those that wrote at their
// last reading, then those started since the previous collection (the likely writers), then
// the others, the longest untried first, so that every process is read in turn. Counters of a
// process left out keep growing; its next reading has the delta since the last one.
func (t *tracker) choose(pids []int, limit int) []int {
	if len(pids) <= limit {
		return pids
	}
	tier := func(pid int) (int, uint64) {
		tr, ok := t.procs[pid]
		switch {
		case ok && tr.wrote:
			return 0, tr.round
		case !ok && !t.listed[pid]:
			return 1, 0
		case !ok:
			return 2, 0
		}
		return 2, tr.round
	}
	sorted := slices.Clone(pids)
	slices.SortFunc(sorted, func(a, b int) int {
		ta, ra := tier(a)
		tb, rb := tier(b)
		return cmp.Or(cmp.Compare(ta, tb), cmp.Compare(ra, rb), cmp.Compare(a, b))
	})
	return sorted[:limit]
}

// needsStat reports whether pid's stat should be read with these counters: when it is read for
// the first time (its parent is needed once it ends) and when it wrote (to tell a reused pid).
func (t *tracker) needsStat(pid int, io ioCounters) bool {
	tr, ok := t.procs[pid]
	return !ok || !tr.read || io != tr.io
}

// update records a reading of pid's counters and returns what it wrote since the last one. A
// process read for the first time wrote nothing in the interval (its counters are the
// baseline), unless it was not listed at the previous collection: it started since, and all it
// wrote is new. A process whose counters went back, or whose start time changed, is a new
// process under a reused pid. st is its stat when needsStat said to read it, else nil.
func (t *tracker) update(pid int, io ioCounters, st *procStat, first bool) ioCounters {
	tr, ok := t.procs[pid]
	if !ok {
		tr = &tracked{}
		t.procs[pid] = tr
	}
	var d ioCounters
	switch {
	case !tr.read && (first || t.listed[pid]):
		// The baseline already holds whatever the process reaped: nothing to take off.
		delete(t.credit, pid)
	case !tr.read:
		d = io
	case io.write < tr.io.write, io.cancelled < tr.io.cancelled, st != nil && tr.start != 0 && st.start != tr.start:
		delete(t.credit, pid)
		d = io
	default:
		d = ioCounters{write: io.write - tr.io.write, cancelled: io.cancelled - tr.io.cancelled}
	}
	if cr, ok := t.credit[pid]; ok {
		d.write, cr.write = sub(d.write, cr.write)
		d.cancelled, cr.cancelled = sub(d.cancelled, cr.cancelled)
		t.credit[pid] = cr
		if cr == (ioCounters{}) {
			delete(t.credit, pid)
		}
	}
	if st != nil {
		tr.start, tr.ppid = st.start, st.ppid
	}
	tr.read, tr.io, tr.round, tr.wrote = true, io, t.round, d.write > d.cancelled
	return d
}

// failed records that pid's counters could not be read this time, so that it waits its turn
// behind the others when not every process can be read.
func (t *tracker) failed(pid int) {
	tr, ok := t.procs[pid]
	if !ok {
		tr = &tracked{}
		t.procs[pid] = tr
	}
	tr.round, tr.wrote = t.round, false
}

// sub takes what it can of credit from v: the rest of v and the rest of the credit.
func sub(v, credit uint64) (uint64, uint64) {
	if credit >= v {
		return 0, credit - v
	}
	return v - credit, 0
}

// end remembers the pids listed in this collection for the next one.
func (t *tracker) end(pids []int) {
	clear(t.listed)
	for _, p := range pids {
		t.listed[p] = true
	}
}
