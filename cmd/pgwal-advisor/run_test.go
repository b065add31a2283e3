package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

// syncBuffer is a bytes.Buffer that the daemon's goroutines may write while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// daemonRun is `pgwal-advisor run` running in-process.
type daemonRun struct {
	base   string
	stderr *syncBuffer
	stop   func() (int, time.Duration)
}

// startRun runs `pgwal-advisor run args... --web.listen-address <free>` in-process until the
// test ends (or stop is called), and waits until it serves.
func startRun(t *testing.T, args ...string) *daemonRun {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"run", "--web.listen-address", addr}, args...), io.Discard, stderr)
	}()
	var once sync.Once
	var code int
	var took time.Duration
	stop := func() (int, time.Duration) {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("run did not return within 30s of cancellation\n%s", stderr)
			}
			took = time.Since(start)
		})
		return code, took
	}
	t.Cleanup(func() { stop() })
	d := &daemonRun{base: "http://" + addr, stderr: stderr, stop: stop}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case code := <-done:
			t.Fatalf("run exited %d before serving:\n%s", code, stderr)
		default:
		}
		if resp, err := http.Get(d.base + "/healthz"); err == nil {
			resp.Body.Close()
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("run does not serve on %s after 10s:\n%s", addr, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemonRun) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(d.base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitFor polls cond every 50ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// closedPortDSN is a DSN with a password for a server that is not there.
func closedPortDSN(t *testing.T) string {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	return "host=127.0.0.1 port=" + port + " user=advisor password=sekrit-pw dbname=postgres sslmode=disable connect_timeout=1"
}

// The daemon serves every endpoint even when PostgreSQL is down, no response and no log line
// carries the DSN's password, and SIGTERM (context cancellation) stops it within seconds with
// the probe file removed.
func TestRunServesWithoutSecretsAndStopsCleanly(t *testing.T) {
	tmp := t.TempDir()
	walDir, probeDir := filepath.Join(tmp, "wal"), filepath.Join(tmp, "probe")
	for _, d := range []string{walDir, probeDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := startRun(t, "--dsn", closedPortDSN(t), "--interval", "200ms", "--wal-dir", walDir,
		"--probe.dir", probeDir, "--probe.burst", "200ms", "--probe.interval", "1m")

	// With the server down the daemon serves, but is not ready: it names the target status.
	waitFor(t, 10*time.Second, "a first snapshot", func() bool {
		code, body := d.get(t, "/readyz")
		return code == http.StatusServiceUnavailable && targetIs(body, "unreachable")
	})
	// The probe starts once the WAL directory is known (--wal-dir here) and keeps its file
	// between bursts.
	waitFor(t, 15*time.Second, "the probe's first burst", func() bool {
		_, body := d.get(t, "/metrics")
		return strings.Contains(body, "pgwal_advisor_probe_enabled 1") && !strings.Contains(body, "pgwal_advisor_probe_last_success_timestamp_seconds 0\n")
	})
	if entries, _ := os.ReadDir(probeDir); len(entries) == 0 {
		t.Errorf("no probe file in %s while probing", probeDir)
	}

	for _, path := range []string{"/", "/metrics", "/api/v1/findings", "/api/v1/recommendations", "/api/v1/snapshot", "/healthz", "/readyz", "/nothing"} {
		_, body := d.get(t, path)
		if strings.Contains(body, "sekrit") {
			t.Errorf("GET %s shows the DSN's password:\n%s", path, body)
		}
	}
	_, body := d.get(t, "/metrics")
	if !strings.Contains(body, "pgwal_advisor_up 0") || !strings.Contains(body, `pgwal_advisor_scrape_collector_success{collector="postgres"} 0`) {
		t.Errorf("/metrics with PostgreSQL down should say so:\n%s", body)
	}
	_, body = d.get(t, "/api/v1/snapshot")
	if !strings.Contains(body, "connection refused") {
		t.Errorf("/api/v1/snapshot should carry the postgres part's error:\n%s", body)
	}

	code, took := d.stop()
	if code != cli.ExitOK {
		t.Errorf("run exited %d after cancellation, want 0:\n%s", code, d.stderr)
	}
	if took > 10*time.Second {
		t.Errorf("run took %v to stop, want seconds", took)
	}
	if entries, _ := os.ReadDir(probeDir); len(entries) != 0 {
		t.Errorf("probe directory not empty after stop: %v", entries)
	}
	if strings.Contains(d.stderr.String(), "sekrit") {
		t.Errorf("the log shows the DSN's password:\n%s", d.stderr)
	}
	if _, err := http.Get(d.base + "/healthz"); err == nil {
		t.Error("still serving after stop")
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SIGHUP re-reads --config.file: a new interval takes effect on the next cycle, the log level
// at once, and a new listen address is reported as needing a restart.
func TestRunReloadOnSIGHUP(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yml")
	writeFile(t, cfgFile, "interval: 1h\nhistory:\n  window: 3h\nlog:\n  level: info\n")
	d := startRun(t, "--dsn", closedPortDSN(t), "--probe.dir", "", "--config.file", cfgFile)
	evaluated := func() time.Time {
		code, body := d.get(t, "/api/v1/findings")
		if code != http.StatusOK {
			return time.Time{}
		}
		var resp struct {
			Evaluated time.Time `json:"evaluated"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Evaluated
	}
	waitFor(t, 10*time.Second, "the first evaluation", func() bool { return !evaluated().IsZero() })
	first := evaluated()

	// A broken file changes nothing.
	writeFile(t, cfgFile, "interval: 200ms\nintervall: 1s\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the failed reload to be logged", func() bool {
		return strings.Contains(d.stderr.String(), "config reload failed")
	})
	if !strings.Contains(d.stderr.String(), `unknown key \"intervall\"`) {
		t.Errorf("the failed reload does not name the unknown key:\n%s", d.stderr)
	}

	writeFile(t, cfgFile, "interval: 200ms\nhistory:\n  window: 3h\nlog:\n  level: debug\nweb:\n  config_file: /etc/pgwal-advisor/web.yml\n  listen_address: 127.0.0.1:1\nthresholds:\n  raise_after: 10s\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// With the new interval, evaluations follow each other in fractions of a second; with the
	// old one the next would come in an hour.
	waitFor(t, 5*time.Second, "evaluations at the reloaded interval", func() bool {
		return evaluated().After(first.Add(300 * time.Millisecond))
	})
	logs := d.stderr.String()
	for _, want := range []string{
		`"key": "interval", "old": "1h0m0s", "new": "200ms"`,
		`"key": "log.level", "old": "info", "new": "debug", "takes_effect": "now"`,
		`"key": "thresholds.raise_after", "old": "2m0s", "new": "10s"`,
		`"key": "web.config_file", "old": "\"\"", "new": "\"/etc/pgwal-advisor/web.yml\"", "takes_effect": "after a restart of pgwal-advisor"`,
		"advisor restarted with the reloaded configuration",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	// --web.listen-address was given on the command line: the file's listen_address does not
	// override it, so it is no change at all.
	if strings.Contains(logs, `"key": "web.listen_address"`) {
		t.Errorf("the file's web.listen_address overrode the command line's")
	}
	// The web configuration did not change under the running server.
	if code, _ := d.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz after reload: %d", code)
	}
	if t.Failed() {
		t.Logf("log:\n%s", logs)
	}
}

func TestRunRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.yml")
	writeFile(t, unknown, "probe:\n  dir: /tmp\n  dirr: /tmp\n")
	badThreshold := filepath.Join(dir, "threshold.yml")
	writeFile(t, badThreshold, "thresholds:\n  raise_afterr: 1m\n")
	zeroInterval := filepath.Join(dir, "zero.yml")
	writeFile(t, zeroInterval, "interval: 0s\n")
	bigRatio := filepath.Join(dir, "ratio.yml")
	writeFile(t, bigRatio, "thresholds:\n  min_improvement: 1.5\n")
	badWeb := filepath.Join(dir, "web.yml")
	writeFile(t, badWeb, "tls_server_config:\n  cert_file: /nonexistent.pem\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"--config.file", unknown}, `line 3: unknown key "probe.dirr" (known keys under probe: burst, dir, interval)`},
		{"unknown threshold", []string{"--config.file", badThreshold}, `unknown key "thresholds.raise_afterr"`},
		{"missing config file", []string{"--config.file", filepath.Join(dir, "nope.yml")}, "nope.yml"},
		{"history shorter than two intervals", []string{"--interval", "1m", "--history.window", "1m"}, "history window"},
		{"bad web config", []string{"--web.config.file", badWeb}, "web.yml"},
		{"zero interval in the file", []string{"--config.file", zeroInterval}, "interval 0s: below the minimum 100ms"},
		{"zero interval on the command line", []string{"--interval", "0s"}, "--interval 0s: below the minimum 100ms"},
		{"ratio above one", []string{"--config.file", bigRatio}, "thresholds.min_improvement 1.5: above the maximum 1"},
		{"back-to-back wait-event samples", []string{"--wait-events.interval", "1ns"}, "--wait-events.interval 1ns: below the minimum 100ms"},
		{"bad log level", []string{"--log.level", "loud"}, "log.level"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--probe.dir", "", "--web.listen-address", freeAddr(t), "--dsn", closedPortDSN(t)}, tc.args...)
			_, stderr, code := runCLI(t, args...)
			if code != cli.ExitBadUsage {
				t.Errorf("exit code %d, want %d (usage)\n%s", code, cli.ExitBadUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, stderr)
			}
		})
	}
}

func TestRunAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, stderr, code := runCLI(t, "run", "--probe.dir", "", "--dsn", closedPortDSN(t), "--web.listen-address", l.Addr().String())
	if code != cli.ExitFailure || !strings.Contains(stderr, "address already in use") {
		t.Errorf("exit %d, want %d with the bind error:\n%s", code, cli.ExitFailure, stderr)
	}
}
