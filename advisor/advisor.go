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

// Defaults of Config.
const (
	DefaultInterval      = 15 * time.Second
	DefaultWaitInterval  = time.Second
	DefaultHistoryWindow = time.Hour
)

// Config configures an Advisor.
type Config struct {
	// Interval is the time between snapshots; WaitInterval between wait-event samples.
	Interval     time.Duration
	WaitInterval time.Duration
	// HistoryWindow bounds the history kept in memory (HistoryWindow / Interval snapshots).
	HistoryWindow time.Duration
	// ProbeDir is where the sync probes write; it must be on the WAL's file system. Empty
	// disables probing (and a finding says so).
	ProbeDir string
	// Probe configures the probe bursts; its Probe.Dir and Probe.WALDir are filled in.
	Probe probes.SchedulerConfig
	// Thresholds for the rules; the zero value means rules.DefaultThresholds().
	Thresholds rules.Thresholds
}

func (c Config) withDefaults() (Config, error) {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.WaitInterval == 0 {
		c.WaitInterval = DefaultWaitInterval
	}
	if c.HistoryWindow == 0 {
		c.HistoryWindow = DefaultHistoryWindow
	}
	if c.Interval < 0 || c.WaitInterval < 0 || c.HistoryWindow < 0 {
		return c, errors.New("intervals and the history window must be positive durations")
	}
	if c.HistoryWindow < 2*c.Interval {
		return c, fmt.Errorf("history window %v is shorter than two intervals of %v: rates need at least two snapshots", c.HistoryWindow, c.Interval)
	}
	if c.Thresholds == (rules.Thresholds{}) {
		c.Thresholds = rules.DefaultThresholds()
	}
	return c, nil
}

// State is what the advisor knows at one moment: a consistent, read-only view for the metrics,
// the API and the apply mode. Readers must not modify it.
type State struct {
	// Snapshot is the latest snapshot; nil before the first.
	Snapshot *collector.Snapshot
	// Findings are every finding shown (firing), including the resolver's
	// recommendations-conflict ones: what the recommendations and the apply mode act on.
	Findings []rules.Finding
	// Pending are the measured findings that hold but have not yet lasted RaiseAfter (state
	// pending, with when they fire): shown on the API, the page and /metrics, never acted on.
	Pending []rules.Finding
	// Recommendations are the findings resolved into one per setting (rules.Resolve): what the
	// API, the metrics, the landing page and the apply mode recommend.
	Recommendations []rules.Recommendation
	// NotEnoughData names, per rule ID, what a rule still lacks to judge.
	NotEnoughData map[string]string
	// Probe is the latest probe report (nil before the first burst or with probing off).
	Probe *probes.Report
	// ProbeEnabled is false when probing is off; ProbeDisabledReason then says why and what to set.
	ProbeEnabled        bool
	ProbeDisabledReason string
	// WaitEvents are the wait-event samples summed since the advisor started (counters).
	WaitEvents collector.WaitEvents
	Evaluated  time.Time
	// History is a copy of the snapshots the rules judged, oldest first (the landing page's
	// charts draw it); nil before the first snapshot.
	History *rules.History
}

// Advisor runs the loop. Create it with New, run it with Run, read it with State from any
// goroutine.
type Advisor struct {
	sampler *Sampler
	cfg     Config
	logger  *zap.Logger
	rules   []rules.Rule

	// Owned by the loop goroutine.
	history *rules.History
	tracker *rules.Tracker
	probe   *probes.Scheduler
	waits   collector.WaitEvents
	// probeWaiting says why the scheduler has not started although a directory is set (the
	// WAL directory, which the probe must share a file system with, is not known yet).
	probeWaiting string
	// failures rate-limits the log of a target that cannot be read.
	failures failureLog

	mu    sync.RWMutex
	state State
	// probeErr is set by the probe goroutine when the scheduler refuses its directory.
	probeErr error
}

// New returns an advisor over the sampler's sources.
func New(sampler *Sampler, cfg Config, logger *zap.Logger) (*Advisor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	all := rules.All()
	limit := int(cfg.HistoryWindow/cfg.Interval) + 1
	a := &Advisor{
		sampler: sampler,
		cfg:     cfg,
		logger:  logger,
		rules:   all,
		history: rules.NewHistory(limit),
		tracker: rules.NewTracker(all),
		waits:   collector.WaitEvents{Counts: map[string]int64{}},
	}
	if cfg.ProbeDir == "" {
		a.state.ProbeDisabledReason = "no probe directory: set --probe.dir to a directory on the WAL's file system (outside pg_wal and the data directory)"
	}
	return a, nil
}

// Inherit continues prev's history, finding episodes, wait-event totals and published state,
// so that a configuration reload does not restart the evidence from nothing. Call it after
// prev.Run has returned and before a.Run starts. The probe window is not carried over: the new
// configuration may probe elsewhere or differently.
func (a *Advisor) Inherit(prev *Advisor) {
	for _, s := range prev.history.Snapshots() {
		a.history.Add(s) // keeps the newest a's window holds
	}
	a.tracker = prev.tracker
	a.waits = prev.waits
	st := prev.State()
	a.mu.Lock()
	defer a.mu.Unlock()
	probeOff := a.state.ProbeDisabledReason
	a.state = st
	a.state.Probe, a.state.ProbeEnabled, a.state.ProbeDisabledReason = nil, false, probeOff
}

// Run samples, probes and evaluates until ctx ends. It returns nil on cancellation, after the
// probe goroutine has stopped and removed its file.
func (a *Advisor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return a.sampler.Every(ctx, a.cfg.Interval, a.cfg.WaitInterval, 0, func(s collector.Snapshot) error {
		a.startProbe(ctx, &wg, s)
		a.Observe(s)
		return nil
	})
}

// startProbe starts the probe scheduler once the WAL directory is known.
func (a *Advisor) startProbe(ctx context.Context, wg *sync.WaitGroup, s collector.Snapshot) {
	if a.probe != nil || a.cfg.ProbeDir == "" {
		if a.probe != nil && s.WALStorage != nil {
			a.probe.SetFacts(FactsOf(s.WALStorage))
		}
		return
	}
	walDir := a.sampler.WALDirOf(s)
	if walDir == "" {
		// Try again next time; meanwhile the probe-disabled finding says why.
		a.probeWaiting = "the WAL directory is unknown, so the probe cannot check that its directory is on the WAL's file system: " + walDirUnknownReason(s)
		return
	}
	a.probeWaiting = ""
	cfg := a.cfg.Probe
	cfg.Probe.Dir = a.cfg.ProbeDir
	cfg.Probe.WALDir = walDir
	if s.Postgres != nil {
		cfg.Probe.Server = ServerIOOf(s.Postgres)
	}
	if s.WALStorage != nil {
		cfg.Probe.Facts = FactsOf(s.WALStorage)
	}
	sched, err := probes.NewScheduler(cfg, a.logger.With(zap.String("component", "probe")))
	if err != nil {
		a.setProbeErr(err)
		a.cfg.ProbeDir = "" // do not retry a configuration that cannot work
		return
	}
	a.probe = sched
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := sched.Run(ctx); err != nil {
			a.setProbeErr(err)
		}
	}()
}

func (a *Advisor) setProbeErr(err error) {
	a.logger.Warn("probing is off", zap.Error(err))
	a.mu.Lock()
	a.probeErr = err
	a.mu.Unlock()
}

// Observe adds a snapshot to the history, evaluates the rules and publishes the new state. Run
// calls it for every snapshot; tests and `check` may call it directly (from one goroutine).
func (a *Advisor) Observe(s collector.Snapshot) {
	a.history.Add(s)
	if s.Postgres != nil && s.Postgres.WaitEvents != nil {
		w := s.Postgres.WaitEvents
		a.waits.Samples += w.Samples
		a.waits.ActiveBackends += w.ActiveBackends
		for k, v := range w.Counts {
			a.waits.Counts[k] += v
		}
	}
	report, probeOff := a.probeStatus()
	a.failures.observe(a.logger, s)
	in := rules.Input{History: a.history, Probe: report, ProbeDisabled: probeOff, Now: s.Time, Config: a.cfg.Thresholds}
	ev := rules.Evaluate(a.rules, in, a.tracker)
	counts := make(map[string]int64, len(a.waits.Counts))
	for k, v := range a.waits.Counts {
		counts[k] = v
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	snap := s
	a.state.Snapshot = &snap
	a.state.Findings = ev.Findings
	a.state.Pending = ev.Pending
	a.state.Recommendations = ev.Recommendations
	a.state.NotEnoughData = ev.NotEnoughData
	a.state.Probe = report
	a.state.WaitEvents = collector.WaitEvents{Samples: a.waits.Samples, ActiveBackends: a.waits.ActiveBackends, Counts: counts}
	a.state.Evaluated = s.Time
	// A copy: the loop keeps appending to its own history while readers draw this one.
	a.state.History = a.history.Since(time.Time{})
	a.state.ProbeEnabled = a.probe != nil && probeOff == ""
	a.state.ProbeDisabledReason = probeOff
}

// probeStatus is the latest probe report, and why the advisor does not probe ("" when it does).
func (a *Advisor) probeStatus() (*probes.Report, string) {
	var report *probes.Report
	if a.probe != nil {
		report = a.probe.Latest()
	}
	a.mu.RLock()
	probeOff, probeErr := a.state.ProbeDisabledReason, a.probeErr
	a.mu.RUnlock()
	if probeErr != nil {
		probeOff = probeErr.Error()
	}
	switch {
	case a.probe != nil:
		// A refused directory is retried by the scheduler; while it is, the finding says why.
		if err := a.probe.Refused(); err != nil {
			probeOff = err.Error()
		} else if probeErr == nil {
			probeOff = ""
		}
	case probeErr == nil && a.cfg.ProbeDir != "":
		probeOff = a.probeWaiting
	}
	return report, probeOff
}

// State returns the current state; safe for concurrent use.
func (a *Advisor) State() State {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.state
}

// FactsOf turns the collector's storage description into the probes' device facts.
func FactsOf(st *collector.Storage) probes.DeviceFacts {
	return probes.DeviceFacts{
		FSType:     st.FSType,
		Rotational: st.Rotational,
		WriteCache: st.WriteCache,
		FUA:        st.FUA,
		Volatile:   st.Volatile,
		Virtual:    st.Virtual,
	}
}

// ServerIOOf tells the probes how the server opens its WAL (O_DIRECT or not).
func ServerIOOf(pg *collector.Postgres) probes.ServerIO {
	return probes.ServerIO{
		VersionNum:    pg.VersionNum,
		WALLevel:      pg.Settings[collector.WALLevel].Value,
		DebugIODirect: pg.Settings[collector.DebugIODirect].Value,
	}
}
