package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// errUsage marks errors in the command line itself.
var errUsage = errors.New("usage")

// globals are the flags every subcommand shares.
type globals struct {
	dsn       string
	format    string
	procfs    string
	sysfs     string
	walDir    string
	logLevel  string
	logFormat string

	logger *zap.Logger
}

func newRootCmd() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "pgwal-advisor",
		Short: "Watch PostgreSQL's WAL write path and recommend settings that make it fast and keep it safe",
		Long: `pgwal-advisor runs beside PostgreSQL. It samples WAL and checkpoint statistics, the kernel's
dirty-page settings and the WAL directory's storage, measures sync latency on the WAL's own file
system, and recommends wal_buffers, wal_sync_method, vm.dirty_* and checkpoint settings with the
evidence behind each recommendation.

Connection: --dsn takes a libpq keyword string ("host=/run/postgresql user=advisor") or a URL
("postgres://advisor@localhost:5432/postgres"). Without it the usual PG* environment variables
and ~/.pgpass apply, as with psql. A role with pg_monitor is enough to collect.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.format != "table" && g.format != "json" {
				return fmt.Errorf("--format %q: want table or json: %w", g.format, errUsage)
			}
			logger, err := newLogger(cmd.ErrOrStderr(), g.logLevel, g.logFormat)
			if err != nil {
				return err
			}
			g.logger = logger
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if g.logger != nil {
				_ = g.logger.Sync()
			}
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (see --help): %w", err, errUsage)
	})
	f := root.PersistentFlags()
	f.StringVar(&g.dsn, "dsn", "", "PostgreSQL connection string (libpq keywords or URL); default: PG* environment variables and ~/.pgpass")
	f.StringVar(&g.format, "format", "table", "output format: table (for people) or json (for programs)")
	f.StringVar(&g.procfs, "path.procfs", "/proc", "procfs mount point")
	f.StringVar(&g.sysfs, "path.sysfs", "/sys", "sysfs mount point")
	f.StringVar(&g.walDir, "wal-dir", "", "the WAL directory, when the advisor's role may not read data_directory/pg_wal (default: asked of the server)")
	f.StringVar(&g.logLevel, "log.level", "info", "log level: debug, info, warn or error")
	f.StringVar(&g.logFormat, "log.format", "console", "log format: console or json")

	root.AddCommand(
		newVersionCmd(),
		newCollectCmd(g),
		newCheckCmd(g),
		newDemoCmd(g),
		newProbeCmd(g),
		newLabCmd(g),
		newRunCmd(g),
		newApplyCmd(g),
		newRollbackCmd(g),
		newBenchCmd(g),
	)
	return root
}

// newLogger builds the one logger the process uses; logs go to stderr so that stdout stays
// the command's output.
func newLogger(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log.level %q: want debug, info, warn or error: %w", level, errUsage)
	}
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	case "console":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	default:
		return nil, fmt.Errorf("--log.format %q: want console or json: %w", format, errUsage)
	}
	core := zapcore.NewCore(enc, zapcore.AddSync(w), lvl)
	return zap.New(core), nil
}

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module's
// build information is used.
var version = ""

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, goVersion := buildVersion()
			fmt.Fprintf(cmd.OutOrStdout(), "pgwal-advisor %s %s\n", v, goVersion)
			return nil
		},
	}
}
