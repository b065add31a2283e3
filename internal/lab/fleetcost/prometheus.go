package fleetcost

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// fleetConfig is what a Prometheus of one run is told: the fleet's size and roles, the one
// daemon every identity is, the pace and the rule files.
type fleetConfig struct {
	Hosts, RoleSize                             int
	Daemon                                      string
	ScrapeInterval, ScrapeTimeout, EvalInterval time.Duration
	RuleFiles                                   []string
}

// hostName is the i-th identity's target, the `instance` its series carry.
func hostName(i int) string { return fmt.Sprintf("db%05d.fleet.lab:9817", i) }

// roleName is the role of the hosts from i*RoleSize on.
func roleName(i int) string { return fmt.Sprintf("role%04d", i) }

// prometheusConfig is prometheus.yml for a run: the job docs/fleet.md describes (job
// pgwal-advisor, its interval and timeout), with one static target per host identity, listed by
// role as an inventory would, and relabelling that keeps each target's name as its instance and
// sends the scrape to the daemon.
func prometheusConfig(c fleetConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n",
		promDuration(c.ScrapeInterval), promDuration(c.ScrapeTimeout), promDuration(c.EvalInterval))
	b.WriteString("rule_files:\n")
	for _, f := range c.RuleFiles {
		fmt.Fprintf(&b, "  - %q\n", f)
	}
	b.WriteString("scrape_configs:\n  - job_name: pgwal-advisor\n    static_configs:\n")
	for first := 0; first < c.Hosts; first += c.RoleSize {
		targets := make([]string, 0, c.RoleSize)
		for i := first; i < min(first+c.RoleSize, c.Hosts); i++ {
			targets = append(targets, hostName(i))
		}
		fmt.Fprintf(&b, "      - targets: [%s]\n        labels: {role: %s}\n", strings.Join(targets, ", "), roleName(first/c.RoleSize))
	}
	fmt.Fprintf(&b, `    relabel_configs:
      - source_labels: [__address__]
        target_label: instance
      - target_label: __address__
        replacement: %q
`, c.Daemon)
	return b.String()
}

// promDuration writes d as Prometheus's configuration reads it ("30s", "1m", "1500ms").
func promDuration(d time.Duration) string {
	switch {
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	default:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
}

// groupIntervalRE matches a rule group's own `interval:`.
var groupIntervalRE = regexp.MustCompile(`(?m)^(\s+)interval: \S+$`)

// ruleFile is one rule file as read at the start, so that every run loads the same rules.
type ruleFile struct {
	name    string
	content []byte
}

func readRuleFiles(paths []string) ([]ruleFile, error) {
	files := make([]ruleFile, 0, len(paths))
	seen := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read the rule file: %w (run from the repository's root, or name the files with --rules)", err)
		}
		name := filepath.Base(p)
		if seen[name] {
			return nil, fmt.Errorf("--rules: two files named %s", name)
		}
		seen[name] = true
		files = append(files, ruleFile{name: name, content: b})
	}
	return files, nil
}

// writeRuleFiles writes the rule files into dir, each group evaluated every interval instead of
// its own when interval is set, and returns their paths.
func writeRuleFiles(dir string, files []ruleFile, interval time.Duration) ([]string, error) {
	paths := make([]string, 0, len(files))
	for _, f := range files {
		content := f.content
		if interval > 0 {
			content = groupIntervalRE.ReplaceAll(content, []byte("${1}interval: "+promDuration(interval)))
		}
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// promServer is a Prometheus a run started, on a free loopback port, its configuration, data
// and log in its directory.
type promServer struct {
	url    string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
}

// startPrometheus starts Prometheus with dir/prometheus.yml and waits until it is ready. Should
// the lab's process die, Prometheus dies with it.
func startPrometheus(ctx context.Context, bin, dir string) (*promServer, error) {
	addr, err := lab.FreeAddr()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &promServer{url: "http://" + addr, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	// A configuration or rule file Prometheus refuses ends it at once: stop waiting then.
	readyCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-readyCtx.Done():
		}
	}()
	if err := lab.WaitHTTPOK(readyCtx, p.url+"/-/ready", time.Minute); err != nil {
		p.stop()
		out, _ := os.ReadFile(log.Name())
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("prometheus did not become ready: %w; its log ends:\n%s", err, lastLines(out, 10))
	}
	return p, nil
}

// stop ends Prometheus (SIGTERM, SIGKILL after 30 s) and waits for it.
func (p *promServer) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.log.Close()
}

// promVersion is the first line of `prometheus --version`.
func promVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "prometheus (version unknown)"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// scrapeTimeout is docs/fleet.md's 10 s, or the interval when that is shorter (Prometheus
// refuses a timeout longer than the interval).
func scrapeTimeout(interval time.Duration) time.Duration { return min(10*time.Second, interval) }
