package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Timing is seed 001's timing lab: how soon an operator sees the single long INSERT on the
// starting configuration, through the running daemon (`pgwal-advisor run` with its defaults,
// its /api/v1/findings polled) and through `pgwal-advisor check` started while it runs.
type Timing struct {
	Rows int `json:"rows"`
	// StatementSeconds is how long the INSERT ran; Completed is false when the lab cut it.
	StatementSeconds float64 `json:"statement_seconds"`
	Completed        bool    `json:"completed"`
	// HeadStartSeconds is how long the daemon ran before the statement began.
	HeadStartSeconds  float64 `json:"head_start_seconds"`
	RaiseAfterSeconds float64 `json:"raise_after_seconds"`
	// Seen holds, per setting the daemon recommended, the first time (seconds from the
	// statement's start) it showed a pending and a firing finding for it.
	Seen []TimingSeen `json:"seen"`
	// Check is `check --window` started CheckStartSeconds after the statement.
	CheckStartSeconds  float64           `json:"check_start_seconds"`
	CheckWindowSeconds float64           `json:"check_window_seconds"`
	CheckExit          int               `json:"check_exit"`
	CheckRecommends    map[string]string `json:"check_recommends"`
	CheckError         string            `json:"check_error,omitempty"`
}

// TimingSeen is when the daemon first showed a setting's recommendation pending and firing;
// a negative time means never within the lab's watch.
type TimingSeen struct {
	Setting        string  `json:"setting"`
	Rule           string  `json:"rule"`
	Recommended    string  `json:"recommended"`
	PendingSeconds float64 `json:"first_pending_seconds"`
	FiringSeconds  float64 `json:"first_firing_seconds"`
}

// timingSettings are the two settings seed 001's fixes change.
var timingSettings = []string{"wal_sync_method", "wal_buffers"}

// advisorBinary finds the daemon next to the running lab binary (make build puts both in
// bin/) or on PATH.
func advisorBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "pgwal-advisor")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("pgwal-advisor"); err == nil {
		return p, nil
	}
	return "", errors.New("the timing lab runs the daemon binary pgwal-advisor: build it next to pgwal-lab (make build) or put it on PATH")
}

// daemon is a `pgwal-advisor run` child the lab stops when it is done with it.
type daemon struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	logs     bytes.Buffer // read only after stop: the child writes it until it exits
	stopOnce sync.Once
}

func startDaemon(ctx context.Context, bin string, args ...string) (*daemon, error) {
	d := &daemon{cmd: exec.CommandContext(ctx, bin, args...), exited: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = &d.logs, &d.logs
	// Should the lab die, the daemon dies with it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	d.cmd.Cancel = func() error { return d.cmd.Process.Signal(syscall.SIGTERM) }
	d.cmd.WaitDelay = 10 * time.Second
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgwal-advisor run: %w", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	return d, nil
}

func (d *daemon) stop() {
	d.stopOnce.Do(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	})
}

// apiFinding is the part of /api/v1/findings the timing lab reads.
type apiFinding struct {
	Rule        string      `json:"rule"`
	Severity    string      `json:"severity"`
	Setting     string      `json:"setting"`
	Recommended string      `json:"recommended"`
	State       rules.State `json:"state"`
}

func getFindings(ctx context.Context, url string) ([]apiFinding, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var body struct {
		Findings []apiFinding `json:"findings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return body.Findings, nil
}

// timingSpec sizes the timing lab.
type timingSpec struct {
	rows int
	// headStart is how long the daemon runs before the statement; checkAfter when check
	// starts into it, for window; watch how long the daemon's findings are polled at most.
	headStart, checkAfter, window, watch time.Duration
}

// timing runs the timing lab on c, which must be in the starting configuration: the daemon
// runs for headStart, then one INSERT of rows starts; checkAfter into it `check --window
// window` starts; the daemon's findings are polled until both settings fire or watch has
// passed since the statement began. The statement is cut there if it still runs (the lab's
// time is finite; the report says so).
func (r *runner) timing(ctx context.Context, c *lab.Cluster, walDir, probeDir string, sp timingSpec) (*Timing, error) {
	rows, headStart, checkAfter, window := sp.rows, sp.headStart, sp.checkAfter, sp.window
	bin, err := advisorBinary()
	if err != nil {
		return nil, err
	}
	raise := rules.DefaultThresholds().RaiseAfter
	tm := &Timing{Rows: rows, HeadStartSeconds: headStart.Seconds(), RaiseAfterSeconds: raise.Seconds(),
		CheckStartSeconds: checkAfter.Seconds(), CheckWindowSeconds: window.Seconds(), CheckRecommends: map[string]string{}}
	if err := c.Exec(ctx, "DROP TABLE IF EXISTS timing_load"); err != nil {
		return nil, err
	}
	if err := equipment.Checkpoint(ctx, c); err != nil {
		return nil, err
	}
	addr, err := lab.FreeAddr()
	if err != nil {
		return nil, err
	}
	daemonProbe, checkProbe := filepath.Join(probeDir, "daemon"), filepath.Join(probeDir, "check")
	for _, d := range []string{daemonProbe, checkProbe} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("timing lab: %w", err)
		}
	}
	defer os.RemoveAll(daemonProbe)
	defer os.RemoveAll(checkProbe)
	// The daemon as an operator runs it: its default interval, thresholds and probe schedule.
	d, err := startDaemon(ctx, bin, "run", "--dsn", c.DSN(), "--wal-dir", walDir, "--web.listen-address", addr, "--probe.dir", daemonProbe)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	if err := lab.WaitHTTPOK(ctx, "http://"+addr+"/readyz", 30*time.Second); err != nil {
		d.stop()
		return nil, fmt.Errorf("timing lab: the daemon did not get ready: %w\n%s", err, d.logs.String())
	}
	r.say("%s: the daemon runs; the statement starts in %v", Timing001, headStart)
	if err := lab.Sleep(ctx, headStart); err != nil {
		return nil, err
	}

	stmtCtx, cutStatement := context.WithCancel(ctx)
	defer cutStatement()
	begin := time.Now()
	stmtDone := make(chan error, 1)
	go func() {
		_, err := c.BulkInsert(stmtCtx, "timing_load", rows)
		tm.StatementSeconds = time.Since(begin).Seconds()
		stmtDone <- err
	}()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if lab.Sleep(ctx, checkAfter) != nil {
			return
		}
		var out, errOut bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "check", "--format", "json", "--window", window.String(),
			"--dsn", c.DSN(), "--wal-dir", walDir, "--probe.dir", checkProbe)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			tm.CheckExit = exit.ExitCode()
		case err != nil:
			tm.CheckError = err.Error()
			return
		}
		var res struct {
			Findings []apiFinding `json:"findings"`
		}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			tm.CheckError = fmt.Sprintf("check's JSON: %v; stderr: %s", err, errOut.String())
			return
		}
		for _, f := range res.Findings {
			if f.Recommended != "" && f.Severity != "info" {
				tm.CheckRecommends[f.Setting] = f.Recommended
			}
		}
	}()

	seen := map[string]*TimingSeen{}
	deadline := begin.Add(sp.watch)
	var stmtErr error
	running := true
	for time.Now().Before(deadline) {
		select {
		case stmtErr = <-stmtDone:
			running = false
			tm.Completed = stmtErr == nil
			r.say("%s: the statement ended after %.1f s", Timing001, tm.StatementSeconds)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		fs, err := getFindings(ctx, "http://"+addr+"/api/v1/findings")
		if err != nil {
			continue // 503 before the first snapshot, or a transient error: the next poll tells
		}
		at := time.Since(begin).Seconds()
		for _, f := range fs {
			if f.Recommended == "" || f.Severity == "info" {
				continue
			}
			s := seen[f.Setting]
			if s == nil {
				s = &TimingSeen{Setting: f.Setting, Rule: f.Rule, Recommended: f.Recommended, PendingSeconds: -1, FiringSeconds: -1}
				seen[f.Setting] = s
				r.say("%s: %.1f s: %s %s %s -> %s", Timing001, at, f.State, f.Rule, f.Setting, f.Recommended)
			}
			if s.PendingSeconds < 0 && (f.State == rules.StatePending || f.State == rules.StateFiring) {
				s.PendingSeconds = at
			}
			if s.FiringSeconds < 0 && f.State == rules.StateFiring {
				s.FiringSeconds = at
				r.say("%s: %.1f s: firing %s %s", Timing001, at, f.Rule, f.Setting)
			}
		}
		if firing(seen, timingSettings) {
			break
		}
	}
	if running {
		cutStatement()
		stmtErr = <-stmtDone
		if stmtCtx.Err() != nil {
			stmtErr = nil // cut by the lab, not failed
		}
	}
	wg.Wait()
	if stmtErr != nil {
		return tm, fmt.Errorf("timing lab: the statement: %w", stmtErr)
	}
	for _, s := range seen {
		tm.Seen = append(tm.Seen, *s)
	}
	sort.Slice(tm.Seen, func(i, j int) bool { return tm.Seen[i].Setting < tm.Seen[j].Setting })
	return tm, c.Exec(ctx, "DROP TABLE IF EXISTS timing_load")
}

func firing(seen map[string]*TimingSeen, settings []string) bool {
	for _, s := range settings {
		if seen[s] == nil || seen[s].FiringSeconds < 0 {
			return false
		}
	}
	return true
}

// timingTargets are the timing lab's targets: first pending within 20 s of the statement's start, firing
// within RaiseAfter + 20 s, and `check` started into the statement recommending both.
func timingTargets(tm *Timing) []Target {
	pending := Target{Name: "timing: first pending finding for wal_sync_method and wal_buffers within 20 s of the statement's start", Want: "<= 20 s"}
	fire := Target{Name: "timing: both firing within RaiseAfter + 20 s", Want: fmt.Sprintf("<= %.0f s", tm.RaiseAfterSeconds+20)}
	check := Target{Name: fmt.Sprintf("timing: check --window %.0fs started %.0f s in recommends both", tm.CheckWindowSeconds, tm.CheckStartSeconds), Want: "both settings recommended"}
	pending.Scored, fire.Scored, check.Scored = true, true, tm.CheckError == ""
	pending.Met, fire.Met, check.Met = true, true, true
	var pg, fg, cg []string
	for _, set := range timingSettings {
		var s *TimingSeen
		for i := range tm.Seen {
			if tm.Seen[i].Setting == set {
				s = &tm.Seen[i]
			}
		}
		switch {
		case s == nil:
			pending.Met, fire.Met = false, false
			pg, fg = append(pg, set+" never"), append(fg, set+" never")
		default:
			pending.Met = pending.Met && s.PendingSeconds >= 0 && s.PendingSeconds <= 20
			fire.Met = fire.Met && s.FiringSeconds >= 0 && s.FiringSeconds <= tm.RaiseAfterSeconds+20
			pg, fg = append(pg, set+" "+secondsOrNever(s.PendingSeconds)), append(fg, set+" "+secondsOrNever(s.FiringSeconds))
		}
		if v, ok := tm.CheckRecommends[set]; ok {
			cg = append(cg, set+"="+v)
		} else {
			check.Met = false
			cg = append(cg, set+" not recommended")
		}
	}
	pending.Got, fire.Got = strings.Join(pg, ", "), strings.Join(fg, ", ")
	check.Got = fmt.Sprintf("%s (exit %d)", strings.Join(cg, ", "), tm.CheckExit)
	if tm.CheckError != "" {
		check.Got = "check failed: " + tm.CheckError
	}
	return []Target{pending, fire, check}
}

func secondsOrNever(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", s)
}

// timingScenario is seed 001's timing lab on its own: the seed's starting configuration on the
// simulated disk, the daemon running, one INSERT of the seed's statement (the targets:
// pending within 20 s, firing within RaiseAfter + 20 s, check started 5 s in recommends both).
func (r *runner) timingScenario(ctx context.Context) (res *ScenarioResult, err error) {
	res = &ScenarioResult{
		ID:    Timing001,
		Title: "Seed 001 timing: how soon the daemon and check see the single INSERT",
		Workload: fmt.Sprintf("INSERT INTO timing_load (id) SELECT generate_series(1, %d), one statement, from wal_buffers=64kB and "+
			"wal_sync_method=open_datasync; WAL on the simulated disk (%v per sync); the daemon's /api/v1/findings polled every 0.5 s",
			r.sz.s001TimingRows, r.sz.latency),
		Base:   map[string]string{"shared_buffers": "256MB"},
		Metric: "seconds",
	}
	eq := equipment.New(r.logger, r.say)
	defer func() {
		if cerr := eq.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	disk, err := eq.Disk(ctx, simdisk.Options{Latency: r.sz.latency})
	if err != nil {
		return res, err
	}
	walDir := filepath.Join(disk.Mountpoint(), "wal")
	c, err := eq.Cluster(ctx, lab.ClusterOptions{WALDir: walDir,
		Settings: merged(res.Base, map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"})})
	if err != nil {
		return res, err
	}
	probe, err := equipment.ProbeDir(disk.Mountpoint())
	if err != nil {
		return res, err
	}
	headStart := r.sz.s001HeadStart
	if r.opts.TimingHeadStart > 0 {
		headStart = r.opts.TimingHeadStart
	}
	tm, err := r.timing(ctx, c, walDir, probe, timingSpec{rows: r.sz.s001TimingRows, headStart: headStart,
		checkAfter: 5 * time.Second, window: 40 * time.Second, watch: r.sz.s001TimingWatch})
	res.Timing = tm
	if err != nil {
		return res, err
	}
	res.Targets = timingTargets(tm)
	return res, nil
}
