package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/bench"
)

func newBenchCmd(g *cli.Globals) *cobra.Command {
	var (
		opts      bench.Options
		scenarios []string
		reports   []string
		out       string
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Replay the seed documents' scenarios and compare the advisor's configuration with the best and with static tuners'",
		Long: `bench runs the seed benchmark suite: each scenario is a seed document's workload and starting
configuration on a throwaway cluster whose WAL (seed 003: data and WAL) lives on the simulated disk.
For each it measures the starting configuration, the configuration the advisor reaches when what
apply mode would apply is applied, the best of a small grid search, and what the static tuners
(PGTune, timescaledb-tune) give for this machine, and reports the issue's targets met or missed.

Scenarios: seed000 (one client, TPC-B, each wal_sync_method), seed001 (bulk insert from
wal_buffers=64kB/open_datasync), timing (seed 001's statement against the running daemon and a
check started into it, about 4 minutes), seed002 (1-100 clients of single-row INSERT commits, WAL on the
disk vs tmpfs), seed003 (16 rate-limited clients across checkpoints, flush-after off), neighbour
(a bulk writer on the database's file system beside 4 rate-limited clients, over a grid of
vm.dirty_* and both of the simulated disk's queue models), neighbour-elsewhere (the bulk writer
on a second, slower device), commit (seed 002's commits under commit_delay x commit_siblings x
16-200 clients on 1 ms and 4 ms devices, 3 interleaved rounds), defaults (PostgreSQL's defaults on
a fast drive, a cloud volume and a rotating disk under OLTP, a bulk load and OLTP beside a bulk
writer, against wal_compression and spaced checkpoints).

The full suite takes about 30 minutes without the neighbour, commit and defaults scenarios;
neighbour takes about 45 minutes (2 rounds of 10 runs of 85 s, then its restore phase: from tuned's
64MB/512MB, the daemon in apply mode recommends and applies the kernel's ratios as one change,
verifies it by the stall and 'pgwal-advisor rollback' restores 64MB/512MB, 2 passes of about 7
minutes; --neighbour-restore-only runs that phase alone; --neighbour-rounds 1: about 22),
neighbour-elsewhere about 18, commit about 15 and defaults about 45. --quick runs tiny sizes and few configurations in a few minutes, a smoke test of the harness rather than of the figures. Progress goes to stderr, the
tables (markdown) or --format json to stdout; --out also writes the markdown report to a file,
keeping the prose blocks and the hand-written sections of the file it replaces.
It must run as root (FUSE, loop devices, /proc/sys/vm) with PostgreSQL's server binaries
installed. Everything it starts is torn down and vm.dirty_* restored, also on Ctrl-C.`,
		Example: `  pgwal-lab bench --quick
  pgwal-lab bench --scenario seed001,seed003 --format json
  pgwal-lab bench --out docs/benchmarks.md
  pgwal-lab bench --report seeds.json,neighbour.json --out docs/benchmarks.md`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range scenarios {
				if !slices.Contains(bench.ScenarioIDs(), strings.TrimSpace(s)) {
					return fmt.Errorf("--scenario %q: want %s: %w", s, strings.Join(bench.ScenarioIDs(), ", "), cli.ErrUsage)
				}
			}
			if opts.NeighbourRounds < 0 || opts.NeighbourWriterMB < 0 {
				return fmt.Errorf("--neighbour-rounds and --neighbour-mb must not be negative: %w", cli.ErrUsage)
			}
			for _, d := range opts.DefaultsDevices {
				if !slices.Contains(bench.DefaultsDevices(), d) {
					return fmt.Errorf("--defaults-devices %q: want %s: %w", d, strings.Join(bench.DefaultsDevices(), ", "), cli.ErrUsage)
				}
			}
			for _, l := range opts.DefaultsLoads {
				if !slices.Contains(bench.DefaultsLoads(), l) {
					return fmt.Errorf("--defaults-loads %q: want %s: %w", l, strings.Join(bench.DefaultsLoads(), ", "), cli.ErrUsage)
				}
			}
			if opts.DefaultsServer != 0 {
				if !slices.Contains(lab.MatrixVersions(), opts.DefaultsServer) {
					return fmt.Errorf("--defaults-server %d: want one of the version matrix's majors %v: %w", opts.DefaultsServer, lab.MatrixVersions(), cli.ErrUsage)
				}
				if len(scenarios) != 1 || strings.TrimSpace(scenarios[0]) != bench.Defaults {
					return fmt.Errorf("--defaults-server needs --scenario %s alone: the other scenarios run on the machine's own server: %w", bench.Defaults, cli.ErrUsage)
				}
			}
			if opts.TimingHeadStart < 0 {
				return fmt.Errorf("--timing-head-start %v: must not be negative: %w", opts.TimingHeadStart, cli.ErrUsage)
			}
			opts.Scenarios = scenarios
			opts.ProcFS, opts.SysFS = g.ProcFS, g.SysFS
			opts.Progress = cmd.ErrOrStderr()
			opts.Command = commandLine(cmd)
			var (
				rep    *bench.Report
				runErr error
			)
			if len(reports) > 0 {
				if len(scenarios) > 0 || opts.Quick {
					return fmt.Errorf("--report renders saved reports: it runs nothing, so --scenario and --quick do not apply: %w", cli.ErrUsage)
				}
				var err error
				if rep, err = readReports(reports); err != nil {
					return err
				}
			} else if rep, runErr = bench.Run(cmd.Context(), opts, g.Logger); rep == nil {
				return runErr
			}
			var md bytes.Buffer
			if err := bench.WriteMarkdown(&md, rep); err != nil {
				return err
			}
			if out != "" {
				doc := md.Bytes()
				if prev, err := os.ReadFile(out); err == nil {
					doc = bench.MergeProse(prev, doc)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("read --out: %w", err)
				}
				if err := os.WriteFile(out, doc, 0o644); err != nil {
					return fmt.Errorf("write --out: %w", err)
				}
			}
			if g.Format == "json" {
				if err := bench.WriteJSON(cmd.OutOrStdout(), rep); err != nil {
					return err
				}
			} else if _, err := cmd.OutOrStdout().Write(md.Bytes()); err != nil {
				return fmt.Errorf("write report: %w", err)
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.Quick, "quick", false, "tiny sizes and few configurations: a smoke test of the harness (a few minutes)")
	f.StringSliceVar(&scenarios, "scenario", nil, "scenarios to run, comma-separated: "+strings.Join(bench.ScenarioIDs(), ", ")+" (default all)")
	f.IntVar(&opts.NeighbourRounds, "neighbour-rounds", 0, "interleaved rounds of the neighbour scenario (0: 2, --quick 1)")
	f.StringSliceVar(&opts.DefaultsDevices, "defaults-devices", nil, "the defaults scenario's devices to run, comma-separated: "+
		strings.Join(bench.DefaultsDevices(), ", ")+" (default all; the quick form runs its own)")
	f.StringSliceVar(&opts.DefaultsLoads, "defaults-loads", nil, "the defaults scenario's loads to run, comma-separated: "+
		strings.Join(bench.DefaultsLoads(), ", ")+" (default the first three; the quick form runs its own)")
	f.IntVar(&opts.DefaultsServer, "defaults-server", 0, "the defaults scenario's PostgreSQL major version, from the version matrix's builds (scripts/install-pg-versions.sh; "+
		"pglz their only wal_compression); 0: the machine's own server")
	f.BoolVar(&opts.NeighbourRestoreOnly, "neighbour-restore-only", false, "run only the neighbour scenario's restore phase (from 64MB/512MB, the daemon in apply mode, rollback); needs pgwal-advisor next to pgwal-lab")
	f.IntVar(&opts.NeighbourWriterMB, "neighbour-mb", 0, "MB the neighbour scenario's bulk writer writes (0: 3000, --quick 300)")
	f.DurationVar(&opts.TimingHeadStart, "timing-head-start", 0, "how long the timing lab's daemon runs before the statement starts, which sets where in its 15 s snapshot cycle the statement begins (0: 35s)")
	f.StringSliceVar(&reports, "report", nil, "run nothing: merge these JSON reports (of --format json runs, e.g. one per part of the suite) and render them")
	f.StringVar(&out, "out", "", "also write the markdown report to this file (e.g. docs/benchmarks.md)")
	return cmd
}

// commandLine is the command as typed, for the report.
func commandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		v := f.Value.String()
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v = strings.Join(sv.GetSlice(), ",")
		}
		if f.Value.Type() == "bool" {
			parts = append(parts, "--"+f.Name)
			return
		}
		parts = append(parts, "--"+f.Name+" "+v)
	})
	return strings.Join(parts, " ")
}

// readReports reads and merges the JSON reports named by --report.
func readReports(paths []string) (*bench.Report, error) {
	var reps []*bench.Report
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("--report: %w", err)
		}
		rep, err := bench.ReadJSON(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("--report %s: %w", p, err)
		}
		reps = append(reps, rep)
	}
	rep, err := bench.MergeReports(reps...)
	if err != nil {
		return nil, fmt.Errorf("--report: %w", err)
	}
	return rep, nil
}
