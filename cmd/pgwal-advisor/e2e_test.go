package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/deploy"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// lookTool returns a Prometheus binary's path; without it the test skips, except in CI, where
// the suite must not pass by skipping.
func lookTool(t *testing.T, name string) string {
	t.Helper()
	return lab.RequireTool(t, name, lab.PrometheusHint)
}

// promtoolCheckMetrics lints exposition text with `promtool check metrics`.
func promtoolCheckMetrics(t *testing.T, metrics string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), lookTool(t, "promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(metrics)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics rejects /metrics: %v\n%s", err, out.String())
	}
}

// startPrometheus starts a real Prometheus on a free loopback port, scraping target every
// second with the project's alert rules loaded, and stops it when the test ends.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := lookTool(t, "prometheus")
	dir := t.TempDir()
	// The alerts hold their findings back for minutes (`for: 2m` and longer) to ride out
	// restarts; the test has seconds, so its copy of the rules has every `for:` set to 0s.
	// Nothing else in the rules changes.
	forLine := regexp.MustCompile(`(?m)^(\s+)for: \S+$`)
	rules := forLine.ReplaceAll(deploy.AlertRules(), []byte("${1}for: 0s"))
	if bytes.Equal(rules, deploy.AlertRules()) {
		t.Fatal("no `for:` found to shorten in deploy/prometheus/alerts.yml")
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - alerts.yml
scrape_configs:
  - job_name: pgwal-advisor
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	lab.StartProcess(t, "prometheus", cmd)
	return "http://" + addr
}

// promAPI queries Prometheus's HTTP API and decodes its data field into v; it returns false
// while Prometheus does not answer yet.
func promAPI(t *testing.T, base, path string, v any) bool {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		return false
	}
	if err := json.Unmarshal(body.Data, v); err != nil {
		t.Fatalf("decode %s: %v\n%s", path, err, body.Data)
	}
	return true
}

// TestEndToEnd is the daemon's end-to-end test: a throwaway cluster with fsync=off, the daemon,
// and a real Prometheus with deploy/prometheus/alerts.yml loaded; through Prometheus's API the
// target is up, the fsync-off finding's series is there and PgwalAdvisorFsyncOff is pending or
// firing. Everything is stopped at the end (t.Cleanup, in reverse order of starting).
func TestEndToEnd(t *testing.T) {
	lookTool(t, "prometheus")
	lookTool(t, "promtool")
	start := time.Now()
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: map[string]string{"fsync": "off"}})
	// The cluster's directory and t.TempDir() are both under os.TempDir(): the probe is on the
	// WAL's file system.
	probeDir := t.TempDir()
	d := startRun(t, "--dsn", c.DSN(), "--interval", "1s", "--probe.dir", probeDir, "--probe.burst", "200ms", "--log.level", "warn")
	waitFor(t, 20*time.Second, "the daemon's first snapshot", func() bool { code, _ := d.get(t, "/readyz"); return code == http.StatusOK })

	// What a real daemon serves passes promtool's lint.
	waitFor(t, 20*time.Second, "the fsync-off finding on /metrics", func() bool {
		_, body := d.get(t, "/metrics")
		return strings.Contains(body, `pgwal_advisor_finding{rule="fsync-off"`)
	})
	_, metrics := d.get(t, "/metrics")
	promtoolCheckMetrics(t, metrics)

	prom := startPrometheus(t, strings.TrimPrefix(d.base, "http://"))
	deadline := 60 * time.Second
	waitFor(t, deadline, "the target to be up in Prometheus", func() bool {
		var targets struct {
			ActiveTargets []struct {
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		}
		return promAPI(t, prom, "/api/v1/targets", &targets) && len(targets.ActiveTargets) == 1 && targets.ActiveTargets[0].Health == "up"
	})
	waitFor(t, deadline, "pgwal_advisor_finding{rule=\"fsync-off\"} in Prometheus", func() bool {
		var result struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		}
		q := url.QueryEscape(`pgwal_advisor_finding{rule="fsync-off"} == 1`)
		return promAPI(t, prom, "/api/v1/query?query="+q, &result) && len(result.Result) == 1 &&
			result.Result[0].Metric["severity"] == "critical" && result.Result[0].Metric["job"] == "pgwal-advisor"
	})
	waitFor(t, deadline, "PgwalAdvisorFsyncOff pending or firing", func() bool {
		var alerts struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		if !promAPI(t, prom, "/api/v1/alerts", &alerts) {
			return false
		}
		for _, a := range alerts.Alerts {
			if a.Labels["alertname"] == "PgwalAdvisorFsyncOff" && (a.State == "pending" || a.State == "firing") {
				return true
			}
		}
		return false
	})
	t.Logf("end to end in %v", time.Since(start).Round(100*time.Millisecond))
}
