package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/config"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/daemon"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/web"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

// runFlags are run's own flags (the connection and the paths are globals).
type runFlags struct {
	configFile string
	cfg        config.Flags

	// Apply mode (docs/apply.md). Not in the configuration file: changing what the daemon may
	// change is a decision for the command line, not for a reload.
	applyMode   string
	applyCfg    apply.Config
	applySysctl string
	patroni     patroniFlags
	// restartWindow is --apply.restart-window, parsed into applyCfg.RestartWindow.
	restartWindow string
	// crossover is --apply.crossover, the opposite of applyCfg.NoCrossover.
	crossover bool
}

func newRunCmd(g *cli.Globals) *cobra.Command {
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
The default, ` + config.StateDir + "/" + config.DefaultProbeSubdir + `, is used when it exists (or is created when
` + config.StateDir + ` exists); otherwise probing is off and the probe-disabled finding says why.
--probe.dir="" turns probing off.

--config.file names an optional YAML file with the same settings (docs/http.md): flags given
on the command line override it. SIGHUP re-reads it: the log level changes at once, intervals,
the history window, the probe settings and the rule thresholds on the next cycle (the advisor's
loop restarts, keeping its history, finding episodes and wait-event counters; the probe measures
afresh); the listen addresses and the web
configuration file's path need a restart, and the log says so. SIGINT and SIGTERM stop the
daemon within seconds; the probe file is removed.`,
		Example: `  pgwal-advisor run --dsn "host=/run/postgresql dbname=postgres"
  pgwal-advisor run --web.listen-address=:9817 --web.config.file=/etc/pgwal-advisor/web.yml
  pgwal-advisor run --config.file=/etc/pgwal-advisor/config.yml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDaemon(cmd.Context(), g, fl, cmd.Flags(), config.StateDir)
		},
	}
	fl.register(cmd.Flags())
	return cmd
}

// register defines run's flags on f.
func (fl *runFlags) register(f *pflag.FlagSet) {
	f.StringVar(&fl.configFile, "config.file", "", "optional YAML configuration file (docs/http.md); flags given on the command line override it; SIGHUP re-reads it")
	fl.cfg.Register(f)
	f.StringVar(&fl.applyMode, "apply", string(apply.ModeOff), "apply mode: off, dry-run (journal and log what would change) or on (docs/apply.md)")
	f.StringSliceVar(&fl.applyCfg.Settings, "apply.settings", apply.DefaultSettings(), "settings the apply mode may change (fsync, synchronous_commit and full_page_writes never are)")
	f.StringVar(&fl.applyCfg.Journal, "apply.journal", apply.DefaultJournal, "the apply journal (JSON lines); 'pgwal-advisor rollback --journal FILE' restores what it records")
	f.StringVar(&fl.applySysctl, "apply.sysctl-file", apply.DefaultSysctlFile, "sysctl.d file that persists applied kernel settings")
	fl.patroni.register(f)
	f.DurationVar(&fl.applyCfg.VerifyWindow, "apply.verify-window", apply.DefaultVerifyWindow, "how long the figures are measured before and after a change")
	f.DurationVar(&fl.applyCfg.Cooldown, "apply.cooldown", apply.DefaultCooldown, "least time between two changes")
	f.IntVar(&fl.applyCfg.MaxPerDay, "apply.max-per-day", apply.DefaultMaxPerDay, "most changes started in 24 hours")
	f.BoolVar(&fl.crossover, "apply.crossover", true, "when one window after a reload or kernel change cannot judge it, alternate the old and new values over six more windows and judge the pairs (docs/apply.md, \"Crossover trials\")")
	f.StringVar(&fl.restartWindow, "apply.restart-window", "", `when the HA manager (--apply.patroni-url) may restart PostgreSQL for a change that waits for a restart, in the host's time zone: "DAYS HH:MM-HH:MM" (or DAYS@HH:MM-HH:MM), e.g. "Sat,Sun 02:00-05:00"; empty: never`)
}

// loadConfig reads --config.file (when given) and resolves it against the command line.
func loadConfig(g *cli.Globals, fl *runFlags, flags *pflag.FlagSet, probeStateDir string) (config.Config, error) {
	var fc config.File
	if fl.configFile != "" {
		var err error
		if fc, err = config.Load(fl.configFile); err != nil {
			return config.Config{}, err
		}
	}
	cf := fl.cfg
	cf.LogLevel, cf.QueryTimeout = g.LogLevel, g.QueryTimeout
	cf.Changed = func(name string) bool { f := flags.Lookup(name); return f != nil && f.Changed }
	return config.Resolve(cf, fc, probeStateDir)
}

// runDaemon runs the daemon until ctx ends. probeStateDir is where the default probe
// directory is looked for (config.StateDir, except in tests).
func runDaemon(ctx context.Context, g *cli.Globals, fl *runFlags, flags *pflag.FlagSet, probeStateDir string) error {
	// SIGHUP is caught from the start: its default action would kill the daemon.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	usage := func(err error) error { return fmt.Errorf("%w: %w", err, cli.ErrUsage) }
	cfg, err := loadConfig(g, fl, flags, probeStateDir)
	if err != nil {
		return usage(err)
	}
	// The daemon idles most of its life: a lower collector target keeps its resident memory near
	// what it holds (advisor/daemon/gc.go). An operator's GOGC wins.
	daemon.TuneGC(os.Getenv)
	v, goVersion := cli.BuildVersion(version)
	d, err := daemon.New(cfg, g.Logger, daemon.Options{
		ConfigFile: fl.configFile, Hup: hup, ProbeStateDir: probeStateDir, Version: v,
		Load: func() (config.Config, error) { return loadConfig(g, fl, flags, probeStateDir) },
		NewSampler: func(logger *zap.Logger) (*advisor.Sampler, func(context.Context)) {
			sg := *g
			sg.Logger = logger
			return newSampler(&sg, 0)
		},
	})
	if err != nil {
		return usage(err)
	}
	defer d.Close(ctx)
	logger := d.Logger()

	applyCfg := fl.applyCfg
	if applyCfg.Mode, err = apply.ParseMode(fl.applyMode); err != nil {
		return usage(err)
	}
	if applyCfg.Mode == apply.ModeOn {
		if err := apply.CheckSysctlFile(fl.applySysctl); err != nil {
			return usage(err)
		}
	}
	applyCfg.NoCrossover = !fl.crossover
	if applyCfg.RestartWindow, err = apply.ParseRestartWindow(fl.restartWindow); err != nil {
		return usage(fmt.Errorf("--apply.restart-window: %w", err))
	}
	if applyCfg.RestartWindow.Set() && fl.patroni.url == "" {
		return usage(errors.New("--apply.restart-window needs --apply.patroni-url: only an HA manager restarts PostgreSQL for the advisor, never the advisor itself"))
	}
	pgApply := apply.NewPostgres(g.DSN, apply.PostgresOptions{QueryTimeout: g.QueryTimeout, ProcFS: g.ProcFS, Logger: logger})
	defer pgApply.Close(context.WithoutCancel(ctx))
	route, err := fl.patroni.postgresRoute(g, pgApply)
	if err != nil {
		return usage(err)
	}
	mgr, err := apply.New(applyCfg, d, []apply.Actuator{route, apply.NewKernel(g.ProcFS, fl.applySysctl, logger)}, logger)
	if err != nil {
		return usage(err)
	}
	srv, err := web.NewServer(d, web.Config{
		ListenAddresses: cfg.ListenAddresses, WebConfigFile: cfg.WebConfigFile, Version: v, GoVersion: goVersion,
		Collectors: []prometheus.Collector{apply.NewMetrics(mgr)}, Apply: mgr,
	}, logger)
	if err != nil {
		return usage(err)
	}
	// apply's Run returns at once with --apply=off.
	return d.Run(ctx, srv.Serve, mgr.Run)
}
