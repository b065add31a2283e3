package advisor

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// WriteSnapshotTable prints a snapshot for people.
func WriteSnapshotTable(w io.Writer, s collector.Snapshot) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Snapshot at %s\n", s.Time.Format("2006-01-02 15:04:05 MST"))
	for _, p := range s.Parts {
		if !p.OK {
			fmt.Fprintf(tw, "  MISSING %s: %s\n", p.Name, p.Error)
		}
	}
	if pg := s.Postgres; pg != nil {
		fmt.Fprintf(tw, "\nPostgreSQL %s (server_version_num %d)\n", pg.Version, pg.VersionNum)
		fmt.Fprintf(tw, "  data directory\t%s\n  WAL directory\t%s\n", orDash(pg.DataDir), orDash(pg.WALDir))
		writeHAManager(tw, pg.HAManager)
		for _, n := range pg.Notes {
			fmt.Fprintf(tw, "  note\t%s\n", n)
		}
		fmt.Fprintf(tw, "\n  SETTING\tVALUE\tSOURCE\tCONTEXT\n")
		for _, name := range collector.SettingNames() {
			st, ok := pg.Settings[name]
			if !ok || name == collector.DataDirectory {
				continue
			}
			val := st.Value
			if st.PendingRestart {
				val += " (pending restart)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", name, val, st.Source, st.Context)
		}
		if wal := pg.WAL; wal != nil {
			fmt.Fprintf(tw, "\n  WAL (cumulative since %s)\n", wal.StatsReset.Format("2006-01-02 15:04:05"))
			fmt.Fprintf(tw, "  records\t%d\n  full-page images\t%d\n  bytes\t%s\n", wal.Records, wal.FPI, collector.FormatBytes(float64(wal.Bytes)))
			fmt.Fprintf(tw, "  buffers full\t%d\n  writes\t%d\n  syncs\t%d\n", wal.BuffersFull, wal.Writes, wal.Syncs)
			fmt.Fprintf(tw, "  write time\t%.3f s\n  sync time\t%.3f s\n", wal.WriteTimeSeconds, wal.SyncTimeSeconds)
		}
		if cp := pg.Checkpointer; cp != nil {
			fmt.Fprintf(tw, "\n  Checkpoints\ttimed %d, requested %d\n", cp.Timed, cp.Requested)
			fmt.Fprintf(tw, "  write / sync time\t%.1f s / %.1f s\n  buffers written\t%d\n", cp.WriteTimeSeconds, cp.SyncTimeSeconds, cp.BuffersWritten)
		}
		if we := pg.WaitEvents; we != nil && we.Samples > 0 {
			fmt.Fprintf(tw, "\n  Wait events (%d samples, %d active backend samples)\n", we.Samples, we.ActiveBackends)
			for _, k := range slices.Sorted(maps.Keys(we.Counts)) {
				fmt.Fprintf(tw, "  %s\t%d\n", k, we.Counts[k])
			}
		}
	}
	if k := s.Kernel; k != nil {
		fmt.Fprintf(tw, "\nKernel\n")
		fmt.Fprintf(tw, "  vm.dirty_background_ratio\t%d\n  vm.dirty_background_bytes\t%d\n", k.VM.DirtyBackgroundRatio, k.VM.DirtyBackgroundBytes)
		fmt.Fprintf(tw, "  vm.dirty_ratio\t%d\n  vm.dirty_bytes\t%d\n", k.VM.DirtyRatio, k.VM.DirtyBytes)
		fmt.Fprintf(tw, "  vm.dirty_expire_centisecs\t%d\n  vm.dirty_writeback_centisecs\t%d\n", k.VM.DirtyExpireCentisecs, k.VM.DirtyWritebackCentisecs)
		fmt.Fprintf(tw, "  background writeback starts at\t%s\n  writers throttled at\t%s\n", collector.FormatBytes(float64(k.DirtyBackgroundThresholdBytes)), collector.FormatBytes(float64(k.DirtyThresholdBytes)))
		fmt.Fprintf(tw, "  Dirty / Writeback now\t%s / %s\n", collector.FormatBytes(float64(k.Meminfo.DirtyBytes)), collector.FormatBytes(float64(k.Meminfo.WritebackBytes)))
		fmt.Fprintf(tw, "  MemTotal / MemAvailable\t%s / %s\n", collector.FormatBytes(float64(k.Meminfo.MemTotalBytes)), collector.FormatBytes(float64(k.Meminfo.MemAvailableBytes)))
	}
	if st := s.WALStorage; st != nil {
		fmt.Fprintf(tw, "\nWAL storage\n")
		fmt.Fprintf(tw, "  path\t%s\n  mount\t%s (%s from %s)\n  options\t%s\n", st.Path, st.MountPoint, st.FSType, orDash(st.MountSource), strings.Join(st.MountOptions, ","))
		fmt.Fprintf(tw, "  device\t%s %s\n", st.Device, st.DeviceName)
		for _, d := range st.Disks {
			fmt.Fprintf(tw, "  disk %s\trotational=%t write_cache=%q fua=%t %s\n", d.Name, d.Rotational, d.WriteCache, d.FUA, d.Model)
		}
		if st.Volatile {
			fmt.Fprintf(tw, "  VOLATILE\tthe WAL is in memory: a power cut loses it\n")
		}
		fmt.Fprintf(tw, "  free / total\t%s / %s\n", collector.FormatBytes(float64(st.FreeBytes)), collector.FormatBytes(float64(st.TotalBytes)))
		for _, n := range st.Notes {
			fmt.Fprintf(tw, "  note\t%s\n", n)
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteCheckTable prints a check's findings for people: the most severe first, each with its
// recommendation, evidence and expected effect.
func WriteCheckTable(w io.Writer, r *CheckResult) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Checked %d snapshots over %.0f s.\n", r.Snapshots, r.WindowSeconds)
	writeHAManager(tw, r.HAManager)
	for _, p := range r.Problems {
		fmt.Fprintf(tw, "  MISSING %s: %s\n", p.Name, p.Error)
	}
	if r.Probe != nil {
		fmt.Fprintf(tw, "\nSync probe in %s (%.1f s):\n", r.Probe.Dir, r.Probe.WallSeconds)
		fmt.Fprintf(tw, "  METHOD\tWRITES/SYNC\tOPS/S\tP50 US\tP99 US\n")
		for _, m := range r.Probe.Methods {
			if !m.Available || m.Samples == 0 {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%d\t%.0f\t%.0f\t%.0f\n", m.Name, m.WritesPerSync, m.OpsPerSec, m.LatencyUS.P50, m.LatencyUS.P99)
		}
		fmt.Fprintf(tw, "  durability: %s: %s\n", r.Probe.Durability.Status, r.Probe.Durability.Reason)
	} else if r.ProbeSkipped != "" {
		fmt.Fprintf(tw, "\nNo sync probe: %s\n", r.ProbeSkipped)
	}
	if len(r.Findings) == 0 {
		fmt.Fprintf(tw, "\nNo findings.\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(tw, "\n%s  %s", strings.ToUpper(f.Severity.String()), f.Rule)
		if f.Setting != "" {
			fmt.Fprintf(tw, "  %s", f.Setting)
		}
		if f.Recommended != "" {
			fmt.Fprintf(tw, ": %s -> %s (%s)", orDash(f.Current), f.Recommended, f.Action)
		}
		fmt.Fprintf(tw, "\n  %s\n", f.Summary)
		if cmd := rules.ManagedCommand(r.HAManager, f.Setting, f.Recommended); cmd != "" && f.Recommended != "" && f.Action != rules.ActionSysctl {
			fmt.Fprintf(tw, "  under %s, change it with: %s\n", r.HAManager.Name, cmd)
		}
		for _, e := range f.Evidence {
			fmt.Fprintf(tw, "    %s\t%s\n", e.Name, formatEvidence(e.Value, e.Unit))
		}
		if f.ExpectedEffect != "" {
			fmt.Fprintf(tw, "  expected: %s\n", f.ExpectedEffect)
		}
		if f.Predicted != nil {
			fmt.Fprintf(tw, "  predicted: %s\n", formatPredicted(*f.Predicted))
		}
	}
	writeRecommendations(tw, r.Recommendations)
	if len(r.NotEnoughData) > 0 {
		fmt.Fprintf(tw, "\nNot enough data to judge:\n")
		for _, id := range slices.Sorted(maps.Keys(r.NotEnoughData)) {
			fmt.Fprintf(tw, "  %s\t%s\n", id, r.NotEnoughData[id])
		}
	}
	return tw.Flush()
}

// writeRecommendations prints the recommendations, one per setting, with the rules behind
// each and the ones it overruled.
func writeRecommendations(w io.Writer, recs []rules.Recommendation) {
	if len(recs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nRecommendations (one per setting):\n")
	for _, rec := range recs {
		fmt.Fprintf(w, "  %s\t%s -> %s\t%s\t%s\n", rec.Setting, orDash(rec.Current), rec.Recommended, rec.Action, strings.ToUpper(rec.Severity.String()))
		for _, b := range rec.Because {
			fmt.Fprintf(w, "    because %s\n", b.Rule)
		}
		if rec.Prediction != nil {
			fmt.Fprintf(w, "    predicted: %.3f s of waiting saved per second (%s)\n", rec.Prediction.SavedSecondsPerSecond, rec.Prediction.Basis)
		}
		if rec.Predicted != nil {
			fmt.Fprintf(w, "    predicted: %s\n", formatPredicted(*rec.Predicted))
		}
		for _, o := range rec.Overruled {
			fmt.Fprintf(w, "    overruled %s (%s): %s\n", o.Rule, o.Recommended, o.Reason)
		}
	}
}

// formatPredicted prints a prediction for people: the figure, now and predicted, and its basis.
func formatPredicted(p rules.Predicted) string {
	return fmt.Sprintf("%s %s now -> %s (%s)", p.Name, formatEvidence(p.Current, p.Unit), formatEvidence(p.Value, p.Unit), p.Basis)
}

// formatEvidence prints a figure in its unit for people.
func formatEvidence(v float64, unit string) string {
	switch unit {
	case rules.UnitSeconds:
		switch {
		case v < 1e-3:
			return fmt.Sprintf("%.0f us", v*1e6)
		case v < 1:
			return fmt.Sprintf("%.2f ms", v*1e3)
		}
		return fmt.Sprintf("%.2f s", v)
	case rules.UnitBytes:
		return collector.FormatBytes(v)
	case rules.UnitBytesPerSecond:
		return collector.FormatBytes(v) + "/s"
	case rules.UnitPerSecond:
		return fmt.Sprintf("%.2f/s", v)
	case rules.UnitRatio:
		return fmt.Sprintf("%.3f", v)
	case rules.UnitSecondsPerMB:
		return formatEvidence(v, rules.UnitSeconds) + "/MB"
	case rules.UnitBool:
		if v != 0 {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprintf("%.4g", v)
}

// writeHAManager says which HA manager runs the server, and what showed it.
func writeHAManager(w io.Writer, m *collector.HAManager) {
	if m == nil {
		return
	}
	fmt.Fprintf(w, "  HA manager\t%s", m.Name)
	if m.Evidence != "" {
		fmt.Fprintf(w, " (%s)", m.Evidence)
	}
	fmt.Fprintln(w)
}
