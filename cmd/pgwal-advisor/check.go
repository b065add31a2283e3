package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func newCheckCmd(g *cli.Globals) *cobra.Command {
	var cfg advisor.CheckConfig
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Sample for a window, probe, evaluate the rules once and print the findings",
		Long: `check watches the server for --window (taking a snapshot every --interval and sampling WAL
wait events every --wait-events.interval), runs the sync probe in --probe.dir for at most
--probe.budget meanwhile, evaluates every rule once over what it saw and prints the findings
with their evidence and recommendations.

Exit status: 0 when nothing (or only info) was found, 1 for a warning, 2 for a critical
finding, 3 when the check could not run (PostgreSQL unreachable, the role refused or the server not
answering within --query-timeout: the reason goes to stderr), 64 for a usage error - among them a
--window shorter than the 30s of snapshots the measured rules need (docs/rules.md, MinSpan;
rounded up to whole --intervals).

JSON contract (--format json): .findings[] with .rule, .severity, .setting, .current,
.recommended, .action, .summary, .evidence[] (.name, .value, .unit), .expected_effect, .state
(always "firing": the window is the evidence, nothing is pending as in run); and
.recommendations[], one per setting (docs/rules.md, "One recommendation per setting"), with
.setting, .current, .recommended, .action, .severity, .rule, .because[] (.rule, .severity,
.summary) and .overruled[] (.rule, .recommended, .reason).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, closeSampler := newSampler(g, cfg.Window)
			defer closeSampler(cmd.Context())
			if cfg.Interval > cfg.Window {
				return fmt.Errorf("--interval %v is longer than --window %v: %w", cfg.Interval, cfg.Window, cli.ErrUsage)
			}
			// Refused before connecting: a window the measured rules cannot judge would end in
			// "all clear" after only the configuration facts were looked at.
			if least := advisor.MinCheckWindow(cfg.Interval, rules.DefaultThresholds()); cfg.Window < least {
				return fmt.Errorf("--window %v is too short: the measured rules need %v of snapshots (MinSpan %v at --interval %v), use --window %v or longer: %w",
					cfg.Window, least, rules.DefaultThresholds().MinSpan, cfg.Interval, least, cli.ErrUsage)
			}
			res, err := advisor.Check(cmd.Context(), s, cfg, g.Logger)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.Format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(res)
			} else {
				err = advisor.WriteCheckTable(out, res)
			}
			if err != nil {
				return fmt.Errorf("write findings: %w", err)
			}
			if p, failed := res.PostgresFailure(); failed {
				return &cli.ExitCodeError{Code: cli.ExitFailure, Err: fmt.Errorf("could not read PostgreSQL (%s): %s", p.Status, p.Error)}
			}
			switch res.MaxSeverity() {
			case rules.Critical:
				return &cli.ExitCodeError{Code: 2}
			case rules.Warning:
				return &cli.ExitCodeError{Code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Window, "window", time.Minute, "how long to watch the server")
	f.DurationVar(&cfg.Interval, "interval", 5*time.Second, "time between snapshots within the window")
	f.DurationVar(&cfg.WaitInterval, "wait-events.interval", time.Second, "how often to sample WAL wait events")
	f.StringVar(&cfg.ProbeDir, "probe.dir", "", "directory on the WAL's file system (outside pg_wal and the data directory) where the sync probe writes; empty: no probe")
	f.DurationVar(&cfg.ProbeBudget, "probe.budget", 10*time.Second, "the most time the sync probe may take within the window")
	// SIGHUP (a closed terminal) stops a check as SIGTERM does: its probe file is removed.
	return cli.StopOnHangup(cmd)
}
