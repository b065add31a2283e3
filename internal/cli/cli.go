// Package cli holds what the project's two commands, pgwal-advisor and pgwal-lab, share: the
// global flags, the logger built from them, the exit codes and the mapping of a command's
// error to its exit code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Exit codes. check uses 0/1/2 for nothing-or-info/warning/critical; anything that could not
// run at all exits with ExitFailure, a command line that does not parse with ExitBadUsage.
const (
	ExitOK       = 0
	ExitFailure  = 3
	ExitBadUsage = 64
)

// ErrUsage marks errors in the command line itself: wrap it (%w) and the command exits
// ExitBadUsage.
var ErrUsage = errors.New("usage")

// DefaultQueryTimeout bounds each query to PostgreSQL unless --query-timeout says otherwise.
const DefaultQueryTimeout = 5 * time.Second

// ExitCodeError carries a specific exit code out of a subcommand. Err, when not nil, is
// printed on stderr.
type ExitCodeError struct {
	Code int
	Err  error
}

func (e *ExitCodeError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitCodeError) Unwrap() error { return e.Err }

// Globals are the flags every subcommand shares, and the logger built from them.
type Globals struct {
	DSN          string
	Format       string
	ProcFS       string
	SysFS        string
	WALDir       string
	QueryTimeout time.Duration
	// FullPagesInterval is how often the WAL's full-page images are read and compressed
	// (probes/compression); 0 turns that off.
	FullPagesInterval time.Duration
	LogLevel          string
	LogFormat         string

	Logger *zap.Logger
}

// NewRoot returns a root command with the output, logging and path flags (--format,
// --log.level, --log.format, --path.procfs, --path.sysfs) bound to g; it checks them and
// builds g.Logger before any subcommand runs. Commands that talk to PostgreSQL add
// ConnectionFlags.
func NewRoot(use, short, long string, g *Globals) *cobra.Command {
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		Long:          long,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if g.Format != "table" && g.Format != "json" {
				return fmt.Errorf("--format %q: want table or json: %w", g.Format, ErrUsage)
			}
			if g.FullPagesInterval < 0 {
				return fmt.Errorf("--full-pages.interval %v: want a positive duration, or 0 to turn the reading off: %w", g.FullPagesInterval, ErrUsage)
			}
			logger, err := NewLogger(cmd.ErrOrStderr(), g.LogLevel, g.LogFormat)
			if err != nil {
				return err
			}
			g.Logger = logger
			return nil
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if g.Logger != nil {
				_ = g.Logger.Sync()
			}
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (see --help): %w", err, ErrUsage)
	})
	f := root.PersistentFlags()
	f.StringVar(&g.Format, "format", "table", "output format: table (for people) or json (for programs)")
	f.StringVar(&g.ProcFS, "path.procfs", "/proc", "procfs mount point")
	f.StringVar(&g.SysFS, "path.sysfs", "/sys", "sysfs mount point")
	f.StringVar(&g.LogLevel, "log.level", "info", "log level: debug, info, warn or error")
	f.StringVar(&g.LogFormat, "log.format", "console", "log format: console or json")
	return root
}

// ConnectionFlags adds the flags of commands that talk to PostgreSQL (--dsn, --wal-dir,
// --query-timeout) to root, bound to g.
func ConnectionFlags(root *cobra.Command, g *Globals) {
	f := root.PersistentFlags()
	f.StringVar(&g.DSN, "dsn", "", "PostgreSQL connection string (libpq keywords or URL); default: PG* environment variables and ~/.pgpass")
	f.StringVar(&g.WALDir, "wal-dir", "", "the WAL directory, when the advisor's role may not read data_directory/pg_wal (default: asked of the server)")
	f.DurationVar(&g.QueryTimeout, "query-timeout", DefaultQueryTimeout, "timeout of each query to PostgreSQL")
	f.DurationVar(&g.FullPagesInterval, "full-pages.interval", 5*time.Minute,
		"how long a reading of the WAL's full-page images takes: up to 8 WAL files, spread over it, whose images are timed compressing, which decides wal_compression (check and apply spread them over --window when shorter; 0: never, the advisor then does not recommend it)")
}

// Execute runs root with args and returns the process exit code: 0 on success, the code of an
// ExitCodeError, ExitBadUsage for errors wrapping ErrUsage, ExitFailure for any other error.
// Errors are printed on stderr prefixed with the command's name.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	usageArgs(root)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	prefix := root.Name() + ":"
	var ec *ExitCodeError
	if errors.As(err, &ec) {
		if ec.Err != nil {
			fmt.Fprintln(stderr, prefix, ec.Err)
		}
		return ec.Code
	}
	fmt.Fprintln(stderr, prefix, err)
	// Cobra's error for an unknown subcommand has no type of its own.
	if errors.Is(err, ErrUsage) || strings.HasPrefix(err.Error(), "unknown command ") {
		return ExitBadUsage
	}
	return ExitFailure
}

// NewLogger builds the one logger the process uses; logs go to w (stderr) so that stdout stays
// the command's output.
func NewLogger(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log.level %q: want debug, info, warn or error: %w", level, ErrUsage)
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
		return nil, fmt.Errorf("--log.format %q: want console or json: %w", format, ErrUsage)
	}
	core := zapcore.NewCore(enc, zapcore.AddSync(w), lvl)
	return zap.New(core), nil
}

// BuildVersion returns the version (version when set, as main's -ldflags "-X main.version=..."
// sets it, else the module's) and the Go version that built the binary.
func BuildVersion(version string) (string, string) {
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

// NewVersionCmd returns the `version` subcommand, printing name, version and Go version.
func NewVersionCmd(name, version string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, goVersion := BuildVersion(version)
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s\n", name, v, goVersion)
			return nil
		},
	}
}

// usageArgs makes every argument error a usage error (exit 64): an unknown subcommand or a stray
// argument is a mistake in the command line, not a command that could not do its job. Cobra's
// own validators return plain errors, so each command's is wrapped; a command with subcommands
// keeps cobra's check, whose "unknown command" Execute reads as a usage error.
func usageArgs(c *cobra.Command) {
	orig := c.Args
	switch {
	case orig != nil:
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := orig(cmd, args); err != nil {
				return fmt.Errorf("%w (see --help): %w", err, ErrUsage)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}
