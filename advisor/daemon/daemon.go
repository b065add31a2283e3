// Package daemon is a running `pgwal-advisor run`: the advisor's loop, the configuration that
// SIGHUP reloads, the log level a reload changes at once, and the swap to a new advisor when a
// reload changes its settings.
package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/config"
)

// Options are what the daemon needs besides its configuration.
type Options struct {
	// ConfigFile is the configuration file's path, for the log; "" when there is none, and
	// then SIGHUP changes nothing.
	ConfigFile string
	// Load re-reads the configuration file and resolves it against the command line; a
	// reload calls it.
	Load func() (config.Config, error)
	// Hup delivers SIGHUP. The caller subscribes before it reads the configuration: the
	// signal's default action would kill the process.
	Hup <-chan os.Signal
	// NewSampler builds the sampler the advisors share, logging through logger; the returned
	// function closes it.
	NewSampler func(logger *zap.Logger) (*advisor.Sampler, func(context.Context))
	// ProbeStateDir is where the default probe directory was looked for, for the log.
	ProbeStateDir string
	// Version is logged at start.
	Version string
}

// Daemon is the running daemon. It implements web.StateSource and apply's state source.
type Daemon struct {
	opts   Options
	logger *zap.Logger
	level  zap.AtomicLevel

	sampler      *advisor.Sampler
	closeSampler func(context.Context)

	// restart hands a new advisor, built from a reloaded configuration, to the loop.
	restart chan *advisor.Advisor

	mu  sync.Mutex // guards cfg: reloads come one at a time, but tests call Reload directly
	cfg config.Config

	// cur is the advisor whose loop runs; prev the one it replaced, whose state is served
	// until cur has its first snapshot, so that a reload does not blank /metrics.
	cur, prev atomic.Pointer[advisor.Advisor]
}

// New builds the daemon from its resolved configuration: a logger whose level a reload can
// change (over logger), the sampler and the first advisor. An error is a configuration the
// advisor refuses. Close releases the sampler.
func New(cfg config.Config, logger *zap.Logger, opts Options) (*Daemon, error) {
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", cfg.LogLevel)
	}
	level := zap.NewAtomicLevelAt(lvl)
	logger = logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return LevelCore{Core: c, Level: level} }))
	// The collectors log through the gated logger too, so that a reloaded level reaches them.
	sampler, closeSampler := opts.NewSampler(logger)
	d := &Daemon{
		opts: opts, logger: logger, level: level, sampler: sampler, closeSampler: closeSampler,
		restart: make(chan *advisor.Advisor, 1), cfg: cfg,
	}
	adv, err := advisor.New(sampler, cfg.Advisor(), logger)
	if err != nil {
		closeSampler(context.Background())
		return nil, err
	}
	d.cur.Store(adv)
	return d, nil
}

// Logger is the daemon's logger, whose level follows the configuration: give it to what runs
// beside the advisor (apply, the web server).
func (d *Daemon) Logger() *zap.Logger { return d.logger }

// Config returns the configuration in force.
func (d *Daemon) Config() config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// Close closes the sampler's connection, even after ctx was cancelled.
func (d *Daemon) Close(ctx context.Context) { d.closeSampler(ctx) }

// State implements web.StateSource.
func (d *Daemon) State() advisor.State {
	cur := d.cur.Load()
	if cur == nil {
		return advisor.State{}
	}
	st := cur.State()
	if st.Snapshot == nil {
		if prev := d.prev.Load(); prev != nil {
			return prev.State()
		}
	} else if d.prev.Load() != nil {
		d.prev.Store(nil)
	}
	return st
}

// Run runs the advisor's loop, the reloads on SIGHUP and each of beside (the web server,
// apply) until ctx ends or one of them fails.
func (d *Daemon) Run(ctx context.Context, beside ...func(context.Context) error) error {
	cfg := d.Config()
	probeDir := cfg.ProbeDir
	if probeDir == "" {
		probeDir = "(off)"
	}
	d.logger.Info("pgwal-advisor running",
		zap.Strings("listen_addresses", cfg.ListenAddresses), zap.Duration("interval", cfg.Interval),
		zap.Duration("wait_events_interval", cfg.WaitInterval), zap.Duration("history_window", cfg.HistoryWindow),
		zap.String("probe_dir", probeDir), zap.Duration("probe_interval", cfg.ProbeInterval), zap.Duration("probe_burst", cfg.ProbeBurst),
		zap.Duration("query_timeout", cfg.QueryTimeout), zap.String("config_file", d.opts.ConfigFile), zap.String("version", d.opts.Version))
	if cfg.NoDefaultProbeDir {
		// The advisor's probe-disabled finding says to set --probe.dir; say why the default did
		// not serve.
		d.logger.Info("probing is off: the default probe directory does not exist, nor the state directory to create it in",
			zap.String("default_probe_dir", filepath.Join(d.opts.ProbeStateDir, config.DefaultProbeSubdir)))
	}

	eg, ctx := errgroup.WithContext(ctx)
	for _, f := range beside {
		eg.Go(func() error { return f(ctx) })
	}
	eg.Go(func() error { return d.loop(ctx, d.cur.Load()) })
	eg.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-d.opts.Hup:
				d.Reload()
			}
		}
	})
	err := eg.Wait()
	d.logger.Info("pgwal-advisor stopped")
	return err
}

// loop runs the advisor until ctx ends, replacing it when a reload hands over a new one. The
// old loop is stopped (and its probe file removed) before the new one starts: both share the
// sampler's connection.
func (d *Daemon) loop(ctx context.Context, a *advisor.Advisor) error {
	for {
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		select {
		case err := <-done:
			cancel()
			if err != nil {
				return fmt.Errorf("advisor: %w", err)
			}
			return nil
		case next := <-d.restart:
			cancel()
			if err := <-done; err != nil {
				return fmt.Errorf("advisor: %w", err)
			}
			next.Inherit(a)
			d.prev.Store(a)
			d.cur.Store(next)
			a = next
			d.logger.Info("advisor restarted with the reloaded configuration, keeping its history")
		}
	}
}

// Reload re-reads the configuration file and applies what changed: the log level at once,
// the advisor's settings by restarting its loop, and it says which settings need a restart
// of the process. A file that does not load or a configuration the advisor refuses leaves the
// running configuration as it is.
func (d *Daemon) Reload() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.opts.ConfigFile == "" {
		d.logger.Warn("sighup received but there is no --config.file to re-read: nothing changed")
		return
	}
	d.logger.Info("sighup received: reloading the config file", zap.String("config_file", d.opts.ConfigFile))
	next, err := d.opts.Load()
	if err != nil {
		d.logger.Error("config reload failed: keeping the running configuration", zap.Error(err))
		return
	}
	changes := config.Diff(d.cfg, next)
	if len(changes) == 0 {
		d.logger.Info("config reloaded: nothing changed")
		return
	}
	var advisorChanged, restartNeeded bool
	for _, c := range changes {
		advisorChanged = advisorChanged || c.When == config.Next
		restartNeeded = restartNeeded || c.When == config.Restart
	}
	// The advisor judges its settings before any change is logged: a refused change must not
	// first be announced as taking effect on the next cycle.
	var a *advisor.Advisor
	if advisorChanged {
		a, err = advisor.New(d.sampler, next.Advisor(), d.logger)
		if err != nil {
			d.logger.Error("config reload: the advisor refuses the new settings; keeping the running ones", zap.Error(err))
			next = next.WithAdvisorSettings(d.cfg)
			changes = config.Diff(d.cfg, next)
		}
	}
	for _, c := range changes {
		d.logger.Info("config changed", zap.String("key", c.Key), zap.String("old", c.Old),
			zap.String("new", c.Value), zap.Stringer("takes_effect", c.When))
	}
	if a != nil {
		select {
		case d.restart <- a:
		default:
			// A restart is still pending: replace it with the newer configuration.
			select {
			case <-d.restart:
			default:
			}
			d.restart <- a
		}
	}
	if restartNeeded {
		d.logger.Warn("config reload: web.listen_address and web.config_file change only when pgwal-advisor restarts (the web configuration file's contents are re-read at every connection)")
		// Keep reporting them as pending until the process restarts.
		next.ListenAddresses, next.WebConfigFile = d.cfg.ListenAddresses, d.cfg.WebConfigFile
	}
	lvl, _ := zapcore.ParseLevel(next.LogLevel) // checked by config.Resolve
	d.level.SetLevel(lvl)
	// The query timeout is the command line's: the sampler keeps the one it was built with.
	next.QueryTimeout = d.cfg.QueryTimeout
	d.cfg = next
}

// LevelCore gates a core by a level that a reload can change. The root logger's core has its
// level fixed at --log.level; LevelCore takes over the decision and writes through the inner
// core directly (zapcore's cores check the level in Check, not in Write), so the level can go
// below --log.level too.
type LevelCore struct {
	zapcore.Core
	Level zap.AtomicLevel
}

// Enabled reports whether l passes the reloadable level.
func (c LevelCore) Enabled(l zapcore.Level) bool { return c.Level.Enabled(l) }

// With returns the core with fields added, gated by the same level.
func (c LevelCore) With(fields []zapcore.Field) zapcore.Core {
	return LevelCore{Core: c.Core.With(fields), Level: c.Level}
}

// Check adds the core to ce when e's level passes the reloadable level.
func (c LevelCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Level.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}
