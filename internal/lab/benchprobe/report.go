package benchprobe

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// The probe's accuracy and cost targets (docs/probes.md, "Accuracy and cost against pg_test_fsync").
const (
	// ratioTolerance: every method's ops/s within ±15% of pg_test_fsync's.
	ratioTolerance = 0.15
	// maxWallShare: our wall time at most a fifth of pg_test_fsync's.
	maxWallShare = 0.2
	// latencyTolerance: on the simulated disk, fdatasync's p50 within 10% of the latency.
	latencyTolerance = 0.10
)

// results is everything one benchmark measured.
type results struct {
	Date    time.Time `json:"date"`
	Command string    `json:"command"`
	Kernel  string    `json:"kernel"`
	CPUs    int       `json:"cpus"`
	// PGTestFsync is the binary and PGSecs its seconds per test; ProbeBudgetSeconds our
	// probe's budget.
	PGTestFsync        string      `json:"pg_test_fsync"`
	PGSecs             int         `json:"pg_secs"`
	ProbeBudgetSeconds float64     `json:"probe_budget_seconds"`
	Runs               []runResult `json:"runs"`
	Notes              []string    `json:"notes,omitempty"`
}

func newResults(o Options) *results {
	var u unix.Utsname
	kernel := ""
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	return &results{
		Date:               time.Now().UTC().Truncate(time.Second),
		Command:            o.Command,
		Kernel:             kernel,
		CPUs:               runtime.NumCPU(),
		PGTestFsync:        o.PGTestFsync,
		PGSecs:             o.PGSecs,
		ProbeBudgetSeconds: o.ProbeDuration.Seconds(),
	}
}

// runResult is one run of both tools on one disk.
type runResult struct {
	// Disk is "bare" or "simulated"; LatencyMS the simulated disk's latency.
	Disk      string  `json:"disk"`
	LatencyMS float64 `json:"latency_ms,omitempty"`
	Dir       string  `json:"dir"`
	DirFS     string  `json:"dir_fs"`
	// Source is the simulated disk's backing directory.
	Source    string `json:"source,omitempty"`
	SourceFS  string `json:"source_fs,omitempty"`
	Run       int    `json:"run"`
	Of        int    `json:"of"`
	OursFirst bool   `json:"ours_first"`
	// LoadBefore and LoadAfter are the one-minute load average before and after the run.
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`

	PG              pgRun          `json:"pg_test_fsync"`
	Ours            *probes.Report `json:"ours"`
	OursWallSeconds float64        `json:"ours_wall_seconds"`
	// OursCPUBusy and PGCPUBusy are the share of the machine's CPU time that was busy while
	// each tool ran (-1: unknown).
	OursCPUBusy float64 `json:"ours_cpu_busy"`
	PGCPUBusy   float64 `json:"pg_cpu_busy"`

	Methods []comparison `json:"comparison"`
	// WallShare is our wall time over pg_test_fsync's for the same two sections, and
	// WallShareFull over its whole run.
	WallShare     float64 `json:"wall_share"`
	WallShareFull float64 `json:"wall_share_full"`
	// FdatasyncP50Over is, on the simulated disk, our fdatasync p50 (one 8kB write) over the
	// configured latency, minus one.
	FdatasyncP50US   float64 `json:"fdatasync_p50_us,omitempty"`
	FdatasyncP50Over float64 `json:"fdatasync_p50_over,omitempty"`
}

// comparison is one method and pattern measured by both.
type comparison struct {
	Name          string  `json:"name"`
	WritesPerSync int     `json:"writes_per_sync"`
	DirectIO      bool    `json:"direct_io"`
	PGOpsPerSec   float64 `json:"pg_ops_per_sec"`
	OpsPerSec     float64 `json:"ops_per_sec"`
	// Ratio is ours over pg_test_fsync's ops/s; 0 when either has no figure.
	Ratio   float64        `json:"ratio"`
	Samples int            `json:"samples"`
	Latency probes.Latency `json:"latency_us"`
}

func (c comparison) ok() bool { return c.Ratio > 0 && math.Abs(c.Ratio-1) <= ratioTolerance }

func (r *runResult) label() string {
	if r.Disk == "simulated" {
		return fmt.Sprintf("simulated %gms", r.LatencyMS)
	}
	return "bare"
}

// compare pairs the two tools' figures.
func (r *runResult) compare() {
	for _, wps := range []int{1, 2} {
		for _, name := range probes.SyncMethods() {
			pg, okPG := r.PG.figure(name, wps)
			ours, okOurs := r.Ours.Pattern(name, wps, probes.BlockBytes)
			if (!okPG || !pg.Available) && (!okOurs || !ours.Available) {
				continue
			}
			c := comparison{Name: name, WritesPerSync: wps, DirectIO: ours.DirectIO, PGOpsPerSec: pg.OpsPerSec,
				OpsPerSec: ours.OpsPerSec, Samples: ours.Samples, Latency: ours.LatencyUS}
			if c.PGOpsPerSec > 0 && c.OpsPerSec > 0 {
				c.Ratio = c.OpsPerSec / c.PGOpsPerSec
			}
			r.Methods = append(r.Methods, c)
		}
	}
	if r.PG.SectionsSeconds > 0 {
		r.WallShare = r.OursWallSeconds / r.PG.SectionsSeconds
	}
	if r.PG.WallSeconds > 0 {
		r.WallShareFull = r.OursWallSeconds / r.PG.WallSeconds
	}
	if r.Disk == "simulated" {
		if m, ok := r.Ours.Pattern(probes.Fdatasync, 1, probes.BlockBytes); ok && m.Samples > 0 {
			r.FdatasyncP50US = m.LatencyUS.P50
			r.FdatasyncP50Over = m.LatencyUS.P50/(r.LatencyMS*1000) - 1
		}
	}
}

// finish adds the notes that depend on all runs: how much each tool's figures varied between
// runs on the same disk, which bounds how finely a ratio can be read.
func (res *results) finish() {
	var labels []string
	byLabel := map[string][]runResult{}
	for _, r := range res.Runs {
		l := r.label()
		if _, ok := byLabel[l]; !ok {
			labels = append(labels, l)
		}
		byLabel[l] = append(byLabel[l], r)
	}
	for _, l := range labels {
		runs := byLabel[l]
		if len(runs) < 2 {
			continue
		}
		pg, pgAt := spread(runs, func(c comparison) float64 { return c.PGOpsPerSec })
		ours, oursAt := spread(runs, func(c comparison) float64 { return c.OpsPerSec })
		res.Notes = append(res.Notes, fmt.Sprintf(
			"Run-to-run spread on the %s disk (largest over smallest ops/s of one method across its %d runs, minus one): pg_test_fsync up to %.0f%% (%s), ours up to %.0f%% (%s).",
			l, len(runs), 100*pg, pgAt, 100*ours, oursAt))
	}
}

// spread is the largest relative spread (max/min - 1) of one figure of a method across runs,
// and which method it was.
func spread(runs []runResult, figure func(comparison) float64) (float64, string) {
	worst, at := 0.0, ""
	for _, c := range runs[0].Methods {
		lo, hi := math.Inf(1), 0.0
		for _, r := range runs {
			if d, ok := r.method(c.Name, c.WritesPerSync); ok && figure(d) > 0 {
				lo, hi = min(lo, figure(d)), max(hi, figure(d))
			}
		}
		if hi > 0 && hi/lo-1 > worst {
			worst, at = hi/lo-1, fmt.Sprintf("%s, %d x 8kB", c.Name, c.WritesPerSync)
		}
	}
	return worst, at
}

// targets sums up the runs against those targets, one line each.
func (res *results) targets() []string {
	var lines []string
	within, total := 0, 0
	perDisk := map[string][2]int{}
	var order []string
	for _, r := range res.Runs {
		l := r.label()
		if _, ok := perDisk[l]; !ok {
			order = append(order, l)
		}
		n := perDisk[l]
		for _, c := range r.Methods {
			if c.Ratio == 0 {
				continue
			}
			total++
			n[1]++
			if c.ok() {
				within++
				n[0]++
			}
		}
		perDisk[l] = n
	}
	var parts []string
	for _, l := range order {
		parts = append(parts, fmt.Sprintf("%s %d of %d", l, perDisk[l][0], perDisk[l][1]))
	}
	lines = append(lines, fmt.Sprintf("ops/s within ±%.0f%% of pg_test_fsync: %d of %d method-runs (%s).",
		100*ratioTolerance, within, total, strings.Join(parts, ", ")))
	worst, worstFull := 0.0, 0.0
	for _, r := range res.Runs {
		worst, worstFull = max(worst, r.WallShare), max(worstFull, r.WallShareFull)
	}
	met := "met"
	if worst > maxWallShare {
		met = "missed"
	}
	lines = append(lines, fmt.Sprintf("Wall time at most %.0f%% of pg_test_fsync's: %s (at most %.0f%% of its time for the same two sections, %.0f%% of its whole run).",
		100*maxWallShare, met, 100*worst, 100*worstFull))
	for _, r := range res.Runs {
		if r.Disk != "simulated" || r.FdatasyncP50US == 0 {
			continue
		}
		met := "met"
		if math.Abs(r.FdatasyncP50Over) > latencyTolerance {
			met = "missed"
		}
		lines = append(lines, fmt.Sprintf("%s: our fdatasync p50 %.0f µs, %+.1f%% from the configured %.0f µs: %s (target ±%.0f%%).",
			r.title(), r.FdatasyncP50US, 100*r.FdatasyncP50Over, r.LatencyMS*1000, met, 100*latencyTolerance))
	}
	return lines
}

// writeMarkdown prints the results as markdown.
func (res *results) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## Probe accuracy and cost against pg_test_fsync\n\n")
	fmt.Fprintf(&b, "Measured %s, Linux %s, %d CPUs. Command: `%s`.\n", res.Date.Format("2006-01-02 15:04 UTC"), res.Kernel, res.CPUs, res.Command)
	fmt.Fprintf(&b, "pg_test_fsync: `%s -f DIR/pg_test_fsync.out -s %d`. Ours: probes.Run with its defaults and a %gs budget, in its own process. ",
		res.PGTestFsync, res.PGSecs, res.ProbeBudgetSeconds)
	fmt.Fprintf(&b, "Ratio is ours / pg_test_fsync ops/s (target 1 ± %.0f%%).\n", 100*ratioTolerance)

	// The ratios of all runs side by side.
	b.WriteString("\n### ops/s, ours / pg_test_fsync\n\n| method | writes/sync |")
	for _, r := range res.Runs {
		fmt.Fprintf(&b, " %s |", r.title())
	}
	b.WriteString("\n|---|---|")
	for range res.Runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, key := range res.methodKeys() {
		fmt.Fprintf(&b, "| %s | %d |", key.name, key.wps)
		for _, r := range res.Runs {
			c, ok := r.method(key.name, key.wps)
			switch {
			case !ok || c.Ratio == 0:
				b.WriteString(" n/a |")
			case c.ok():
				fmt.Fprintf(&b, " %.0f / %.0f = **%.2f** |", c.OpsPerSec, c.PGOpsPerSec, c.Ratio)
			default:
				fmt.Fprintf(&b, " %.0f / %.0f = **%.2f** (miss) |", c.OpsPerSec, c.PGOpsPerSec, c.Ratio)
			}
		}
		b.WriteString("\n")
	}

	fmt.Fprintf(&b, "\n### Wall time (target: ours at most %.0f%% of pg_test_fsync's)\n\n", 100*maxWallShare)
	b.WriteString("| run | order | pg_test_fsync, whole run | pg_test_fsync, the two sections compared | ours | ours / sections | ours / whole run | our stop | CPUs busy during ours, pg_test_fsync | load avg before, after |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Runs {
		order := "pg_test_fsync first"
		if r.OursFirst {
			order = "ours first"
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f s | %.1f s | %.1f s | %.2f | %.2f | %s | %.0f%%, %.0f%% | %.1f, %.1f |\n", r.title(), order,
			r.PG.WallSeconds, r.PG.SectionsSeconds, r.OursWallSeconds, r.WallShare, r.WallShareFull, r.Ours.Stop,
			100*r.OursCPUBusy, 100*r.PGCPUBusy, r.LoadBefore, r.LoadAfter)
	}

	var sim []runResult
	for _, r := range res.Runs {
		if r.Disk == "simulated" {
			sim = append(sim, r)
		}
	}
	if len(sim) > 0 {
		fmt.Fprintf(&b, "\n### Simulated disk: fdatasync (one 8kB write) against the configured latency (target: p50 within %.0f%%)\n\n", 100*latencyTolerance)
		b.WriteString("| run | configured | ours p50 | ours p50 / configured - 1 | ours p90 | ours p99 | ours mean | pg_test_fsync usecs/op (mean) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|\n")
		for _, r := range sim {
			c, _ := r.method(probes.Fdatasync, 1)
			pg, _ := r.PG.figure(probes.Fdatasync, 1)
			verdict := ""
			if math.Abs(r.FdatasyncP50Over) > latencyTolerance {
				verdict = " (miss)"
			}
			fmt.Fprintf(&b, "| %s | %.0f µs | %.0f µs | %+.1f%%%s | %.0f µs | %.0f µs | %.0f µs | %.0f |\n", r.title(), r.LatencyMS*1000,
				r.FdatasyncP50US, 100*r.FdatasyncP50Over, verdict, c.Latency.P90, c.Latency.P99, c.Latency.Mean, pg.UsecsPerOp)
		}
	}

	b.WriteString("\n### Targets\n\n")
	for _, l := range res.targets() {
		fmt.Fprintf(&b, "- %s\n", l)
	}

	b.WriteString("\n### Runs\n\n")
	for _, r := range res.Runs {
		where := fmt.Sprintf("`%s` (%s)", r.Dir, r.DirFS)
		if r.Source != "" {
			where += fmt.Sprintf(", backed by `%s` (%s)", r.Source, r.SourceFS)
		}
		fmt.Fprintf(&b, "- %s: %s; O_DIRECT: %s.\n", r.title(), where, r.Ours.DirectIOPolicy)
	}
	if len(res.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fsName names the file system type under path.
func fsName(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "unknown"
	}
	switch int64(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return fmt.Sprintf("0x%x", st.Type)
}

func (r runResult) title() string {
	if r.Of > 1 {
		return fmt.Sprintf("%s #%d", r.label(), r.Run)
	}
	return r.label()
}

func (r runResult) method(name string, wps int) (comparison, bool) {
	for _, c := range r.Methods {
		if c.Name == name && c.WritesPerSync == wps {
			return c, true
		}
	}
	return comparison{}, false
}

type methodKey struct {
	name string
	wps  int
}

// methodKeys lists every method and pattern measured in some run, in pg_test_fsync's order.
func (res *results) methodKeys() []methodKey {
	var keys []methodKey
	for _, wps := range []int{1, 2} {
		for _, name := range probes.SyncMethods() {
			for _, r := range res.Runs {
				if _, ok := r.method(name, wps); ok {
					keys = append(keys, methodKey{name, wps})
					break
				}
			}
		}
	}
	return keys
}
