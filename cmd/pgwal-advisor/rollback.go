package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

func newRollbackCmd(g *cli.Globals) *cobra.Command {
	var (
		journal        string
		all            bool
		id             int
		confirmTimeout time.Duration
		sysctlFile     string
		patroni        patroniFlags
	)
	cmd := &cobra.Command{
		Use:   "rollback",
		Short: "Restore the old values of changes the apply mode made, from its journal",
		Long: `rollback restores what a change recorded before it was made: --id ID one change, --all every
change still in effect, newest first. Each rollback is journaled (outcome rolled_back).

PostgreSQL settings go back where they came from: a value that postgresql.auto.conf held is set
there again (ALTER SYSTEM SET), otherwise the setting is reset (ALTER SYSTEM RESET) so that
postgresql.conf, an include or the default applies again; then pg_reload_conf(). A restart
setting (wal_buffers) the server already runs with the new value stays pending restart.
Kernel settings: the ratio and bytes knobs both as they were (the ratio first, then a non-zero
bytes value), and the sysctl.d file's line as it was (the file is removed when nothing is left).
A vm.dirty_thresholds change puts back all four vm.dirty_* files and the sysctl.d file's lines
of them from its one record.

Each change's live value is read first and compared with the journal's: the new value (or one
waiting for a restart) is restored; the old value already live is recorded rolled back without
touching anything; any other value is someone else's change and is not touched, since restoring
it would undo their change. A change whose undo failed (undo_failed: the server went away right
after ALTER SYSTEM, say) is settled the same way. Connection and paths come from the global
flags (--dsn, --path.procfs).

The journal is never opened through a symbolic link, and is refused when another user owns it
or could write it or its directory (docs/apply.md, "The journal").

A journal record is input, and every one passes the apply mode's guard before anything is
written: a record naming a setting that is never changed (fsync, synchronous_commit,
full_page_writes, wal_level, ...), a value out of bounds, or a sysctl_file that is not the
advisor's own file in the sysctl.d directory is refused with a REFUSED line naming the change,
the setting and the reason; the other records are rolled back.

Exit status: 0 when every rollback succeeded (or there is nothing to roll back: no journal at the
default path), 3 when one failed or was refused or the journal could not be read (a --journal
given that does not exist included), 64 for a usage error.`,
		Example: `  pgwal-advisor rollback --journal /var/lib/pgwal-advisor/apply.journal --id 3
  pgwal-advisor rollback --journal /var/lib/pgwal-advisor/apply.journal --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (id != 0) {
				return fmt.Errorf("give either --all or --id ID: %w", cli.ErrUsage)
			}
			if id < 0 {
				return fmt.Errorf("--id %d: change IDs are positive (see the journal's intent records): %w", id, cli.ErrUsage)
			}
			if err := apply.CheckSysctlFile(sysctlFile); err != nil {
				return fmt.Errorf("%w: %w", err, cli.ErrUsage)
			}
			// Lstat: a link in the journal's place is not "no journal"; reading refuses it.
			if _, err := os.Lstat(journal); errors.Is(err, fs.ErrNotExist) {
				// A journal named on the command line that is not there is most likely a
				// mistyped path: saying "nothing to roll back" would hide changes that are
				// in effect. The default journal missing means apply never ran here.
				if cmd.Flags().Changed("journal") {
					return fmt.Errorf("rollback: the journal %s does not exist: give the file the apply mode wrote "+
						"(apply --journal, run --apply.journal; default %s)", journal, apply.DefaultJournal)
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "Nothing to roll back: there is no journal at %s, so the apply mode has not changed anything with it.\n", journal)
				return err
			}
			ctx := cmd.Context()
			pg := apply.NewPostgres(g.DSN, apply.PostgresOptions{QueryTimeout: g.QueryTimeout, ProcFS: g.ProcFS, ConfirmTimeout: confirmTimeout, Logger: g.Logger})
			defer closePostgres(ctx, pg)
			// The sysctl.d file each kernel change used is in its journal record; the guard
			// takes it only beside --apply.sysctl-file.
			route, err := patroni.postgresRoute(g, pg)
			if err != nil {
				return err
			}
			acts := []apply.Actuator{route, apply.NewKernel(g.ProcFS, sysctlFile, g.Logger)}
			results, err := apply.Rollback(ctx, apply.NewJournal(journal), acts, id, nil, g.Logger)
			if err != nil && results == nil {
				// The journal could not be read (or the change not found): the error alone
				// says so; a table would add "Nothing to roll back", which is not what happened.
				return err
			}
			out := cmd.OutOrStdout()
			var werr error
			if g.Format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				werr = enc.Encode(map[string]any{"journal": journal, "rollbacks": results})
			} else {
				werr = apply.WriteRollback(out, results)
			}
			if err != nil {
				return err
			}
			if werr != nil {
				return fmt.Errorf("write the rollback results: %w", werr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&journal, "journal", apply.DefaultJournal, "the apply journal to roll back from")
	f.BoolVar(&all, "all", false, "roll back every change still in effect, newest first")
	f.IntVar(&id, "id", 0, "roll back one change (its id in the journal)")
	f.StringVar(&sysctlFile, "apply.sysctl-file", apply.DefaultSysctlFile, "the sysctl.d file the apply mode persists kernel settings in: a journal's recorded file is used only beside it, named like it")
	patroni.register(f)
	f.DurationVar(&confirmTimeout, "confirm-timeout", apply.DefaultConfirmTimeout, "how long to wait for a reloaded setting to show its old value")
	return cmd
}
