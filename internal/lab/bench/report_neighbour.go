package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
)

// writeNeighbourTable writes the neighbour scenario's medians per configuration, and the
// per-second series of the median run of the configurations the targets compare.
func writeNeighbourTable(b *strings.Builder, s *ScenarioResult) {
	head := []string{"configuration", "role", "queue", "settings (over the base)", "stall seconds (median, runs)", "longest stall",
		"p50 latency", "p99 latency", "max latency", "WAL flush mean (stall / outside)", "s without a WAL flush",
		"most WAL flush time in 1 s", "waits in the stall (median run)", "Dirty peak", "Writeback peak", "bulk writer", "log fsync max"}
	var rows [][]string
	for _, c := range s.Configs {
		sm := neighbour.Summarize(c.Neighbour)
		if sm == nil {
			continue
		}
		writer := "did not finish"
		if sm.WriterSeconds > 0 {
			writer = fmt.Sprintf("%.0f s", sm.WriterSeconds)
		}
		rows = append(rows, []string{c.Name, roles(c, s.GridBest), neighbourQueue(c.Config), settingsText(c.Settings, c.Kernel),
			bold(fmt.Sprintf("%s (%s)", num(sm.StallSeconds), runsText(c.Runs)), c.Name == s.GridBest),
			fmt.Sprintf("%.0f s", sm.LongestStall), ms(sm.P50MS), ms(sm.P99MS), ms(sm.MaxMS),
			fmt.Sprintf("%s ms (%s / %s)", num(sm.WALSyncMS), num(sm.WALSyncStallMS), num(sm.WALCalmMS)),
			fmt.Sprintf("%.0f", sm.FlushlessSeconds), ms(sm.WALMaxSecondMS), sharesText(sm.Median.WaitStall),
			collector.FormatBytes(sm.DirtyPeak), collector.FormatBytes(sm.WritebackPeak), writer, ms(sm.LogFsyncMaxMS)})
	}
	table(b, head, rows)
	b.WriteString("\nPer second of the median run (p99 commit latency of the commits scheduled in that second, ms; " +
		"Dirty+Writeback, MiB; WAL flush time reported in that second, ms; a * marks a stall second):\n\n")
	for _, c := range s.Configs {
		if !c.has(RoleStart) && !c.has(RoleAdvisor) && c.Name != s.GridBest && c.Name != neighbourBest(s, "priority") {
			continue
		}
		sm := neighbour.Summarize(c.Neighbour)
		if sm == nil {
			continue
		}
		ps := sm.Median.PerSecond
		p99 := make([]string, len(ps.P99MS))
		dirty := make([]string, len(ps.Dirty))
		flush := make([]string, len(ps.WALSyncMS))
		for i := range ps.P99MS {
			p99[i] = strconv.FormatFloat(ps.P99MS[i], 'f', 0, 64)
			if i < len(ps.Stall) && ps.Stall[i] {
				p99[i] += "*"
			}
		}
		for i := range ps.Dirty {
			dirty[i] = strconv.FormatInt((ps.Dirty[i]+ps.Writeback[i])>>20, 10)
		}
		for i := range ps.WALSyncMS {
			flush[i] = strconv.FormatFloat(ps.WALSyncMS[i], 'f', 0, 64)
		}
		fmt.Fprintf(b, "- %s (%d stall s):\n  - p99 ms: %s\n  - Dirty+Writeback MiB: %s\n  - WAL flush ms: %s\n",
			c.Name, sm.Median.StallSeconds, strings.Join(p99, " "), strings.Join(dirty, " "), strings.Join(flush, " "))
	}
	b.WriteString("\n")
}

func ms(v float64) string { return num(v) + " ms" }

// sharesText lists wait-event shares, largest first, those under 5% left out.
func sharesText(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range keys {
		if m[k] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*m[k]))
		}
	}
	return strings.Join(parts, ", ")
}
