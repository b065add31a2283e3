package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// startProcess starts a long-running child and stops it (SIGTERM, then SIGKILL after 10 s)
// when the test ends; its output is logged if the test failed.
func startProcess(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	lab.StartProcess(t, name, exec.Command(bin, args...))
}

// promQuery evaluates an instant query and returns its samples as label set (in Prometheus's
// text form) to value; ok is false while Prometheus does not answer.
func promQuery(ctx context.Context, base, query string) (samples map[string]float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		return nil, false
	}
	samples = map[string]float64{}
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, false
		}
		delete(r.Metric, "__name__")
		samples[fmt.Sprint(r.Metric)] = v
	}
	return samples, true
}

// TestFleet runs a fleet as the recording rules expect one: many advisors, each watching its
// own PostgreSQL, scraped by one real Prometheus that evaluates deploy/prometheus/recording.yml.
// Three throwaway clusters stand in for three kinds of host - fsync=off, a small wal_buffers
// with open_datasync, and a healthy one - each watched by seven advisors (seven "hosts" with
// the same configuration), and the aggregates must count exactly the hosts set up that way.
func TestFleet(t *testing.T) {
	prometheus := lab.RequireTool(t, "prometheus", lab.PrometheusHint)
	lab.RequireServer(t)
	const perCluster = 7

	dir := t.TempDir()
	bin := filepath.Join(dir, "pgwal-advisor")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/pgwal-advisor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}

	kinds := []struct {
		name     string
		settings map[string]string
	}{
		{"fsync-off", map[string]string{"fsync": "off"}},
		{"small-buffers-open-datasync", map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"}},
		{"healthy", map[string]string{"track_wal_io_timing": "on"}},
	}
	var targets []string
	hostsOf := map[string][]string{}
	for _, k := range kinds {
		c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: k.settings})
		for i := range perCluster {
			addr, err := lab.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			// Probing is off: 21 probes on one shared disk would measure each other.
			startProcess(t, fmt.Sprintf("advisor %s #%d", k.name, i), bin, "run",
				"--dsn", c.DSN(), "--wal-dir", filepath.Join(c.DataDir(), "pg_wal"),
				"--web.listen-address", addr, "--interval", "2s", "--probe.dir", "")
			targets = append(targets, addr)
			hostsOf[k.name] = append(hostsOf[k.name], addr)
		}
	}

	// The rule group evaluates every minute in production; here every second, so that the test
	// does not wait for the group's first slot.
	rules := string(readFile(t, recordingFile))
	if strings.Count(rules, "interval: 1m\n") != 1 {
		t.Fatalf("%s: want one group with interval: 1m", recordingFile)
	}
	rules = strings.Replace(rules, "interval: 1m\n", "interval: 1s\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "recording.yml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = strconv.Quote(a)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - recording.yml
scrape_configs:
  - job_name: pgwal-advisor
    scrape_timeout: 1s
    static_configs:
      - targets: [%s]
`, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	startProcess(t, "prometheus", prometheus,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	base := "http://" + promAddr

	all := float64(len(targets))
	nFsyncOff := float64(len(hostsOf["fsync-off"]))
	// Every cluster but the healthy one leaves track_wal_io_timing at its default, off.
	nTimingOff := all - float64(len(hostsOf["healthy"]))
	want := map[string]map[string]float64{
		`sum(up{job="pgwal-advisor"})`:                                                            {"map[]": all},
		`fleet:pgwal_advisor_finding:hosts{rule="fsync-off"}`:                                     {"map[rule:fsync-off severity:critical]": nFsyncOff},
		`fleet:pgwal_advisor_finding:hosts{rule="track-wal-io-timing-off"}`:                       {"map[rule:track-wal-io-timing-off severity:info]": nTimingOff},
		`fleet:pgwal_advisor_wal_storage_volatile:hosts`:                                          {"map[]": 0},
		`fleet:pgwal_advisor_wal_storage_volatile:hosts_reporting`:                                {"map[]": all},
		`fleet:pgwal_advisor_apply_change_applied:hosts`:                                          {"map[]": 0},
		`fleet:pgwal_advisor_apply_change_pending_restart:hosts`:                                  {"map[]": 0},
		`count(count by (instance) (pgwal_advisor_wal_sync_method_info{method="open_datasync"}))`: {"map[]": float64(len(hostsOf["small-buffers-open-datasync"]))},
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	got := map[string]map[string]float64{}
	for {
		equal := true
		for q, w := range want {
			s, ok := promQuery(ctx, base, q)
			got[q] = s
			if !ok || fmt.Sprint(s) != fmt.Sprint(w) {
				equal = false
			}
		}
		if equal {
			break
		}
		if err := lab.Sleep(ctx, time.Second); err != nil {
			for q, w := range want {
				if fmt.Sprint(got[q]) != fmt.Sprint(w) {
					t.Errorf("%s = %v, want %v", q, got[q], w)
				}
			}
			t.Fatalf("the aggregates did not reach the fleet's counts within 2 minutes")
		}
	}
	for q, w := range want {
		t.Logf("%s = %v", q, w)
	}

	// Every panel of the fleet dashboard shows something on this fleet, except those that need
	// what the fleet does not do: probing (off here) and applied changes (none).
	mayBeEmpty := map[string]bool{
		"fleet:pgwal_advisor_probe_fdatasync_p50_seconds:quantile":  true,
		"fleet:pgwal_advisor_probe_fdatasync_p50_seconds:max":       true,
		"fleet:pgwal_advisor_apply_change_applied:hosts_by_setting": true,
	}
	r := strings.NewReplacer("$__rate_interval", "1m")
	for _, p := range dashboardPanels(t, fleetDashboard) {
		for _, tg := range p.Targets {
			q := r.Replace(tg.Expr)
			s, ok := promQuery(ctx, base, q)
			switch {
			case !ok:
				t.Errorf("fleet dashboard, panel %q: query %s failed", p.Title, q)
			case len(s) == 0 && !mayBeEmpty[q]:
				t.Errorf("fleet dashboard, panel %q: %s is empty on a fleet of %d advisors", p.Title, q, len(targets))
			default:
				t.Logf("fleet dashboard, panel %q: %s: %d series", p.Title, q, len(s))
			}
		}
	}
}
