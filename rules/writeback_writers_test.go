package rules

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// The neighbour() history's stall covers the intervals ending at snapshots 20 to 23 (t0+95s to
// t0+115s); with the kernel's 30 s of dirty expiry the writers' span starts after t0+65s: the
// intervals ending at snapshots 14 to 23.

// dd is the neighbour: 400MB per 5 s interval from snapshot 15 to 24, in backup.service.
func dd(i int) []collector.ProcessWrites {
	if i < 15 || i > 24 {
		return nil
	}
	return []collector.ProcessWrites{{PID: 4711, PPID: 1, Comm: "dd", NetWriteBytes: 400e6, WriteBytes: 400e6,
		Cgroup: "/system.slice/backup.service", BlkioCgroup: "/system.slice/backup.service", Unit: "backup.service"}}
}

// checkpointer is PostgreSQL's own writer: more than dd in every interval.
func checkpointer(i int) []collector.ProcessWrites {
	return []collector.ProcessWrites{{PID: 201, PPID: 200, Comm: "postgres", NetWriteBytes: 500e6, WriteBytes: 500e6,
		Cgroup: "/system.slice/postgresql.service", Unit: "postgresql.service", Postmaster: 200}}
}

// loopWorker is the loop device's kernel thread, which writes what the loop's users wrote.
func loopWorker(int) []collector.ProcessWrites {
	return []collector.ProcessWrites{{PID: 90, PPID: 2, Comm: "loop3", KernelThread: true, NetWriteBytes: 900e6, WriteBytes: 900e6, Cgroup: "/"}}
}

// early wrote only well before the stall (the interval ending at snapshot 5).
func early(i int) []collector.ProcessWrites {
	if i != 5 {
		return nil
	}
	return []collector.ProcessWrites{{PID: 3000, PPID: 1, Comm: "tar", NetWriteBytes: 9e9, WriteBytes: 9e9, Cgroup: "/user.slice"}}
}

// writersFixture attaches a writer list to each snapshot of the neighbour history after the
// first (the collector's baseline lists none), with the processes the given functions return.
type writersFixture struct {
	layout     collector.CgroupLayout
	procs      []func(int) []collector.ProcessWrites
	unreadable int
	errno      string
	expire     int64 // vm.dirty_expire_centisecs; 0: the kernel's 3000
	// ioStat gives dd's cgroup io.stat counters on the WAL's disk (7:3): 95% of the device's.
	ioStat bool
	none   bool // no writer lists at all
}

func (wf writersFixture) input() Input {
	sc := neighbour()
	sc.storage = loopStorage()
	sc.storage.Disks = []collector.Disk{{Name: "loop3"}}
	if wf.expire > 0 {
		sc.kernel = func(k *collector.Kernel) { k.VM.DirtyExpireCentisecs = wf.expire }
	}
	in := sc.input()
	if wf.none {
		return in
	}
	var ddCgroup uint64
	for i := 1; i < in.History.Len(); i++ {
		w := &collector.Writers{IntervalSeconds: 5, Layout: wf.layout, Unreadable: wf.unreadable, UnreadableErrno: wf.errno}
		for _, f := range wf.procs {
			for _, p := range f(i) {
				w.Processes = append(w.Processes, p)
				w.NetWriteBytes += p.NetWriteBytes
			}
		}
		if wf.ioStat {
			ddCgroup += uint64(0.95 * 80e6 * 5)
			w.Cgroups = []collector.CgroupWrites{{Hierarchy: collector.HierarchyV2, Path: "/system.slice/backup.service",
				Unit: "backup.service", Devices: []collector.DeviceWrites{{Device: "7:3", WriteBytes: ddCgroup}}}}
		}
		in.History.snaps[i].Writers = w
	}
	return in
}

func TestWritebackWriters(t *testing.T) {
	v2NoSystemd := layoutV2
	v2NoSystemd.Systemd = false
	const ddLabels = `{pid="4711",comm="dd",unit="backup.service"}`
	for _, tc := range []struct {
		name string
		fx   writersFixture
		// says and evidence are what the summary must say and the evidence names it must hold;
		// never what neither may mention.
		says, evidence, never []string
	}{
		{"writer named, v2 with a systemd unit",
			writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{dd}, ioStat: true},
			[]string{"The writer: pid 4711 dd (backup.service) wrote 3.4GB from 30s before the stall to its end (50s, 69MB/s)",
				"100% of the bytes written by processes", "its cgroup wrote 95% of the device's writes",
				`systemctl set-property --runtime backup.service IOWriteBandwidthMax="/dev/loop3 38M"`, "half the 76MB/s"},
			[]string{"writer_bytes" + ddLabels, "writer_write_rate" + ddLabels, "writer_share_of_process_writes" + ddLabels,
				"writer_cgroup_share_of_device_writes" + ddLabels, "writers_span_seconds", "postgres_write_bytes"},
			nil},
		{"v2 without systemd: the io.max line",
			writersFixture{layout: v2NoSystemd, procs: []func(int) []collector.ProcessWrites{dd}},
			[]string{`echo "7:3 wbps=40000000" > /sys/fs/cgroup/system.slice/backup.service/io.max`}, nil,
			[]string{"systemctl"}},
		{"v1: blkio cannot throttle write-back, dd's own limit",
			writersFixture{layout: layoutV1, procs: []func(int) []collector.ProcessWrites{dd}},
			[]string{"pid 4711 dd (backup.service)", "cgroups are v1", "blkio.throttle limits only direct and synchronous writes",
				"dd oflag=direct", "pv -L 38M"}, nil,
			[]string{"io.max", "systemctl"}},
		{"hybrid: blkio cannot throttle write-back, dd's own limit",
			writersFixture{layout: layoutHybrid, procs: []func(int) []collector.ProcessWrites{dd}},
			[]string{"cgroups are hybrid", "blkio.throttle limits only direct and synchronous writes", "dd oflag=direct"}, nil,
			[]string{"io.max", "systemctl"}},
		{"PostgreSQL's own processes are not named",
			writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{checkpointer, dd}},
			[]string{"pid 4711 dd (backup.service) wrote 3.4GB", "PostgreSQL's own processes wrote 4.7GB",
				"systemctl set-property --runtime backup.service"},
			[]string{"writer_bytes" + ddLabels},
			[]string{`comm="postgres"`, "pid 201", "postgresql.service"}},
		{"a kernel thread is not named",
			writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{loopWorker, dd}},
			[]string{"pid 4711 dd (backup.service)"}, []string{"writer_bytes" + ddLabels},
			[]string{"loop3 (", `comm="loop3"`}},
		{"only PostgreSQL and the kernel wrote",
			writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{checkpointer, loopWorker}},
			[]string{"No process other than PostgreSQL's own and kernel threads was seen writing"}, []string{"postgres_write_bytes"},
			[]string{"writer_bytes", "systemctl"}},
		{"writers unseen: EACCES",
			writersFixture{layout: layoutHybrid, procs: []func(int) []collector.ProcessWrites{checkpointer}, unreadable: 12, errno: "EACCES"},
			[]string{"the advisor could not see the writers", "12 processes could not be read (EACCES)", "CAP_SYS_PTRACE",
				"docs/http.md, Security"},
			[]string{"writers_unreadable"}, []string{"writer_bytes"}},
		{"no writer lists",
			writersFixture{none: true},
			[]string{"Who wrote is unknown"}, []string{"writers_listed"}, []string{"writer_bytes"}},
		{"the span reaches back by dirty expiry only",
			writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{early, dd}},
			[]string{"pid 4711 dd"}, nil, []string{"tar", "Next:"}},
		{"a longer dirty expiry reaches the earlier writer",
			writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{early, dd}, expire: 30000},
			[]string{"pid 3000 tar (cgroup /user.slice) wrote 8.4GB from 5m0s before", "Next: pid 4711 dd (backup.service) 3.4GB"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := WritebackStallsWAL(nil).Eval(tc.fx.input())
			if len(res.Findings) != 1 {
				t.Fatalf("got %d findings (not enough data: %q), want the advice", len(res.Findings), res.NotEnoughData)
			}
			f := res.Findings[0]
			names := map[string]bool{}
			for _, e := range f.Evidence {
				names[e.Name] = true
			}
			for _, s := range tc.says {
				if !strings.Contains(f.Summary, s) {
					t.Errorf("summary does not say %q:\n%s", s, f.Summary)
				}
			}
			for _, n := range tc.evidence {
				if !names[n] {
					t.Errorf("no evidence %s in %v", n, f.Evidence)
				}
			}
			for _, s := range tc.never {
				if strings.Contains(f.Summary, s) {
					t.Errorf("summary says %q:\n%s", s, f.Summary)
				}
				for n := range names {
					if strings.Contains(n, s) {
						t.Errorf("evidence %s mentions %q", n, s)
					}
				}
			}
			if _, err := json.Marshal(f); err != nil {
				t.Errorf("the finding does not encode: %v", err)
			}
		})
	}
}

// TestWritebackWritersSums: a writer's rows sum its intervals in the span by pid and name, and
// its share and rate are of the span's process bytes and seconds.
func TestWritebackWritersSums(t *testing.T) {
	res := WritebackStallsWAL(nil).Eval(writersFixture{layout: layoutV2, procs: []func(int) []collector.ProcessWrites{checkpointer, dd}}.input())
	if len(res.Findings) != 1 {
		t.Fatalf("got %d findings, want 1", len(res.Findings))
	}
	const l = `{pid="4711",comm="dd",unit="backup.service"}`
	want := map[string]float64{
		"writers_span_seconds": 50, "process_write_bytes": 10*500e6 + 9*400e6, "postgres_write_bytes": 10 * 500e6,
		"writer_bytes" + l: 9 * 400e6, "writer_write_rate" + l: 9 * 400e6 / 50, "writer_share_of_process_writes" + l: 3.6e9 / 8.6e9,
	}
	got := map[string]float64{}
	for _, e := range res.Findings[0].Evidence {
		got[e.Name] = e.Value
	}
	for n, w := range want {
		if g, ok := got[n]; !ok || g < w*0.999 || g > w*1.001 {
			t.Errorf("%s = %v (present %v), want %v", n, g, ok, w)
		}
	}
}

// TestWritebackWritersQuotesNames: a process names itself (prctl PR_SET_NAME), so its name
// reaches the evidence as one quoted label value and the finding still encodes.
func TestWritebackWritersQuotesNames(t *testing.T) {
	evil := func(i int) []collector.ProcessWrites {
		return []collector.ProcessWrites{{PID: 66, Comm: "x\",pid=\"1\n\xff", NetWriteBytes: 1e9, Cgroup: "/a\"b"}}
	}
	res := WritebackStallsWAL(nil).Eval(writersFixture{layout: layoutHybrid, procs: []func(int) []collector.ProcessWrites{evil}}.input())
	if len(res.Findings) != 1 {
		t.Fatalf("got %d findings, want 1", len(res.Findings))
	}
	const want = `writer_bytes{pid="66",comm="x\",pid=\"1\n\xff",cgroup="/a\"b"}`
	found := false
	for _, e := range res.Findings[0].Evidence {
		found = found || e.Name == want
		if strings.HasPrefix(e.Name, "writer_bytes") && e.Name != want {
			t.Errorf("evidence name %s, want %s", e.Name, want)
		}
	}
	if !found {
		t.Errorf("no evidence %s in %v", want, res.Findings[0].Evidence)
	}
	if _, err := json.Marshal(res.Findings[0]); err != nil {
		t.Error(err)
	}
}
