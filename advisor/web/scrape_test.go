package web

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
)

// countingGatherer counts the gatherings behind the cache.
type countingGatherer struct {
	g  prometheus.Gatherer
	mu sync.Mutex
	n  int
}

func (c *countingGatherer) Gather() ([]*dto.MetricFamily, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.g.Gather()
}

func (c *countingGatherer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func newCountedCache(t *testing.T, src StateSource) (*scrapeCache, *countingGatherer, *time.Time) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(src, "1.2.3", "go1.26.8"))
	g := &countingGatherer{g: reg}
	c := newScrapeCache(src, g, zaptest.NewLogger(t))
	now := fixtureTime()
	c.now = func() time.Time { return now }
	return c, g, &now
}

func scrape(t *testing.T, h http.Handler, acceptEncoding string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec
}

// One encoding per evaluation: scrapes of one state share it, a new evaluation or the age
// limit makes a new one.
func TestScrapeCacheEncodesOncePerEvaluation(t *testing.T) {
	src := &staticSource{st: fsyncOffState()}
	c, g, now := newCountedCache(t, src)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { scrape(t, c, "") })
	}
	wg.Wait()
	if n := g.count(); n != 1 {
		t.Errorf("50 scrapes of one evaluation gathered %d times, want 1", n)
	}
	first := scrape(t, c, "").Body.String()
	if !strings.Contains(first, `pgwal_advisor_finding{rule="fsync-off"`) {
		t.Fatalf("the cached scrape lacks the finding:\n%s", first)
	}

	src.set(healthyState())
	if body := scrape(t, c, "").Body.String(); strings.Contains(body, "pgwal_advisor_finding{") {
		t.Error("a cleared finding is still served after a new evaluation")
	}
	if n := g.count(); n != 2 {
		t.Errorf("after a new evaluation: %d gatherings, want 2", n)
	}

	*now = now.Add(scrapeMaxAge - time.Millisecond)
	scrape(t, c, "")
	if n := g.count(); n != 2 {
		t.Errorf("within the age limit: %d gatherings, want 2", n)
	}
	*now = now.Add(time.Millisecond)
	scrape(t, c, "")
	if n := g.count(); n != 3 {
		t.Errorf("at the age limit: %d gatherings, want 3", n)
	}
}

func TestScrapeCacheGzip(t *testing.T) {
	c, _, _ := newCountedCache(t, &staticSource{st: healthyState()})
	plain := scrape(t, c, "")
	if enc := plain.Header().Get("Content-Encoding"); enc != "" {
		t.Errorf("without Accept-Encoding: Content-Encoding %q", enc)
	}
	if ct := plain.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{
		{"gzip", true},
		{"deflate, gzip;q=0.5", true},
		{"GZIP", true},
		{"gzip;q=0", false},
		{"gzip; q=0.0, identity", false},
		{"br, zstd", false},
	} {
		t.Run(tc.accept, func(t *testing.T) {
			rec := scrape(t, c, tc.accept)
			body := rec.Body.Bytes()
			if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
				t.Fatalf("Accept-Encoding %q: gzip = %v, want %v", tc.accept, got, tc.gzip)
			}
			if tc.gzip {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if body, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(body, plain.Body.Bytes()) {
				t.Error("the body differs from the plain scrape")
			}
			if !strings.Contains(rec.Header().Get("Vary"), "Accept-Encoding") {
				t.Error("no Vary: Accept-Encoding")
			}
		})
	}
}
