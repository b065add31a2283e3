// Package config is the daemon's configuration: run's flags that the configuration file may
// also set, the file's schema and key checks, the merge of defaults, file and command line,
// the bounds every duration, ratio and threshold must keep (limits.go), and which settings a
// reload changed and when each takes effect.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/web"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

const (
	// StateDir is the daemon's state directory (systemd's StateDirectory=pgwal-advisor).
	StateDir = "/var/lib/pgwal-advisor"
	// DefaultProbeSubdir, under StateDir, is the default probe directory: on a typical host
	// /var/lib holds both the state directory and PostgreSQL's data, so it is on the WAL's
	// file system; where it is not, the probes refuse it and the probe-disabled finding says so.
	DefaultProbeSubdir = "probe"
)

// Flags are run's flags that the configuration file may set too, and the global flags the
// configuration reads (--log.level, --query-timeout).
type Flags struct {
	Interval        time.Duration
	WaitInterval    time.Duration
	HistoryWindow   time.Duration
	ProbeDir        string
	ProbeInterval   time.Duration
	ProbeBurst      time.Duration
	ListenAddresses []string
	WebConfigFile   string
	LogLevel        string
	QueryTimeout    time.Duration
	// Changed reports whether a flag was given on the command line (pflag's Flag.Changed);
	// those win over the file. nil: none was.
	Changed func(flag string) bool
}

// Register defines the flags on f, bound to fl; LogLevel and QueryTimeout are the root
// command's and are set by the caller.
func (fl *Flags) Register(f *pflag.FlagSet) {
	f.StringSliceVar(&fl.ListenAddresses, "web.listen-address", []string{web.DefaultListenAddress}, "address to listen on for HTTP (repeatable); the default is loopback only, on a port clear of node_exporter's 9100 and postgres_exporter's 9187")
	f.StringVar(&fl.WebConfigFile, "web.config.file", "", "exporter-toolkit web configuration file for TLS and basic auth (empty: plain HTTP, no authentication)")
	f.DurationVar(&fl.Interval, "interval", advisor.DefaultInterval, "time between snapshots")
	f.DurationVar(&fl.WaitInterval, "wait-events.interval", advisor.DefaultWaitInterval, "how often to sample WAL wait events from pg_stat_activity between snapshots")
	f.DurationVar(&fl.HistoryWindow, "history.window", advisor.DefaultHistoryWindow, "how much snapshot history to keep in memory for the rules")
	f.StringVar(&fl.ProbeDir, "probe.dir", filepath.Join(StateDir, DefaultProbeSubdir), "directory for the sync probe's file, on the WAL's file system outside pg_wal and the data directory (\"\": no probing)")
	f.DurationVar(&fl.ProbeInterval, "probe.interval", probes.DefaultInterval, "time from one probe burst's start to the next")
	f.DurationVar(&fl.ProbeBurst, "probe.burst", probes.DefaultBurst, "how long each probe burst measures")
}

// Config is the effective configuration: the flags' defaults, then the configuration file,
// then the flags given on the command line.
type Config struct {
	Interval        time.Duration
	WaitInterval    time.Duration
	HistoryWindow   time.Duration
	ProbeDir        string
	ProbeInterval   time.Duration
	ProbeBurst      time.Duration
	ListenAddresses []string
	WebConfigFile   string
	LogLevel        string
	// QueryTimeout is a flag only: a reload does not change it.
	QueryTimeout time.Duration
	Thresholds   rules.Thresholds
	// NoDefaultProbeDir is set when the default probe directory was wanted but does not exist.
	NoDefaultProbeDir bool
}

// Advisor returns the advisor's part of the configuration.
func (c Config) Advisor() advisor.Config {
	return advisor.Config{
		Interval:      c.Interval,
		WaitInterval:  c.WaitInterval,
		HistoryWindow: c.HistoryWindow,
		ProbeDir:      c.ProbeDir,
		Probe:         probes.SchedulerConfig{Burst: c.ProbeBurst, Interval: c.ProbeInterval},
		Thresholds:    c.Thresholds,
	}
}

// WithAdvisorSettings returns c with the advisor's settings of running: what a reload keeps
// when the advisor refuses the new ones.
func (c Config) WithAdvisorSettings(running Config) Config {
	c.Interval, c.WaitInterval, c.HistoryWindow = running.Interval, running.WaitInterval, running.HistoryWindow
	c.ProbeDir, c.ProbeInterval, c.ProbeBurst = running.ProbeDir, running.ProbeInterval, running.ProbeBurst
	c.Thresholds = running.Thresholds
	return c
}

// When says when a changed setting takes effect.
type When int

const (
	Now     When = iota // the log level
	Next                // the next cycle: the advisor's loop restarts
	Restart             // only when the process restarts
)

func (w When) String() string {
	switch w {
	case Now:
		return "now"
	case Next:
		return "next cycle (the advisor's loop restarts, keeping its history)"
	default:
		return "after a restart of pgwal-advisor"
	}
}

// Setting is one setting as the file's keys name it, its value as text, and when a change of
// it takes effect.
type Setting struct {
	Key, Value string
	When       When
}

// Settings lists the configuration as the file's keys name it, for logging what a reload
// changed and when that takes effect.
func (c Config) Settings() []Setting {
	s := []Setting{
		{"interval", c.Interval.String(), Next},
		{"wait_events.interval", c.WaitInterval.String(), Next},
		{"history.window", c.HistoryWindow.String(), Next},
		{"probe.dir", fmt.Sprintf("%q", c.ProbeDir), Next},
		{"probe.interval", c.ProbeInterval.String(), Next},
		{"probe.burst", c.ProbeBurst.String(), Next},
		{"web.listen_address", strings.Join(c.ListenAddresses, ","), Restart},
		{"web.config_file", fmt.Sprintf("%q", c.WebConfigFile), Restart},
		{"log.level", c.LogLevel, Now},
	}
	v := reflect.ValueOf(c.Thresholds)
	for i := range v.NumField() {
		s = append(s, Setting{"thresholds." + snakeCase(v.Type().Field(i).Name), fmt.Sprint(v.Field(i).Interface()), Next})
	}
	return s
}

// Change is a setting whose value a reload changed.
type Change struct {
	Setting
	Old string
}

// Diff returns the settings whose values differ from old to next, in Settings' order.
func Diff(old, next Config) []Change {
	was := map[string]string{}
	for _, s := range old.Settings() {
		was[s.Key] = s.Value
	}
	var changes []Change
	for _, s := range next.Settings() {
		if o := was[s.Key]; o != s.Value {
			changes = append(changes, Change{Setting: s, Old: o})
		}
	}
	return changes
}

// Resolve merges the flags' defaults, the configuration file and the flags given on the
// command line (which win), and checks the result against Limits. probeStateDir is where the
// default probe directory lives (StateDir, except in tests).
func Resolve(fl Flags, fc File, probeStateDir string) (Config, error) {
	explicit := func(name string) bool { return fl.Changed != nil && fl.Changed(name) }
	cfg := Config{
		Interval:        fl.Interval,
		WaitInterval:    fl.WaitInterval,
		HistoryWindow:   fl.HistoryWindow,
		ProbeDir:        fl.ProbeDir,
		ProbeInterval:   fl.ProbeInterval,
		ProbeBurst:      fl.ProbeBurst,
		ListenAddresses: slices.Clone(fl.ListenAddresses),
		WebConfigFile:   fl.WebConfigFile,
		LogLevel:        fl.LogLevel,
		QueryTimeout:    fl.QueryTimeout,
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
	// A value is named as the operator gave it: the flag when it came from the command line,
	// the file's key otherwise.
	name := func(l Limit) string {
		if l.Flag != "" && (l.Key == "" || explicit(l.Flag)) {
			return "--" + l.Flag
		}
		return l.Key
	}
	if err := cfg.check(name); err != nil {
		return cfg, err
	}
	if _, err := zapcore.ParseLevel(cfg.LogLevel); err != nil {
		return cfg, fmt.Errorf("log level %q: want debug, info, warn or error", cfg.LogLevel)
	}
	if len(cfg.ListenAddresses) == 0 {
		return cfg, errors.New("no listen address: give --web.listen-address or web.listen_address")
	}
	for _, a := range cfg.ListenAddresses {
		if err := checkListenAddress(a); err != nil {
			return cfg, err
		}
	}
	// Only the default probe directory is looked for; one that was asked for is handed to the
	// probes as is, so that their refusal says what is wrong with it.
	defaultDir := filepath.Join(StateDir, DefaultProbeSubdir)
	if cfg.ProbeDir == defaultDir && !explicit("probe.dir") && fc.Probe.Dir == nil {
		cfg.ProbeDir = DefaultProbeDir(probeStateDir)
		cfg.NoDefaultProbeDir = cfg.ProbeDir == ""
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

// DefaultProbeDir returns stateDir/probe when it exists, creating it when only the state
// directory exists (systemd creates that one, StateDirectory=pgwal-advisor), and "" (no
// probing) otherwise.
func DefaultProbeDir(stateDir string) string {
	dir := filepath.Join(stateDir, DefaultProbeSubdir)
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

// checkListenAddress refuses a listen address that cannot be bound before anything starts or
// connects: host:port with a port from 0 to 65535, and a host that is empty, an IP address or a
// host name (resolved only when the server binds). A typo would otherwise surface as a failure
// to serve, after the connection to PostgreSQL, with the wrong exit status.
func checkListenAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("listen address %q: %v: want host:port, e.g. 127.0.0.1:9817 or [::1]:9817", a, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("listen address %q: port %q: want a number from 0 to 65535", a, port)
	}
	if host == "" || net.ParseIP(host) != nil {
		return nil
	}
	if strings.Trim(host, "0123456789.") == "" {
		return fmt.Errorf("listen address %q: %q is not an IP address", a, host)
	}
	for _, r := range host {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("listen address %q: %q is neither an IP address nor a host name", a, host)
		}
	}
	return nil
}
