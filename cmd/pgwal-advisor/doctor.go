package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/config"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/doctor"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

func newDoctorCmd(g *cli.Globals) *cobra.Command {
	var (
		probeDir, journal, sysctlFile string
		applyOn                       bool
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what the daemon needs on this host and say how to fix what is missing",
		Long: `doctor checks, one by one, what ` + "`pgwal-advisor run`" + ` needs, as the user it runs as and with the same
connection: PostgreSQL reached and authenticated, the role's pg_monitor, the WAL directory found
and searchable, its file system and device read from /sys, /proc read, and the probe directory
(on the WAL's file system, writable, not writable by others, room for the probe file). With
--apply it also checks apply mode's journal directory, --apply.sysctl-file, writing
/proc/sys/vm and the role's ALTER SYSTEM privileges. It writes nothing.

Run it after installing, as the daemon's user with its environment, e.g.
  runuser -u pgwal-advisor -- env $(grep -v '^#' /etc/default/pgwal-advisor) pgwal-advisor doctor
(the README's "Install" section has the exact line for the package's unit).

Exit status: 0 when everything is in place, 3 when a check failed, 64 for a usage error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("probe.dir") {
				// The daemon's default, without creating it as run would.
				if d := filepath.Join(config.StateDir, config.DefaultProbeSubdir); isDir(d) {
					probeDir = d
				}
			}
			ctx := cmd.Context()
			sampler, closeSampler := newSampler(g, 0)
			defer closeSampler(ctx)
			setup := doctor.Setup{ProbeDir: probeDir, Apply: applyOn, Journal: journal, SysctlFile: sysctlFile}
			if applyOn {
				pg := apply.NewPostgres(g.DSN, apply.PostgresOptions{QueryTimeout: g.QueryTimeout, ProcFS: g.ProcFS, Logger: g.Logger})
				defer closePostgres(ctx, pg)
				setup.Postgres, setup.Kernel = pg, apply.NewKernel(g.ProcFS, sysctlFile, g.Logger)
			}
			checks := doctor.Diagnose(ctx, sampler.Sample(ctx), setup)
			out := cmd.OutOrStdout()
			var err error
			if g.Format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				err = enc.Encode(map[string]any{"ok": doctor.OK(checks), "checks": checks})
			} else {
				err = doctor.Write(out, checks)
			}
			if err != nil {
				return fmt.Errorf("write the checks: %w", err)
			}
			if !doctor.OK(checks) {
				return fmt.Errorf("not ready: %d of %d checks failed", failed(checks), len(checks))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&probeDir, "probe.dir", "", "the probe directory the daemon will use (default: "+config.StateDir+"/"+config.DefaultProbeSubdir+" when it exists)")
	f.BoolVar(&applyOn, "apply", false, "also check what --apply=on needs")
	f.StringVar(&journal, "apply.journal", apply.DefaultJournal, "the apply journal, with --apply")
	f.StringVar(&sysctlFile, "apply.sysctl-file", apply.DefaultSysctlFile, "the sysctl.d file, with --apply")
	return cmd
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func failed(checks []doctor.Check) int {
	n := 0
	for _, c := range checks {
		if !c.OK {
			n++
		}
	}
	return n
}
