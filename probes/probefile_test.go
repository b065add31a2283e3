package probes

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// deadPID returns the PID of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	return cmd.Process.Pid
}

func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := write(filePrefix + strconv.Itoa(deadPID(t)) + "-0000abcd")
	// Our own PID and young: a process that has just created its file and not yet locked it.
	young := write(filePrefix + strconv.Itoa(os.Getpid()) + "-0000abce")
	other := write(filePrefix + "notapid-0000abcd")
	foreign := write("unrelated-file")
	d := openDir(t, dir)
	live, err := createProbeFile(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer live.remove()
	// A live file whose PID looks dead is still kept: the lock is what counts.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(live.path, old, old); err != nil {
		t.Fatal(err)
	}

	removed, err := d.removeLeftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != dead {
		t.Errorf("removed %v, want only %s", removed, dead)
	}
	for _, p := range []string{young, other, foreign, live.path} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v, want it kept", p, err)
		}
	}
}

func TestProbeFilePID(t *testing.T) {
	tests := []struct {
		name string
		pid  int
		ok   bool
	}{
		{filePrefix + "123-0badf00d", 123, true},
		{filePrefix + "123-0badf00", 0, false},
		{filePrefix + "123-0badf00g", 0, false},
		{filePrefix + "-0badf00d", 0, false},
		{filePrefix + "0-0badf00d", 0, false},
		{"x" + filePrefix + "123-0badf00d", 0, false},
	}
	for _, tt := range tests {
		pid, ok := probeFilePID(tt.name)
		if pid != tt.pid || ok != tt.ok {
			t.Errorf("probeFilePID(%q) = %d, %v; want %d, %v", tt.name, pid, ok, tt.pid, tt.ok)
		}
	}
}

// TestSchedulerDropsFileWhenFull fills a real tmpfs while the scheduler runs: before the next
// burst the file is dropped, probing pauses with a reason, and nothing is left.
func TestSchedulerDropsFileWhenFull(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root")
	}
	dir := mountTmpfs(t, "size=96m")
	s, err := NewScheduler(SchedulerConfig{
		Probe:    Config{Dir: dir, MinFreeBytes: 32 << 20},
		Burst:    MinDuration,
		Interval: MinDuration + 200*time.Millisecond,
	}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for s.Latest() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(probeFiles(t, dir)); n != 1 {
		t.Errorf("%d probe files while probing, want 1", n)
	}
	// Fill the file system to a few MB free: below the headroom with the file in place.
	fill := filepath.Join(dir, "filler")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		t.Fatal(err)
	}
	free := int64(sfs.Bavail) * sfs.Bsize
	if err := unix.Fallocate(int(f.Fd()), 0, 0, free-(4<<20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for s.Refused() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	assertNoProbeFile(t, dir)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	assertNoProbeFile(t, dir)
	os.Remove(fill)
}

// TestProbeDirSuggestion: a probe directory on another file system than the WAL is refused with
// a directory to create at the top of the WAL's file system and the commands (issue 35).
func TestProbeDirSuggestion(t *testing.T) {
	wal := filepath.Join(t.TempDir(), "data", "pg_wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(wal, &st); err != nil {
		t.Fatal(err)
	}
	got := probeDirSuggestion(wal, st.Dev)
	var pkg unix.Stat_t
	if unix.Stat(packageProbeDir, &pkg) == nil && pkg.Dev == st.Dev {
		if !strings.Contains(got, "--probe.dir="+packageProbeDir) {
			t.Errorf("probeDirSuggestion = %q, want the package's directory, which is on the WAL's file system", got)
		}
		return
	}
	if !strings.Contains(got, "install -d -o pgwal-advisor -g pgwal-advisor -m 0770 ") || !strings.Contains(got, "pgwal-advisor-probe") ||
		strings.Contains(got, filepath.Dir(wal)+"/") {
		t.Errorf("probeDirSuggestion = %q, want a directory outside the data directory and the command that makes it", got)
	}
}
