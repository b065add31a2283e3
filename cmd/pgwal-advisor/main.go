// Command pgwal-advisor runs beside PostgreSQL, watches its WAL write path, the kernel's dirty
// pages and the WAL's storage, and recommends (or applies) settings that make it fast without
// making it unsafe. This package holds flags, wiring and exit codes only; the test and demo
// equipment (demo, bench, the simulated disk) is the pgwal-lab command's.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/config"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module's
// build information is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, newRootCmd(), args, stdout, stderr)
}

func newRootCmd() *cobra.Command {
	g := &cli.Globals{}
	root := cli.NewRoot("pgwal-advisor",
		"Watch PostgreSQL's WAL write path and recommend settings that make it fast and keep it safe",
		`pgwal-advisor runs beside PostgreSQL. It samples WAL and checkpoint statistics, the kernel's
dirty-page settings and the WAL directory's storage, measures sync latency on the WAL's own file
system, and recommends wal_buffers, wal_sync_method, vm.dirty_* and checkpoint settings with the
evidence behind each recommendation.

Connection: --dsn takes a libpq keyword string ("host=/run/postgresql user=advisor") or a URL
("postgres://advisor@localhost:5432/postgres"). Without it the usual PG* environment variables
and ~/.pgpass apply, as with psql. A role with pg_monitor is enough to collect.

The demo, the seed benchmarks and the simulated disk are in a separate command, pgwal-lab.`, g)
	cli.ConnectionFlags(root, g)
	// Every command's durations and ratios are bounded by the one table the configuration
	// file's values are checked against too.
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := config.CheckFlags(cmd.Name(), cmd.Flags()); err != nil {
			return fmt.Errorf("%w: %w", err, cli.ErrUsage)
		}
		if err := pre(cmd, args); err != nil {
			return err
		}
		warnPasswordInDSN(g)
		return nil
	}
	root.AddCommand(
		cli.NewVersionCmd("pgwal-advisor", version),
		newCollectCmd(g),
		newCheckCmd(g),
		newProbeCmd(g),
		newRunCmd(g),
		newApplyCmd(g),
		newRollbackCmd(g),
		newDoctorCmd(g),
	)
	return root
}

// warnPasswordInDSN says once, at start, that a password given in --dsn is in the process's
// command line, which every local user can read (ps, /proc/PID/cmdline). The password itself is
// never logged.
func warnPasswordInDSN(g *cli.Globals) {
	if g.DSN == "" || len(postgres.DSNSecrets(g.DSN)) == 0 {
		return
	}
	g.Logger.Warn("--dsn holds a password, which every local user can read in ps: put it in a pgpass file " +
		"(~/.pgpass, or PGPASSFILE, e.g. a systemd LoadCredential as in the unit) or in PGPASSWORD in the " +
		"unit's environment file (/etc/default/pgwal-advisor), and leave it out of --dsn")
}
