package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// The fault matrix: each test plays one fault on real components (a throwaway cluster, the
// built binary, a real tmpfs) and checks that the advisor says what is wrong, recovers and
// leaves nothing behind. docs/security.md lists the rows and the test of each.

// passwordCluster is a cluster that asks TCP clients other than postgres for a password, with
// a role "advisor" (password right-pw, pg_monitor) and a role "nomon" (no pg_monitor).
func passwordCluster(t *testing.T) *lab.Cluster {
	t.Helper()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE ROLE advisor LOGIN PASSWORD 'right-pw' IN ROLE pg_monitor",
		"CREATE ROLE nomon LOGIN PASSWORD 'right-pw'",
	} {
		if err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	hba := filepath.Join(c.DataDir(), "pg_hba.conf")
	st, err := os.Stat(hba)
	if err != nil {
		t.Fatal(err)
	}
	rules := "local all postgres trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(rules), st.Mode()); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func tcpDSN(c *lab.Cluster, user, password string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=postgres sslmode=disable connect_timeout=2", c.Port(), user, password)
}

// postmasterPID reads the cluster's postmaster.pid.
func postmasterPID(t *testing.T, c *lab.Cluster) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestFaultCLIUnreachable(t *testing.T) {
	lab.RequireServer(t)
	c := passwordCluster(t)
	stopped := passwordCluster(t)
	pid := postmasterPID(t, stopped)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	tests := []struct {
		name   string
		dsn    string
		env    string // PGPASSWORD
		status string
	}{
		{"closed port", closedPortDSN(t), "", "unreachable"},
		{"wrong password (keyword)", tcpDSN(c, "advisor", "wrong-pw"), "", "unauthenticated"},
		{"wrong password (URL)", fmt.Sprintf("postgres://advisor:wrong-pw@127.0.0.1:%d/postgres?sslmode=disable", c.Port()), "", "unauthenticated"},
		{"wrong password (PGPASSWORD)", fmt.Sprintf("host=127.0.0.1 port=%d user=advisor dbname=postgres sslmode=disable", c.Port()), "wrong-pw", "unauthenticated"},
		{"unknown role", tcpDSN(c, "nobody", "wrong-pw"), "", "unauthenticated"},
		{"stopped server", tcpDSN(stopped, "advisor", "right-pw"), "", "unreachable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PGPASSWORD", tt.env)
			for _, args := range [][]string{
				{"check", "--window", "30s", "--interval", "1s", "--query-timeout", "1s"},
				{"collect", "--format", "json", "--query-timeout", "1s"},
			} {
				out, stderr, code := runCLI(t, append(args, "--dsn", tt.dsn)...)
				if code != cli.ExitFailure {
					t.Errorf("%s: exit %d, want %d\nstderr: %s", args[0], code, cli.ExitFailure, stderr)
				}
				if !strings.Contains(stderr, "could not read PostgreSQL") || !strings.Contains(stderr, "("+tt.status+")") {
					t.Errorf("%s: stderr %q: want the reason with status %s", args[0], stderr, tt.status)
				}
				if strings.Contains(out+stderr, "wrong-pw") {
					t.Errorf("%s: the password leaked", args[0])
				}
				if args[0] == "collect" && !strings.Contains(out, `"kernel"`) {
					t.Errorf("collect: stdout lacks the parts it could read:\n%s", out)
				}
			}
		})
	}
	// The right password works: the failures above are the faults, not the setup.
	if _, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", tcpDSN(c, "advisor", "right-pw")); code != 0 {
		t.Errorf("collect with the right password: exit %d: %s", code, stderr)
	}
}

func TestFaultDaemonServerDown(t *testing.T) {
	lab.RequireServer(t)
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	ctx := context.Background()
	pgctl := func(args ...string) {
		t.Helper()
		if out, err := c.Command(ctx, "pg_ctl", append(args, "-D", c.DataDir(), "-w", "-t", "60")...).CombinedOutput(); err != nil {
			t.Fatalf("pg_ctl %v: %v: %s", args, err, out)
		}
	}
	pgctl("stop", "-m", "fast")
	d := startRun(t, "--dsn", c.URL(), "--interval", "200ms", "--probe.dir", "")
	waitFor(t, 10*time.Second, "readyz 503 naming the target", func() bool {
		code, body := d.get(t, "/readyz")
		return code == http.StatusServiceUnavailable && targetIs(body, "unreachable")
	})
	if _, page := d.get(t, "/"); !strings.Contains(page, "PostgreSQL unreachable") || strings.Contains(page, "nothing to change") {
		t.Errorf("landing page with the server down does not say so:\n%s", page)
	}
	if log := d.stderr.String(); !strings.Contains(log, "cannot use postgresql") || !strings.Contains(log, "unreachable") {
		t.Errorf("the first failure is not in the log:\n%s", log)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.Port(), c.SocketDir())
	pgctl("start", "-l", filepath.Join(c.DataDir(), "restart.log"), "-o", opts)
	waitFor(t, 15*time.Second, "readyz 200 after the server started", func() bool {
		code, _ := d.get(t, "/readyz")
		return code == http.StatusOK
	})
	if log := d.stderr.String(); !strings.Contains(log, "postgresql can be read again") {
		t.Errorf("the recovery is not in the log:\n%s", log)
	}
}

func TestFaultDaemonWrongPassword(t *testing.T) {
	lab.RequireServer(t)
	c := passwordCluster(t)
	d := startRun(t, "--dsn", tcpDSN(c, "advisor", "wrong-pw"), "--interval", "200ms", "--probe.dir", "")
	waitFor(t, 10*time.Second, "readyz 503 unauthenticated", func() bool {
		code, body := d.get(t, "/readyz")
		return code == http.StatusServiceUnavailable && targetIs(body, "unauthenticated")
	})
	log := d.stderr.String()
	if !strings.Contains(log, "cannot use postgresql") {
		t.Errorf("the failure is not in the log:\n%s", log)
	}
	if strings.Contains(log, "wrong-pw") {
		t.Errorf("the password is in the log")
	}
	// Rate-limited: one line for the repeated failure, not one per attempt.
	time.Sleep(time.Second)
	if n := strings.Count(d.stderr.String(), "cannot use postgresql"); n != 1 {
		t.Errorf("%d log lines for one unchanged failure, want 1", n)
	}
}

func TestFaultDaemonRoleWithoutPGMonitor(t *testing.T) {
	lab.RequireServer(t)
	c := passwordCluster(t)
	probeDir := t.TempDir()
	d := startRun(t, "--dsn", tcpDSN(c, "nomon", "right-pw"), "--interval", "200ms", "--probe.dir", probeDir)
	waitFor(t, 10*time.Second, "readyz 503 missing_privileges", func() bool {
		code, body := d.get(t, "/readyz")
		return code == http.StatusServiceUnavailable && targetIs(body, "missing_privileges") && strings.Contains(body, "pg_monitor")
	})
	waitFor(t, 10*time.Second, "the probe-disabled finding with a reason", func() bool {
		_, body := d.get(t, "/api/v1/findings")
		return strings.Contains(body, `"probe-disabled"`) && strings.Contains(body, "WAL directory is unknown")
	})
}

// TestFaultProbeKillRestart runs the built daemon with a probe directory, kills it twice with
// SIGKILL and restarts it: each start removes the leftover, so exactly one probe file exists
// while it runs, and none after a clean stop.
func TestFaultProbeKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon binary")
	}
	bin := filepath.Join(t.TempDir(), "pgwal-advisor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	tmp := t.TempDir()
	walDir, probeDir := filepath.Join(tmp, "wal"), filepath.Join(tmp, "probe")
	for _, d := range []string{walDir, probeDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--dsn", closedPortDSN(t), "--interval", "200ms", "--wal-dir", walDir,
			"--web.listen-address", freeAddr(t), "--probe.dir", probeDir, "--probe.burst", "200ms", "--probe.interval", "1m")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		own := fmt.Sprintf(".pgwal-advisor-probe-%d-", cmd.Process.Pid)
		waitFor(t, 15*time.Second, "the probe file of pid "+strconv.Itoa(cmd.Process.Pid), func() bool {
			entries, _ := os.ReadDir(probeDir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), own) {
					return true
				}
			}
			return false
		})
		if entries, _ := os.ReadDir(probeDir); len(entries) != 1 {
			t.Errorf("%d probe files while running, want 1: %v", len(entries), entries)
		}
		return cmd
	}
	for range 2 {
		cmd := start()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	cmd := start()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("daemon after SIGTERM: %v", err)
	}
	if entries, _ := os.ReadDir(probeDir); len(entries) != 0 {
		t.Errorf("probe files left after a clean stop: %v", entries)
	}
}

// targetIs reports whether a /readyz body names the target status.
func targetIs(body, status string) bool {
	var r struct {
		Target string `json:"target"`
	}
	return json.Unmarshal([]byte(body), &r) == nil && r.Target == status
}

// TestFaultProbeFullFileSystem runs the daemon with its probe directory on a small real tmpfs
// and fills it: before the next burst the probe drops its file and the probe-disabled finding
// says why.
func TestFaultProbeFullFileSystem(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a tmpfs")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=96m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	walDir, probeDir := filepath.Join(dir, "wal"), filepath.Join(dir, "probe")
	for _, d := range []string{walDir, probeDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := startRun(t, "--dsn", closedPortDSN(t), "--interval", "200ms", "--wal-dir", walDir,
		"--probe.dir", probeDir, "--probe.burst", "200ms", "--probe.interval", "1s")
	waitFor(t, 15*time.Second, "the probe file", func() bool { e, _ := os.ReadDir(probeDir); return len(e) == 1 })
	// Fill in 1MB pieces until less than 4MB is free (the probe may still be writing its file).
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if int64(st.Bavail)*st.Bsize < 4<<20 {
			break
		}
		if _, err := filler.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	filler.Close()
	waitFor(t, 15*time.Second, "the probe file dropped", func() bool { e, _ := os.ReadDir(probeDir); return len(e) == 0 })
	waitFor(t, 10*time.Second, "the probe-disabled finding naming the free space", func() bool {
		_, body := d.get(t, "/api/v1/findings")
		return strings.Contains(body, `"probe-disabled"`) && strings.Contains(body, "free")
	})
	d.stop()
	if e, _ := os.ReadDir(probeDir); len(e) != 0 {
		t.Errorf("probe files left: %v", e)
	}
}
