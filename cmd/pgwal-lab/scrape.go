package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/scrapebench"
)

// newBenchScrapeCmd is `pgwal-lab bench-scrape` (scripts/bench-scrape.sh).
func newBenchScrapeCmd(_ *cli.Globals) *cobra.Command {
	var opts scrapebench.Options
	cmd := &cobra.Command{
		Use:   "bench-scrape",
		Short: "Measure what a scrape of /metrics costs, pgwal-advisor beside Debian's postgres_exporter",
		Long: `bench-scrape starts a throwaway cluster, the daemon (--bin, and --compare beside it when given) and
Debian's prometheus-postgres-exporter (--exporter) watching it, and loads each in turn with wrk on
loopback (--connections for --duration) in --rounds interleaved rounds, so that drift in a shared
machine's load hits every side alike; a control side scrapes the daemon's /healthz. It prints p50,
p99 and requests/s per round and per side, and the machine's load average around each run; it does
not judge them (docs/benchmarks.md, "Scrape cost"). About 2 minutes with the defaults.
scripts/bench-scrape.sh builds the binaries, installs what is missing and runs it. Everything it
starts is stopped when it ends.`,
		Example: `  pgwal-lab bench-scrape --bin bin/pgwal-advisor
  pgwal-lab bench-scrape --rounds 9 --gzip=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return scrapebench.Run(cmd.Context(), opts, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Bin, "bin", "bin/pgwal-advisor", "the pgwal-advisor binary")
	f.StringVar(&opts.Compare, "compare", "", "another pgwal-advisor binary (say, an older build) to measure beside the first")
	f.StringVar(&opts.Exporter, "exporter", "prometheus-postgres-exporter", "Debian's postgres_exporter binary")
	f.IntVar(&opts.Rounds, "rounds", 5, "interleaved rounds (each side once a round)")
	f.DurationVar(&opts.Duration, "duration", 10*time.Second, "wrk's run against each side")
	f.IntVar(&opts.Connections, "connections", 50, "concurrent connections")
	f.IntVar(&opts.Threads, "threads", 2, "wrk threads")
	f.DurationVar(&opts.Warmup, "warmup", 20*time.Second, "time after both are ready before the first round (the daemon's first probe burst runs at start)")
	f.BoolVar(&opts.Gzip, "gzip", true, "send Accept-Encoding: gzip, as Prometheus does")
	return cmd
}
