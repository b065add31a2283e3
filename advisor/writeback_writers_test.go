package advisor

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// ddNeighbour is the neighbour as a process of its own: dd writing what it reads from its
// stdin into a file through the page cache (no sync), in a cgroup v2 of its own where the test
// can make one. Its stdin stays open until Stop, so that dd is alive at every snapshot and its
// bytes stay its own: a process that ends has its counters added to its parent's (proc(5)).
type ddNeighbour struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	pid    int
	cgroup string // dd's cgroup v2 path as /proc/PID/cgroup shows it
	made   string // the cgroup directory the test made, removed by Stop
	stderr bytes.Buffer
}

// startDD starts dd writing into path; Write feeds it.
func startDD(t *testing.T, path string) *ddNeighbour {
	t.Helper()
	n := &ddNeighbour{}
	if mnt := cgroup2Mount(); mnt != "" {
		dir := filepath.Join(mnt, fmt.Sprintf("neighbour-dd-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Logf("dd stays in the test's cgroup: %v", err)
		} else {
			n.made = dir
		}
	}
	script := `exec dd of="$2" bs=1M iflag=fullblock status=none`
	if n.made != "" {
		script = `echo $$ > "$1/cgroup.procs" && ` + script
	}
	n.cmd = exec.Command("sh", "-c", script, "sh", n.made, path)
	n.cmd.Stderr = &n.stderr
	var err error
	if n.stdin, err = n.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		n.removeCgroup(t)
		t.Fatalf("start dd: %v", err)
	}
	n.pid = n.cmd.Process.Pid
	t.Cleanup(func() { n.Stop(t) })
	// sh moves itself into the cgroup, then becomes dd: wait for the exec.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n.pid)); strings.TrimSpace(string(comm)) == "dd" {
			n.cgroup = v2Path(t, n.pid)
			return n
		}
	}
	t.Fatalf("pid %d did not become dd: %s", n.pid, n.stderr.String())
	return nil
}

// Write feeds dd size bytes.
func (n *ddNeighbour) Write(size int) error {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for written := 0; written < size; written += len(buf) {
		if _, err := n.stdin.Write(buf); err != nil {
			return fmt.Errorf("feed dd: %w: %s", err, n.stderr.String())
		}
	}
	return nil
}

// Stop closes dd's stdin, waits for it to end and removes its cgroup; safe to call twice.
func (n *ddNeighbour) Stop(t *testing.T) {
	if n.cmd == nil {
		return
	}
	n.stdin.Close()
	if err := n.cmd.Wait(); err != nil {
		t.Errorf("dd: %v: %s", err, n.stderr.String())
	}
	n.cmd = nil
	n.removeCgroup(t)
}

func (n *ddNeighbour) removeCgroup(t *testing.T) {
	if n.made == "" {
		return
	}
	if err := os.Remove(n.made); err != nil {
		t.Errorf("remove dd's cgroup: %v", err)
	}
	n.made = ""
}

// cgroup2Mount is where the unified hierarchy is mounted: beside v1 (hybrid) or alone.
func cgroup2Mount() string {
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.subtree_control")); err == nil {
			return d
		}
	}
	return ""
}

// v2Path is pid's cgroup v2 path (the "0::" line of /proc/PID/cgroup).
func v2Path(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p
		}
	}
	return ""
}

// assertWriterNamed checks that writeback-stalls-wal names dd (pid, name, cgroup) in its
// summary and evidence, names none of PostgreSQL's processes, and gives the throttle that
// works on this host's cgroup layout.
func assertWriterNamed(t *testing.T, f rules.Finding, dd *ddNeighbour, h *rules.History) {
	t.Helper()
	where := "cgroup " + dd.cgroup
	if dd.cgroup == "" {
		where = ""
	}
	// On a quiet host dd is the first writer. Where other test binaries write beside it (the
	// suite runs packages in parallel) one of them can write more in the window, and is then
	// rightly named first: dd must still be among the named writers.
	first := strings.Contains(f.Summary, fmt.Sprintf("The writer: pid %d dd (%s", dd.pid, where))
	if s := fmt.Sprintf("pid %d dd (%s", dd.pid, where); !strings.Contains(f.Summary, s) {
		t.Errorf("the summary does not name dd as %q:\n%s", s, f.Summary)
	}
	label := fmt.Sprintf(`writer_bytes{pid="%d",comm="dd"`, dd.pid)
	if dd.made != "" {
		label += `,cgroup=` + strconv.Quote(dd.cgroup) + "}"
	}
	named := false
	for _, e := range f.Evidence {
		named = named || strings.HasPrefix(e.Name, label) && e.Value > 0
		if strings.HasPrefix(e.Name, "writer_") && strings.Contains(e.Name, `comm="postgres"`) {
			t.Errorf("PostgreSQL's own process named as a writer: %s", e.Name)
		}
	}
	if !named {
		t.Errorf("no evidence %s... in %v", label, f.Evidence)
	}
	if strings.Contains(f.Summary, " postgres (") {
		t.Errorf("the summary names a postgres process as a writer:\n%s", f.Summary)
	}
	var layout collector.CgroupLayout
	if last, ok := h.Latest(); ok && last.Writers != nil {
		layout = last.Writers.Layout
	}
	var want []string
	switch {
	case layout.WritebackThrottle():
		want = []string{"wbps="} // dd's cgroup names no unit: the io.max line
	case layout.Version == collector.CgroupHybrid:
		want = []string{"hybrid", "blkio.throttle limits only direct and synchronous writes"}
	}
	if first && !layout.WritebackThrottle() {
		want = append(want, "dd oflag=direct") // the advice is for the first writer's own limit
	}
	t.Logf("cgroup layout %s", layout.Version)
	for _, s := range want {
		if !strings.Contains(f.Summary, s) {
			t.Errorf("the %s layout's advice lacks %q:\n%s", layout.Version, s, f.Summary)
		}
	}
}
