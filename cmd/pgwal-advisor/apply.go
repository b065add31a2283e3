package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

func newApplyCmd(g *cli.Globals) *cobra.Command {
	var (
		check          advisor.CheckConfig
		confirmTimeout time.Duration
		dryRun, yes    bool
		settings       []string
		journal        string
		sysctlFile     string
		patroni        patroniFlags
	)
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Check, show the recommended changes as a diff, and with --yes apply the safe ones once",
		Long: `apply runs a check (as ` + "`pgwal-advisor check`" + `: --window of snapshots, the sync probe in --probe.dir),
then shows each recommended change as a diff - setting: current -> recommended, its action and
rule, and why - and what is not applied and why: fsync, synchronous_commit and full_page_writes
never are, nor advice and never-auto findings, a wal_sync_method the probes did not find durable
and available, a value outside documented bounds, a setting not in --apply.settings, or a value
rolled back for making things worse (the journal remembers).

Without --yes, or with --dry-run, nothing is changed. With --yes each allowed change is made once,
journaled in --apply.journal before it is made: PostgreSQL settings with ALTER SYSTEM and
pg_reload_conf(), confirmed running (restart settings such as wal_buffers are written and reported
pending restart: PostgreSQL is never restarted), kernel settings in <path.procfs>/sys/vm and
--apply.sysctl-file. Changes made here are not verified (there is no window before them to
compare with); ` + "`pgwal-advisor run --apply=on`" + ` manages them from then on. The way back:
pgwal-advisor rollback --journal FILE --id ID (or --all). docs/apply.md has the details.

Exit status: 0 when nothing failed, 3 when the check or a change failed or the server refuses ALTER SYSTEM
(allow_alter_system off, an unwritable postgresql.auto.conf), 64 for a usage error.`,
		Example: `  pgwal-advisor apply --dsn "host=/run/postgresql user=postgres" --probe.dir /var/lib/pgwal-advisor/probe
  pgwal-advisor apply --yes --apply.settings wal_sync_method,checkpoint_flush_after`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dryRun && yes {
				return fmt.Errorf("--dry-run and --yes contradict each other: %w", cli.ErrUsage)
			}
			if check.Interval > check.Window {
				return fmt.Errorf("--interval %v is longer than --window %v: %w", check.Interval, check.Window, cli.ErrUsage)
			}
			allowed, err := apply.ParseSettings(settings)
			if err != nil {
				return fmt.Errorf("%w: %w", err, cli.ErrUsage)
			}
			if yes {
				if err := apply.CheckSysctlFile(sysctlFile); err != nil {
					return fmt.Errorf("%w: %w", err, cli.ErrUsage)
				}
			}
			ctx := cmd.Context()
			sampler, closeSampler := newSampler(g, check.Window)
			defer closeSampler(ctx)
			res, err := advisor.Check(ctx, sampler, check, g.Logger)
			if err != nil {
				return err
			}
			// The guard checks the kernel's thresholds and the server's accepted values against
			// the state as it is now.
			snap := sampler.Sample(ctx)
			if err := applicableServer(res, snap); err != nil {
				return err
			}
			st := advisor.State{Snapshot: &snap, Findings: res.Findings, Recommendations: res.Recommendations, Probe: res.Probe, ProbeEnabled: res.Probe != nil, ProbeDisabledReason: res.ProbeSkipped}

			pg := apply.NewPostgres(g.DSN, apply.PostgresOptions{QueryTimeout: g.QueryTimeout, ProcFS: g.ProcFS, ConfirmTimeout: confirmTimeout, Logger: g.Logger})
			defer closePostgres(ctx, pg)
			route, err := patroni.postgresRoute(g, pg)
			if err != nil {
				return err
			}
			acts := []apply.Actuator{route, apply.NewKernel(g.ProcFS, sysctlFile, g.Logger)}
			m, err := apply.New(apply.Config{Mode: apply.ModeOn, Settings: allowed, Journal: journal}, nil, acts, g.Logger)
			if err != nil {
				return fmt.Errorf("%w: %w", err, cli.ErrUsage)
			}
			plan, err := m.Plan(ctx, st)
			if err != nil {
				return err
			}
			var applyErr error
			if yes {
				plan, applyErr = m.ApplyPlan(ctx, plan)
			}
			out := cmd.OutOrStdout()
			if g.Format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(map[string]any{"applied": yes, "journal": journal, "changes": plan, "probe_skipped": res.ProbeSkipped})
			} else {
				err = apply.WritePlan(out, plan, yes, journal)
			}
			if err != nil {
				return fmt.Errorf("write the plan: %w", err)
			}
			if applyErr != nil {
				return fmt.Errorf("apply: %w", applyErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dryRun, "dry-run", false, "show what would change and change nothing (the default without --yes)")
	f.BoolVar(&yes, "yes", false, "apply the allowed changes once, each journaled before it is made")
	f.DurationVar(&check.Window, "window", time.Minute, "how long the check watches the server")
	f.DurationVar(&check.Interval, "interval", 5*time.Second, "time between snapshots within the window")
	f.DurationVar(&check.WaitInterval, "wait-events.interval", time.Second, "how often to sample WAL wait events")
	f.StringVar(&check.ProbeDir, "probe.dir", "", "directory on the WAL's file system (outside pg_wal and the data directory) for the sync probe; without it no wal_sync_method is changed")
	f.DurationVar(&check.ProbeBudget, "probe.budget", 10*time.Second, "the most time the sync probe may take within the window")
	f.DurationVar(&confirmTimeout, "confirm-timeout", apply.DefaultConfirmTimeout, "how long to wait for a reloaded setting to show its new value")
	f.StringSliceVar(&settings, "apply.settings", apply.DefaultSettings(), "settings that may be changed (comma-separated)")
	f.StringVar(&journal, "apply.journal", apply.DefaultJournal, "the apply journal (JSON lines); its directory must exist")
	f.StringVar(&sysctlFile, "apply.sysctl-file", apply.DefaultSysctlFile, "sysctl.d file where kernel settings are persisted")
	patroni.register(f)
	return cli.StopOnHangup(cmd)
}

// closePostgres closes the actuator's connection on the way out, even after ctx was cancelled.
func closePostgres(ctx context.Context, pg *apply.Postgres) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = pg.Close(ctx) // nothing to do about it: the server drops the session
}

// applicableServer refuses a run whose server could not be read (nothing would be judged, and
// "Nothing changed" would read as a healthy server) or is a standby: a standby's settings are its
// operator's decision at failover time, and ALTER SYSTEM there writes its postgresql.auto.conf.
func applicableServer(res *advisor.CheckResult, snap collector.Snapshot) error {
	if p, failed := res.PostgresFailure(); failed {
		return &cli.ExitCodeError{Code: cli.ExitFailure, Err: fmt.Errorf("could not read PostgreSQL (%s): %s; nothing was changed", p.Status, p.Error)}
	}
	if p, failed := advisor.PostgresFailure(snap); failed {
		return &cli.ExitCodeError{Code: cli.ExitFailure, Err: fmt.Errorf("could not read PostgreSQL (%s): %s; nothing was changed", p.Status, p.Error)}
	}
	if snap.Postgres != nil && snap.Postgres.InRecovery {
		return &cli.ExitCodeError{Code: cli.ExitFailure, Err: errors.New("the server is a standby (in recovery): its settings are its operator's decision at failover time; apply on the primary. Nothing was changed")}
	}
	return nil
}
