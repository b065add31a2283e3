package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/config"
)

// LevelCore lets a reload lower the level below what the root logger was built with.
func TestLevelCore(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	level := zap.NewAtomicLevelAt(zapcore.WarnLevel)
	logger := zap.New(core).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return LevelCore{Core: c, Level: level} }))
	logger.Info("hidden")
	level.SetLevel(zapcore.DebugLevel)
	logger.With(zap.String("k", "v")).Debug("shown")
	if got := logs.All(); len(got) != 1 || got[0].Message != "shown" {
		t.Errorf("logged %v, want only the debug entry after lowering the level", got)
	}
}

// newTestDaemon builds a daemon over a sampler with no parts (nothing to reach) whose Load
// returns what load says.
func newTestDaemon(t *testing.T, load func() (config.Config, error)) (*Daemon, config.Config, *observer.ObservedLogs) {
	t.Helper()
	var fl config.Flags
	fl.Register(pflag.NewFlagSet("run", pflag.ContinueOnError))
	fl.ProbeDir, fl.LogLevel, fl.QueryTimeout = "", "info", 5*time.Second
	cfg, err := config.Resolve(fl, config.File{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := New(cfg, zap.New(core), Options{
		ConfigFile: "config.yml", Load: load,
		NewSampler: func(*zap.Logger) (*advisor.Sampler, func(context.Context)) {
			return &advisor.Sampler{}, func(context.Context) {}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d, cfg, logs
}

func TestReload(t *testing.T) {
	t.Run("changes reach the advisor and the level", func(t *testing.T) {
		var next config.Config
		d, cfg, logs := newTestDaemon(t, func() (config.Config, error) { return next, nil })
		next = cfg
		next.Interval, next.LogLevel = time.Minute, "debug"
		d.Reload()
		if got := d.Config(); got.Interval != time.Minute || got.LogLevel != "debug" {
			t.Errorf("after reload: interval %v, level %s", got.Interval, got.LogLevel)
		}
		select {
		case <-d.restart:
		default:
			t.Error("no new advisor handed to the loop")
		}
		if !d.Logger().Core().Enabled(zapcore.DebugLevel) {
			t.Error("the log level did not change at once")
		}
		if n := logs.FilterMessage("config changed").Len(); n != 2 {
			t.Errorf("%d changes logged, want 2", n)
		}
	})
	t.Run("a refused advisor keeps the running settings", func(t *testing.T) {
		var next config.Config
		d, cfg, logs := newTestDaemon(t, func() (config.Config, error) { return next, nil })
		next = cfg
		next.HistoryWindow, next.LogLevel = cfg.Interval, "warn" // shorter than two intervals
		d.Reload()
		got := d.Config()
		if got.HistoryWindow != cfg.HistoryWindow || got.LogLevel != "warn" {
			t.Errorf("after a refused reload: window %v (want %v), level %s (want warn)", got.HistoryWindow, cfg.HistoryWindow, got.LogLevel)
		}
		if logs.FilterMessageSnippet("the advisor refuses").Len() != 1 {
			t.Error("the refusal is not logged")
		}
		select {
		case <-d.restart:
			t.Error("a refused configuration restarted the advisor")
		default:
		}
	})
	t.Run("a file that does not load changes nothing", func(t *testing.T) {
		d, cfg, logs := newTestDaemon(t, func() (config.Config, error) { return config.Config{}, errors.New("line 1: unknown key") })
		d.Reload()
		if settings(d.Config()) != settings(cfg) {
			t.Error("the configuration changed")
		}
		if logs.FilterMessage("config reload failed: keeping the running configuration").Len() != 1 {
			t.Error("the failure is not logged")
		}
	})
}

func settings(c config.Config) string {
	var b strings.Builder
	for _, s := range c.Settings() {
		b.WriteString(s.Key + "=" + s.Value + " ")
	}
	return b.String()
}
