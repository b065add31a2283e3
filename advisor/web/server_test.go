package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"
)

// freeAddr returns a loopback address nobody listens on (a port is only ever handed out once
// the previous owner closed it, so a race with another process is possible but harmless here).
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

// startServer serves src on a free port until the test ends; it returns the base URL and a
// function that stops the server and returns Serve's error and how long stopping took.
func startServer(t *testing.T, cfg Config) (string, func() (time.Duration, error)) {
	t.Helper()
	addr := freeAddr(t)
	cfg.ListenAddresses = []string{addr}
	s, err := NewServer(&staticSource{st: healthyState()}, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	stopped := false
	stop := func() (time.Duration, error) {
		stopped = true
		start := time.Now()
		cancel()
		err := <-done
		return time.Since(start), err
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	waitListening(t, addr, done)
	return "http://" + addr, stop
}

func waitListening(t *testing.T, addr string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("server stopped before listening: %v", err)
		default:
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s after 5s", addr)
}

func httpGet(t *testing.T, url string, user, pass string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeAndShutdown(t *testing.T) {
	base, stop := startServer(t, Config{Version: "1.2.3", GoVersion: "go1.26.8"})
	if code, body := httpGet(t, base+"/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("GET /healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/metrics", "", ""); code != http.StatusOK || !strings.Contains(body, "pgwal_advisor_up 1") {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	took, err := stop()
	if err != nil {
		t.Fatalf("Serve after cancel: %v, want nil", err)
	}
	if took > ShutdownTimeout {
		t.Errorf("shutdown took %v, want under %v", took, ShutdownTimeout)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

// The web configuration file turns on basic auth (and TLS) as in every Prometheus exporter.
func TestServeBasicAuth(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, fmt.Appendf(nil, "basic_auth_users:\n  prometheus: %s\n", hash), 0o600); err != nil {
		t.Fatal(err)
	}
	base, _ := startServer(t, Config{WebConfigFile: webConfig})
	if code, _ := httpGet(t, base+"/metrics", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without credentials: %d, want 401", code)
	}
	if code, _ := httpGet(t, base+"/metrics", "prometheus", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a wrong password: %d, want 401", code)
	}
	if code, body := httpGet(t, base+"/api/v1/findings", "prometheus", "s3cret"); code != http.StatusOK {
		t.Errorf("GET /api/v1/findings with credentials: %d %s", code, body)
	}
}

func TestNewServerRejectsBadWebConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent/cert.pem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"missing file": filepath.Join(dir, "nope.yml"), "bad TLS": bad} {
		t.Run(name, func(t *testing.T) {
			_, err := NewServer(&staticSource{}, Config{ListenAddresses: []string{freeAddr(t)}, WebConfigFile: path}, zaptest.NewLogger(t))
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("NewServer with %s: err = %v, want an error naming the file", name, err)
			}
		})
	}
}

func TestServeAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := NewServer(&staticSource{}, Config{ListenAddresses: []string{l.Addr().String()}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = s.Serve(ctx)
	if err == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Serve on a busy address: %v, want an error at once", err)
	}
	if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("error %q does not name the address", err)
	}
}

// Several listen addresses with basic auth: each address has its own http.Server, so
// exporter-toolkit's wrapping of the handler does not race (run with -race).
func TestServeSeveralAddresses(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, fmt.Appendf(nil, "basic_auth_users:\n  prometheus: %s\n", hash), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := []string{freeAddr(t), freeAddr(t)}
	s, err := NewServer(&staticSource{st: healthyState()}, Config{ListenAddresses: addrs, WebConfigFile: webConfig}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	for _, addr := range addrs {
		waitListening(t, addr, done)
		if code, _ := httpGet(t, "http://"+addr+"/healthz", "prometheus", "s3cret"); code != http.StatusOK {
			t.Errorf("GET %s/healthz: %d", addr, code)
		}
		if code, _ := httpGet(t, "http://"+addr+"/healthz", "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s/healthz without credentials: %d, want 401", addr, code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
}

// TestNewServerRefusesCostlyBcrypt: a basic-auth hash whose cost lets any unauthenticated client
// spend the daemon's CPU (issue 33: cost 13, 40 wrong passwords took 80 CPU seconds) is refused at
// start, naming the user and the fix; cost 10 is taken.
func TestNewServerRefusesCostlyBcrypt(t *testing.T) {
	for _, tc := range []struct {
		cost int
		want string
	}{{10, ""}, {13, `basic_auth_users "prometheus": bcrypt cost 13`}} {
		hash, err := bcrypt.GenerateFromPassword([]byte("pw"), tc.cost)
		if err != nil {
			t.Fatal(err)
		}
		webConfig := filepath.Join(t.TempDir(), "web.yml")
		if err := os.WriteFile(webConfig, fmt.Appendf(nil, "basic_auth_users:\n  prometheus: %s\n", hash), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = NewServer(&staticSource{}, Config{WebConfigFile: webConfig}, zaptest.NewLogger(t))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("cost %d: %v, want it taken", tc.cost, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "htpasswd -nbBC 10")):
			t.Errorf("cost %d: %v, want an error with %q and the fix", tc.cost, err, tc.want)
		}
	}
}
