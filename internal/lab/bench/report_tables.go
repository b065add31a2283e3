package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

func writeValueTable(b *strings.Builder, s *ScenarioResult) {
	unit := s.Metric
	head := []string{"configuration", "role", "settings (over the base)", unit + " (median)", "runs"}
	// The 95% interval of the mean, where some configuration ran often enough to have one.
	withInterval := false
	for _, c := range s.Configs {
		if _, _, ok := stats.Interval95(c.Runs); ok {
			withInterval = true
		}
	}
	if withInterval {
		head = append(head, "95% interval of the mean")
	}
	var rows [][]string
	for _, c := range s.Configs {
		runs := make([]string, len(c.Runs))
		for i, v := range c.Runs {
			runs[i] = num(v)
		}
		row := []string{c.Name, roles(c, s.GridBest), settingsText(c.Settings, c.Kernel), bold(num(c.Value), c.Name == s.GridBest), strings.Join(runs, ", ")}
		if withInterval {
			iv := ""
			if lo, hi, ok := stats.Interval95(c.Runs); ok {
				iv = num(lo) + " - " + num(hi)
			}
			row = append(row, iv)
		}
		rows = append(rows, row)
	}
	table(b, head, rows)
	b.WriteString("\n")
}

func writeClientsTable(b *strings.Builder, s *ScenarioResult) {
	head := []string{"clients"}
	for _, c := range s.Configs {
		head = append(head, c.Name+" ("+roles(c, "")+")")
	}
	var counts []int
	for _, c := range s.Configs {
		for _, cr := range c.Clients {
			if !slices.Contains(counts, cr.Clients) {
				counts = append(counts, cr.Clients)
			}
		}
	}
	slices.Sort(counts)
	var rows [][]string
	for _, n := range counts {
		row := []string{strconv.Itoa(n)}
		for _, c := range s.Configs {
			cell := ""
			for _, cr := range c.Clients {
				if cr.Clients == n {
					cell = num(cr.TPS)
				}
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	table(b, head, rows)
	b.WriteString("\nSettings (over the base): ")
	var parts []string
	for _, c := range s.Configs {
		parts = append(parts, fmt.Sprintf("%s: %s", c.Name, settingsText(c.Settings, c.Kernel)))
	}
	b.WriteString(strings.Join(parts, "; ") + ". tps, one run each.\n\n")
}

func writeSmoothTable(b *strings.Builder, s *ScenarioResult) {
	head := []string{"configuration", "role", "settings (over the base)", "median tps", "worst second", "p5", "seconds < half median",
		"p99 latency", "max latency", "checkpoints", "checkpoint sync", "Dirty+Writeback peak (host)"}
	var rows [][]string
	for _, c := range s.Configs {
		sm := c.Smooth
		if sm == nil {
			continue
		}
		rows = append(rows, []string{c.Name, roles(c, s.GridBest), settingsText(c.Settings, c.Kernel), num(sm.MedianTPS),
			bold(num(sm.WorstSecond), c.Name == s.GridBest), num(sm.P5TPS), fmt.Sprintf("%d of %d", sm.SecondsBelowHalf, sm.Seconds),
			fmt.Sprintf("%s ms", num(sm.P99LatencyMS)), fmt.Sprintf("%s ms", num(sm.MaxLatencyMS)), strconv.FormatInt(sm.Checkpoints, 10),
			fmt.Sprintf("%.1f s", sm.CheckpointSyncSeconds), collector.FormatBytes(float64(sm.DirtyPeakBytes))})
	}
	table(b, head, rows)
	b.WriteString("\nPer-second throughput (tps, from pgbench -P 1):\n\n")
	for _, c := range s.Configs {
		if c.Smooth == nil {
			continue
		}
		per := make([]string, len(c.Smooth.PerSecond))
		for i, v := range c.Smooth.PerSecond {
			per[i] = strconv.FormatFloat(v, 'f', 0, 64)
		}
		fmt.Fprintf(b, "- %s: %s\n", c.Name, strings.Join(per, " "))
	}
	b.WriteString("\n")
}

// writeCommitTables writes the commit grid, one table per device: per number of clients, each
// grid point's median tps with its range, and against commit_delay=0 the change of the medians,
// in bold where the ranges do not overlap (beyond the spread).
func writeCommitTables(b *strings.Builder, g *CommitGrid) {
	for _, d := range g.Devices {
		fmt.Fprintf(b, "Simulated device at %g ms per sync; tps median (range over the runs), and the change against commit_delay=0 "+
			"(bold: beyond the spread):\n\n", d.LatencyMS)
		head := []string{"clients"}
		for _, c := range d.Configs {
			head = append(head, c.Name)
		}
		var rows [][]string
		for ci, n := range d.Clients {
			row := []string{strconv.Itoa(n)}
			for k, c := range d.Configs {
				runs := c.TPS[ci]
				if len(runs) == 0 {
					row = append(row, "not measured")
					continue
				}
				cell := fmt.Sprintf("%s (%s-%s)", num(stats.Median(runs)), num(stats.Min(runs)), num(stats.Max(runs)))
				if k > 0 {
					x := d.gain(k, ci)
					cell += " " + bold(fmt.Sprintf("%+.0f%%", 100*x.gain), x.beyond)
				}
				row = append(row, cell)
			}
			rows = append(rows, row)
		}
		table(b, head, rows)
		b.WriteString("\n")
	}
}
