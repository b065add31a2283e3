package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/demo"
)

func newDemoCmd(g *globals) *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Reproduce seed 001 on a throwaway cluster and a simulated slow disk, and show what the advisor finds",
		Long: `demo needs nothing configured: it mounts a simulated disk whose syncs take --latency (FUSE; a
plain temporary directory where FUSE is unavailable), starts a throwaway PostgreSQL cluster with
seed 001's starting configuration (wal_buffers=64kB, wal_sync_method=open_datasync) with its WAL
on that disk, runs seed 001's bulk load while the advisor watches for --window, and prints the
findings. Everything is removed at the end, also on Ctrl-C. It must run as root (or as a user
that may mount FUSE and run PostgreSQL's initdb).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.ProcFS, opts.SysFS = g.procfs, g.sysfs
			out := cmd.OutOrStdout()
			progress := out
			if g.format == "json" {
				progress = io.Discard
			}
			res, err := demo.Run(cmd.Context(), progress, opts, g.logger)
			if err != nil {
				return err
			}
			if g.format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return fmt.Errorf("write findings: %w", err)
				}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&opts.Latency, "latency", 4*time.Millisecond, "sync latency of the simulated disk")
	cmd.Flags().DurationVar(&opts.Window, "window", 35*time.Second, "how long the advisor watches the load (the measured rules need 30 s)")
	return cmd
}
