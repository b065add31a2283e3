package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
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

// awaitQueries polls Prometheus until every query returns exactly its wanted samples, and
// fails the test with what it last saw when ctx ends first.
func awaitQueries(ctx context.Context, t *testing.T, base string, want map[string]map[string]float64) {
	t.Helper()
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
			for _, q := range slices.Sorted(maps.Keys(want)) {
				t.Logf("%s = %v", q, want[q])
			}
			return
		}
		if err := lab.Sleep(ctx, time.Second); err != nil {
			for _, q := range slices.Sorted(maps.Keys(want)) {
				if fmt.Sprint(got[q]) != fmt.Sprint(want[q]) {
					t.Errorf("%s = %v, want %v", q, got[q], want[q])
				}
			}
			t.Fatalf("the central Prometheus did not reach the fleet's figures in time")
		}
	}
}

// fleetKind is one kind of host in TestFleet: a throwaway cluster with its settings, watched by
// hosts advisors (each one "host" of the fleet), with its WAL on a simulated disk or not, and
// the role of each host ("" for none).
type fleetKind struct {
	name     string
	settings map[string]string
	disk     *simdisk.Disk
	roles    []string
}

// TestFleet runs a fleet as large users run one: many advisors, each watching its own
// PostgreSQL, scraped by an edge Prometheus that remote-writes everything to a central
// Prometheus (its remote-write receiver on), which alone evaluates deploy/prometheus/recording.yml
// and alerts.yml. Through the central one's API, the fleet's counts, its outlier and its drift
// must come out as the fleet was built:
//
//   - fsync-off and small-buffers-open-datasync: three hosts each on the machine's own disk,
//     not probing and with no role; they make the per-finding counts.
//   - healthy: four hosts on a simulated 1 ms disk, two of role ledger, two of role orders.
//   - slow: one host of role ledger on a simulated 10 ms disk, the same settings as healthy: the
//     outlier, of its device class (all simulated-disk hosts share one) and by write wait.
//   - drifted: one host of role orders on the 1 ms disk with wal_compression on, where the rest
//     of orders runs it off: orders has drifted, ledger is in step.
//
// Probing hosts probe in short bursts on their own disk; the three simulated-disk clusters
// carry a light commit load so that their WAL write wait per byte can be compared.
func TestFleet(t *testing.T) {
	prometheus := lab.RequireTool(t, "prometheus", lab.PrometheusHint)
	lab.RequireServer(t)

	dir := t.TempDir()
	bin := filepath.Join(dir, "pgwal-advisor")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/pgwal-advisor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	fast := simdisk.MountForTest(t, simdisk.Options{Latency: time.Millisecond})
	slow := simdisk.MountForTest(t, simdisk.Options{Latency: 10 * time.Millisecond})
	timing := map[string]string{"track_wal_io_timing": "on"}
	kinds := []fleetKind{
		{name: "fsync-off", settings: map[string]string{"fsync": "off"}, roles: []string{"", "", ""}},
		{name: "small-buffers-open-datasync", settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"}, roles: []string{"", "", ""}},
		{name: "healthy", settings: timing, disk: fast, roles: []string{"ledger", "ledger", "orders", "orders"}},
		{name: "slow", settings: timing, disk: slow, roles: []string{"ledger"}},
		{name: "drifted", settings: map[string]string{"track_wal_io_timing": "on", "wal_compression": "on"}, disk: fast, roles: []string{"orders"}},
	}
	hostsOf, roleOf := startFleet(t, bin, kinds)

	central := startCentral(t, prometheus, dir)
	edge := startEdge(t, prometheus, dir, central, roleOf)

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	all := float64(len(roleOf))
	nFsyncOff := float64(len(hostsOf["fsync-off"]))
	nTimingOff := nFsyncOff + float64(len(hostsOf["small-buffers-open-datasync"]))
	slowHost := hostsOf["slow"][0]
	awaitQueries(ctx, t, central, map[string]map[string]float64{
		`sum(up{job="pgwal-advisor"})`:                                                            {"map[]": all},
		`fleet:pgwal_advisor_finding:hosts{rule="fsync-off"}`:                                     {"map[rule:fsync-off severity:critical]": nFsyncOff},
		`fleet:pgwal_advisor_finding:hosts{rule="track-wal-io-timing-off"}`:                       {"map[rule:track-wal-io-timing-off severity:info]": nTimingOff},
		`fleet:pgwal_advisor_wal_storage_volatile:hosts`:                                          {"map[]": 0},
		`fleet:pgwal_advisor_wal_storage_volatile:hosts_reporting`:                                {"map[]": all},
		`fleet:pgwal_advisor_apply_change_applied:hosts`:                                          {"map[]": 0},
		`fleet:pgwal_advisor_apply_change_pending_restart:hosts`:                                  {"map[]": 0},
		`count(count by (instance) (pgwal_advisor_wal_sync_method_info{method="open_datasync"}))`: {"map[]": float64(len(hostsOf["small-buffers-open-datasync"]))},
		// The six probing hosts form one class (a FUSE disk has no sysfs facts): big enough.
		`sum(fleet:pgwal_advisor_probe_fdatasync_p50_seconds:class_hosts)`: {"map[]": 6},
		// The slow host alone is an outlier, by its probe and by its WAL write wait.
		`count by (instance) (ALERTS{alertname="PgwalAdvisorSyncLatencyOutlier",alertstate="firing"})`:  {fmt.Sprintf("map[instance:%s]", slowHost): 1},
		`count by (instance) (ALERTS{alertname="PgwalAdvisorWALWriteWaitOutlier",alertstate="firing"})`: {fmt.Sprintf("map[instance:%s]", slowHost): 1},
		// orders has drifted in wal_compression and nothing else; ledger is in step.
		`count by (role, setting) (ALERTS{alertname="PgwalAdvisorSettingDrift",alertstate="firing"})`: {"map[role:orders setting:wal_compression]": 1},
		`count by (role) (fleet:pgwal_advisor_setting_info:distinct_values)`:                          {"map[role:ledger]": 10, "map[role:orders]": 10},
	})
	for _, q := range []string{
		"fleet:pgwal_advisor_probe_fdatasync_p50_seconds:ratio_to_class_median",
		"fleet:pgwal_advisor_wal_write_wait_seconds_per_byte:ratio_to_class_median",
	} {
		s, _ := promQuery(ctx, central, q)
		t.Logf("%s: %v", q, s)
	}

	// The edge evaluates no rules: the figures above are the central Prometheus's own.
	if s, ok := promQuery(ctx, edge, `{__name__=~"fleet:.+|ALERTS"}`); !ok || len(s) > 0 {
		t.Errorf("the edge Prometheus has recorded series or alerts (%v, answered %v); the rules belong to the central one", s, ok)
	}

	// Every panel of the fleet dashboard shows something on this fleet, except the applied
	// changes (this fleet applies none).
	mayBeEmpty := map[string]bool{"fleet:pgwal_advisor_apply_change_applied:hosts_by_setting": true}
	r := strings.NewReplacer("$__rate_interval", "1m")
	for _, p := range dashboardPanels(t, fleetDashboard) {
		for _, tg := range p.Targets {
			q := r.Replace(tg.Expr)
			s, ok := promQuery(ctx, central, q)
			switch {
			case !ok:
				t.Errorf("fleet dashboard, panel %q: query %s failed", p.Title, q)
			case len(s) == 0 && !mayBeEmpty[q]:
				t.Errorf("fleet dashboard, panel %q: %s is empty on a fleet of %d advisors", p.Title, q, len(roleOf))
			default:
				t.Logf("fleet dashboard, panel %q: %s: %d series", p.Title, q, len(s))
			}
		}
	}
}

// startFleet starts each kind's cluster and its advisors, and a commit load on the clusters on
// a simulated disk. It returns the advisors' addresses per kind and the role of each.
func startFleet(t *testing.T, bin string, kinds []fleetKind) (hostsOf map[string][]string, roleOf map[string]string) {
	t.Helper()
	hostsOf, roleOf = map[string][]string{}, map[string]string{}
	var loaded []*lab.Cluster
	for _, k := range kinds {
		opts := lab.ClusterOptions{Settings: k.settings}
		if k.disk != nil {
			opts.WALDir = filepath.Join(k.disk.Mountpoint(), "wal-"+k.name)
		}
		c := lab.NewTestCluster(t, opts)
		walDir := filepath.Join(c.DataDir(), "pg_wal")
		if k.disk != nil {
			walDir = opts.WALDir
			loaded = append(loaded, c)
		}
		for i, role := range k.roles {
			addr, err := lab.FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			// The machine's own disk is shared by the clusters on it, and its probes would
			// measure each other: only the hosts on a simulated disk probe, whose syncs wait
			// without holding each other up. Each has a probe directory of its own.
			probeDir := ""
			if k.disk != nil {
				probeDir = filepath.Join(k.disk.Mountpoint(), fmt.Sprintf("probe-%s-%d", k.name, i))
				if err := os.Mkdir(probeDir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			startProcess(t, fmt.Sprintf("advisor %s #%d", k.name, i), bin, "run",
				"--dsn", c.DSN(), "--wal-dir", walDir, "--web.listen-address", addr, "--interval", "2s",
				"--probe.dir", probeDir, "--probe.burst", "500ms", "--probe.interval", "5s", "--log.level", "warn")
			hostsOf[k.name] = append(hostsOf[k.name], addr)
			roleOf[addr] = role
		}
	}
	startCommitLoad(t, loaded)
	return hostsOf, roleOf
}

// startCommitLoad commits 4 kB every 40 ms on each cluster until the test ends: 25 commits
// and some 110 kB of WAL a second. The 10 ms disk takes that many commits with room to spare,
// so every cluster commits at the same rate and its write wait per byte follows its disk. The
// rules' floor is 10 kB/s over 5 minutes, and a 5-minute rate() of a series younger than that
// counts its increase over the whole window: at 110 kB/s a host is judged within half a minute.
func startCommitLoad(t *testing.T, clusters []*lab.Cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(clusters))
	for _, c := range clusters {
		wg.Go(func() {
			conn, err := c.Connect(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, "CREATE TABLE load (v text)"); err != nil {
				errs <- fmt.Errorf("create the load's table: %w", err)
				return
			}
			tick := time.NewTicker(40 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				// Four rows of a kilobyte of md5 text, which does not compress: 4 kB of WAL.
				if _, err := conn.Exec(ctx, "INSERT INTO load SELECT (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 32)) FROM generate_series(1, 4)"); err != nil && ctx.Err() == nil {
					errs <- fmt.Errorf("commit load: %w", err)
					return
				}
			}
		})
	}
	// Registered after the clusters' cleanups, so the load stops before they do.
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// forRE matches an alert's `for:`.
var forRE = regexp.MustCompile(`(?m)^(\s+)for: \S+$`)

// startCentral starts the central Prometheus: the remote-write receiver, with the project's
// recording rules and alerts loaded and no scrape of its own. The rules are copies in which
// only what sets the pace changes: the groups evaluate every second rather than every minute
// and the alerts' `for:` is 5 s, so that the test waits seconds for what takes minutes in
// production; the expressions are the real ones. It returns the Prometheus's base URL.
func startCentral(t *testing.T, prometheus, dir string) string {
	t.Helper()
	rules := string(readFile(t, recordingFile))
	if n := strings.Count(rules, "interval: 1m\n"); n < 3 {
		t.Fatalf("%s: %d groups with interval: 1m, want every group (3 or more)", recordingFile, n)
	}
	rules = strings.ReplaceAll(rules, "interval: 1m\n", "interval: 1s\n")
	alerts := forRE.ReplaceAllString(string(readFile(t, alertsFile)), "${1}for: 5s")
	central := filepath.Join(dir, "central")
	writeFiles(t, central, map[string]string{
		"recording.yml": rules,
		"alerts.yml":    alerts,
		"prometheus.yml": `global:
  evaluation_interval: 1s
rule_files:
  - recording.yml
  - alerts.yml
`,
	})
	return startPrometheus(t, "central prometheus", prometheus, central, "--web.enable-remote-write-receiver")
}

// startEdge starts the edge Prometheus: it scrapes every advisor, each with its role as a
// target label where it has one, evaluates nothing, and remote-writes everything to central.
// It returns the Prometheus's base URL.
func startEdge(t *testing.T, prometheus, dir, central string, roleOf map[string]string) string {
	t.Helper()
	byRole := map[string][]string{}
	for addr, role := range roleOf {
		byRole[role] = append(byRole[role], strconv.Quote(addr))
	}
	var groups strings.Builder
	for _, role := range slices.Sorted(maps.Keys(byRole)) {
		fmt.Fprintf(&groups, "      - targets: [%s]\n", strings.Join(slices.Sorted(slices.Values(byRole[role])), ", "))
		if role != "" {
			fmt.Fprintf(&groups, "        labels:\n          role: %s\n", role)
		}
	}
	edge := filepath.Join(dir, "edge")
	writeFiles(t, edge, map[string]string{"prometheus.yml": fmt.Sprintf(`global:
  scrape_interval: 1s
  external_labels:
    site: lab
scrape_configs:
  - job_name: pgwal-advisor
    scrape_timeout: 1s
    static_configs:
%sremote_write:
  - url: %s/api/v1/write
    queue_config:
      batch_send_deadline: 1s
`, groups.String(), central)})
	return startPrometheus(t, "edge prometheus", prometheus, edge)
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startPrometheus starts a Prometheus on a free loopback port with dir's prometheus.yml and
// its storage in dir, and returns its base URL.
func startPrometheus(t *testing.T, name, prometheus, dir string, flags ...string) string {
	t.Helper()
	addr, err := lab.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	startProcess(t, name, prometheus, append([]string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn",
	}, flags...)...)
	return "http://" + addr
}
