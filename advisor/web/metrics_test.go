package web

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestCollectorGolden compares the collector's output for hand-built states with exposition
// text in testdata/*.prom (go test ./advisor/web -run Golden -update rewrites them; review the
// diff).
func TestCollectorGolden(t *testing.T) {
	cases := []struct {
		name  string
		state advisor.State
	}{
		{"before-first-snapshot", advisor.State{ProbeDisabledReason: "no probe directory"}},
		{"healthy", healthyState()},
		{"fsync-off", fsyncOffState()},
		{"probe-disabled", probeDisabledState()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCollector(&staticSource{st: tc.state}, "1.2.3", "go1.26.8")
			golden := filepath.Join("testdata", tc.name+".prom")
			if *update {
				if err := os.WriteFile(golden, exposition(t, c), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if err := testutil.CollectAndCompare(c, bytes.NewReader(want)); err != nil {
				t.Errorf("metrics differ from %s:\n%v", golden, err)
			}
		})
	}
}

// exposition renders everything a collector emits as exposition text. (testutil's
// CollectAndFormat without metric names formats nothing.)
func exposition(t *testing.T, c prometheus.Collector) []byte {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// A finding that clears must disappear from the next scrape: the collector keeps no series
// between scrapes.
func TestCollectorNoStaleSeries(t *testing.T) {
	src := &staticSource{st: fsyncOffState()}
	c := NewCollector(src, "v", "go")
	if got := testutil.CollectAndCount(c, "pgwal_advisor_finding"); got != 2 {
		t.Fatalf("findings with fsync off: got %d series, want 2", got)
	}
	if got := testutil.CollectAndCount(c, "pgwal_advisor_recommendation_info"); got != 1 {
		t.Fatalf("recommendations with fsync off: got %d series, want 1", got)
	}
	src.set(healthyState())
	if got := testutil.CollectAndCount(c, "pgwal_advisor_finding"); got != 0 {
		t.Errorf("findings after fsync was turned on: got %d series, want 0", got)
	}
	if got := testutil.CollectAndCount(c, "pgwal_advisor_recommendation_info"); got != 0 {
		t.Errorf("recommendations after fsync was turned on: got %d series, want 0", got)
	}
}

// Duplicate findings (a rule bug) or label values that are not UTF-8 must not fail the scrape
// of everything else.
func TestCollectorSurvivesBadFindings(t *testing.T) {
	st := fsyncOffState()
	st.Findings = append(st.Findings, st.Findings[0])
	st.Snapshot.Postgres.Settings["wal_sync_method"] = setting("fdata\xffsync")
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(&staticSource{st: st}, "v", "go"))
	mfs, err := reg.Gather()
	if err == nil {
		t.Fatal("gather with a label value that is not UTF-8: want an error for that metric")
	}
	var findings int
	for _, mf := range mfs {
		if mf.GetName() == "pgwal_advisor_finding" {
			findings = len(mf.GetMetric())
		}
	}
	if findings != 2 {
		t.Errorf("findings with a duplicate: got %d series, want 2 (the duplicate dropped, the rest kept)", findings)
	}
	if len(mfs) < 30 {
		t.Errorf("gathered %d families despite one bad metric, want the rest", len(mfs))
	}
}

// otherCollectors are docs/metrics.md's sections whose metrics another package's collector
// exports and tests against the page (advisor/apply: "Apply"); the daemon registers those
// collectors next to this one (HandlerOptions.Collectors).
func otherCollectors() []string { return []string{"Apply"} }

// docMetrics reads the metric names from the tables of docs/metrics.md, leaving out the
// sections of otherCollectors.
func docMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	section := ""
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		if !strings.HasPrefix(line, "| `") || slices.Contains(otherCollectors(), section) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
		names[name] = true
	}
	if len(names) == 0 {
		t.Fatal("docs/metrics.md: no metric table rows found")
	}
	return names
}

// descNames returns the metric names a collector describes. Desc has no accessor for its name;
// its String form is stable: Desc{fqName: "pgwal_advisor_up", help: ...}.
func descNames(c prometheus.Collector) map[string]bool {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		_, rest, _ := strings.Cut(d.String(), `fqName: "`)
		name, _, _ := strings.Cut(rest, `"`)
		names[name] = true
	}
	return names
}

// TestMetricsDocumented checks docs/metrics.md against the code both ways: every metric the
// collector can emit is documented, and every documented metric is emitted for a full state.
func TestMetricsDocumented(t *testing.T) {
	documented := docMetrics(t)
	c := NewCollector(&staticSource{st: fullState()}, "v", "go")
	registered := descNames(c)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, mf := range mfs {
		emitted[mf.GetName()] = true
	}

	for name := range registered {
		if !documented[name] {
			t.Errorf("metric %s is registered but not documented in docs/metrics.md", name)
		}
		if !emitted[name] {
			t.Errorf("metric %s is registered but not emitted for the full state (extend fullState)", name)
		}
	}
	for name := range documented {
		if !emitted[name] {
			t.Errorf("metric %s is documented in docs/metrics.md but not emitted for a full state", name)
		}
	}
}
