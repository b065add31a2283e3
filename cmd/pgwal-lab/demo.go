package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/demo"
)

func newDemoCmd(g *cli.Globals) *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Reproduce seed 001 on a throwaway cluster and a simulated slow disk, let the advisor fix it, and show the gain",
		Long: `demo needs nothing configured. It mounts a simulated disk whose syncs take --latency (FUSE; a
plain temporary directory where FUSE is unavailable), starts a throwaway PostgreSQL cluster with
seed 001's starting configuration (wal_buffers=64kB, wal_sync_method=open_datasync) and its WAL
on that disk, times seed 001's bulk insert (--rows rows), lets the advisor watch a batched load
and print its findings as they appear, applies the safe ones (journaled, restarting its own
cluster for wal_buffers), times the same insert again and prints a before/after table.

The demo shortens one threshold: a measured finding shows after 5 s instead of 2 minutes. The
evidence the rules need is not shortened (30 s of history, a significant probe difference).
Everything is removed at the end, also on Ctrl-C, except the log file: the advisor's and the
equipment's logs (JSON lines, at --log.level) go to a new file in the temporary directory, named
on the first line; --verbose shows them on stderr as well. It runs as root (FUSE, and initdb as
the postgres user). With --web.listen-address the landing page, /metrics and the API are served
while it runs.

JSON (--format json): .before_seconds, .after_seconds, .speedup, .applied[] (.setting, .from,
.to), .findings[], .log_file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.ProcFS, opts.SysFS = g.ProcFS, g.SysFS
			opts.Version, _ = cli.BuildVersion(version)
			if opts.Rows < 1000 {
				return fmt.Errorf("--rows %d: want at least 1000: %w", opts.Rows, cli.ErrUsage)
			}
			out := cmd.OutOrStdout()
			progress := out
			if g.Format == "json" {
				progress = io.Discard
			}
			sum, err := demo.Run(cmd.Context(), progress, opts, g.Logger)
			if err != nil {
				return err
			}
			if g.Format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(sum); err != nil {
					return fmt.Errorf("write the summary: %w", err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&opts.Latency, "latency", 4*time.Millisecond, "sync latency of the simulated disk")
	f.IntVar(&opts.Rows, "rows", 200000, "rows of the timed bulk insert (seed 001 used 1000000)")
	f.DurationVar(&opts.Timeout, "timeout", 90*time.Second, "the longest the advisor watches before the demo applies what it found")
	f.BoolVar(&opts.Verbose, "verbose", false, "show the logs on stderr too, among the steps (they always go to the file the demo names)")
	f.StringVar(&opts.ListenAddress, "web.listen-address", "", "serve the landing page, /metrics and the API here while the demo runs (e.g. 127.0.0.1:9817)")
	return cmd
}
