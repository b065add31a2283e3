package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"gopkg.in/yaml.v3"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/web"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Defaults of `run` that no other package owns.
const (
	// stateDir is the daemon's state directory (systemd's StateDirectory=pgwal-advisor).
	stateDir = "/var/lib/pgwal-advisor"
	// defaultProbeSubdir, under stateDir, is the default probe directory: on a typical host
	// /var/lib holds both the state directory and PostgreSQL's data, so it is on the WAL's
	// file system; where it is not, the probes refuse it and the probe-disabled finding says so.
	defaultProbeSubdir = "probe"
)

// runFlags are run's own flags (the connection and the paths are globals).
type runFlags struct {
	configFile      string
	listenAddresses []string
	webConfigFile   string
	interval        time.Duration
	waitInterval    time.Duration
	historyWindow   time.Duration
	probeDir        string
	probeInterval   time.Duration
	probeBurst      time.Duration
	queryTimeout    time.Duration

	// Apply mode (docs/apply.md). Not in the configuration file: changing what the daemon may
	// change is a decision for the command line, not for a reload.
	applyMode   string
	applyCfg    apply.Config
	applySysctl string
}

func newRunCmd(g *globals) *cobra.Command {
	fl := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon: collect, probe and evaluate continuously, and serve metrics, the API and the findings over HTTP",
		Long: `run is the daemon. Every --interval it takes a snapshot of PostgreSQL's WAL statistics and
settings, the kernel's dirty-page settings and the WAL's storage, samples WAL wait events every
--wait-events.interval in between, probes sync latency on the WAL's file system in short bursts
(--probe.burst every --probe.interval), and evaluates the rules over the last --history.window.

It serves, through prometheus/exporter-toolkit:
  /metrics                  Prometheus metrics (docs/metrics.md)
  /api/v1/findings          current findings with evidence and action class (JSON)
  /api/v1/recommendations   the recommended changes (JSON)
  /api/v1/snapshot          the latest raw snapshot (JSON)
  /healthz, /readyz         liveness; readiness once the first snapshot is taken
  /                         a landing page with the current findings
All endpoints are read-only. The default listen address is loopback only, on port 9817: clear
of node_exporter (9100) and postgres_exporter (9187), which usually run on the same host.
--web.config.file turns on TLS and basic auth (the exporter-toolkit web configuration).

Probing needs a directory on the WAL's file system, outside pg_wal and the data directory.
The default, ` + stateDir + "/" + defaultProbeSubdir + `, is used when it exists (or is created when
` + stateDir + ` exists); otherwise probing is off and the probe-disabled finding says why.
--probe.dir="" turns probing off.

--config.file names an optional YAML file with the same settings (docs/http.md): flags given
on the command line override it. SIGHUP re-reads it: the log level changes at once, intervals,
the history window, the probe settings and the rule thresholds on the next cycle (the advisor's
loop restarts: its history and finding episodes start over); the listen addresses and the web
configuration file's path need a restart, and the log says so. SIGINT and SIGTERM stop the
daemon within seconds; the probe file is removed.`,
		Example: `  pgwal-advisor run --dsn "host=/run/postgresql user=pgwal_advisor"
  pgwal-advisor run --web.listen-address=:9817 --web.config.file=/etc/pgwal-advisor/web.yml
  pgwal-advisor run --config.file=/etc/pgwal-advisor/config.yml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDaemon(cmd.Context(), g, fl, cmd.Flags())
		},
	}
	fl.register(cmd.Flags())
	return cmd
}

// register defines run's flags on f.
func (fl *runFlags) register(f *pflag.FlagSet) {
	f.StringVar(&fl.configFile, "config.file", "", "optional YAML configuration file (docs/http.md); flags given on the command line override it; SIGHUP re-reads it")
	f.StringSliceVar(&fl.listenAddresses, "web.listen-address", []string{web.DefaultListenAddress}, "address to listen on for HTTP (repeatable); the default is loopback only, on a port clear of node_exporter's 9100 and postgres_exporter's 9187")
	f.StringVar(&fl.webConfigFile, "web.config.file", "", "exporter-toolkit web configuration file for TLS and basic auth (empty: plain HTTP, no authentication)")
	f.DurationVar(&fl.interval, "interval", advisor.DefaultInterval, "time between snapshots")
	f.DurationVar(&fl.waitInterval, "wait-events.interval", advisor.DefaultWaitInterval, "how often to sample WAL wait events from pg_stat_activity between snapshots")
	f.DurationVar(&fl.historyWindow, "history.window", advisor.DefaultHistoryWindow, "how much snapshot history to keep in memory for the rules")
	f.StringVar(&fl.probeDir, "probe.dir", filepath.Join(stateDir, defaultProbeSubdir), "directory for the sync probe's file, on the WAL's file system outside pg_wal and the data directory (\"\": no probing)")
	f.DurationVar(&fl.probeInterval, "probe.interval", probes.DefaultInterval, "time from one probe burst's start to the next")
	f.DurationVar(&fl.probeBurst, "probe.burst", probes.DefaultBurst, "how long each probe burst measures")
	f.DurationVar(&fl.queryTimeout, "query-timeout", 5*time.Second, "timeout of each query to PostgreSQL")
	f.StringVar(&fl.applyMode, "apply", string(apply.ModeOff), "apply mode: off, dry-run (journal and log what would change) or on (docs/apply.md)")
	f.StringSliceVar(&fl.applyCfg.Settings, "apply.settings", apply.DefaultSettings(), "settings the apply mode may change (fsync, synchronous_commit and full_page_writes never are)")
	f.StringVar(&fl.applyCfg.Journal, "apply.journal", apply.DefaultJournal, "the apply journal (JSON lines); 'pgwal-advisor rollback --journal FILE' restores what it records")
	f.StringVar(&fl.applySysctl, "apply.sysctl-file", apply.DefaultSysctlFile, "sysctl.d file that persists applied kernel settings")
	f.DurationVar(&fl.applyCfg.VerifyWindow, "apply.verify-window", apply.DefaultVerifyWindow, "how long the figures are measured before and after a change")
	f.DurationVar(&fl.applyCfg.Cooldown, "apply.cooldown", apply.DefaultCooldown, "least time between two changes")
	f.IntVar(&fl.applyCfg.MaxPerDay, "apply.max-per-day", apply.DefaultMaxPerDay, "most changes started in 24 hours")
}

// runConfig is the effective configuration: the flags' defaults, then the configuration file,
// then the flags given on the command line.
type runConfig struct {
	Interval        time.Duration
	WaitInterval    time.Duration
	HistoryWindow   time.Duration
	ProbeDir        string
	ProbeInterval   time.Duration
	ProbeBurst      time.Duration
	ListenAddresses []string
	WebConfigFile   string
	LogLevel        string
	Thresholds      rules.Thresholds
	// noDefaultProbeDir is set when the default probe directory was wanted but does not exist.
	noDefaultProbeDir bool
}

func (c runConfig) advisorConfig() advisor.Config {
	return advisor.Config{
		Interval:      c.Interval,
		WaitInterval:  c.WaitInterval,
		HistoryWindow: c.HistoryWindow,
		ProbeDir:      c.ProbeDir,
		Probe:         probes.SchedulerConfig{Burst: c.ProbeBurst, Interval: c.ProbeInterval},
		Thresholds:    c.Thresholds,
	}
}

// When a changed setting takes effect.
type applyWhen int

const (
	applyNow     applyWhen = iota // the log level
	applyAdvisor                  // the next cycle: the advisor's loop restarts
	applyRestart                  // only when the process restarts
)

func (w applyWhen) String() string {
	switch w {
	case applyNow:
		return "now"
	case applyAdvisor:
		return "next cycle (the advisor's loop restarts; its history starts over)"
	default:
		return "after a restart of pgwal-advisor"
	}
}

type settingValue struct {
	key, value string
	when       applyWhen
}

// settings lists the configuration as the file's keys name it, for logging what a reload
// changed and when that takes effect.
func (c runConfig) settings() []settingValue {
	s := []settingValue{
		{"interval", c.Interval.String(), applyAdvisor},
		{"wait_events.interval", c.WaitInterval.String(), applyAdvisor},
		{"history.window", c.HistoryWindow.String(), applyAdvisor},
		{"probe.dir", fmt.Sprintf("%q", c.ProbeDir), applyAdvisor},
		{"probe.interval", c.ProbeInterval.String(), applyAdvisor},
		{"probe.burst", c.ProbeBurst.String(), applyAdvisor},
		{"web.listen_address", strings.Join(c.ListenAddresses, ","), applyRestart},
		{"web.config_file", fmt.Sprintf("%q", c.WebConfigFile), applyRestart},
		{"log.level", c.LogLevel, applyNow},
	}
	v := reflect.ValueOf(c.Thresholds)
	for i := range v.NumField() {
		s = append(s, settingValue{"thresholds." + snakeCase(v.Type().Field(i).Name), fmt.Sprint(v.Field(i).Interface()), applyAdvisor})
	}
	return s
}

// fileConfig is the configuration file. Pointers tell "not set" from a zero value.
type fileConfig struct {
	Interval   *time.Duration `yaml:"interval"`
	WaitEvents struct {
		Interval *time.Duration `yaml:"interval"`
	} `yaml:"wait_events"`
	History struct {
		Window *time.Duration `yaml:"window"`
	} `yaml:"history"`
	Probe struct {
		Dir      *string        `yaml:"dir"`
		Interval *time.Duration `yaml:"interval"`
		Burst    *time.Duration `yaml:"burst"`
	} `yaml:"probe"`
	Web struct {
		ListenAddress stringList `yaml:"listen_address"`
		ConfigFile    *string    `yaml:"config_file"`
	} `yaml:"web"`
	Log struct {
		Level *string `yaml:"level"`
	} `yaml:"log"`
	// Thresholds are rules.Thresholds' fields in snake_case (raise_after, wal_buffers_floor).
	Thresholds map[string]yaml.Node `yaml:"thresholds"`
}

// stringList takes one string or a list of them (listen_address: ":9817" or a list).
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = stringList{n.Value}
		return nil
	case yaml.SequenceNode:
		var s []string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = s
		return nil
	}
	return fmt.Errorf("line %d: want an address or a list of addresses", n.Line)
}

// loadConfigFile reads and checks the configuration file; unknown keys are errors that name
// the key, so that a typo is not silently ignored.
func loadConfigFile(path string) (fileConfig, error) {
	var fc fileConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("read config file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := checkKeys(&doc, reflect.TypeFor[fileConfig](), ""); err != nil {
		return fc, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) > 0 {
		if err := doc.Decode(&fc); err != nil {
			return fc, fmt.Errorf("config file %s: %w", path, err)
		}
	}
	return fc, nil
}

// checkKeys refuses keys that t (a struct with yaml tags) does not have, naming the key with
// its path and line and listing the keys that exist there.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		return checkKeys(n.Content[0], t, path)
	}
	if n.Kind != yaml.MappingNode {
		return nil // a value of the wrong type is the decoder's to report
	}
	fields := map[string]reflect.Type{}
	if t.Kind() == reflect.Map {
		// The thresholds: keys are rules.Thresholds' fields.
		for k := range thresholdFields() {
			fields[k] = nil
		}
	} else {
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			fields[name] = t.Field(i).Type
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			where := ""
			if path != "" {
				where = " under " + path
			}
			return fmt.Errorf("line %d: unknown key %q (known keys%s: %s)", k.Line, full, where, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
		if ft != nil && (ft.Kind() == reflect.Struct || ft.Kind() == reflect.Map) {
			if err := checkKeys(v, ft, full); err != nil {
				return err
			}
		}
	}
	return nil
}

// thresholdFields maps the configuration file's threshold keys to rules.Thresholds' field
// indexes: the Go field name in snake_case, so that docs/rules.md's table names them too.
func thresholdFields() map[string]int {
	t := reflect.TypeFor[rules.Thresholds]()
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		m[snakeCase(t.Field(i).Name)] = i
	}
	return m
}

// snakeCase turns a Go field name into a configuration key: WALBuffersFloor -> wal_buffers_floor.
func snakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// applyThresholds sets the file's thresholds over th.
func applyThresholds(th *rules.Thresholds, nodes map[string]yaml.Node) error {
	fields := thresholdFields()
	v := reflect.ValueOf(th).Elem()
	for _, key := range slices.Sorted(maps.Keys(nodes)) {
		node := nodes[key]
		field := v.Field(fields[key])
		val := reflect.New(field.Type())
		if err := node.Decode(val.Interface()); err != nil {
			return fmt.Errorf("thresholds.%s: %w", key, err)
		}
		// Every threshold is a duration, a count, a size or a ratio: none is negative.
		if isNumber(field.Kind()) && val.Elem().Convert(reflect.TypeFor[float64]()).Float() < 0 {
			return fmt.Errorf("thresholds.%s: %v is negative", key, val.Elem().Interface())
		}
		field.Set(val.Elem())
	}
	return nil
}

func isNumber(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// resolveConfig merges the flags' defaults, the configuration file and the flags given on the
// command line (which win). probeStateDir is where the default probe directory lives.
func resolveConfig(g *globals, fl *runFlags, flags *pflag.FlagSet, fc fileConfig, probeStateDir string) (runConfig, error) {
	explicit := func(name string) bool {
		f := flags.Lookup(name)
		return f != nil && f.Changed
	}
	cfg := runConfig{
		Interval:        fl.interval,
		WaitInterval:    fl.waitInterval,
		HistoryWindow:   fl.historyWindow,
		ProbeDir:        fl.probeDir,
		ProbeInterval:   fl.probeInterval,
		ProbeBurst:      fl.probeBurst,
		ListenAddresses: slices.Clone(fl.listenAddresses),
		WebConfigFile:   fl.webConfigFile,
		LogLevel:        g.logLevel,
		Thresholds:      rules.DefaultThresholds(),
	}
	override(&cfg.Interval, fc.Interval, explicit("interval"))
	override(&cfg.WaitInterval, fc.WaitEvents.Interval, explicit("wait-events.interval"))
	override(&cfg.HistoryWindow, fc.History.Window, explicit("history.window"))
	override(&cfg.ProbeDir, fc.Probe.Dir, explicit("probe.dir"))
	override(&cfg.ProbeInterval, fc.Probe.Interval, explicit("probe.interval"))
	override(&cfg.ProbeBurst, fc.Probe.Burst, explicit("probe.burst"))
	override(&cfg.WebConfigFile, fc.Web.ConfigFile, explicit("web.config.file"))
	override(&cfg.LogLevel, fc.Log.Level, explicit("log.level"))
	if len(fc.Web.ListenAddress) > 0 && !explicit("web.listen-address") {
		cfg.ListenAddresses = slices.Clone(fc.Web.ListenAddress)
	}
	if err := applyThresholds(&cfg.Thresholds, fc.Thresholds); err != nil {
		return cfg, err
	}
	if _, err := zapcore.ParseLevel(cfg.LogLevel); err != nil {
		return cfg, fmt.Errorf("log level %q: want debug, info, warn or error", cfg.LogLevel)
	}
	if len(cfg.ListenAddresses) == 0 {
		return cfg, errors.New("no listen address: give --web.listen-address or web.listen_address")
	}
	// Only the default probe directory is looked for; one that was asked for is handed to the
	// probes as is, so that their refusal says what is wrong with it.
	defaultDir := filepath.Join(stateDir, defaultProbeSubdir)
	if cfg.ProbeDir == defaultDir && !explicit("probe.dir") && fc.Probe.Dir == nil {
		cfg.ProbeDir = defaultProbeDir(probeStateDir)
		cfg.noDefaultProbeDir = cfg.ProbeDir == ""
	}
	return cfg, nil
}

// override sets *dst to the file's value, unless the file does not set it or the flag was
// given on the command line.
func override[T any](dst, file *T, explicitFlag bool) {
	if file != nil && !explicitFlag {
		*dst = *file
	}
}

// defaultProbeDir returns stateDir/probe when it exists, creating it when only the state
// directory exists (systemd creates that one, StateDirectory=pgwal-advisor), and "" (no
// probing) otherwise.
func defaultProbeDir(stateDir string) string {
	dir := filepath.Join(stateDir, defaultProbeSubdir)
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir
	}
	if st, err := os.Stat(stateDir); err != nil || !st.IsDir() {
		return ""
	}
	if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return ""
	}
	return dir
}

// levelCore gates a core by a level that SIGHUP can change. The core root.go builds has its
// level fixed at --log.level; levelCore takes over the decision and writes through the inner
// core directly (zapcore's cores check the level in Check, not in Write), so the level can go
// below --log.level too.
type levelCore struct {
	zapcore.Core
	level zap.AtomicLevel
}

func (c levelCore) Enabled(l zapcore.Level) bool { return c.level.Enabled(l) }

func (c levelCore) With(fields []zapcore.Field) zapcore.Core {
	return levelCore{Core: c.Core.With(fields), level: c.level}
}

func (c levelCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.level.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// daemon is a running `pgwal-advisor run`: the advisor's loop, the HTTP server, and the
// configuration that SIGHUP reloads.
type daemon struct {
	g       *globals
	fl      *runFlags
	flags   *pflag.FlagSet
	logger  *zap.Logger
	level   zap.AtomicLevel
	sampler *advisor.Sampler
	// probeStateDir is stateDir, except in tests.
	probeStateDir string

	// restart hands a new advisor, built from a reloaded configuration, to the loop.
	restart chan *advisor.Advisor

	mu  sync.Mutex // guards cfg: reloads come one at a time, but tests call reload directly
	cfg runConfig

	// cur is the advisor whose loop runs; prev the one it replaced, whose state is served
	// until cur has its first snapshot, so that a reload does not blank /metrics.
	cur, prev atomic.Pointer[advisor.Advisor]
}

// State implements web.StateSource.
func (d *daemon) State() advisor.State {
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

func runDaemon(ctx context.Context, g *globals, fl *runFlags, flags *pflag.FlagSet) error {
	return startDaemon(ctx, g, fl, flags, stateDir, nil)
}

// startDaemon runs the daemon until ctx ends. ready, when not nil, is called with the daemon
// once it serves (tests use it to reload without a signal).
func startDaemon(ctx context.Context, g *globals, fl *runFlags, flags *pflag.FlagSet, probeStateDir string, ready func(*daemon)) error {
	// SIGHUP is caught from the start: its default action would kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var fc fileConfig
	if fl.configFile != "" {
		var err error
		if fc, err = loadConfigFile(fl.configFile); err != nil {
			return fmt.Errorf("%w: %w", err, errUsage)
		}
	}
	cfg, err := resolveConfig(g, fl, flags, fc, probeStateDir)
	if err != nil {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	lvl, _ := zapcore.ParseLevel(cfg.LogLevel) // checked by resolveConfig
	level := zap.NewAtomicLevelAt(lvl)
	logger := g.logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return levelCore{Core: c, level: level} }))

	// The collectors log through the gated logger too, so that a reloaded level reaches them.
	sampler, closeSampler := newSampler(&globals{dsn: g.dsn, procfs: g.procfs, sysfs: g.sysfs, walDir: g.walDir, logger: logger}, fl.queryTimeout)
	defer closeSampler(ctx)
	d := &daemon{
		g: g, fl: fl, flags: flags, logger: logger, level: level, sampler: sampler,
		probeStateDir: probeStateDir, restart: make(chan *advisor.Advisor, 1), cfg: cfg,
	}
	adv, err := advisor.New(sampler, cfg.advisorConfig(), logger)
	if err != nil {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	d.cur.Store(adv)
	v, goVersion := buildVersion()
	applyCfg := fl.applyCfg
	if applyCfg.Mode, err = apply.ParseMode(fl.applyMode); err != nil {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	pgApply := apply.NewPostgres(g.dsn, apply.PostgresOptions{QueryTimeout: fl.queryTimeout, Logger: logger})
	defer pgApply.Close(context.WithoutCancel(ctx))
	mgr, err := apply.New(applyCfg, d, []apply.Actuator{pgApply, apply.NewKernel(g.procfs, fl.applySysctl, logger)}, logger)
	if err != nil {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	srv, err := web.NewServer(d, web.Config{
		ListenAddresses: cfg.ListenAddresses, WebConfigFile: cfg.WebConfigFile, Version: v, GoVersion: goVersion,
		Collectors: []prometheus.Collector{apply.NewMetrics(mgr)},
	}, logger)
	if err != nil {
		return fmt.Errorf("%w: %w", err, errUsage)
	}
	probeDir := cfg.ProbeDir
	if probeDir == "" {
		probeDir = "(off)"
	}
	logger.Info("pgwal-advisor running",
		zap.Strings("listen_addresses", cfg.ListenAddresses), zap.Duration("interval", cfg.Interval),
		zap.String("probe_dir", probeDir), zap.String("config_file", fl.configFile), zap.String("version", v))
	if cfg.noDefaultProbeDir {
		// The advisor's probe-disabled finding says to set --probe.dir; say why the default did
		// not serve.
		logger.Info("probing is off: the default probe directory does not exist, nor the state directory to create it in",
			zap.String("default_probe_dir", filepath.Join(probeStateDir, defaultProbeSubdir)))
	}

	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return srv.Serve(ctx) })
	eg.Go(func() error { return d.loop(ctx, adv) })
	eg.Go(func() error { return mgr.Run(ctx) }) // returns at once with --apply=off
	eg.Go(func() error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				d.reload()
			}
		}
	})
	if ready != nil {
		ready(d)
	}
	err = eg.Wait()
	logger.Info("pgwal-advisor stopped")
	return err
}

// loop runs the advisor until ctx ends, replacing it when a reload hands over a new one. The
// old loop is stopped (and its probe file removed) before the new one starts: both share the
// sampler's connection.
func (d *daemon) loop(ctx context.Context, a *advisor.Advisor) error {
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

// reload re-reads the configuration file and applies what changed: the log level at once,
// the advisor's settings by restarting its loop, and it says which settings need a restart
// of the process. A file that does not load or a configuration the advisor refuses leaves the
// running configuration as it is.
func (d *daemon) reload() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fl.configFile == "" {
		d.logger.Warn("sighup received but there is no --config.file to re-read: nothing changed")
		return
	}
	d.logger.Info("sighup received: reloading the config file", zap.String("config_file", d.fl.configFile))
	fc, err := loadConfigFile(d.fl.configFile)
	if err != nil {
		d.logger.Error("config reload failed: keeping the running configuration", zap.Error(err))
		return
	}
	next, err := resolveConfig(d.g, d.fl, d.flags, fc, d.probeStateDir)
	if err != nil {
		d.logger.Error("config reload failed: keeping the running configuration", zap.Error(err))
		return
	}
	old := map[string]settingValue{}
	for _, s := range d.cfg.settings() {
		old[s.key] = s
	}
	var advisorChanged, restartNeeded bool
	changed := 0
	for _, s := range next.settings() {
		if o := old[s.key]; o.value != s.value {
			changed++
			d.logger.Info("config changed", zap.String("key", s.key), zap.String("old", o.value),
				zap.String("new", s.value), zap.Stringer("takes_effect", s.when))
			advisorChanged = advisorChanged || s.when == applyAdvisor
			restartNeeded = restartNeeded || s.when == applyRestart
		}
	}
	if changed == 0 {
		d.logger.Info("config reloaded: nothing changed")
		return
	}
	if advisorChanged {
		a, err := advisor.New(d.sampler, next.advisorConfig(), d.logger)
		if err != nil {
			d.logger.Error("config reload: the advisor refuses the new settings; keeping the running ones", zap.Error(err))
			next = withAdvisorSettings(next, d.cfg)
		} else {
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
	}
	if restartNeeded {
		d.logger.Warn("config reload: web.listen_address and web.config_file change only when pgwal-advisor restarts (the web configuration file's contents are re-read at every connection)")
		// Keep reporting them as pending until the process restarts.
		next.ListenAddresses, next.WebConfigFile = d.cfg.ListenAddresses, d.cfg.WebConfigFile
	}
	lvl, _ := zapcore.ParseLevel(next.LogLevel)
	d.level.SetLevel(lvl)
	d.cfg = next
}

// withAdvisorSettings returns cfg with the advisor's settings of running.
func withAdvisorSettings(cfg, running runConfig) runConfig {
	cfg.Interval, cfg.WaitInterval, cfg.HistoryWindow = running.Interval, running.WaitInterval, running.HistoryWindow
	cfg.ProbeDir, cfg.ProbeInterval, cfg.ProbeBurst = running.ProbeDir, running.ProbeInterval, running.ProbeBurst
	cfg.Thresholds = running.Thresholds
	return cfg
}

// buildVersion returns the version (-ldflags -X main.version, else the module's) and the Go
// version that built the binary.
func buildVersion() (string, string) {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if v == "" && ok {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	goVersion := ""
	if ok {
		goVersion = bi.GoVersion
	}
	return v, goVersion
}
