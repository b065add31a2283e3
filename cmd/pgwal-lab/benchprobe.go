package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/benchprobe"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// newBenchProbeCmd is `pgwal-lab bench-probe` (make bench-probe).
func newBenchProbeCmd(g *cli.Globals) *cobra.Command {
	var (
		opts       benchprobe.Options
		latencies  string
		probeChild string
	)
	cmd := &cobra.Command{
		Use:   "bench-probe",
		Short: "Measure the probe's accuracy and cost against pg_test_fsync, on the bare disk and on the simulated disk",
		Long: `bench-probe runs our probe (probes.Run with its defaults, in a child process) and pg_test_fsync
(--secs per test, its default 5) on the same directory, alternating which goes first: --runs times on
the bare disk (a temporary directory under --dir) and --sim-runs times on the simulated disk at each of
--latencies (mounted under --dir, backed by --sim-src). It prints, per method and write pattern, both
ops/s and their ratio, both wall times, and on the simulated disk our fdatasync p50 against the
configured latency (docs/probes.md, "Accuracy and cost against pg_test_fsync"). It prints figures and
asserts nothing; about 6 minutes with the defaults.

The simulated disk needs root and /dev/fuse; without them only the bare disk is measured, and the
output says so. Every mount is unmounted and every directory removed on the way out, Ctrl-C included.
--json (or --format json) prints JSON instead of markdown; --save also writes it to a file.`,
		Example: `  pgwal-lab bench-probe
  pgwal-lab bench-probe --runs 2 --sim-runs 2 --save bench.json
  pgwal-lab bench-probe --latencies "" --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if probeChild != "" {
				return benchprobe.ProbeChild(cmd.Context(), probeChild, opts.ProbeDuration, cmd.OutOrStdout())
			}
			var err error
			if opts.Latencies, err = benchprobe.ParseLatencies(latencies); err != nil {
				return fmt.Errorf("--latencies: %w: %w", err, cli.ErrUsage)
			}
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: %w", err, cli.ErrUsage)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this program to run the probe: %w", err)
			}
			opts.Child = []string{self, cmd.Name()}
			opts.Command = commandLine(cmd)
			opts.JSON = opts.JSON || g.Format == "json"
			return benchprobe.Run(cmd.Context(), opts, cmd.OutOrStdout(), g.Logger)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.BaseDir, "dir", "/var/tmp", "directory on the bare disk to measure in (a temporary directory is made there), and to mount the simulated disks in")
	f.StringVar(&opts.SimSource, "sim-src", benchprobe.DefaultSimSource(), "directory to hold the simulated disk's backing files (default: tmpfs, so that the host disk's own stalls stay out of the simulated device)")
	f.IntVar(&opts.Runs, "runs", 2, "runs on the bare disk (its figures vary from run to run)")
	f.IntVar(&opts.SimRuns, "sim-runs", 1, "runs on each simulated disk")
	f.StringVar(&latencies, "latencies", "1ms,4ms", "simulated disk latencies, comma separated; empty for the bare disk only")
	f.DurationVar(&opts.ProbeDuration, "duration", probes.DefaultDuration, "our probe's budget (probes.Run's default)")
	f.IntVar(&opts.PGSecs, "secs", 5, "pg_test_fsync's seconds per test (its default: 5)")
	f.StringVar(&opts.PGTestFsync, "pg-test-fsync", "", "pg_test_fsync binary (default: from the installed PostgreSQL)")
	f.BoolVar(&opts.JSON, "json", false, "print JSON instead of markdown")
	f.StringVar(&opts.Save, "save", "", "also write the results as JSON to this file")
	f.StringVar(&probeChild, "probe-child", "", "internal: run the probe in this directory and print its report as JSON")
	_ = f.MarkHidden("probe-child")
	return cmd
}
