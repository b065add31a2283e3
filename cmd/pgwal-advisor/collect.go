package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

func newCollectCmd(g *cli.Globals) *cobra.Command {
	var (
		interval     time.Duration
		count        int
		waitInterval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "collect",
		Short: "Collect one snapshot (or several, with rates between them) and print it",
		Long: `collect reads PostgreSQL's WAL and checkpoint statistics and settings, the kernel's dirty-page
settings and state, and the WAL directory's storage, and prints what it found. A part that cannot
be read is reported with the reason; the rest is still printed. When PostgreSQL cannot be reached,
authenticated or does not answer within --query-timeout, the reason also goes to stderr and the
exit status is 3.

With --interval it takes a snapshot every interval (--count of them, 0 for until interrupted)
and prints, from the second on, the rates between consecutive snapshots.

JSON paths other tools rely on: .postgres.version_num, .postgres.settings.<name>.value,
.postgres.settings.<name>.bytes, .postgres.wal.buffers_full, .postgres.wal.writes,
.postgres.wal.syncs, .postgres.wal_dir, .kernel.vm.<knob>, .kernel.meminfo.dirty_bytes,
.wal_storage.fs_type, .wal_storage.mount_options, .wal_storage.rotational,
.wal_storage.write_cache; with --interval, .rates on every line but the first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < 0 || count < 0 {
				return fmt.Errorf("--interval and --count must not be negative: %w", cli.ErrUsage)
			}
			if interval == 0 {
				if count > 1 {
					return fmt.Errorf("--count %d needs an --interval: %w", count, cli.ErrUsage)
				}
				count = 1
				interval = time.Second // unused: one snapshot is taken
			}
			s, closeSampler := newSampler(g, 0)
			defer closeSampler(cmd.Context())
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			if count == 1 {
				enc.SetIndent("", "  ")
			}
			var (
				prev     *collector.Snapshot
				failures int
				lastFail collector.Part
			)
			err := s.Every(cmd.Context(), interval, waitInterval, count, func(snap collector.Snapshot) error {
				if p, failed := advisor.PostgresFailure(snap); failed {
					failures, lastFail = failures+1, p
				}
				var rates *advisor.Rates
				if prev != nil {
					r := advisor.RatesBetween(*prev, snap)
					rates = &r
				}
				prev = &snap
				if g.Format == "json" {
					return enc.Encode(struct {
						collector.Snapshot
						Rates *advisor.Rates `json:"rates,omitempty"`
					}{snap, rates})
				}
				if rates != nil {
					return advisor.WriteRatesTable(out, *rates)
				}
				return advisor.WriteSnapshotTable(out, snap)
			})
			if err != nil || failures == 0 {
				return err
			}
			return &cli.ExitCodeError{Code: cli.ExitFailure, Err: fmt.Errorf("could not read PostgreSQL in %d snapshot(s) (%s): %s", failures, lastFail.Status, lastFail.Error)}
		},
	}
	f := cmd.Flags()
	f.DurationVar(&interval, "interval", 0, "take a snapshot every interval and print rates between them (0: one snapshot)")
	f.IntVar(&count, "count", 0, "with --interval: how many snapshots (0: until interrupted)")
	f.DurationVar(&waitInterval, "wait-events.interval", time.Second, "how often to sample WAL wait events from pg_stat_activity between snapshots")
	return cli.StopOnHangup(cmd)
}
