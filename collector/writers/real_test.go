package writers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// asNobodyEnv makes the test binary, run again as nobody, collect twice from /proc and print
// the second reading as JSON instead of running the tests (TestWriterUnreadableAsNobody).
const asNobodyEnv = "PGWAL_WRITERS_AS_NOBODY"

func TestMain(m *testing.M) {
	if os.Getenv(asNobodyEnv) == "1" {
		c := New("/proc", "/sys", Options{})
		var w *collector.Writers
		var err error
		for range 2 {
			if w, err = c.Collect(context.Background()); err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(3)
			}
		}
		if err := json.NewEncoder(os.Stdout).Encode(w); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// bufferedWriter is a real dd writing through the page cache. It reads zeros from a pipe the
// test holds open, so that it stays alive, and its counters stay its own, until the test
// closes the pipe (once reaped, a child's counters are added to its parent's).
type bufferedWriter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	file  string
}

// startWriter starts dd writing size bytes into a file in dir and returns once they were
// written (the file has them, so every write(2) returned).
func startWriter(t *testing.T, dir string, size int64) *bufferedWriter {
	t.Helper()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is on tmpfs, whose writes /proc/PID/io does not count: set TMPDIR to a disk", dir)
	}
	w := &bufferedWriter{file: filepath.Join(dir, "dd.out")}
	w.cmd = exec.Command("dd", "of="+w.file, "bs=1M")
	stdin, err := w.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.stdin = stdin
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("start dd: %v", err)
	}
	t.Cleanup(w.stop)
	zeros := make([]byte, 1<<20)
	for n := int64(0); n < size; n += int64(len(zeros)) {
		if _, err := stdin.Write(zeros); err != nil {
			t.Fatalf("feed dd: %v", err)
		}
	}
	// dd has read the last MiB when the write above returns, not yet written it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if fi, err := os.Stat(w.file); err == nil && fi.Size() >= size {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("dd did not write %d bytes within a minute", size)
		}
	}
}

func (w *bufferedWriter) stop() {
	if w.stdin != nil {
		w.stdin.Close()
		w.stdin = nil
		_ = w.cmd.Wait()
	}
}

// TestWriterRealProcess finds a real buffered writer between two readings of this machine's
// /proc: its pid, comm, cgroups as the kernel reports them, and at least the bytes it wrote.
func TestWriterRealProcess(t *testing.T) {
	const size = 200 << 20
	c := New("/proc", "/sys", Options{})
	collect(t, c)
	dd := startWriter(t, t.TempDir(), size)
	w := collect(t, c)
	p, ok := byPID(w)[dd.cmd.Process.Pid]
	if !ok {
		t.Fatalf("dd (pid %d) not among the writers %+v", dd.cmd.Process.Pid, w.Processes)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cg := parseCgroup(b)
	if p.Comm != "dd" || p.NetWriteBytes < size || p.PPID != os.Getpid() || p.Postmaster != 0 || p.KernelThread ||
		p.Cgroup != cg.v2 || p.BlkioCgroup != cg.blkio || p.MemoryCgroup != cg.memory {
		t.Errorf("dd = %+v; want comm dd, at least %d bytes, parent %d, not PostgreSQL's, cgroups %+v", p, size, os.Getpid(), cg)
	}
	if w.Processes[0].PID != p.PID {
		t.Logf("dd is not the first writer: %+v", w.Processes[0])
	}
	t.Logf("dd: %+v; layout %+v", p, w.Layout)
	// kthreadd (pid 2) is the kernel's thread of threads.
	if b, err := os.ReadFile("/proc/2/stat"); err == nil {
		if st, err := parseStat(b); err != nil || !st.kthread {
			t.Errorf("pid 2 %+v, %v: want a kernel thread", st, err)
		}
	}
}

// TestWriterRealPostgres tells a throwaway cluster's backend, which writes WAL and a table,
// from a real dd beside it: the backend is PostgreSQL's own, under the cluster's postmaster.
func TestWriterRealPostgres(t *testing.T) {
	cl := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()
	conn, err := cl.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	postmaster := postmasterPID(t, cl.DataDir())

	c := New("/proc", "/sys", Options{})
	collect(t, c)
	if _, err := conn.Exec(ctx, "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 200000) g"); err != nil {
		t.Fatal(err)
	}
	dd := startWriter(t, t.TempDir(), 64<<20)
	w := collect(t, c)
	procs := byPID(w)
	if p, ok := procs[backend]; !ok || p.Postmaster != postmaster || p.Comm != "postgres" {
		t.Errorf("backend %d: %+v (listed %v); want comm postgres under postmaster %d", backend, p, ok, postmaster)
	}
	if p, ok := procs[dd.cmd.Process.Pid]; !ok || p.Postmaster != 0 {
		t.Errorf("dd %d: %+v (listed %v); want listed, not PostgreSQL's", dd.cmd.Process.Pid, p, ok)
	}
	for _, p := range w.Processes {
		if p.Comm == "postgres" && p.Postmaster == 0 {
			t.Errorf("postgres process %d not told as PostgreSQL's: %+v", p.PID, p)
		}
	}
	t.Logf("writers: %+v", w.Processes)
}

// postmasterPID reads the first line of the data directory's postmaster.pid.
func postmasterPID(t *testing.T, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestWriterUnreadableAsNobody runs the collector as nobody (uid 65534), without
// CAP_SYS_PTRACE: the other users' processes (this test's, root's) cannot be read, and the
// reading says how many and why, instead of listing no writer as if none wrote.
func TestWriterUnreadableAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process as nobody")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private to root: nobody runs a copy.
	bin := filepath.Join(lab.SharedTempDir(t, ""), "writers.test")
	copyFile(t, self, bin)
	cmd := exec.Command(bin)
	cmd.Env = []string{asNobodyEnv + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("collector as nobody: %v: %s", err, ee.Stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
	var w collector.Writers
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if w.Unreadable == 0 || w.UnreadableErrno != "EACCES" || !strings.Contains(strings.Join(w.Notes, " "), "CAP_SYS_PTRACE") {
		t.Errorf("as nobody: %d unreadable (%s), notes %q; want root's processes unreadable (EACCES) and a note naming CAP_SYS_PTRACE",
			w.Unreadable, w.UnreadableErrno, w.Notes)
	}
	t.Logf("as nobody: seen %d, read %d, unreadable %d (%s)", w.Seen, w.Read, w.Unreadable, w.UnreadableErrno)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
