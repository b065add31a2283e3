package writers

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

const gb = 1 << 30

// fixture is a copy of a testdata tree whose processes' counters a test moves between readings.
type fixture struct {
	t    *testing.T
	root string
	// io is each process's cumulative (write, cancelled) as last written.
	io map[int]ioCounters
}

func newFixture(t *testing.T, tree string) *fixture {
	t.Helper()
	root := t.TempDir()
	src := filepath.Join("testdata", tree)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(root, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, root: root, io: map[int]ioCounters{}}
	for _, pid := range []int{1, 900, 901, 920, 950, 4700, 4711, 6000} {
		f.io[pid] = ioCounters{write: uint64(1000 * pid)}
	}
	return f
}

func (f *fixture) collector(opts Options) *Collector {
	return New(filepath.Join(f.root, "proc"), filepath.Join(f.root, "sys"), opts)
}

// write adds to a process's counters.
func (f *fixture) write(pid int, write, cancelled uint64) {
	f.t.Helper()
	c := f.io[pid]
	c.write += write
	c.cancelled += cancelled
	f.setIO(pid, c)
}

func (f *fixture) setIO(pid int, c ioCounters) {
	f.t.Helper()
	f.io[pid] = c
	text := fmt.Sprintf("rchar: 1\nwchar: %d\nsyscr: 1\nsyscw: 1\nread_bytes: 0\nwrite_bytes: %d\ncancelled_write_bytes: %d\n", c.write, c.write, c.cancelled)
	if err := os.WriteFile(filepath.Join(f.root, "proc", strconv.Itoa(pid), "io"), []byte(text), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// spawn adds a process started after the previous reading.
func (f *fixture) spawn(pid int, comm string, ppid int, start uint64, cgroupFile string, c ioCounters) {
	f.t.Helper()
	dir := filepath.Join(f.root, "proc", strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) R %d %d %d 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 %d 10000000 500\n", pid, comm, ppid, pid, pid, start)
	for name, text := range map[string]string{"comm": comm + "\n", "stat": stat, "cgroup": cgroupFile} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	f.setIO(pid, c)
}

// exit removes a process, as its parent reaps it: the parent's counters take the child's.
func (f *fixture) exit(pid, parent int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, "proc", strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
	c, p := f.io[pid], f.io[parent]
	f.setIO(parent, ioCounters{write: p.write + c.write, cancelled: p.cancelled + c.cancelled})
	delete(f.io, pid)
}

func collect(t *testing.T, c *Collector) *collector.Writers {
	t.Helper()
	w, err := c.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func byPID(w *collector.Writers) map[int]collector.ProcessWrites {
	m := map[int]collector.ProcessWrites{}
	for _, p := range w.Processes {
		m[p.PID] = p
	}
	return m
}

func pids(w *collector.Writers) []int {
	var out []int
	for _, p := range w.Processes {
		out = append(out, p.PID)
	}
	return out
}

// TestWriterCollectFixtures reads each layout's tree twice: the backup's dd, PostgreSQL's
// backend and its archive_command's cp wrote in between; the bash that started dd wrote and
// deleted as much (net 0), rsync nothing, and sshd's counters cannot be read.
func TestWriterCollectFixtures(t *testing.T) {
	const pgPath = "/system.slice/system-postgresql.slice/postgresql@15-main.service"
	for _, tc := range []struct {
		tree                                string
		cgroup, blkio, memory, unit, pgUnit string
		cgroups                             []collector.CgroupWrites
	}{
		{tree: "v2", cgroup: "/system.slice/backup.service", unit: "backup.service", pgUnit: "postgresql@15-main.service",
			cgroups: []collector.CgroupWrites{
				{Hierarchy: "v2", Path: "/system.slice/backup.service", Unit: "backup.service",
					Devices: []collector.DeviceWrites{{Device: "8:0", WriteBytes: 4096}, {Device: "254:0", WriteBytes: 3145728000}}},
				{Hierarchy: "v2", Path: pgPath, Unit: "postgresql@15-main.service", Devices: []collector.DeviceWrites{{Device: "254:0", WriteBytes: 52428800}}},
			}},
		{tree: "v1", blkio: "/system.slice/backup.service", memory: "/system.slice/backup.service",
			unit: "backup.service", pgUnit: "postgresql@15-main.service",
			cgroups: []collector.CgroupWrites{{Hierarchy: "blkio", Path: "/system.slice/backup.service", Unit: "backup.service",
				Devices: []collector.DeviceWrites{{Device: "254:0", WriteBytes: 1048576}}}}},
		{tree: "hybrid", cgroup: "/system.slice/backup.service", blkio: "/system.slice/backup.service", memory: "/system.slice/backup.service",
			unit: "backup.service", pgUnit: "postgresql@15-main.service",
			cgroups: []collector.CgroupWrites{{Hierarchy: "blkio", Path: "/system.slice/backup.service", Unit: "backup.service",
				Devices: []collector.DeviceWrites{{Device: "254:0", WriteBytes: 0}}}}},
		{tree: "none", cgroup: "/"},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			f := newFixture(t, tc.tree)
			c := f.collector(Options{})
			base := collect(t, c)
			if len(base.Processes) != 0 || base.IntervalSeconds != 0 || base.Seen != 9 || base.Read != 8 {
				t.Fatalf("baseline: %d processes, interval %v, seen %d, read %d; want none, 0, 9, 8",
					len(base.Processes), base.IntervalSeconds, base.Seen, base.Read)
			}
			f.write(4711, 2900<<20, 0)
			f.write(901, 50<<20, 0)
			f.write(950, 16<<20, 0)
			f.write(4700, 4096, 4096)
			w := collect(t, c)
			if got, want := pids(w), []int{4711, 901, 950}; !slices.Equal(got, want) {
				t.Fatalf("writers %v, want %v (the most bytes first, net 0 left out)", got, want)
			}
			dd := w.Processes[0]
			want := collector.ProcessWrites{PID: 4711, PPID: 4700, Comm: "dd", WriteBytes: 2900 << 20, NetWriteBytes: 2900 << 20,
				Cgroup: tc.cgroup, BlkioCgroup: tc.blkio, MemoryCgroup: tc.memory, Unit: tc.unit}
			if dd != want {
				t.Errorf("dd = %+v\nwant %+v", dd, want)
			}
			procs := byPID(w)
			for _, pid := range []int{901, 950} {
				if p := procs[pid]; p.Postmaster != 900 || p.Unit != tc.pgUnit {
					t.Errorf("pid %d %s: postmaster %d, unit %q; want 900 (PostgreSQL's own), %q", pid, p.Comm, p.Postmaster, p.Unit, tc.pgUnit)
				}
			}
			if !slices.Equal(w.Postmasters, []int{900}) {
				t.Errorf("postmasters %v, want [900]", w.Postmasters)
			}
			if w.NetWriteBytes != (2900+50+16)<<20 {
				t.Errorf("net write bytes %d, want %d", w.NetWriteBytes, (2900+50+16)<<20)
			}
			if w.Unreadable != 1 || w.UnreadableErrno != "EISDIR" || len(w.Notes) == 0 {
				t.Errorf("unreadable %d (%s), notes %q; want sshd's 1 (EISDIR) said in a note", w.Unreadable, w.UnreadableErrno, w.Notes)
			}
			if !cgroupsEqual(w.Cgroups, tc.cgroups) {
				t.Errorf("cgroups %+v\nwant %+v", w.Cgroups, tc.cgroups)
			}
		})
	}
}

func cgroupsEqual(a, b []collector.CgroupWrites) bool {
	return slices.EqualFunc(a, b, func(x, y collector.CgroupWrites) bool {
		return x.Hierarchy == y.Hierarchy && x.Path == y.Path && x.Unit == y.Unit && slices.Equal(x.Devices, y.Devices)
	})
}

// TestWriterReapedChildNotCountedTwice: dd is seen writing, then ends and bash reaps it, which
// adds dd's counters to bash's. Only what dd wrote after its last reading is new.
func TestWriterReapedChildNotCountedTwice(t *testing.T) {
	f := newFixture(t, "v2")
	c := f.collector(Options{})
	collect(t, c)
	f.write(4711, 1*gb, 0)
	if w := collect(t, c); w.NetWriteBytes != gb || byPID(w)[4711].NetWriteBytes != gb {
		t.Fatalf("dd: %+v", w.Processes)
	}
	f.write(4711, gb/2, 0) // written after the last reading, unseen before dd ends
	f.exit(4711, 4700)
	w := collect(t, c)
	if w.NetWriteBytes != gb/2 {
		t.Errorf("after dd ended: net %d bytes, want %d (only what dd wrote since its last reading)", w.NetWriteBytes, gb/2)
	}
	if got := byPID(w)[4700].NetWriteBytes; got != gb/2 {
		t.Errorf("bash (which reaped dd) wrote %d, want %d", got, gb/2)
	}
	// Nothing is taken off bash's later writes.
	f.write(4700, 4096, 0)
	if got := byPID(collect(t, c))[4700].NetWriteBytes; got != 4096 {
		t.Errorf("bash's next interval: %d, want 4096", got)
	}
}

// TestWriterReusedPID: a pid whose counters went back, or whose start time changed, is a new
// process: all its counters are new writes.
func TestWriterReusedPID(t *testing.T) {
	f := newFixture(t, "v2")
	c := f.collector(Options{})
	collect(t, c)
	f.setIO(6000, ioCounters{write: 4096})
	if got := byPID(collect(t, c))[6000].NetWriteBytes; got != 4096 {
		t.Errorf("counters went back: %d bytes, want 4096 (a new process's all)", got)
	}
	f.spawn(6000, "tar", 1, 99999, "0::/system.slice/tar.service\n", ioCounters{write: 3 * gb})
	w := collect(t, c)
	if p := byPID(w)[6000]; p.NetWriteBytes != 3*gb || p.Comm != "tar" {
		t.Errorf("new process under pid 6000: %+v; want tar with 3 GiB", p)
	}
}

// TestWriterCap: with more processes than the cap, a new process and the last writers are read
// first; the others wait their turn, and the skipped are counted.
func TestWriterCap(t *testing.T) {
	f := newFixture(t, "v2")
	c := f.collector(Options{MaxProcesses: 3, MaxListed: 1})
	if w := collect(t, c); w.Read+w.Unreadable != 3 || w.Skipped != 6 {
		t.Fatalf("read %d + unreadable %d, skipped %d; want 3 and 6", w.Read, w.Unreadable, w.Skipped)
	}
	f.spawn(7000, "pg_basebackup", 1, 99999, "0::/user.slice/user-1000.slice/session-3.scope\n", ioCounters{write: 2 * gb})
	w := collect(t, c)
	if got := pids(w); !slices.Equal(got, []int{7000}) {
		t.Fatalf("writers %v, want the new pg_basebackup read first", got)
	}
	if w.Skipped != 7 {
		t.Errorf("skipped %d, want 7", w.Skipped)
	}
	// Every process is read in turn: once each has a baseline, dd's writes show when its turn
	// comes, and none are lost or counted twice.
	for range 4 {
		collect(t, c)
	}
	f.write(4711, gb, 0)
	f.write(7000, gb, 0)
	var dd, bb uint64
	for range 4 {
		w := collect(t, c)
		dd += byPID(w)[4711].NetWriteBytes
		bb += byPID(w)[7000].NetWriteBytes
		if p := byPID(w); len(p) == 0 && w.OtherProcesses > 0 {
			t.Errorf("%d writers beyond the list, none listed", w.OtherProcesses)
		}
	}
	if dd != gb || bb != gb {
		t.Errorf("over 4 readings dd wrote %d and pg_basebackup %d, want %d each", dd, bb, gb)
	}
}

// TestWriterKnownPostmaster: a postmaster whose binary has another name is told by its pid.
func TestWriterKnownPostmaster(t *testing.T) {
	f := newFixture(t, "v2")
	f.spawn(8000, "pg-server", 1, 5000, "0::/system.slice/pg.service\n", ioCounters{})
	f.spawn(8001, "pg-server", 8000, 5001, "0::/system.slice/pg.service\n", ioCounters{})
	for _, tc := range []struct {
		known, want int
	}{{0, 0}, {8000, 8000}} {
		c := f.collector(Options{Postmaster: tc.known})
		collect(t, c)
		f.write(8001, 1<<20, 0)
		if p := byPID(collect(t, c))[8001]; p.Postmaster != tc.want {
			t.Errorf("known postmaster %d: pid 8001's postmaster %d, want %d", tc.known, p.Postmaster, tc.want)
		}
	}
}

// TestWriterProcfsMissing: without a process list the part fails, naming the flag to check.
func TestWriterProcfsMissing(t *testing.T) {
	_, err := New(filepath.Join(t.TempDir(), "nothing"), t.TempDir(), Options{}).Collect(context.Background())
	if err == nil {
		t.Fatal("no error without a procfs")
	}
	t.Log(err)
}
