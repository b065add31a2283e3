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

// TestFaultCLIUnreachable runs check and collect against faults a user meets: a closed port, a
// hung server, an unknown role, and a wrong password in each form a user writes it (libpq
// keywords plain, quoted and escaped, URL user info and query parameters, percent-encoded & and
// #, sslpassword beside it, PGPASSWORD, a password file and a service file, by environment or
// keyword). Each exits 3 with the reason, and no password appears in stdout or stderr.
func TestFaultCLIUnreachable(t *testing.T) {
	lab.RequireServer(t)
	c := passwordCluster(t)
	stopped := passwordCluster(t)
	pid := postmasterPID(t, stopped)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	dir := t.TempDir()
	hostPort := fmt.Sprintf("host=127.0.0.1 port=%d", c.Port())
	url := fmt.Sprintf("postgres://%%s@127.0.0.1:%d/postgres?sslmode=disable%%s", c.Port())
	passfile := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(passfile, fmt.Appendf(nil, "127.0.0.1:%d:*:advisor:wrong-pw-passfile\n", c.Port()), 0o600); err != nil {
		t.Fatal(err)
	}
	servicefile := filepath.Join(dir, "pg_service.conf")
	service := fmt.Sprintf("[wrongsvc]\nhost=127.0.0.1\nport=%d\nuser=advisor\npassword=wrong-pw-service\ndbname=postgres\nsslmode=disable\nconnect_timeout=2\n", c.Port())
	if err := os.WriteFile(servicefile, []byte(service), 0o600); err != nil {
		t.Fatal(err)
	}
	_, closedPort, _ := strings.Cut(strings.Fields(closedPortDSN(t))[1], "=")

	tests := []struct {
		name string
		dsn  string
		// env is set for the subtest (and makes it run alone); secrets must appear in no output.
		env     map[string]string
		secrets []string
		status  string
	}{
		{name: "closed port", dsn: closedPortDSN(t), secrets: []string{"sekrit-pw"}, status: "unreachable"},
		{name: "stopped server", dsn: tcpDSN(stopped, "advisor", "right-pw"), secrets: []string{"right-pw"}, status: "unreachable"},
		{name: "unknown role", dsn: tcpDSN(c, "nobody", "wrong-pw"), secrets: []string{"wrong-pw"}, status: "unauthenticated"},
		{name: "wrong password (keyword)", dsn: tcpDSN(c, "advisor", "wrong-pw"), secrets: []string{"wrong-pw"}},
		{name: "wrong password (quoted keyword with spaces)",
			dsn:     hostPort + " user=advisor password='wrong pw with spaces' dbname=postgres sslmode=disable",
			secrets: []string{"wrong pw with spaces", "with spaces"}},
		{name: "wrong password (quoted keyword with escapes)",
			dsn:     hostPort + ` user=advisor password='it\'s wr\\ong-pw' dbname=postgres sslmode=disable`,
			secrets: []string{`it's wr\ong-pw`, `it\'s wr\\ong-pw`, "ong-pw"}},
		{name: "wrong password (keyword with & and #)",
			dsn:     hostPort + " user=advisor password=wr&ng#pw-kw dbname=postgres sslmode=disable",
			secrets: []string{"wr&ng#pw-kw", "ng#pw-kw"}},
		{name: "wrong password (URL user info)", dsn: fmt.Sprintf(url, "advisor:wrong-pw", ""), secrets: []string{"wrong-pw"}},
		{name: "wrong password (URL user info, encoded & and #)", dsn: fmt.Sprintf(url, "advisor:wr%26ng%23pw-ui", ""),
			secrets: []string{"wr&ng#pw-ui", "wr%26ng%23pw-ui", "pw-ui"}},
		{name: "wrong password (URL ?password=)", dsn: fmt.Sprintf(url, "advisor", "&password=wrong-pw-query"), secrets: []string{"wrong-pw-query"}},
		{name: "wrong password (URL ?password= with & and # and options after it)",
			dsn:     fmt.Sprintf(url, "advisor", "&password=wr%26ng%23pw-q&application_name=pgwal%23advisor&connect_timeout=2"),
			secrets: []string{"wr&ng#pw-q", "wr%26ng%23pw-q", "pw-q"}},
		{name: "wrong password (URL with sslpassword)", dsn: fmt.Sprintf(url, "advisor:wrong-pw", "&sslpassword=ssl-secret-pw"),
			secrets: []string{"wrong-pw", "ssl-secret-pw"}},
		{name: "wrong password (keyword with sslpassword)",
			dsn:     hostPort + " user=advisor password=wrong-pw sslpassword=ssl-secret-pw dbname=postgres sslmode=disable",
			secrets: []string{"wrong-pw", "ssl-secret-pw"}},
		{name: "wrong password (multi-host URL, first host closed)",
			dsn:     fmt.Sprintf("postgres://advisor:wrong-pw-multi@127.0.0.1:%s,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", closedPort, c.Port()),
			secrets: []string{"wrong-pw-multi"}},
		{name: "wrong password (passfile keyword)", dsn: hostPort + " user=advisor dbname=postgres sslmode=disable passfile=" + passfile,
			secrets: []string{"wrong-pw-passfile"}},
		{name: "wrong password (service file keyword)", dsn: "service=wrongsvc servicefile=" + servicefile,
			secrets: []string{"wrong-pw-service"}},
		{name: "wrong password (PGPASSWORD)", dsn: hostPort + " user=advisor dbname=postgres sslmode=disable",
			env: map[string]string{"PGPASSWORD": "wrong-pw-env"}, secrets: []string{"wrong-pw-env"}},
		{name: "wrong password (PGPASSFILE)", dsn: hostPort + " user=advisor dbname=postgres sslmode=disable",
			env: map[string]string{"PGPASSFILE": passfile}, secrets: []string{"wrong-pw-passfile"}},
		{name: "wrong password (PGSERVICEFILE and service=)", dsn: "service=wrongsvc",
			env: map[string]string{"PGSERVICEFILE": servicefile}, secrets: []string{"wrong-pw-service"}},
		{name: "wrong password (PGSERVICE, PGSERVICEFILE, no --dsn)", dsn: "",
			env: map[string]string{"PGSERVICEFILE": servicefile, "PGSERVICE": "wrongsvc"}, secrets: []string{"wrong-pw-service"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env == nil {
				// Run beside the other environment-free cases, after the ones that set the
				// environment (parallel subtests start when the parent's function returns).
				t.Parallel()
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			status := tt.status
			if status == "" {
				status = "unauthenticated"
			}
			for _, args := range [][]string{
				{"check", "--window", "30s", "--interval", "1s", "--query-timeout", "1s", "--log.level", "debug"},
				{"collect", "--format", "json", "--query-timeout", "1s", "--log.level", "debug"},
			} {
				if tt.dsn != "" {
					args = append(args, "--dsn", tt.dsn)
				}
				out, stderr, code := runCLI(t, args...)
				if code != cli.ExitFailure {
					t.Errorf("%s: exit %d, want %d\nstderr: %s", args[0], code, cli.ExitFailure, stderr)
				}
				if !strings.Contains(stderr, "could not read PostgreSQL") || !strings.Contains(stderr, "("+status+")") {
					t.Errorf("%s: stderr %q: want the reason with status %s", args[0], stderr, status)
				}
				for _, secret := range tt.secrets {
					if strings.Contains(out+stderr, secret) {
						t.Errorf("%s: the password leaked (%q):\nstdout: %s\nstderr: %s", args[0], secret, out, stderr)
					}
				}
				if args[0] == "collect" && !strings.Contains(out, `"kernel"`) {
					t.Errorf("collect: stdout lacks the parts it could read:\n%s", out)
				}
			}
		})
	}
	// The right password works, in a keyword DSN and in the service file: the failures above
	// are the faults, not the setup.
	t.Run("right password", func(t *testing.T) {
		t.Parallel()
		right := filepath.Join(dir, "right_service.conf")
		if err := os.WriteFile(right, []byte(strings.ReplaceAll(service, "wrong-pw-service", "right-pw")), 0o600); err != nil {
			t.Fatal(err)
		}
		rightPass := filepath.Join(dir, "right_pgpass")
		if err := os.WriteFile(rightPass, fmt.Appendf(nil, "127.0.0.1:%d:*:advisor:right-pw\n", c.Port()), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, dsn := range []string{
			tcpDSN(c, "advisor", "right-pw"),
			"service=wrongsvc servicefile=" + right,
			hostPort + " user=advisor dbname=postgres sslmode=disable passfile=" + rightPass,
		} {
			if _, stderr, code := runCLI(t, "collect", "--format", "json", "--dsn", dsn); code != 0 {
				t.Errorf("collect --dsn %q: exit %d: %s", dsn, code, stderr)
			}
		}
	})
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
