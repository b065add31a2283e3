package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// buildAdvisorBinary builds the command into the test's temporary directory.
func buildAdvisorBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pgwal-advisor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	return bin
}

// ownProbeFile reports whether dir holds a probe file of process pid.
func ownProbeFile(dir string, pid int) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".pgwal-advisor-probe-"+strconv.Itoa(pid)+"-") {
			return true
		}
	}
	return false
}

// hangUp starts cmd, sends it SIGHUP as soon as its probe file is in dir, as a closing
// terminal does, and waits for it to end.
func hangUp(t *testing.T, cmd *exec.Cmd, dir string) *os.ProcessState {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
	go func() { _ = cmd.Wait(); close(done) }()
	// Polled closely: check's probe may take well under a second.
	for deadline := time.Now().Add(60 * time.Second); !ownProbeFile(dir, cmd.Process.Pid); time.Sleep(time.Millisecond) {
		select {
		case <-done:
			t.Fatalf("%s ended before its probe file was seen:\n%s", cmd.Args[1], &stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no probe file of %s after 60s:\n%s", cmd.Args[1], &stderr)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s still running 60s after SIGHUP:\n%s", cmd.Args[1], &stderr)
	}
	t.Logf("%s after SIGHUP: %v\n%s", strings.Join(cmd.Args, " "), cmd.ProcessState, &stderr)
	return cmd.ProcessState
}

// assertStoppedCleanly wants the command to have returned with exit status 3 (it could not do
// its job), not to have died of the signal, and its probe file gone.
func assertStoppedCleanly(t *testing.T, ps *os.ProcessState, dir string) {
	t.Helper()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("killed by %v instead of stopping cleanly", ws.Signal())
	} else if ps.ExitCode() != cli.ExitFailure {
		t.Errorf("exit status %d, want %d (interrupted)", ps.ExitCode(), cli.ExitFailure)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".pgwal-advisor-probe-*")); len(left) > 0 {
		t.Errorf("probe files left after SIGHUP: %v", left)
	}
}

// A closed terminal sends SIGHUP: the one-shot probe stops as on Ctrl-C, removing its file, and
// says by its exit status that it did not finish.
func TestProbeHangUpRemovesFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildAdvisorBinary(t)
	dir := t.TempDir()
	// A precision no run reaches within the budget: the probe runs until the signal.
	cmd := exec.Command(bin, "probe", "--dir", dir, "--duration", "30s", "--precision", "0.001", "--min-samples", "100000")
	assertStoppedCleanly(t, hangUp(t, cmd, dir), dir)

	// Under nohup the signal stays ignored: the run ends with its report.
	nohup := exec.Command("sh", "-c", `trap '' HUP; exec "$@"`, "sh", bin, "probe", "--dir", dir, "--duration", "1s", "--precision", "0.001", "--min-samples", "100000")
	if ps := hangUp(t, nohup, dir); ps.ExitCode() != 0 {
		t.Errorf("under nohup: %v, want the probe to finish", ps)
	}
}

// check probes within its window: SIGHUP stops it cleanly too.
func TestCheckHangUpRemovesProbeFile(t *testing.T) {
	lab.RequireServer(t)
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	bin := buildAdvisorBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "check", "--dsn", c.URL(), "--window", "1m", "--interval", "1s", "--probe.dir", dir, "--probe.budget", "1m")
	assertStoppedCleanly(t, hangUp(t, cmd, dir), dir)
}

// A probe directory other users can write without the sticky bit is a usage error, said
// before anything is written.
func TestProbeRefusesDirOthersCanWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "probe", "--dir", dir, "--duration", "1s")
	if code != cli.ExitBadUsage || !strings.Contains(stderr, dir) || !strings.Contains(stderr, "(mode 0777) is writable by every user") || !strings.Contains(stderr, "chmod +t") {
		t.Errorf("exit %d, want %d naming the directory, its mode and what to do:\n%s", code, cli.ExitBadUsage, stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".pgwal-advisor-probe-*")); len(left) > 0 {
		t.Errorf("probe files left: %v", left)
	}
}

// Bursts longer than the interval between them are refused at the start, from the command
// line and from the file alike (before, probing was quietly off).
func TestRunRefusesProbeBurstOverInterval(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yml")
	writeFile(t, cfgFile, "probe:\n  burst: 10m\n  interval: 1m\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"flags", []string{"--probe.burst", "10m", "--probe.interval", "1m"}, "--probe.interval 1m0s is shorter than --probe.burst 10m0s"},
		{"config file", []string{"--config.file", cfgFile}, "probe.interval 1m0s is shorter than probe.burst 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--probe.dir", "", "--web.listen-address", freeAddr(t), "--dsn", closedPortDSN(t)}, tc.args...)
			// Bounded: a daemon that accepts the pair runs until stopped.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			code := run(ctx, args, io.Discard, &stderr)
			if code != cli.ExitBadUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, want %d saying %q:\n%s", code, cli.ExitBadUsage, tc.want, &stderr)
			}
		})
	}
}

// A reload with bursts longer than their interval is refused, and the running configuration
// kept.
func TestRunReloadRefusesProbeBurstOverInterval(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yml")
	writeFile(t, cfgFile, "probe:\n  burst: 1s\n  interval: 1m\n")
	d := startRun(t, "--dsn", closedPortDSN(t), "--probe.dir", "", "--config.file", cfgFile)
	writeFile(t, cfgFile, "probe:\n  burst: 10m\n  interval: 1m\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the reload to end", func() bool {
		s := d.stderr.String()
		return strings.Contains(s, "config reload failed") || strings.Contains(s, "config changed")
	})
	logs := d.stderr.String()
	if !strings.Contains(logs, "config reload failed: keeping the running configuration") ||
		!strings.Contains(logs, "probe.interval 1m0s is shorter than probe.burst 10m0s") {
		t.Errorf("the reload was not refused with the reason:\n%s", logs)
	}
	if strings.Contains(logs, `"key": "probe.burst"`) {
		t.Errorf("the refused burst was taken:\n%s", logs)
	}
}
