package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/footprint"
)

// newBenchFootprintCmd is `pgwal-lab bench-footprint` (scripts/bench-footprint.sh).
func newBenchFootprintCmd(_ *cli.Globals) *cobra.Command {
	var opts footprint.Options
	cmd := &cobra.Command{
		Use:   "bench-footprint",
		Short: "Measure what pgwal-advisor costs the host: idle RSS beside postgres_exporter, CPU, /metrics under load, pgbench with and without it",
		Long: `bench-footprint starts a throwaway cluster and first measures idle memory side by side: the
daemon (--bin) at its defaults, any --idle.compare builds and Debian's postgres_exporter
(--idle.exporter) watch the cluster, each scraped every --idle.scrape-interval for --idle.window,
then their VmRSS (RssAnon and RssFile), peak and CPU are read; each of --idle.rounds starts every
side afresh, in an order that rotates, and the table gives the median and range. --idle.only stops
there. Then it measures the daemon's CPU share of one core and its RSS over --steady, the latency of
/metrics under --wrk.connections concurrent scrapers (wrk), and pgbench's tps with and without the
daemon in --pgbench.pairs alternating pairs ("without" is the daemon stopped with SIGSTOP: it keeps
its connection and memory but does nothing). It prints figures, it does not judge them
(docs/http.md, "Footprint"); about 13 minutes with the defaults. scripts/bench-footprint.sh builds
the binaries, installs wrk and postgres_exporter when missing and runs it. Everything it starts is
stopped when it ends.`,
		Example: `  pgwal-lab bench-footprint --bin bin/pgwal-advisor
  pgwal-lab bench-footprint --idle.only --idle.compare old=/tmp/pgwal-advisor.old
  pgwal-lab bench-footprint --idle.rounds 0 --steady 120s --pgbench.pairs 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return footprint.Run(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Bin, "bin", "bin/pgwal-advisor", "the pgwal-advisor binary")
	f.DurationVar(&opts.Warmup, "warmup", 10*time.Second, "time after the daemon is ready before measuring (its first probe burst runs at start)")
	f.DurationVar(&opts.Steady, "steady", 60*time.Second, "steady-state window for CPU and RSS")
	f.DurationVar(&opts.WrkDuration, "wrk.duration", 10*time.Second, "wrk's run against /metrics")
	f.IntVar(&opts.WrkConnections, "wrk.connections", 50, "concurrent scrapers")
	f.IntVar(&opts.WrkThreads, "wrk.threads", 2, "wrk threads")
	f.IntVar(&opts.Runs, "pgbench.pairs", 5, "pgbench runs with and without the daemon (each)")
	f.DurationVar(&opts.PgbenchTime, "pgbench.time", 20*time.Second, "length of each pgbench run")
	f.IntVar(&opts.PgbenchClients, "pgbench.clients", 4, "pgbench clients")
	f.IntVar(&opts.Scale, "pgbench.scale", 10, "pgbench scale factor")
	f.IntVar(&opts.Idle.Rounds, "idle.rounds", 3, "interleaved rounds of the idle side-by-side measurement (0: none)")
	f.DurationVar(&opts.Idle.Window, "idle.window", 2*time.Minute, "how long each side runs, scraped, before its memory is read")
	f.DurationVar(&opts.Idle.Scrape, "idle.scrape-interval", time.Second, "time between two scrapes of a side in the idle measurement")
	f.StringSliceVar(&opts.Idle.Compare, "idle.compare", nil, "other pgwal-advisor builds to measure beside --bin when idle (label=path or path; repeatable)")
	f.StringVar(&opts.Idle.Exporter, "idle.exporter", "prometheus-postgres-exporter", "Debian's postgres_exporter binary, measured beside the daemon when idle (\"\": leave it out)")
	f.BoolVar(&opts.IdleOnly, "idle.only", false, "measure only the idle footprint, side by side, and stop")
	return cmd
}
