package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func newTestHandler(t *testing.T, src StateSource) http.Handler {
	t.Helper()
	h, err := NewHandler(src, HandlerOptions{Version: "1.2.3", GoVersion: "go1.26.8"})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// get serves one request and returns the status, the Content-Type and the body.
func get(t *testing.T, h http.Handler, method, path string) (int, string, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, body)
	}
	return v
}

func TestEndpointsBeforeFirstSnapshot(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: advisor.State{ProbeDisabledReason: "no probe directory"}})
	cases := []struct {
		path string
		code int
	}{
		{"/healthz", http.StatusOK},
		{"/readyz", http.StatusServiceUnavailable},
		{"/api/v1/findings", http.StatusServiceUnavailable},
		{"/api/v1/recommendations", http.StatusServiceUnavailable},
		{"/api/v1/snapshot", http.StatusServiceUnavailable},
		{"/metrics", http.StatusOK},
		{"/", http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			code, ctype, body := get(t, h, http.MethodGet, tc.path)
			if code != tc.code {
				t.Fatalf("GET %s: got %d, want %d\n%s", tc.path, code, tc.code, body)
			}
			if code == http.StatusServiceUnavailable {
				if ctype != "application/json; charset=utf-8" {
					t.Errorf("GET %s: Content-Type %q, want JSON", tc.path, ctype)
				}
				if !strings.Contains(body, "no snapshot yet") {
					t.Errorf("GET %s: body %s does not say why", tc.path, body)
				}
			}
		})
	}
	_, _, body := get(t, h, http.MethodGet, "/readyz")
	if got := decode[StatusResponse](t, body); got.Status != "not ready" || got.Reason == "" {
		t.Errorf("/readyz before the first snapshot = %+v, want not ready with a reason", got)
	}
	_, _, body = get(t, h, http.MethodGet, "/")
	if !strings.Contains(body, "No snapshot yet") {
		t.Errorf("landing page before the first snapshot does not say so:\n%s", body)
	}
}

func TestFindingsAPI(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: fsyncOffState()})
	code, ctype, body := get(t, h, http.MethodGet, "/api/v1/findings")
	if code != http.StatusOK || ctype != "application/json; charset=utf-8" {
		t.Fatalf("GET /api/v1/findings: %d %q\n%s", code, ctype, body)
	}
	got := decode[FindingsResponse](t, body)
	if len(got.Findings) != 2 {
		t.Fatalf("got %d findings, want 2:\n%s", len(got.Findings), body)
	}
	f := got.Findings[0]
	if f.Rule != "fsync-off" || f.Severity != rules.Critical || f.Action != rules.ActionNeverAuto || f.Recommended != "on" {
		t.Errorf("first finding = %+v, want fsync-off, critical, never-auto, recommended on", f.Finding)
	}
	if len(f.Evidence) != 1 || f.Evidence[0].Name != "fsync" || f.Evidence[0].Unit != rules.UnitBool {
		t.Errorf("fsync-off evidence = %+v, want the fsync bool", f.Evidence)
	}
	if want := RulesDocURL + "#fsync-off"; f.DocsURL != want {
		t.Errorf("docs_url = %q, want %q", f.DocsURL, want)
	}
	if !got.Evaluated.Equal(fixtureTime()) {
		t.Errorf("evaluated = %v, want %v", got.Evaluated, fixtureTime())
	}
	if got.NotEnoughData["checkpoint-stalls"] == "" {
		t.Errorf("not_enough_data = %v, want checkpoint-stalls' reason", got.NotEnoughData)
	}
	if !got.Probe.Enabled {
		t.Errorf("probe = %+v, want enabled", got.Probe)
	}
	// A finding without evidence still has a list, so clients can iterate without a nil check.
	if !strings.Contains(body, `"evidence": []`) {
		t.Errorf("a finding without evidence should have \"evidence\": []:\n%s", body)
	}
}

func TestRecommendationsAPI(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: fsyncOffState()})
	code, _, body := get(t, h, http.MethodGet, "/api/v1/recommendations")
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/recommendations: %d\n%s", code, body)
	}
	got := decode[RecommendationsResponse](t, body)
	want := Recommendation{Recommendation: rules.Recommendation{
		Setting: "fsync", Current: "off", Recommended: "on", Action: rules.ActionNeverAuto, Rule: "fsync-off",
		Severity: rules.Critical, Summary: "fsync is off: a crash can corrupt the cluster.",
		Evidence: []rules.Evidence{{Name: "fsync", Value: 0, Unit: rules.UnitBool}},
	}, DocsURL: RulesDocURL + "#fsync-off"}
	if len(got.Recommendations) != 1 {
		t.Fatalf("got %d recommendations, want 1 (findings without a recommended value are left out):\n%s", len(got.Recommendations), body)
	}
	r := got.Recommendations[0]
	if r.Setting != want.Setting || r.Current != want.Current || r.Recommended != want.Recommended || r.Action != want.Action ||
		r.Rule != want.Rule || r.Severity != want.Severity || r.Summary != want.Summary || r.DocsURL != want.DocsURL ||
		len(r.Evidence) != 1 || r.Evidence[0] != want.Evidence[0] {
		t.Errorf("recommendation:\n got %+v\nwant %+v", r, want)
	}

	// No findings: an empty list, not null.
	h = newTestHandler(t, &staticSource{st: healthyState()})
	_, _, body = get(t, h, http.MethodGet, "/api/v1/recommendations")
	if !strings.Contains(body, `"recommendations": []`) {
		t.Errorf("healthy server: want an empty list:\n%s", body)
	}
}

func TestSnapshotAPI(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: healthyState()})
	code, _, body := get(t, h, http.MethodGet, "/api/v1/snapshot")
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/snapshot: %d\n%s", code, body)
	}
	var doc struct {
		Postgres struct {
			VersionNum int `json:"version_num"`
		} `json:"postgres"`
		WALStorage struct {
			FSType string `json:"fs_type"`
		} `json:"wal_storage"`
		Parts []struct{ Name string } `json:"parts"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Postgres.VersionNum != 160004 || doc.WALStorage.FSType != "ext4" || len(doc.Parts) != 3 {
		t.Errorf("snapshot = %+v, want the collector's snapshot JSON", doc)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: healthyState()})
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, body := get(t, h, http.MethodGet, path); code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200\n%s", path, code, body)
		}
	}
}

func TestMethodsAndUnknownPaths(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: healthyState()})
	for _, path := range []string{"/", "/metrics", "/api/v1/findings", "/api/v1/recommendations", "/api/v1/snapshot", "/healthz", "/readyz"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader("{}")))
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %d, want 405", method, path, rec.Code)
				continue
			}
			if got := rec.Header().Get("Allow"); got != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q, want GET, HEAD", method, path, got)
			}
			if e := decode[ErrorResponse](t, rec.Body.String()); !strings.Contains(e.Error, method) {
				t.Errorf("%s %s: error %q does not name the method", method, path, e.Error)
			}
		}
		if code, _, _ := get(t, h, http.MethodHead, path); code != http.StatusOK {
			t.Errorf("HEAD %s: %d, want 200", path, code)
		}
	}
	code, ctype, body := get(t, h, http.MethodGet, "/api/v1/nothing")
	if code != http.StatusNotFound || ctype != "application/json; charset=utf-8" {
		t.Errorf("GET /api/v1/nothing: %d %q, want a JSON 404", code, ctype)
	}
	if e := decode[ErrorResponse](t, body); !strings.Contains(e.Error, "/api/v1/nothing") {
		t.Errorf("404 error %q does not name the path", e.Error)
	}
}

func TestLandingPage(t *testing.T) {
	st := fsyncOffState()
	// Everything a rule or the server puts on the page is escaped.
	st.Findings[1].Summary = `synchronous_commit is off <script>alert("x")</script>`
	st.Findings[1].Current = `"><img src=x onerror=alert(1)>`
	st.NotEnoughData["wal-lock-contention"] = "<b>need</b> 20 samples"
	h := newTestHandler(t, &staticSource{st: st})
	code, ctype, body := get(t, h, http.MethodGet, "/")
	if code != http.StatusOK || !strings.HasPrefix(ctype, "text/html") {
		t.Fatalf("GET /: %d %q", code, ctype)
	}
	for _, want := range []string{
		"<h1>pgwal-advisor</h1>", // the toolkit's page
		`href="/metrics"`, `href="/api/v1/findings"`, `href="/api/v1/recommendations"`, `href="/api/v1/snapshot"`,
		`<a href="https://github.com/pgwal-advisor/pgwal-advisor/blob/main/docs/rules.md#fsync-off">fsync-off</a>`,
		`<td>off &rarr; on</td>`, "<td>never-auto</td>", "<td>critical</td>",
		"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;",
		"&#34;&gt;&lt;img src=x onerror=alert(1)&gt;",
		"&lt;b&gt;need&lt;/b&gt; 20 samples",
		"Sync probing: on.",
		"Version: 1.2.3",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script>", "<img", "<b>need", "debug/pprof"} {
		if strings.Contains(body, bad) {
			t.Errorf("landing page contains %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("landing page:\n%s", body)
	}

	h = newTestHandler(t, &staticSource{st: probeDisabledState()})
	_, _, body = get(t, h, http.MethodGet, "/")
	if !strings.Contains(body, "Sync probing: off (probe directory &#34;/var/lib/pgwal-advisor/probe&#34; is not on the file system") {
		t.Errorf("landing page does not say why probing is off:\n%s", body)
	}
	h = newTestHandler(t, &staticSource{st: healthyState()})
	_, _, body = get(t, h, http.MethodGet, "/")
	if !strings.Contains(body, "No findings") {
		t.Errorf("landing page of a healthy server does not say there are no findings:\n%s", body)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: fullState()})
	code, _, body := get(t, h, http.MethodGet, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	for _, want := range []string{
		`pgwal_advisor_finding{rule="fsync-off",setting="fsync",severity="critical",state="firing"} 1`,
		`pgwal_advisor_build_info{goversion="go1.26.8",version="1.2.3"} 1`,
		"go_goroutines ", "process_resident_memory_bytes ", "promhttp_metric_handler_requests_total",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// promtool lints what /metrics serves (`promtool check metrics` must accept
// it): naming, units, HELP, counter suffixes.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := lookPromtool(t)
	for name, st := range map[string]advisor.State{"full": fullState(), "probe-disabled": probeDisabledState(), "empty": {}} {
		t.Run(name, func(t *testing.T) {
			_, _, body := get(t, newTestHandler(t, &staticSource{st: st}), http.MethodGet, "/metrics")
			cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(body)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
			}
		})
	}
}

// lookPromtool returns promtool's path; without it the test skips, except in CI.
func lookPromtool(t *testing.T) string {
	t.Helper()
	return lab.RequireTool(t, "promtool", lab.PrometheusHint)
}

// Concurrent scrapes share a collection in flight; each still gets the whole exposition, and a
// state change shows in the next scrape (a result is never reused after its collection).
func TestMetricsConcurrentScrapes(t *testing.T) {
	src := &staticSource{st: fsyncOffState()}
	h := newTestHandler(t, src)
	var wg sync.WaitGroup
	bodies := make([]string, 20)
	for i := range bodies {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			bodies[i] = rec.Body.String()
		})
	}
	wg.Wait()
	for i, body := range bodies {
		if !strings.Contains(body, `pgwal_advisor_finding{rule="fsync-off"`) || !strings.Contains(body, "go_goroutines") {
			t.Errorf("concurrent scrape %d is incomplete:\n%s", i, body)
		}
	}
	src.set(healthyState())
	if _, _, body := get(t, h, http.MethodGet, "/metrics"); strings.Contains(body, "pgwal_advisor_finding{") {
		t.Errorf("a cleared finding is still served after the state changed")
	}
}

// Other packages' collectors (the apply mode's) are served on the same /metrics; one that
// clashes with a built-in is refused at construction.
func TestExtraCollectors(t *testing.T) {
	extra := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pgwal_advisor_apply_journal_ok", Help: "test"})
	extra.Set(1)
	h, err := NewHandler(&staticSource{st: healthyState()}, HandlerOptions{Collectors: []prometheus.Collector{extra}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, body := get(t, h, http.MethodGet, "/metrics"); !strings.Contains(body, "pgwal_advisor_apply_journal_ok 1") {
		t.Errorf("the extra collector's metric is not served")
	}
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pgwal_advisor_up", Help: "clash"})
	if _, err := NewHandler(&staticSource{}, HandlerOptions{Collectors: []prometheus.Collector{clash}}); err == nil {
		t.Error("a collector that clashes with pgwal_advisor_up was accepted")
	}
}
