package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// Who filled the queue: the processes that wrote over the stall and the span before it, from the
// snapshots' writer lists (collector/writers). A process's write_bytes grows when it dirties a
// page, not when write-back sends the page to the device (proc(5)), so the span reaches back
// before the stall by vm.dirty_expire_centisecs, the oldest a dirty page gets before the
// flusher writes it. PostgreSQL's own processes and kernel threads (a loop device's worker
// writes what its users wrote) are counted but never named as the other writer
// (docs/rules.md, writeback-stalls-wal, The writers).

// maxNamedWriters is how many writers the evidence lists.
const maxNamedWriters = 3

// defaultDirtyExpire is the kernel's vm.dirty_expire_centisecs (3000), for a snapshot that lacks it.
const defaultDirtyExpire = 30 * time.Second

// namedWriter is one process's writes summed over the span, by pid and name.
type namedWriter struct {
	pid  int
	comm string
	// unit is its systemd unit, cgroup its cgroup v2 path, blkio its v1 blkio path.
	unit, cgroup, blkio string
	bytes               float64
	// diskBytes is what its v2 cgroup wrote to the WAL's disk over the span (io.stat), when hasDisk.
	diskBytes float64
	hasDisk   bool
}

// writerFacts is who wrote over the span from the stall's start less the lead-in to its end.
type writerFacts struct {
	// listed says a snapshot in the span carried a writer list; seconds is the time the lists cover.
	listed  bool
	seconds float64
	lead    time.Duration
	layout  collector.CgroupLayout
	// top are the writers that are neither PostgreSQL's nor kernel threads, the most bytes first;
	// others counts the rest of them.
	top    []namedWriter
	others int
	// processBytes is every process's net written bytes, listed or not; postgresBytes those of
	// PostgreSQL's listed processes.
	processBytes, postgresBytes float64
	// unreadable is the most processes a snapshot could not read, and errno why.
	unreadable int
	errno      string
	// disk is the WAL's whole disk as "MAJ:MIN" ("" when the WAL's device is a partition or
	// unknown), diskPath its node; diskBytes what it wrote over the span, when hasDisk.
	disk, diskPath string
	diskBytes      float64
	hasDisk        bool
}

// writersOf gathers the writer facts over the stall s and its lead-in from the history h.
func writersOf(h *History, s StallFacts, k *collector.Kernel, st *collector.Storage) writerFacts {
	wf := writerFacts{lead: defaultDirtyExpire}
	if k != nil && k.VM.DirtyExpireCentisecs > 0 {
		// Capped at an hour: the value is read from /proc, and the history holds two at most.
		wf.lead = time.Duration(min(k.VM.DirtyExpireCentisecs, 360000)) * 10 * time.Millisecond
	}
	wf.disk, wf.diskPath = wholeDisk(st)
	if s.from.IsZero() {
		return wf
	}
	span := spanSnapshots(h, s.from.Add(-wf.lead), s.to)
	type key struct {
		pid  int
		comm string
	}
	sums := map[key]*namedWriter{}
	for _, snap := range span {
		w := snap.Writers
		wf.listed, wf.layout = true, w.Layout
		wf.seconds += w.IntervalSeconds
		wf.processBytes += float64(w.NetWriteBytes)
		if w.Unreadable > wf.unreadable {
			wf.unreadable, wf.errno = w.Unreadable, w.UnreadableErrno
		}
		for _, p := range w.Processes {
			switch {
			case p.Postmaster != 0:
				wf.postgresBytes += float64(p.NetWriteBytes)
			case !p.KernelThread:
				id := key{p.PID, p.Comm}
				if sums[id] == nil {
					sums[id] = &namedWriter{pid: p.PID, comm: p.Comm}
				}
				nw := sums[id]
				nw.bytes += float64(p.NetWriteBytes)
				nw.unit, nw.cgroup, nw.blkio = p.Unit, p.Cgroup, p.BlkioCgroup
			}
		}
	}
	all := make([]namedWriter, 0, len(sums))
	for _, nw := range sums {
		all = append(all, *nw)
	}
	slices.SortFunc(all, func(a, b namedWriter) int {
		return cmp.Or(cmp.Compare(b.bytes, a.bytes), cmp.Compare(a.pid, b.pid), cmp.Compare(a.comm, b.comm))
	})
	wf.top = all[:min(len(all), maxNamedWriters)]
	wf.others = len(all) - len(wf.top)
	wf.diskShares(span)
	return wf
}

// spanSnapshots are the snapshots whose writer lists cover part of (from, to].
func spanSnapshots(h *History, from, to time.Time) []collector.Snapshot {
	var out []collector.Snapshot
	for i := 0; i < h.Len(); i++ {
		s := h.snaps[i]
		if s.Writers == nil || s.Writers.IntervalSeconds <= 0 {
			continue
		}
		start := s.Time.Add(-time.Duration(s.Writers.IntervalSeconds * float64(time.Second)))
		if s.Time.After(from) && start.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// wholeDisk is the WAL's device as io.max and io.stat name it: the whole disk, which the
// device is when it is its only disk under its own name (not a partition, dm or md device).
func wholeDisk(st *collector.Storage) (dev, node string) {
	if st == nil || len(st.Disks) != 1 || st.Disks[0].Name != st.DeviceName || !validDevice(st.Device) {
		return "", ""
	}
	return st.Device, "/dev/" + st.DeviceName
}

// diskShares reads, for the named writers in a v2 cgroup, what their cgroup wrote to the
// WAL's disk over the span (io.stat: cumulative, so the first and the last reading in the
// span), and what the disk wrote between the same readings. Only cgroup v2 with io and memory
// charges write-back to the writer's cgroup; elsewhere the figure would miss the write-back.
func (wf *writerFacts) diskShares(span []collector.Snapshot) {
	if wf.disk == "" || !wf.layout.WritebackThrottle() {
		return
	}
	for i := range wf.top {
		nw := &wf.top[i]
		var first, last *collector.Snapshot
		var a, b uint64
		for j := range span {
			if v, ok := cgroupDiskBytes(span[j].Writers, nw.cgroup, wf.disk); ok && span[j].WALStorage != nil && span[j].WALStorage.IO != nil {
				if first == nil {
					first, a = &span[j], v
				}
				last, b = &span[j], v
			}
		}
		if first == nil || first == last || b < a || last.WALStorage.IO.WriteBytes <= first.WALStorage.IO.WriteBytes {
			continue
		}
		nw.diskBytes, nw.hasDisk = float64(b-a), true
		wf.diskBytes, wf.hasDisk = float64(last.WALStorage.IO.WriteBytes-first.WALStorage.IO.WriteBytes), true
	}
}

// cgroupDiskBytes is the cumulative bytes a v2 cgroup wrote to disk, as a writer list read them.
func cgroupDiskBytes(w *collector.Writers, cgroup, disk string) (uint64, bool) {
	for _, c := range w.Cgroups {
		if c.Hierarchy != collector.HierarchyV2 || c.Path != cgroup || cgroup == "" {
			continue
		}
		for _, d := range c.Devices {
			if d.Device == disk {
				return d.WriteBytes, true
			}
		}
	}
	return 0, false
}

// where names a writer's place for a person: its unit, else its cgroup (v2, else v1 blkio).
func (nw namedWriter) where() string {
	switch {
	case nw.unit != "":
		return nw.unit
	case nw.cgroup != "":
		return "cgroup " + nw.cgroup
	case nw.blkio != "":
		return "blkio cgroup " + nw.blkio
	}
	return "cgroup unknown"
}

// labels identify a writer in an evidence name; quoted, so that a name read from /proc stays
// one label value whatever it holds.
func (nw namedWriter) labels() string {
	l := fmt.Sprintf("{pid=%q,comm=%s", strconv.Itoa(nw.pid), strconv.Quote(nw.comm))
	switch {
	case nw.unit != "":
		l += ",unit=" + strconv.Quote(nw.unit)
	case nw.cgroup != "":
		l += ",cgroup=" + strconv.Quote(nw.cgroup)
	case nw.blkio != "":
		l += ",blkio_cgroup=" + strconv.Quote(nw.blkio)
	}
	return l + "}"
}

// evidence lists the span, the named writers and what the others wrote.
func (wf writerFacts) evidence() []Evidence {
	if !wf.listed {
		return []Evidence{{Name: "writers_listed", Value: 0, Unit: UnitBool}}
	}
	ev := []Evidence{
		{Name: "writers_span_seconds", Value: wf.seconds, Unit: UnitSeconds},
		{Name: "process_write_bytes", Value: wf.processBytes, Unit: UnitBytes},
		{Name: "postgres_write_bytes", Value: wf.postgresBytes, Unit: UnitBytes},
	}
	for _, nw := range wf.top {
		l := nw.labels()
		ev = append(ev, Evidence{Name: "writer_bytes" + l, Value: nw.bytes, Unit: UnitBytes},
			Evidence{Name: "writer_write_rate" + l, Value: wf.rate(nw.bytes), Unit: UnitBytesPerSecond},
			Evidence{Name: "writer_share_of_process_writes" + l, Value: wf.share(nw.bytes), Unit: UnitRatio})
		if nw.hasDisk {
			ev = append(ev, Evidence{Name: "writer_cgroup_share_of_device_writes" + l, Value: min(nw.diskBytes/wf.diskBytes, 1), Unit: UnitRatio})
		}
	}
	if wf.others > 0 {
		ev = append(ev, Evidence{Name: "writers_not_named", Value: float64(wf.others), Unit: UnitCount})
	}
	if wf.unreadable > 0 {
		ev = append(ev, Evidence{Name: "writers_unreadable", Value: float64(wf.unreadable), Unit: UnitCount})
	}
	return ev
}

func (wf writerFacts) rate(b float64) float64 {
	if wf.seconds <= 0 {
		return 0
	}
	return b / wf.seconds
}

func (wf writerFacts) share(b float64) float64 {
	if wf.processBytes <= 0 {
		return 0
	}
	return min(b/wf.processBytes, 1)
}

// summary names the first writer, or says why no writer can be named.
func (wf writerFacts) summary() string {
	if !wf.listed {
		return " Who wrote is unknown: the snapshots carry no list of writers (the writers part was not collected)."
	}
	span := fmt.Sprintf("from %s before the stall to its end", humanSeconds(wf.lead.Seconds()))
	if len(wf.top) == 0 {
		s := fmt.Sprintf(" No process other than PostgreSQL's own and kernel threads was seen writing %s (%s)", span, humanSeconds(wf.seconds))
		if wf.unreadable > 0 {
			return s + "; the advisor could not see the writers: " + wf.unreadableText() + "."
		}
		return s + "."
	}
	nw := wf.top[0]
	s := fmt.Sprintf(" The writer: pid %d %s (%s) wrote %s %s (%s, %s/s), %s of the bytes written by processes then",
		nw.pid, nw.comm, nw.where(), collector.FormatBytes(nw.bytes), span, humanSeconds(wf.seconds), collector.FormatBytes(wf.rate(nw.bytes)),
		pct(wf.share(nw.bytes)))
	if nw.hasDisk {
		s += fmt.Sprintf(" (its cgroup wrote %s of the device's writes)", pct(min(nw.diskBytes/wf.diskBytes, 1)))
	}
	s += fmt.Sprintf("; PostgreSQL's own processes wrote %s.", collector.FormatBytes(wf.postgresBytes))
	if len(wf.top) > 1 {
		var next []string
		for _, o := range wf.top[1:] {
			next = append(next, fmt.Sprintf("pid %d %s (%s) %s", o.pid, o.comm, o.where(), collector.FormatBytes(o.bytes)))
		}
		s += " Next: " + strings.Join(next, ", ") + "."
	}
	if wf.unreadable > 0 {
		s += " A writer may be missing: " + wf.unreadableText() + "."
	}
	return s
}

// unreadableText says how many processes could not be read, why, and what would show them.
func (wf writerFacts) unreadableText() string {
	what := fmt.Sprintf("%d processes", wf.unreadable)
	if wf.unreadable == 1 {
		what = "1 process"
	}
	s := fmt.Sprintf("the write counters of %s could not be read (%s)", what, cmp.Or(wf.errno, "unknown error"))
	if wf.errno == "EACCES" || wf.errno == "EPERM" {
		s += ": reading another user's /proc/PID/io needs CAP_SYS_PTRACE (docs/http.md, Security)"
	}
	return s
}

// throttle is the advice that limits the first named writer on this host, at half the rate
// the WAL's device wrote during the stall (rules/throttle.go says why half).
func (wf writerFacts) throttle(s StallFacts, hasDevice bool) ThrottleAdvice {
	in := ThrottleInput{Layout: wf.layout, Device: wf.disk, DevicePath: wf.diskPath}
	if hasDevice {
		in.DeviceWriteRate = cmp.Or(s.devRateDuring, s.devPeak)
	}
	if len(wf.top) > 0 {
		nw := wf.top[0]
		in.Unit, in.Cgroup, in.Comm = nw.unit, nw.cgroup, nw.comm
	}
	return Throttle(in)
}
