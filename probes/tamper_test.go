package probes

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The attacker of these tests is a real second user, nobody (uid and gid 65534), who can write
// the probe directory and swaps the probe file for a symbolic link to a file only root may
// read and write.
const nobodyID = 65534

// requireNobody skips unless the test runs as root (to run a process as nobody and to create
// files nobody cannot touch) and the nobody user exists.
func requireNobody(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running a process as another user needs root")
	}
	if err := exec.Command("id", "-u", "nobody").Run(); err != nil {
		t.Skip("no user nobody here")
	}
}

// asNobody runs a shell script as nobody and returns its combined output and error.
func asNobody(t *testing.T, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyID, Gid: nobodyID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// swapForSymlink is the attack: remove the probe file and put a link to target in its place.
const swapForSymlink = `rm -f "$1" && ln -s "$2" "$1"`

// rootOnlyFile creates a file only root can read or write, in a directory only root can enter,
// and returns its path and content.
func rootOnlyFile(t *testing.T) (string, string) {
	t.Helper()
	const content = "root's own data: the probe must never write here\n"
	path := filepath.Join(t.TempDir(), "root-only")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

// sharedDir returns a probe directory with mode and owner uid:gid, in a directory every user
// can enter; it is removed with whatever is left in it when the test ends.
func sharedDir(t *testing.T, mode os.FileMode, uid, gid int) string {
	t.Helper()
	base, err := os.MkdirTemp("", "probes-tamper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "probe")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func assertUnchanged(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("root's file %s was written through the swapped name: %d bytes now, starting %q", path, len(got), got[:min(len(got), 32)])
	}
}

// TestSchedulerProbeFileSwappedForSymlink: between two bursts of the daemon's scheduler, nobody
// (the owner of the probe directory) removes the probe file and puts a symbolic link to a file
// of root's in its place. The next bursts must not write through the link: the scheduler sees
// on its own descriptor that the file was removed, says so, leaves the link alone and probes
// on in a fresh file.
func TestSchedulerProbeFileSwappedForSymlink(t *testing.T) {
	requireNobody(t)
	dir := sharedDir(t, 0o755, nobodyID, nobodyID)
	target, content := rootOnlyFile(t)
	core, logs := observer.New(zap.InfoLevel)
	s, err := NewScheduler(SchedulerConfig{
		Probe:    Config{Dir: dir, Methods: []string{Fdatasync, OpenDatasync}},
		Burst:    MinDuration,
		Interval: MinDuration + 200*time.Millisecond,
	}, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	bursts := func() int {
		if r := s.Latest(); r != nil {
			return r.Bursts
		}
		return 0
	}
	waitUntil(t, "the first burst", func() bool { return bursts() >= 1 })
	files := probeFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("probe files %v, want one", files)
	}
	swapped := files[0]
	if out, err := asNobody(t, swapForSymlink, swapped, target); err != nil {
		t.Fatalf("the attack failed: %v: %s", err, out)
	}
	after := bursts()
	waitUntil(t, "two bursts after the swap", func() bool { return bursts() >= after+2 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}

	assertUnchanged(t, target, content)
	if n := logs.FilterMessage("probe file changed by someone else; making a fresh one").Len(); n != 1 {
		t.Errorf("%d warnings that the probe file was changed, want 1; logs: %v", n, logs.All())
	}
	// The link is the attacker's: left in place, and the log says why.
	if dest, err := os.Readlink(swapped); err != nil || dest != target {
		t.Errorf("the attacker's link %s: %q, %v; want it left alone", swapped, dest, err)
	}
	if logs.FilterMessage("remove probe file").FilterField(zap.String("path", swapped)).Len() == 0 {
		t.Errorf("nothing logged about the replaced name %s: %v", swapped, logs.All())
	}
	if left := probeFiles(t, dir); len(left) != 1 || left[0] != swapped {
		t.Errorf("left in the probe directory: %v, want only the attacker's link", left)
	}
}

// waitUntil polls cond, generously: the assertions are on what happened, not on how fast.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRunProbeFileSwappedForSymlink races the one-shot probe: while it measures, nobody tries to
// swap the probe file for a link to a file of root's. In a sticky directory of root's the
// attack fails and the run succeeds; in a sticky directory nobody owns (the owner may remove
// anything in it) it succeeds, and the run must neither write through the link nor report as
// if nothing happened. A directory every user can write without the sticky bit is refused
// before anything is created.
func TestRunProbeFileSwappedForSymlink(t *testing.T) {
	requireNobody(t)
	tests := []struct {
		name     string
		mode     os.FileMode
		owner    int
		wantErr  string // "" for a report
		refusal  bool   // the directory is refused up front
		attacked bool   // the swap succeeds
	}{
		{name: "sticky, root's", mode: 0o777 | os.ModeSticky, owner: 0},
		{name: "sticky, nobody's", mode: 0o777 | os.ModeSticky, owner: nobodyID, wantErr: "was removed and its name given to a symbolic link owned by uid 65534", attacked: true},
		{name: "world-writable, not sticky", mode: 0o777, owner: 0, wantErr: "(mode 0777) is writable by every user without the sticky bit", refusal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := sharedDir(t, tt.mode, tt.owner, tt.owner)
			target, content := rootOnlyFile(t)
			var attack []string // what the attacker did, for the failure message
			swapped := ""
			rep, err := Run(context.Background(), Config{Dir: dir, Duration: time.Second, Precision: 1e-9, Methods: []string{Fdatasync, OpenDatasync}},
				func(time.Duration, time.Duration) {
					if swapped != "" {
						return
					}
					files := probeFiles(t, dir)
					if len(files) != 1 {
						t.Errorf("probe files %v while measuring, want one", files)
						swapped = "-"
						return
					}
					swapped = files[0]
					out, err := asNobody(t, swapForSymlink, swapped, target)
					attack = append(attack, out, errString(err))
				})
			assertUnchanged(t, target, content)
			var ce *ConfigError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Run = %v, want a report (the attack: %q)", err, attack)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Run = report %v, error %v; want an error saying %q (the attack: %q)", rep != nil, err, tt.wantErr, attack)
			case tt.refusal != errors.As(err, &ce):
				t.Errorf("Run error %v: ConfigError %v, want %v", err, !tt.refusal, tt.refusal)
			}
			if tt.refusal {
				for _, want := range []string{dir, "chmod +t", "chmod o-w", packageProbeDir} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not say %q", err, want)
					}
				}
				if swapped != "" {
					t.Errorf("a refused directory was probed")
				}
			}
			if (swapped != "" && swapped != "-") && tt.attacked {
				if dest, err := os.Readlink(swapped); err != nil || dest != target {
					t.Errorf("the attacker's link %s: %q, %v; want it left alone", swapped, dest, err)
				}
				os.Remove(swapped)
			}
			assertNoProbeFile(t, dir)
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestDirOthersCanWrite refuses directories in which users other than the advisor's can
// replace its file, and accepts those where they cannot.
func TestDirOthersCanWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another group needs root")
	}
	own := os.Getegid()
	tests := []struct {
		name string
		mode os.FileMode
		gid  int
		want string // "" for accepted
	}{
		{"private", 0o700, own, ""},
		{"group-writable by the advisor's group", 0o770, own, ""},
		{"group-writable by another group", 0o770, nobodyID, "is writable by group"},
		{"group-writable by another group, sticky", 0o770 | os.ModeSticky, nobodyID, ""},
		{"world-writable", 0o777, own, "is writable by every user"},
		{"world-writable, sticky (like /tmp)", 0o777 | os.ModeSticky, own, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := sharedDir(t, tt.mode, os.Geteuid(), tt.gid)
			d, err := openProbeDir(dir)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("openProbeDir = %v, want it accepted", err)
				}
				d.close()
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("openProbeDir = %v, want a ConfigError naming %s and saying %q", err, dir, tt.want)
			}
			if !strings.Contains(err.Error(), "chmod +t") {
				t.Errorf("refusal %q does not say what to do", err)
			}
		})
	}
}
