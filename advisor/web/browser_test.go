package web

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// requireChromium returns Debian's chromium ($PGWAL_CHROMIUM overrides the path), or skips the
// test without it, except under CI=true, where a missing browser is a broken set-up.
func requireChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("the browser test starts PostgreSQL and chromium: not under -short")
	}
	path := os.Getenv("PGWAL_CHROMIUM")
	if path == "" {
		path = "chromium"
	}
	found, err := exec.LookPath(path)
	if err != nil {
		msg := fmt.Sprintf("no chromium (%v): apt-get install chromium, or set PGWAL_CHROMIUM to its path", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return found
}

// artifactDir is where the test writes its screenshots: $PGWAL_ARTIFACTS when set (kept after
// the test), else a directory of the test's own.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("PGWAL_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// watchedState runs an advisor against a real throwaway cluster under a batched load with
// checkpoints until every chart has something to draw, then stops the advisor so that the
// page and the API are read from one frozen state.
func watchedState(t *testing.T) *advisor.Advisor {
	t.Helper()
	parent := lab.SharedTempDir(t, "")
	probeDir := filepath.Join(parent, "probe")
	if err := os.Mkdir(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Small WAL buffers, so that the load forces writes for want of buffer space.
	c := lab.NewTestCluster(t, lab.ClusterOptions{WALDir: filepath.Join(parent, "wal"), Settings: map[string]string{
		"wal_buffers": "64kB", "track_wal_io_timing": "on",
	}})
	logger := zaptest.NewLogger(t)
	pg := postgres.New(c.DSN(), postgres.Options{Logger: logger})
	t.Cleanup(func() { pg.Close(context.Background()) })
	sampler := &advisor.Sampler{Postgres: pg, Kernel: kernel.New("/proc"), Storage: storage.New("/proc", "/sys")}
	adv, err := advisor.New(sampler, advisor.Config{
		Interval: time.Second, WaitInterval: 250 * time.Millisecond, HistoryWindow: 5 * time.Minute,
		ProbeDir: probeDir, Probe: probes.SchedulerConfig{Burst: time.Second, Interval: 5 * time.Second},
	}, logger)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := adv.Run(runCtx); err != nil {
			t.Errorf("advisor: %v", err)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; runCtx.Err() == nil; i++ {
			// Batches, because pg_stat_wal counts a backend's WAL at transaction end.
			if _, err := c.BatchedLoad(runCtx, "load", 100000, 20000); err != nil && runCtx.Err() == nil {
				t.Errorf("load: %v", err)
				return
			}
			if i%3 != 2 {
				continue
			}
			if err := c.Exec(runCtx, "CHECKPOINT"); err != nil && runCtx.Err() == nil {
				t.Errorf("checkpoint: %v", err)
				return
			}
		}
	}()
	for {
		ch := chartsOf(adv.State())
		moving := false
		for _, p := range ch.WAL {
			moving = moving || p.BytesPerSecond > 0
		}
		if len(ch.SyncLatency.Bars) > 0 && len(ch.WAL) >= 10 && moving && len(ch.Dirty) >= 10 && len(ch.Checkpoints) >= 2 {
			return adv // the deferred stop and wait freeze the state
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the charts never had data to draw: %+v", ch)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// serveTLS serves src as the daemon does, with TLS and basic auth from a web configuration
// file, on loopback; it returns the base URL and the Authorization header value.
func serveTLS(t *testing.T, src StateSource) (string, string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	conf := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  dba: %s\n", certFile, keyFile, hash)
	if err := os.WriteFile(webConfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	s, err := NewServer(src, Config{ListenAddresses: []string{addr}, WebConfigFile: webConfig, Version: "browser-test"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	waitListening(t, addr, done)
	pool := x509.NewCertPool()
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool.AddCert(cert)
	return "https://" + addr, "Basic " + base64.StdEncoding.EncodeToString([]byte("dba:s3cret")), pool
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// apiCharts reads /api/v1/charts as a client of the API would.
func apiCharts(t *testing.T, base, auth string, pool *x509.CertPool) Charts {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest(http.MethodGet, base+"/api/v1/charts", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/charts: %d %v %s", resp.StatusCode, err, body)
	}
	var c Charts
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// chromiumLeftovers lists the scratch directories chromium makes in the system's temporary
// directory.
func chromiumLeftovers(t *testing.T) []string {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(os.TempDir(), "org.chromium.Chromium.*"))
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// startBrowser starts headless chromium with a fresh profile, loopback only: every request to
// anywhere else goes to a proxy that is not there.
func startBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium puts its singleton socket in a directory of its own under $TMPDIR and leaves
		// it there when it exits: keep it in the test's directory, which the test removes.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("proxy-server", "http://127.0.0.1:9"),
		// The test's own certificate authority is not in the profile's trust store.
		chromedp.Flag("ignore-certificate-errors", true),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// pageCharts is what the page's charts carry, read in the browser.
type pageCharts struct {
	Evaluated   string              `json:"evaluated"`
	Figures     []string            `json:"figures"`
	Charts      []string            `json:"charts"`
	Bars        []map[string]string `json:"bars"`
	Series      []map[string]string `json:"series"`
	Checkpoints []map[string]string `json:"checkpoints"`
	Links       []string            `json:"links"`
	ScrollWidth float64             `json:"scrollWidth"`
	InnerWidth  float64             `json:"innerWidth"`
	WidestSVG   float64             `json:"widestSVG"`
}

const readPage = `(() => {
  const data = sel => [...document.querySelectorAll(sel)].map(e => Object.assign({}, e.dataset));
  return {
    evaluated: document.querySelector('section.charts').dataset.evaluated,
    figures: [...document.querySelectorAll('section.charts figure')].filter(f => f.querySelector('svg')).map(f => f.id),
    charts: [...document.querySelectorAll('svg.chart')].filter(s => s.getBoundingClientRect().width > 0).map(s => s.dataset.chart),
    bars: data('svg[data-chart=sync_latency] g.bar'),
    series: [...document.querySelectorAll('svg.chart polyline.series')].map(p => ({chart: p.closest('svg').dataset.chart, series: p.dataset.series, values: p.dataset.values})),
    checkpoints: data('svg[data-chart=checkpoints] g.checkpoint'),
    links: [...document.querySelectorAll('a.evidence-link')].map(a => a.getAttribute('href')),
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    widestSVG: Math.max(...[...document.querySelectorAll('svg.chart')].map(s => s.getBoundingClientRect().right)),
  };
})()`

// TestBrowserLandingPage opens the landing page of a daemon watching a real cluster, behind
// TLS and basic auth, in headless chromium at a phone's width and a desktop's: the four charts
// are drawn with the figures /api/v1/charts reports, nothing is logged as an error, and nothing
// scrolls sideways.
func TestBrowserLandingPage(t *testing.T) {
	chromium := requireChromium(t)
	leftBefore := chromiumLeftovers(t)
	t.Cleanup(func() { // registered first, so it runs after the browser and its directories are gone
		for _, d := range chromiumLeftovers(t) {
			if !slices.Contains(leftBefore, d) {
				t.Errorf("chromium left %s behind", d)
			}
		}
	})
	adv := watchedState(t)
	base, auth, pool := serveTLS(t, adv)
	want := apiCharts(t, base, auth, pool)
	artifacts := artifactDir(t)
	ctx := startBrowser(t, chromium)

	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				problems = append(problems, fmt.Sprintf("console.%s %v", ev.Type, ev.Args))
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				problems = append(problems, fmt.Sprintf("log: %s %s", ev.Entry.Text, ev.Entry.URL))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	setAuth := func(ctx context.Context, tg *chromedp.Target) (cdp.Empty, error) {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return cdp.Empty{}, err
		}
		return cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
	}
	if _, err := chromedp.Run(ctx, setAuth); err != nil {
		t.Fatalf("set the basic auth header: %v", err)
	}

	for _, width := range []int64{420, 1280} {
		t.Run(strconv.FormatInt(width, 10), func(t *testing.T) {
			opts := []chromedp.EmulateViewportOption{}
			if width < 600 {
				opts = append(opts, chromedp.EmulateMobile, chromedp.EmulatePortrait)
			}
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900, opts...), chromedp.Navigate(base+"/")); err != nil {
				t.Fatalf("open the landing page: %v", err)
			}
			got, err := chromedp.Run(ctx, chromedp.Evaluate[pageCharts](readPage))
			if err != nil {
				t.Fatalf("read the page: %v", err)
			}
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			if err != nil {
				t.Fatalf("screenshot: %v", err)
			}
			shot := filepath.Join(artifacts, fmt.Sprintf("landing-%d.png", width))
			if err := os.WriteFile(shot, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s", shot)
			checkPage(t, got, want)
			if got.ScrollWidth > got.InnerWidth || got.WidestSVG > got.InnerWidth {
				t.Errorf("at %d px the page is %v px wide (widest chart ends at %v): it scrolls sideways", width, got.ScrollWidth, got.WidestSVG)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("the browser reported %s", p)
	}
}

// checkPage compares what the page draws with what the API reports.
func checkPage(t *testing.T, got pageCharts, want Charts) {
	t.Helper()
	if ev, _ := time.Parse(time.RFC3339Nano, got.Evaluated); !ev.Equal(want.Evaluated) {
		t.Fatalf("the page shows the evaluation of %s, the API %s", got.Evaluated, want.Evaluated)
	}
	if g, w := strings.Join(got.Figures, " "), strings.Join([]string{anchorSync, anchorWAL, anchorDirty, anchorCheckpoints}, " "); g != w {
		t.Errorf("figures with a chart: %s, want %s", g, w)
	}
	if g, w := strings.Join(got.Charts, " "), "sync_latency wal_bytes wal_buffers_full dirty checkpoints"; g != w {
		t.Errorf("visible charts: %s, want %s", g, w)
	}
	for _, l := range got.Links {
		if !slices.Contains(got.Figures, strings.TrimPrefix(l, "#")) {
			t.Errorf("a finding's evidence link %q points at no chart", l)
		}
	}
	if len(got.Bars) != len(want.SyncLatency.Bars) {
		t.Fatalf("%d latency bars, the API has %d", len(got.Bars), len(want.SyncLatency.Bars))
	}
	inUse := 0
	for i, b := range want.SyncLatency.Bars {
		g := got.Bars[i]
		if g["method"] != b.Method || g["writesPerSync"] != strconv.Itoa(b.WritesPerSync) || g["inUse"] != strconv.FormatBool(b.InUse) {
			t.Errorf("bar %d = %v, the API has %+v", i, g, b)
		}
		sameFigure(t, "mean of "+b.Method, g["meanSeconds"], b.MeanSeconds)
		sameFigure(t, "95% low of "+b.Method, g["ciLowSeconds"], b.CILowSeconds)
		sameFigure(t, "95% high of "+b.Method, g["ciHighSeconds"], b.CIHighSeconds)
		if b.InUse {
			inUse++
		}
	}
	if inUse == 0 {
		t.Errorf("no bar marks the method in use (%q)", want.SyncLatency.MethodInUse)
	}
	wantSeries := map[string][]float64{}
	for _, p := range want.WAL {
		wantSeries["wal_bytes_per_second"] = append(wantSeries["wal_bytes_per_second"], p.BytesPerSecond)
		wantSeries["wal_buffers_full_share"] = append(wantSeries["wal_buffers_full_share"], p.BuffersFullShare)
	}
	for _, p := range want.Dirty {
		wantSeries["dirty_bytes"] = append(wantSeries["dirty_bytes"], float64(p.DirtyBytes))
		wantSeries["writeback_bytes"] = append(wantSeries["writeback_bytes"], float64(p.WritebackBytes))
		wantSeries["dirty_background_threshold_bytes"] = append(wantSeries["dirty_background_threshold_bytes"], float64(p.DirtyBackgroundThresholdBytes))
		wantSeries["dirty_threshold_bytes"] = append(wantSeries["dirty_threshold_bytes"], float64(p.DirtyThresholdBytes))
	}
	if len(got.Series) != len(wantSeries) {
		t.Errorf("%d lines drawn, want %d", len(got.Series), len(wantSeries))
	}
	for _, s := range got.Series {
		values := strings.Fields(s["values"])
		w := wantSeries[s["series"]]
		if len(values) != len(w) {
			t.Errorf("%s: %d points drawn, the API has %d", s["series"], len(values), len(w))
			continue
		}
		for i, v := range values {
			sameFigure(t, fmt.Sprintf("%s[%d]", s["series"], i), v, w[i])
		}
	}
	if len(got.Checkpoints) != len(want.Checkpoints) {
		t.Fatalf("%d checkpoint intervals drawn, the API has %d", len(got.Checkpoints), len(want.Checkpoints))
	}
	for i, p := range want.Checkpoints {
		g := got.Checkpoints[i]
		sameFigure(t, "checkpoint sync", g["syncSeconds"], p.SyncSeconds)
		sameFigure(t, "checkpoints requested", g["requested"], p.Requested)
		sameFigure(t, "checkpoints timed", g["timed"], p.Timed)
	}
}

func sameFigure(t *testing.T, what, drawn string, want float64) {
	t.Helper()
	v, err := strconv.ParseFloat(drawn, 64)
	if err != nil || v != want {
		t.Errorf("%s: the page draws %q, the API reports %v", what, drawn, want)
	}
}
