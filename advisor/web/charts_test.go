package web

import (
	"encoding/json"
	"encoding/xml"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// historyState is the healthy state with five snapshots 15 s apart: WAL grows by 1.5MB a
// step, a checkpoint is requested in the third interval, and the server restarts (its counters
// reset) before the last snapshot.
func historyState() advisor.State {
	st := healthyState()
	h := rules.NewHistory(10)
	start := fixtureTime().Add(-time.Minute)
	booted := start.Add(-time.Hour)
	for i := range 5 {
		s := snapshot()
		s.Time = start.Add(time.Duration(i) * 15 * time.Second)
		s.Postgres.StartTime = booted
		w := s.Postgres.WAL
		w.Bytes = int64(i) * 1536 << 10
		w.Writes = int64(i) * 100
		w.BuffersFull = int64(i) * 10
		if i >= 3 {
			s.Postgres.Checkpointer.Requested = 3
			s.Postgres.Checkpointer.SyncTimeSeconds = 1.25
		}
		if i == 4 {
			s.Postgres.StartTime = s.Time.Add(-time.Second)
			w.Bytes, w.Writes, w.BuffersFull = 1000, 1, 0
		}
		s.Kernel.Meminfo.DirtyBytes = int64(i) << 20
		s.Kernel.Meminfo.WritebackBytes = int64(i) << 10
		h.Add(*s)
		st.Snapshot = s
	}
	st.History = h
	st.Evaluated = st.Snapshot.Time
	return st
}

func TestChartsOf(t *testing.T) {
	c := chartsOf(historyState())
	if c.WindowSeconds != 60 {
		t.Errorf("window = %v s, want 60", c.WindowSeconds)
	}
	// Three intervals before the restart; the one across it is left out.
	if len(c.WAL) != 3 {
		t.Fatalf("WAL points = %d, want 3: %+v", len(c.WAL), c.WAL)
	}
	for _, p := range c.WAL {
		if want := float64(1536<<10) / 15; p.BytesPerSecond != want {
			t.Errorf("WAL bytes/s at %v = %v, want %v", p.Time, p.BytesPerSecond, want)
		}
		if p.BuffersFullShare != 0.1 {
			t.Errorf("buffers-full share at %v = %v, want 0.1", p.Time, p.BuffersFullShare)
		}
	}
	if len(c.Dirty) != 5 || c.Dirty[2].DirtyBytes != 2<<20 || c.Dirty[2].DirtyThresholdBytes != 2<<30 {
		t.Errorf("dirty points = %+v, want 5 with Dirty 2MB at the third", c.Dirty)
	}
	if len(c.Checkpoints) != 1 || c.Checkpoints[0].Requested != 1 || c.Checkpoints[0].SyncSeconds != 0.5 {
		t.Errorf("checkpoints = %+v, want one interval with 1 requested and 0.5 s of sync", c.Checkpoints)
	}
	bars := c.SyncLatency.Bars
	if c.SyncLatency.MethodInUse != "fdatasync" || len(bars) != 2 {
		t.Fatalf("sync latency = %+v, want fdatasync in use and 2 bars", c.SyncLatency)
	}
	if bars[0].Method != "fdatasync" || !bars[0].InUse || bars[0].MeanSeconds != 500e-6 || bars[1].InUse {
		t.Errorf("bars = %+v, want fdatasync (in use, 500 µs) first", bars)
	}
}

func TestChartsMissing(t *testing.T) {
	st := probeDisabledState()
	c := chartsOf(st)
	if !strings.Contains(c.SyncLatency.Missing, "not on the file system") || len(c.SyncLatency.Bars) != 0 {
		t.Errorf("sync latency = %+v, want no bars and the reason probing is off", c.SyncLatency)
	}
	page := chartsHTML(c)
	for _, want := range []string{"sync probing is off", "not enough history yet", "no kernel readings yet", "no checkpoint in the history window"} {
		if !strings.Contains(page, want) {
			t.Errorf("charts section lacks %q", want)
		}
	}
}

// TestChartsSVG checks the drawn figures: well-formed markup, and every figure's data-*
// attribute equal to the API's value.
func TestChartsSVG(t *testing.T) {
	c := chartsOf(historyState())
	page := chartsHTML(c)
	if err := wellFormed(page); err != nil {
		t.Fatalf("charts section is not well-formed: %v", err)
	}
	for _, id := range []string{anchorSync, anchorWAL, anchorDirty, anchorCheckpoints} {
		if !strings.Contains(page, `<figure id="`+id+`"`) {
			t.Errorf("no figure %s", id)
		}
	}
	for _, kind := range []string{"sync_latency", "wal_bytes", "wal_buffers_full", "dirty", "checkpoints"} {
		if !strings.Contains(page, `data-chart="`+kind+`"`) {
			t.Errorf("no svg of kind %s", kind)
		}
	}
	wantAttr := func(name, value string) {
		t.Helper()
		if !strings.Contains(page, name+`="`+value+`"`) {
			t.Errorf("no %s=%q in the charts", name, value)
		}
	}
	wantAttr("data-mean-seconds", num(500e-6))
	wantAttr("data-in-use", "true")
	wantAttr("data-sync-seconds", "0.5")
	wantAttr("data-requested", "1")
	rate := num(float64(1536<<10) / 15)
	wantAttr("data-values", strings.Join([]string{rate, rate, rate}, " "))
	wantAttr("data-values", "0.1 0.1 0.1")
	wantAttr("data-values", "0 1048576 2097152 3145728 4194304")
	if n := strings.Count(page, `<g class="bar"`); n != 2 {
		t.Errorf("%d bars, want 2", n)
	}
}

func wellFormed(fragment string) error {
	d := xml.NewDecoder(strings.NewReader("<root>" + fragment + "</root>"))
	d.Strict = true
	for {
		if _, err := d.Token(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestLandingCharts serves the landing page and the charts endpoint from one state: the page
// has the charts and links each finding with a chart to it.
func TestLandingCharts(t *testing.T) {
	st := historyState()
	st.Findings = []rules.Finding{{
		Rule: "sync-method-slow", Severity: rules.Warning, Setting: "wal_sync_method", Current: "fdatasync",
		Recommended: "open_datasync", Action: rules.ActionReload, Summary: "open_datasync is faster here.",
		Evidence:  []rules.Evidence{{Name: "fdatasync_mean", Value: 500, Unit: "us"}},
		FirstSeen: fixtureTime(), LastSeen: fixtureTime(),
	}}
	h, err := NewHandler(&staticSource{st: st}, HandlerOptions{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := get(t, h, http.MethodGet, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d %s", code, body)
	}
	for _, want := range []string{`href="#` + anchorSync + `"`, `id="` + anchorSync + `"`, "fdatasync_mean = 500 us", `href="/api/v1/charts"`} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page lacks %q", want)
		}
	}
	if regexp.MustCompile(`<(script|img|link)\b`).MatchString(body) {
		t.Error("the landing page loads a script or an external asset")
	}
	code, _, body = get(t, h, http.MethodGet, "/api/v1/charts")
	got := decode[Charts](t, body)
	if code != http.StatusOK || len(got.WAL) != 3 || len(got.Dirty) != 5 || len(got.Checkpoints) != 1 || len(got.SyncLatency.Bars) != 2 {
		t.Errorf("/api/v1/charts = %d %+v, want the series of chartsOf", code, got)
	}
	empty, err := NewHandler(&staticSource{}, HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(t, empty, http.MethodGet, "/api/v1/charts"); code != http.StatusServiceUnavailable {
		t.Errorf("/api/v1/charts before the first snapshot: %d, want 503", code)
	}
}

// TestNumMatchesJSON: a data-* attribute must read exactly as the API's figure.
func TestNumMatchesJSON(t *testing.T) {
	for _, v := range []float64{0, 1, -2.5, 1048576, 4.194304e6, 1e20, 1e21, 1.5e-6, 9.99e-7, 1e-7, 123e-9, 0.1 + 0.2, 1.7976931348623157e308} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := num(v); got != string(b) {
			t.Errorf("num(%v) = %s, encoding/json %s", v, got, b)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for _, c := range []struct {
		format func(float64) string
		v      float64
		want   string
	}{
		{formatSeconds, 2e-3, "2 ms"},
		{formatSeconds, 2.5e-3, "2.5 ms"},
		{formatSeconds, 0, "0"},
		{formatShare, 0.5, "50%"},
		{collector.FormatBytes, 1.5 * 1024 * 1024, "1.5MB"},
		{formatBytesPerSecond, 20 * 1024, "20kB/s"},
	} {
		if got := tickLabel(c.format, c.v); got != c.want {
			t.Errorf("tickLabel(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
