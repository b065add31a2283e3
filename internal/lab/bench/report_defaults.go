package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// bandwidthBound says whether a cell is one where the issue expects the advisor to beat the
// static tuners: the OLTP load on the cloud volume and on the rotating disk.
func bandwidthBound(cell *ScenarioResult) bool {
	return cell.Title == "cloud, "+loadOLTP || cell.Title == "hdd, "+loadOLTP
}

// beyond reports whether every run of a beat every run of b on s's metric: a difference larger
// than both configurations' run-to-run spread.
func (s *ScenarioResult) beyond(a, b *ConfigResult) bool {
	if a == nil || b == nil || len(a.Runs) == 0 || len(b.Runs) == 0 {
		return false
	}
	if s.HigherIsBetter {
		return stats.Min(a.Runs) > stats.Max(b.Runs)
	}
	return stats.Max(a.Runs) < stats.Min(b.Runs)
}

// cellTargets scores one cell: the advisor no worse than the start beyond the spread and within
// 1.1x of the grid's best; on the bandwidth-bound cells better than the static tuners beyond the
// spread; no warning where nothing measured gained; the applied changes' predictions within 30%.
func cellTargets(cell *ScenarioResult) []Target {
	adv, start := cell.withRole(RoleAdvisor), cell.withRole(RoleStart)
	best, static := cell.config(cell.GridBest), cell.withRole(RoleStatic)
	var out []Target
	if adv == nil || start == nil || best == nil || len(adv.Runs) == 0 {
		return []Target{{Name: "the advisor's configuration measured", Got: "not measured"}}
	}
	vs := func(c *ConfigResult) string {
		return fmt.Sprintf("%s %s (runs %s)", c.Name, num(c.Value), numsText(c.Runs))
	}
	out = append(out, Target{Name: "no worse than the start beyond the spread", Scored: true, Met: !cell.beyond(start, adv),
		Got: "advisor " + vs(adv) + ", start " + vs(start)})
	within := adv.Value*1.1 >= best.Value
	if !cell.HigherIsBetter {
		within = adv.Value <= 1.1*best.Value
	}
	out = append(out, Target{Name: "within 1.1x of the grid's best", Scored: true, Met: within, Got: "advisor " + vs(adv) + ", best " + vs(best)})
	if bandwidthBound(cell) && static != nil {
		out = append(out, Target{Name: "beats the static tuners beyond the spread", Scored: true, Met: cell.beyond(adv, static),
			Got: "advisor " + vs(adv) + ", static tuners " + vs(static)})
	}
	// A warning is justified by a measured gain: the grid's best or the advisor's own
	// configuration (which may change what the grid does not, wal_buffers) beyond the spread.
	if !cell.beyond(best, start) && !cell.beyond(adv, start) {
		warned := cellWarnings(cell)
		got := "neither the grid nor the advisor's configuration gained beyond the spread; no warning"
		if len(warned) > 0 {
			got = "neither the grid nor the advisor's configuration gained beyond the spread; warnings: " + strings.Join(warned, ", ")
		}
		out = append(out, Target{Name: "no warning where nothing gained", Scored: true, Met: len(warned) == 0, Got: got})
	}
	if p := predictionTarget(cell); p.Scored {
		out = append(out, p)
	}
	return out
}

// cellWarnings lists the rules that warned in any of the cell's advisor rounds.
func cellWarnings(cell *ScenarioResult) []string {
	var out []string
	if cell.Advisor == nil {
		return nil
	}
	for _, r := range cell.Advisor.Rounds {
		for _, f := range r.Findings {
			if f.Severity != "info" && !slices.Contains(out, f.Rule) {
				out = append(out, f.Rule)
			}
		}
	}
	return out
}

// numsText writes runs as num does, for figures with fractions (tps, seconds).
func numsText(runs []float64) string {
	s := make([]string, len(runs))
	for i, v := range runs {
		s[i] = num(v)
	}
	return strings.Join(s, ", ")
}

// defaultsTargets scores every cell and sums each target up over the matrix for the report's
// targets table: met on how many cells, and which missed.
func defaultsTargets(res *ScenarioResult) []Target {
	type tally struct {
		scored, met int
		missed      []string
	}
	var order []string
	by := map[string]*tally{}
	for _, cell := range res.Cells {
		cell.Targets = cellTargets(cell)
		for _, t := range cell.Targets {
			tl, ok := by[t.Name]
			if !ok {
				tl = &tally{}
				by[t.Name] = tl
				order = append(order, t.Name)
			}
			if !t.Scored {
				continue
			}
			tl.scored++
			if t.Met {
				tl.met++
			} else {
				tl.missed = append(tl.missed, cell.Title+": "+t.Got)
			}
		}
	}
	var out []Target
	for _, name := range order {
		tl := by[name]
		t := Target{Name: name + " (every cell it applies to)", Scored: tl.scored > 0, Met: tl.scored > 0 && tl.met == tl.scored}
		t.Got = fmt.Sprintf("met on %d of %d cells", tl.met, tl.scored)
		if len(tl.missed) > 0 {
			t.Got += "; missed: " + strings.Join(tl.missed, "; ")
		}
		out = append(out, t)
	}
	return out
}

// writeDefaultsCells writes the matrix: a summary row per cell, then each cell's table, its
// advisor rounds and its targets.
func writeDefaultsCells(b *strings.Builder, s *ScenarioResult) {
	var rows [][]string
	for _, cell := range s.Cells {
		adv, start := cell.withRole(RoleAdvisor), cell.withRole(RoleStart)
		changes := "nothing"
		if len(cell.AdvisorChanges) > 0 {
			changes = settingsText(cell.AdvisorChanges, nil)
		}
		row := []string{cell.Title, cell.Metric, changes, "", "", "", cell.GridBest, ""}
		if start != nil && adv != nil && start.Value > 0 {
			row[3], row[4] = num(start.Value), num(adv.Value)
			row[5] = fmt.Sprintf("%+.0f%%", 100*(adv.Value/start.Value-1))
			if st := medianRun(start.Defaults); st != nil {
				row[7] = fmt.Sprintf("%.0f%%", 100*st.ImageShare)
			}
		}
		rows = append(rows, row)
	}
	b.WriteString("Summary (medians; the advisor's gain against the start; images' share of the WAL at the start):\n\n")
	table(b, []string{"cell", "metric", "the advisor changed", "start", "advisor", "gain", "grid's best", "images at the start"}, rows)
	b.WriteString("\n")
	for _, cell := range s.Cells {
		fmt.Fprintf(b, "### %s\n\n", cell.Title)
		writeDefaultsTable(b, cell)
		writeAdvisor(b, cell)
		for _, t := range cell.Targets {
			fmt.Fprintf(b, "- Target - %s: %s (%s).\n", t.Name, t.verdict(), t.Got)
		}
		b.WriteString("\n")
		if n := spreadNote(cell); n != "" {
			b.WriteString(n + "\n\n")
		}
	}
}

func writeDefaultsTable(b *strings.Builder, cell *ScenarioResult) {
	var rows [][]string
	for _, c := range cell.Configs {
		row := []string{c.Name, roles(c, cell.GridBest), settingsText(c.Settings, c.Kernel),
			bold(num(c.Value), c.Name == cell.GridBest) + " (" + numsText(c.Runs) + ")", "", "", "", ""}
		if m := medianRun(c.Defaults); m != nil {
			if m.P99LatencyMS > 0 {
				row[4] = num(m.P99LatencyMS)
			}
			row[5] = collector.FormatBytes(m.BytesPerTxn())
			if cell.Metric == "seconds" {
				row[5] = collector.FormatBytes(m.WALBytes)
			}
			row[6] = fmt.Sprintf("%.0f%% (%.0f images)", 100*m.ImageShare, m.WALFPI)
			row[7] = fmt.Sprint(m.Checkpoints)
		}
		rows = append(rows, row)
	}
	wal := "WAL a transaction"
	if cell.Metric == "seconds" {
		wal = "WAL of the load"
	}
	table(b, []string{"configuration", "role", "settings (over the base)", cell.Metric + " (median, runs)", "p99 ms", wal,
		"images' share of the WAL", "checkpoints"}, rows)
	b.WriteString("\n")
}

// medianRun is the run whose value is the median's (the lower middle of an even count): its
// other figures are reported beside the median.
func medianRun(runs []*DefaultsRun) *DefaultsRun {
	if len(runs) == 0 {
		return nil
	}
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b *DefaultsRun) int {
		switch {
		case a.Value < b.Value:
			return -1
		case a.Value > b.Value:
			return 1
		}
		return 0
	})
	return sorted[(len(sorted)-1)/2]
}
