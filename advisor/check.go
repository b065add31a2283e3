package advisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// CheckConfig configures a one-off check.
type CheckConfig struct {
	// Window is how long to sample; Interval the time between snapshots within it.
	Window       time.Duration
	Interval     time.Duration
	WaitInterval time.Duration
	// ProbeDir is where the probe writes (on the WAL's file system); empty: no probing.
	ProbeDir string
	// ProbeBudget bounds the probe's run within the window.
	ProbeBudget time.Duration
	Thresholds  rules.Thresholds
}

// CheckResult is what a check found. Its JSON is the contract of `check --format json`.
type CheckResult struct {
	Findings []rules.Finding `json:"findings"`
	// Recommendations are the findings resolved into one per setting (rules.Resolve).
	Recommendations []rules.Recommendation `json:"recommendations"`
	// NotEnoughData names, per rule, what it lacked to judge.
	NotEnoughData map[string]string `json:"not_enough_data,omitempty"`
	Snapshots     int               `json:"snapshots"`
	WindowSeconds float64           `json:"window_seconds"`
	// Parts lists the collection problems of the last snapshot.
	Problems []collector.Part `json:"problems,omitempty"`
	Probe    *probes.Report   `json:"probe,omitempty"`
	// ProbeSkipped says why no probe report is included.
	ProbeSkipped string `json:"probe_skipped,omitempty"`
	// HAManager is the HA manager that runs the server (collector.ManagerNone for none); nil
	// when PostgreSQL could not be read.
	HAManager *collector.HAManager `json:"ha_manager,omitempty"`
	// History is the window's snapshots the rules judged (not part of the JSON contract): for
	// measuring a figure a finding predicted (rules.MeasurePredicted) once its change is in
	// force, and for a test to show what each interval held.
	History *rules.History `json:"-"`
}

// PostgresFailure returns the postgres part of the last snapshot when the server could not be
// reached or read: the check then could not judge, whatever the findings say.
func (r *CheckResult) PostgresFailure() (collector.Part, bool) {
	for _, p := range r.Problems {
		if p.Name == collector.PartPostgres {
			return p, true
		}
	}
	return collector.Part{}, false
}

// errUnreadable stops a check whose first snapshot could not read PostgreSQL.
var errUnreadable = errors.New("postgresql unreadable")

func postgresFailed(snap collector.Snapshot) bool {
	for _, p := range snap.Parts {
		if p.Name == collector.PartPostgres && !p.OK {
			return true
		}
	}
	return false
}

// MaxSeverity is the highest severity among the findings (0 when none).
func (r *CheckResult) MaxSeverity() rules.Severity {
	return rules.MaxSeverity(r.Findings)
}

// MinCheckWindow is the shortest window, at the given interval, whose snapshots span the MinSpan
// the measured (rate-based) rules need: a shorter check could judge configuration facts only and
// would report "all clear" on a server it never measured. The check command refuses such a
// window; Check itself accepts it for callers that want configuration facts only. The snapshots fall on whole
// intervals, so the window is MinSpan rounded up to a multiple of the interval.
func MinCheckWindow(interval time.Duration, t rules.Thresholds) time.Duration {
	if interval <= 0 {
		return t.MinSpan
	}
	n := (t.MinSpan + interval - 1) / interval
	return max(n, 1) * interval
}

// Check samples for the window (probing within its budget alongside), evaluates the rules once
// over what it saw and returns the findings. The window is itself the span of evidence, so no
// noise control (rules.Tracker) applies.
func Check(ctx context.Context, s *Sampler, cfg CheckConfig, logger *zap.Logger) (*CheckResult, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.Interval <= 0 || cfg.Window < cfg.Interval {
		return nil, fmt.Errorf("check window %v and interval %v: the window must hold at least one interval", cfg.Window, cfg.Interval)
	}
	if cfg.Thresholds == (rules.Thresholds{}) {
		cfg.Thresholds = rules.DefaultThresholds()
	}

	count := int(cfg.Window/cfg.Interval) + 1
	h := rules.NewHistory(count)
	probe := &windowProbe{dir: cfg.ProbeDir, budget: cfg.ProbeBudget, skipped: "no --probe.dir given"}
	if cfg.ProbeDir != "" {
		probe.skipped = "the probe did not start: PostgreSQL could not be read, so the WAL directory is unknown"
	}
	err := s.Every(ctx, cfg.Interval, cfg.WaitInterval, count, func(snap collector.Snapshot) error {
		h.Add(snap)
		// A server that cannot be read at the start is not watched for the whole window: the
		// check could not run, and the operator learns it now rather than a minute later.
		if h.Len() == 1 && postgresFailed(snap) {
			return errUnreadable
		}
		probe.start(ctx, s, snap)
		return nil
	})
	probe.wg.Wait()
	if err != nil && !errors.Is(err, errUnreadable) {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("check interrupted: %w", ctx.Err())
	}
	res := &CheckResult{ProbeSkipped: probe.skipped}
	switch {
	case probe.err != nil:
		var ce *probes.ConfigError
		if !errors.As(probe.err, &ce) {
			return nil, fmt.Errorf("probe: %w", probe.err)
		}
		res.ProbeSkipped = probe.err.Error()
		logger.Warn("probe refused", zap.Error(probe.err))
	case probe.report != nil:
		res.Probe, res.ProbeSkipped = probe.report, ""
	}
	res.judge(h, cfg.Thresholds)
	return res, nil
}

// judge evaluates the rules once over the window's history. What check finds fires (and sets
// the exit status) at once: the window is itself the span of evidence, so nothing is pending.
func (r *CheckResult) judge(h *rules.History, t rules.Thresholds) {
	last, _ := h.Latest()
	for _, p := range last.Parts {
		if !p.OK {
			r.Problems = append(r.Problems, p)
		}
	}
	if last.Postgres != nil {
		r.HAManager = last.Postgres.HAManager
	}
	r.Snapshots = h.Len()
	r.History = h
	r.WindowSeconds = h.Span().Seconds()
	in := rules.Input{History: h, Probe: r.Probe, ProbeDisabled: r.ProbeSkipped, Now: last.Time, Config: t}
	ev := rules.Evaluate(rules.All(), in, nil)
	r.Findings, r.Recommendations = ev.Findings, ev.Recommendations
	if len(ev.NotEnoughData) > 0 {
		r.NotEnoughData = ev.NotEnoughData
	}
}

// windowProbe is a check's one probe run, started alongside the sampling once the WAL directory
// is known (the probe must write on the WAL's file system).
type windowProbe struct {
	dir     string
	budget  time.Duration
	started bool
	// skipped says why no probe report is included, while none is.
	skipped string
	wg      sync.WaitGroup
	report  *probes.Report
	err     error
}

// start starts the probe on the first snapshot that names the WAL directory.
func (p *windowProbe) start(ctx context.Context, s *Sampler, snap collector.Snapshot) {
	if p.started || p.dir == "" {
		return
	}
	walDir := s.WALDirOf(snap)
	if walDir == "" {
		p.skipped = "the WAL directory is unknown (see the snapshot's problems); set --wal-dir"
		return
	}
	p.started = true
	pc := probes.Config{Dir: p.dir, WALDir: walDir, Duration: p.budget}
	if snap.Postgres != nil {
		pc.Server = ServerIOOf(snap.Postgres)
	}
	if snap.WALStorage != nil {
		pc.Facts = FactsOf(snap.WALStorage)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.report, p.err = probes.Run(ctx, pc, nil)
	}()
}
