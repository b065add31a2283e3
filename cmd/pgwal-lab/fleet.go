package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/fleetcost"
)

// newBenchFleetCmd is `pgwal-lab bench-fleet` (make bench-fleet).
func newBenchFleetCmd(g *cli.Globals) *cobra.Command {
	opts := fleetcost.Defaults()
	cmd := &cobra.Command{
		Use:   "bench-fleet",
		Short: "Measure what a fleet of 100, 500 and 2000 hosts costs the Prometheus that scrapes it",
		Long: `bench-fleet starts a throwaway cluster with a light pgbench load and the daemon (--bin) beside it, and
serves that daemon's /metrics under N host identities to a real Prometheus (--prometheus; loopback,
a temporary directory) that loads the project's recording and alert rules (--rules): N static
targets, each its own instance and role, relabelled to the one daemon, so every identity is a
real scrape with a host's series. For each N of --hosts, --rounds times interleaved, on a fresh
Prometheus at the documented pace (docs/fleet.md: scrape every 30 s, evaluate every minute), it
reads after --warmup and again after --window: head series, Prometheus's RSS, samples appended
per second, each rule group's last evaluation time and the scrapes' duration (median across
targets and the longest). It prints the figures with their spread and the machine's load; it
does not judge them (docs/fleet.md, "What a fleet costs Prometheus"). About 20 minutes with the
defaults; --quick (N = 10 and 50, one round, a second's pace) is the smoke test. Everything it
starts is stopped and removed when it ends.

JSON (--format json): .runs[] (one per Prometheus), .sizes[] (the median and range per N),
.memory_fit, .host, .options; progress goes to stderr.`,
		Example: `  pgwal-lab bench-fleet --bin bin/pgwal-advisor
  pgwal-lab bench-fleet --quick
  pgwal-lab bench-fleet --hosts 100,1000 --rounds 3 --format json > fleet.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: %w", err, cli.ErrUsage)
			}
			progress := cmd.OutOrStdout()
			if g.Format == "json" {
				progress = cmd.ErrOrStderr()
			}
			rep, err := fleetcost.Run(cmd.Context(), opts, progress)
			if err != nil {
				return err
			}
			if g.Format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return fmt.Errorf("write the report: %w", err)
				}
				return nil
			}
			fleetcost.WriteText(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Bin, "bin", opts.Bin, "the pgwal-advisor binary")
	f.StringVar(&opts.Prometheus, "prometheus", opts.Prometheus, "the prometheus binary (Debian's)")
	f.StringSliceVar(&opts.RuleFiles, "rules", opts.RuleFiles, "rule files loaded into every Prometheus")
	f.IntSliceVar(&opts.Hosts, "hosts", opts.Hosts, "fleet sizes, measured in this order once a round")
	f.IntVar(&opts.Rounds, "rounds", opts.Rounds, "rounds (each fleet size once a round, on a fresh Prometheus)")
	f.DurationVar(&opts.ScrapeInterval, "scrape-interval", opts.ScrapeInterval, "scrape interval (docs/fleet.md: 30s)")
	f.DurationVar(&opts.EvalInterval, "evaluation-interval", opts.EvalInterval, "Prometheus's global evaluation interval (the rule groups set their own)")
	f.DurationVar(&opts.Warmup, "warmup", opts.Warmup, "time from Prometheus's start to the first reading (3 scrape intervals or more)")
	f.DurationVar(&opts.Window, "window", opts.Window, "time between the first and the second reading")
	f.IntVar(&opts.RoleSize, "role-size", opts.RoleSize, "hosts that share a role label")
	f.IntVar(&opts.LoadTPS, "load.tps", opts.LoadTPS, "pgbench transactions a second on the cluster (0: idle)")
	f.BoolVar(&opts.Quick, "quick", false, "the smoke test: N = 10 and 50, one round, a second's pace")
	return cmd
}
