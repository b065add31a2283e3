package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
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
		// Only what took effect is announced: the refused window is not logged as a change
		// taking effect next cycle, the level (which did change) is.
		for _, e := range logs.FilterMessage("config changed").All() {
			if key := e.ContextMap()["key"]; key != "log.level" {
				t.Errorf("a refused reload logged %q as changed: %v", key, e.ContextMap())
			}
		}
		if n := logs.FilterMessage("config changed").Len(); n != 1 {
			t.Errorf("%d changes logged, want 1 (the log level)", n)
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

// A reload that changes the advisor's settings restarts its loop with the history it had: the
// new advisor's first evaluation sees the snapshots taken before the reload, and the log, the
// help text of run and docs/http.md say so.
func TestReloadKeepsHistory(t *testing.T) {
	var next config.Config
	d, _, logs := newTestDaemon(t, func() (config.Config, error) { return next, nil })
	d.cfg.Interval = 100 * time.Millisecond
	first, err := advisor.New(d.sampler, d.cfg.Advisor(), d.logger)
	if err != nil {
		t.Fatal(err)
	}
	d.cur.Store(first)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	historyLen := func(a *advisor.Advisor) int {
		if h := a.State().History; h != nil {
			return h.Len()
		}
		return 0
	}
	waitFor("three snapshots before the reload", func() bool { return historyLen(first) >= 3 })

	next = d.Config()
	next.Interval = 150 * time.Millisecond
	d.Reload()
	waitFor("the restarted advisor", func() bool { return d.cur.Load() != first })
	oldest := first.State().History.Snapshots()[0].Time
	restarted := d.cur.Load()
	waitFor("the restarted advisor's first snapshot", func() bool {
		h := restarted.State().History
		return h != nil && h.Len() > historyLen(first)
	})
	if got := restarted.State().History.Snapshots()[0].Time; !got.Equal(oldest) {
		t.Errorf("after the reload the history starts at %v, want the first advisor's oldest snapshot %v", got, oldest)
	}
	if logs.FilterMessageSnippet("keeping its history").Len() != 1 {
		t.Error("the restart is not logged as keeping the history")
	}
	for _, e := range logs.FilterMessage("config changed").All() {
		if when := e.ContextMap()["takes_effect"]; strings.Contains(fmt.Sprint(when), "starts over") {
			t.Errorf("the change is logged as starting the history over: %v", when)
		}
	}
	startsOver := regexp.MustCompile(`(?i)(history|episodes|counters)[^.|]*starts? over`)
	for _, doc := range []string{"../../docs/http.md", "../../cmd/pgwal-advisor/run.go", "../../docs/metrics.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if m := startsOver.Find(b); m != nil {
			t.Errorf("%s says %q; a reload keeps the history, episodes and counters", doc, m)
		}
	}
}
