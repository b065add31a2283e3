package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

func newProbeCmd(g *cli.Globals) *cobra.Command {
	var (
		cfg     probes.Config
		methods []string
	)
	cmd := &cobra.Command{
		Use:   "probe --dir DIR",
		Short: "Measure what each wal_sync_method costs on the WAL's file system, and whether syncs can be durable",
		Long: `probe measures sync latency the way PostgreSQL issues each wal_sync_method (like
pg_test_fsync: one and two 8kB writes per sync into a preallocated 16MB file), with the methods
interleaved so that noise hits all alike, until every method's mean is known within --precision
or --duration is spent. It then judges whether the syncs can be reaching stable storage.

--dir must be on the WAL's file system, outside pg_wal and the data directory; with --wal-dir
it must be on the same file system as the WAL directory, and users other than the advisor's
(and its group) must not be able to write it unless it has the sticky bit. The probe file is
removed on exit, including on Ctrl-C, SIGTERM and SIGHUP (a closed terminal).

O_DIRECT is used where the server would use it: give --server-version-num and --wal-level
(and, from PostgreSQL 16, --debug-io-direct) to emulate a server; without them open_datasync
and open_sync use O_DIRECT, as pg_test_fsync does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.WALDir = g.WALDir
			cfg.Methods = methods
			progress, done := progressBar(cmd.ErrOrStderr(), g.Format)
			rep, err := probes.Run(cmd.Context(), cfg, progress)
			done()
			var ce *probes.ConfigError
			if errors.As(err, &ce) {
				return &cli.ExitCodeError{Code: cli.ExitBadUsage, Err: err}
			}
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("probe interrupted; the probe file was removed: %w", err)
			}
			if err != nil {
				return err
			}
			if g.Format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return writeProbeTable(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "directory for the probe file: on the WAL's file system, outside pg_wal and the data directory (required)")
	f.DurationVar(&cfg.Duration, "duration", probes.DefaultDuration, "measuring budget for all methods together; the run ends earlier once --precision is reached")
	f.Float64Var(&cfg.Precision, "precision", probes.DefaultPrecision, "stop once every method's 95% interval is within this fraction of its mean")
	f.IntVar(&cfg.MinSamples, "min-samples", probes.DefaultMinSamples, "samples per method before --precision may end the run")
	f.StringSliceVar(&methods, "methods", nil, "wal_sync_method names to measure (default all: "+strings.Join(probes.SyncMethods(), ",")+")")
	f.BoolVar(&cfg.OpenSyncSizes, "open-sync-sizes", false, "also compare open_sync writing 16kB in 1, 2, 4, 8 and 16 pieces")
	f.IntVar(&cfg.Server.VersionNum, "server-version-num", 0, "emulate this server's O_DIRECT choice (server_version_num, e.g. 150004); 0: as pg_test_fsync")
	f.StringVar(&cfg.Server.WALLevel, "wal-level", "", "the emulated server's wal_level (up to PostgreSQL 15, minimal means O_DIRECT for open_* methods)")
	f.StringVar(&cfg.Server.DebugIODirect, "debug-io-direct", "", "the emulated server's debug_io_direct (PostgreSQL 16 and later; \"wal\" means O_DIRECT for every method)")
	f.Int64Var(&cfg.MinFreeBytes, "min-free-bytes", probes.DefaultMinFreeBytes, "refuse unless this much space stays free beside the 16MB probe file")
	// --dir is not marked required: probes.Run's refusal says what the directory must be.
	// SIGHUP (a closed terminal) stops the probe as SIGTERM does: its file is removed.
	return cli.StopOnHangup(cmd)
}

// progressBar returns a progress callback drawing a bar on w when w is a terminal (and the
// output is for people), and a function that ends the bar.
func progressBar(w io.Writer, format string) (progress func(done, total time.Duration), finish func()) {
	f, ok := w.(*os.File)
	if format != "table" || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, func() {}
	}
	var bar *progressbar.ProgressBar
	progress = func(done, total time.Duration) {
		if bar == nil {
			bar = progressbar.NewOptions64(total.Milliseconds(),
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("probing sync methods"),
				progressbar.OptionSetPredictTime(false),
				progressbar.OptionClearOnFinish(),
				progressbar.OptionThrottle(100*time.Millisecond),
			)
		}
		_ = bar.Set64(done.Milliseconds())
	}
	finish = func() {
		if bar != nil {
			_ = bar.Finish()
		}
	}
	return progress, finish
}

// writeProbeTable prints the report laid out like pg_test_fsync's, with percentiles and the
// interval of each mean, then the durability verdict.
func writeProbeTable(w io.Writer, rep *probes.Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Probe directory %s: %.1f s with a %.1f s budget (%s)\n", rep.Dir, rep.WallSeconds, rep.BudgetSeconds, stopWords(rep))
	fmt.Fprintf(&b, "O_DIRECT: %s\n", rep.DirectIOPolicy)

	header := fmt.Sprintf("        %-30s%13s  %8s %9s %9s  %-21s %8s\n", "", "ops/sec", "usecs/op", "p50", "p99", "95% CI of mean (us)", "samples")
	section := func(title string, rows []probes.MethodResult, label func(probes.MethodResult) string) {
		if len(rows) == 0 {
			return
		}
		b.WriteString("\n" + title)
		b.WriteString(header)
		for _, m := range rows {
			writeRow(&b, label(m), m)
		}
	}
	byName := func(m probes.MethodResult) string {
		if m.DirectIO {
			return m.Name + " (O_DIRECT)"
		}
		return m.Name
	}
	pick := func(keep func(probes.MethodResult) bool) []probes.MethodResult {
		return slices.DeleteFunc(slices.Clone(rep.Methods), func(m probes.MethodResult) bool { return !keep(m) })
	}
	eightK := func(wps int) func(probes.MethodResult) bool {
		return func(m probes.MethodResult) bool {
			return m.Name != probes.Write && m.WritesPerSync == wps && m.WriteBytes == probes.BlockBytes
		}
	}
	const order = "(in wal_sync_method preference order, except fdatasync is Linux's default)\n"
	section("Compare file sync methods using one 8kB write:\n"+order, pick(eightK(1)), byName)
	section("Compare file sync methods using two 8kB writes:\n"+order, pick(eightK(2)), byName)

	var sizes []probes.MethodResult
	for _, pieces := range []int{1, 2, 4, 8, 16} {
		if m, ok := rep.Pattern(probes.OpenSync, pieces, 16<<10/pieces); ok && (pieces != 2 || len(sizes) > 0) {
			sizes = append(sizes, m)
		}
	}
	section("Compare open_sync with different write sizes:\n(the cost of writing 16kB per sync in different open_sync write sizes)\n", sizes,
		func(m probes.MethodResult) string {
			return fmt.Sprintf("%2d * %2dkB open_sync write", m.WritesPerSync, m.WriteBytes>>10)
		})
	section("Non-sync'ed 8kB writes:\n", pick(func(m probes.MethodResult) bool { return m.Name == probes.Write }),
		func(m probes.MethodResult) string { return m.Name })

	notes := pick(func(m probes.MethodResult) bool { return m.Note != "" })
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, m := range notes {
			fmt.Fprintf(&b, "* %s (%d x %dkB): %s\n", m.Name, m.WritesPerSync, m.WriteBytes>>10, m.Note)
		}
	}

	d := rep.Durability
	fmt.Fprintf(&b, "\nDurability: %s\n  %s\n", d.Status, d.Reason)
	if len(d.Evidence) > 0 {
		keys := make([]string, 0, len(d.Evidence))
		for k := range d.Evidence {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString("  evidence:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%.4g", k, d.Evidence[k])
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(b *strings.Builder, label string, m probes.MethodResult) {
	if !m.Available {
		fmt.Fprintf(b, "        %-30s%13s  %s\n", label, "n/a", m.Error)
		return
	}
	if m.Samples == 0 {
		fmt.Fprintf(b, "        %-30s%13s\n", label, "no samples")
		return
	}
	l := m.LatencyUS
	mark := ""
	if m.Note != "" {
		mark = "*"
	}
	ci := usecs(l.CILow) + " - " + usecs(l.CIHigh)
	fmt.Fprintf(b, "        %-30s%13.3f  %8s %9s %9s  %-21s %8d\n", label+mark, m.OpsPerSec, usecs(l.Mean), usecs(l.P50), usecs(l.P99), ci, m.Samples)
}

// usecs prints microseconds as pg_test_fsync does, with a decimal where whole microseconds
// would round tmpfs and page-cache figures to nothing.
func usecs(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func stopWords(rep *probes.Report) string {
	switch rep.Stop {
	case probes.StopPrecision:
		return fmt.Sprintf("stopped early: every method's mean known within ±%.0f%%", rep.Precision*100)
	case probes.StopBudget:
		return "budget spent"
	case probes.StopSampleCap:
		return "sample limit reached"
	}
	return rep.Stop
}
