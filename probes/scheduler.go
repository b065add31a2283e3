package probes

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Defaults of the continuous mode.
const (
	DefaultBurst    = 2 * time.Second
	DefaultInterval = 5 * time.Minute
	// DefaultBurstOpsPerSec caps timed operations within a burst. Unlimited, a fast NVMe
	// device takes some 10,000 syncs a second, and 2 s of that every 5 minutes would write
	// tens of gigabytes a day to an SSD for no better answer; 200/s is as fast as a busy
	// single-client commit stream and still fills the window within an hour.
	DefaultBurstOpsPerSec = 200
	// DefaultWindow is the samples kept per method and pattern: enough for a p99 and a narrow
	// interval, bounded in memory (8kB per pattern).
	DefaultWindow = 1000
)

// SchedulerConfig configures the continuous mode.
type SchedulerConfig struct {
	// Probe says where and what to probe, as for Run. Its Duration, MinSamples and Precision
	// are not used: each burst lasts Burst. MaxOpsPerSec defaults to DefaultBurstOpsPerSec.
	Probe Config
	// Burst is how long each burst measures (default 2 s); Interval the time from one burst's
	// start to the next (default 5 min).
	Burst    time.Duration
	Interval time.Duration
	// Window is the number of recent samples kept per method and pattern (default 1000).
	Window int
}

// Scheduler is the daemon's continuous probe. It measures in short bursts and keeps a bounded
// window of recent samples per method, so that the report reflects the device as it is now
// without probing all the time.
//
// Cost, with the defaults: one 2 s burst every 5 minutes, a duty cycle of 2/300 = 0.7% of the
// time; within a burst at most 200 timed operations a second (400 a burst, each one or two
// 8kB writes and a sync: about 5MB written a burst, 1.4GB a day), so the device is far from
// saturated even then. The 16MB probe file is written once when Run starts and kept between
// bursts (rewriting it every burst would cost more device writes than the bursts themselves);
// it is removed when Run returns.
type Scheduler struct {
	cfg    SchedulerConfig
	logger *zap.Logger

	// Owned by Run's goroutine.
	file    *probeFile
	windows map[patternKey][]float64
	started time.Time
	wall    time.Duration
	bursts  int

	mu      sync.RWMutex
	latest  *Report
	facts   DeviceFacts
	refused error // why the directory is refused now; nil while probing works
}

// Back-off of a refused probe directory: an operator who frees space or fixes permissions
// should not have to restart the daemon, and retrying every burst would flood the log.
const (
	refusedRetryFirst = time.Minute
	refusedRetryMax   = 30 * time.Minute
)

type patternKey struct {
	name          string
	writesPerSync int
	writeBytes    int
}

// NewScheduler checks cfg and returns a scheduler; nothing runs until Run. A nil logger logs
// nothing.
func NewScheduler(cfg SchedulerConfig, logger *zap.Logger) (*Scheduler, error) {
	if logger == nil {
		logger = zap.NewNop()
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Probe.MaxOpsPerSec == 0 {
		cfg.Probe.MaxOpsPerSec = DefaultBurstOpsPerSec
	}
	switch {
	case cfg.Burst < MinDuration:
		return nil, refuse("probe burst %v is too short: at least %v is needed for every method to give samples", cfg.Burst, MinDuration)
	case cfg.Interval < cfg.Burst:
		return nil, refuse("probe interval %v is shorter than the burst %v: bursts would run back to back", cfg.Interval, cfg.Burst)
	case cfg.Window < 2:
		return nil, refuse("probe window %d: at least 2 samples are needed for an interval", cfg.Window)
	}
	probe := cfg.Probe
	probe.Duration = cfg.Burst
	probe, err := probe.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Probe = probe
	return &Scheduler{
		cfg:     cfg,
		logger:  logger.With(zap.String("probe_dir", cfg.Probe.Dir)),
		windows: map[patternKey][]float64{},
		facts:   cfg.Probe.Facts,
	}, nil
}

// DutyCycle is the share of time spent probing: Burst / Interval.
func (s *Scheduler) DutyCycle() float64 {
	return s.cfg.Burst.Seconds() / s.cfg.Interval.Seconds()
}

// Run probes a burst at once and then every Interval until ctx is cancelled, then removes the
// probe file and returns nil. Probe files that a killed advisor left in the directory are
// removed first. While the directory is refused (missing, not writable, writable by other
// users, short of free space before a burst) probing pauses, Refused says why, and the
// directory is checked again after a back-off of one minute doubling to 30 minutes; a burst
// that fails otherwise is logged and retried at the next interval with a fresh file.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.dropFile()
	s.sweep()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	backoff := refusedRetryFirst
	for {
		wait := (<-chan time.Time)(tick.C)
		err := s.burst(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			backoff = refusedRetryFirst
			s.setRefused(nil)
		case isRefusal(err):
			s.dropFile()
			s.logger.Warn("probe directory refused; probing paused", zap.Error(err), zap.Duration("retry_in", backoff))
			s.setRefused(err)
			retry := time.NewTimer(backoff)
			wait = retry.C
			backoff = min(2*backoff, refusedRetryMax)
			select {
			case <-ctx.Done():
				retry.Stop()
				return nil
			case <-wait:
			}
			continue
		default:
			s.logger.Warn("probe burst failed", zap.Error(err))
			s.dropFile()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wait:
		}
	}
}

// sweep removes leftovers of killed advisors, logging what it removed. A directory that
// cannot be opened is left to the first burst to refuse.
func (s *Scheduler) sweep() {
	d, err := openProbeDir(s.cfg.Probe.Dir)
	if err != nil {
		return
	}
	defer d.close()
	removed, err := d.removeLeftovers()
	for _, p := range removed {
		s.logger.Info("removed a probe file left by a stopped advisor", zap.String("path", p))
	}
	if err != nil {
		s.logger.Warn("remove probe leftovers", zap.Error(err))
	}
}

// Refused returns why the probe directory is refused now, or nil while probing works.
func (s *Scheduler) Refused() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.refused
}

func (s *Scheduler) setRefused(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = err
}

// Latest returns the report over the current window, or nil before the first burst ends. The
// report is shared with other callers and must not be modified.
func (s *Scheduler) Latest() *Report {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.latest
}

// SetFacts replaces the device facts the verdict uses (the collector learns them after the
// scheduler starts, and they can change) and re-judges the latest report.
func (s *Scheduler) SetFacts(f DeviceFacts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.facts = f
	if s.latest != nil {
		r := *s.latest
		r.Durability = Judge(&r, s.judgeFacts(f))
		s.latest = &r
	}
}

// judgeFacts fills the file system type when the collector has not said.
func (s *Scheduler) judgeFacts(f DeviceFacts) DeviceFacts {
	cfg := s.cfg.Probe
	cfg.Facts = f
	return factsFor(cfg)
}

// burst measures once and folds the samples into the window.
func (s *Scheduler) burst(ctx context.Context) error {
	if err := s.ensureFile(ctx); err != nil {
		return err
	}
	m, err := newMeasurer(s.file, s.cfg.Probe, linuxCalls())
	if err != nil {
		return err
	}
	defer m.close()
	start := time.Now()
	if _, err := m.run(ctx, runLimits{budget: s.cfg.Burst, maxOps: s.cfg.Probe.MaxOpsPerSec}, nil); err != nil {
		return err
	}
	end := time.Now()
	if s.bursts == 0 {
		s.started = start
	}
	s.bursts++
	s.wall += end.Sub(start)

	methods := make([]MethodResult, 0, len(m.patterns))
	for _, p := range m.patterns {
		k := patternKey{p.res.Name, p.res.WritesPerSync, p.res.WriteBytes}
		w := append(s.windows[k], p.samples...)
		if over := len(w) - s.cfg.Window; over > 0 {
			w = w[:copy(w, w[over:])]
		}
		s.windows[k] = w
		methods = append(methods, result(p.res, w))
	}
	rep := &Report{
		Dir:            s.cfg.Probe.Dir,
		Started:        s.started,
		Finished:       end,
		WallSeconds:    s.wall.Seconds(),
		BudgetSeconds:  s.cfg.Burst.Seconds(),
		Stop:           StopContinuous,
		Bursts:         s.bursts,
		DirectIOPolicy: s.cfg.Probe.Server.Describe(),
		Methods:        methods,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rep.Durability = Judge(rep, s.judgeFacts(s.facts))
	s.latest = rep
	return nil
}

// ensureFile creates the probe file unless the one kept is still there and the advisor's
// alone. Someone may have cleaned the directory between bursts, or replaced the file: the kept
// descriptor says so (fstat), never the path, and a fresh file is made. Before every burst the
// free space is checked: with the file in place, what is left must stay above the headroom, or
// the file is dropped (a file system filling up needs the 16MB more than the advisor does);
// without it, checkDir wants room for the file and the headroom.
func (s *Scheduler) ensureFile(ctx context.Context) error {
	if s.file != nil {
		if err := s.file.check(); err != nil {
			s.logger.Warn("probe file changed by someone else; making a fresh one", zap.Error(err))
			s.dropFile()
		}
	}
	if s.file != nil {
		free, err := s.file.freeBytes()
		if err != nil {
			return err
		}
		if free < s.cfg.Probe.MinFreeBytes {
			s.dropFile()
			return refuse("probe directory %q has %s free, below the %s the probe leaves free: its file was removed",
				s.cfg.Probe.Dir, mb(free), mb(s.cfg.Probe.MinFreeBytes))
		}
		return nil
	}
	d, err := openProbeDir(s.cfg.Probe.Dir)
	if err != nil {
		return err
	}
	defer d.close()
	if err := checkDir(s.cfg.Probe, d); err != nil {
		return err
	}
	f, err := createProbeFile(ctx, d)
	if err != nil {
		return err
	}
	s.file = f
	return nil
}

func (s *Scheduler) dropFile() {
	if s.file == nil {
		return
	}
	if err := s.file.remove(); err != nil {
		s.logger.Warn("remove probe file", zap.String("path", s.file.path), zap.Error(err))
	}
	s.file = nil
}

// isRefusal tells a directory the probe cannot use now (refused, or the file system full while
// writing the file) from a burst that failed.
func isRefusal(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}
