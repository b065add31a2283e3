package web

import (
	"net/http"
	"slices"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Charts is the body of /api/v1/charts: the series the landing page draws, in base units, so
// that what a picture shows can be checked against figures (and a dashboard can draw the same).
type Charts struct {
	Evaluated time.Time `json:"evaluated"`
	// WindowSeconds is the time the history spans (oldest to newest snapshot).
	WindowSeconds float64           `json:"window_seconds"`
	SyncLatency   SyncLatencyChart  `json:"sync_latency"`
	WAL           []WALPoint        `json:"wal"`
	Dirty         []DirtyPoint      `json:"dirty"`
	Checkpoints   []CheckpointPoint `json:"checkpoints"`
}

// SyncLatencyChart is the probe's latency of one sync per wal_sync_method and write pattern.
type SyncLatencyChart struct {
	// MethodInUse is the server's wal_sync_method ("" when PostgreSQL was not read).
	MethodInUse string    `json:"method_in_use"`
	Bars        []SyncBar `json:"bars"`
	// Missing says why there are no bars (probing off, no burst yet).
	Missing string `json:"missing,omitempty"`
}

// SyncBar is one method and write pattern: the mean latency with its 95% interval.
type SyncBar struct {
	Method        string  `json:"method"`
	WritesPerSync int     `json:"writes_per_sync"`
	DirectIO      bool    `json:"direct_io"`
	InUse         bool    `json:"in_use"`
	Samples       int     `json:"samples"`
	MeanSeconds   float64 `json:"mean_seconds"`
	CILowSeconds  float64 `json:"ci_low_seconds"`
	CIHighSeconds float64 `json:"ci_high_seconds"`
}

// WALPoint is WAL generation over one interval between snapshots: bytes per second, and the
// share of WAL writes that happened because the WAL buffers were full (wal_buffers_full /
// wal_write; 0 when nothing was written).
type WALPoint struct {
	Time             time.Time `json:"time"`
	BytesPerSecond   float64   `json:"bytes_per_second"`
	BuffersFullShare float64   `json:"buffers_full_share"`
}

// DirtyPoint is the kernel's Dirty and Writeback at one snapshot, with the thresholds in force.
type DirtyPoint struct {
	Time                          time.Time `json:"time"`
	DirtyBytes                    int64     `json:"dirty_bytes"`
	WritebackBytes                int64     `json:"writeback_bytes"`
	DirtyBackgroundThresholdBytes int64     `json:"dirty_background_threshold_bytes"`
	DirtyThresholdBytes           int64     `json:"dirty_threshold_bytes"`
}

// CheckpointPoint is an interval between snapshots in which checkpoints were counted: how many
// started by timeout and by request, and what their writes and syncs took.
type CheckpointPoint struct {
	From         time.Time `json:"from"`
	Time         time.Time `json:"time"`
	Timed        float64   `json:"timed"`
	Requested    float64   `json:"requested"`
	WriteSeconds float64   `json:"write_seconds"`
	SyncSeconds  float64   `json:"sync_seconds"`
}

// Chart anchors on the landing page; a finding links to the chart that shows its evidence.
const (
	anchorSync        = "chart-sync-latency"
	anchorWAL         = "chart-wal"
	anchorDirty       = "chart-dirty"
	anchorCheckpoints = "chart-checkpoints"
)

// evidenceAnchor says which chart shows a rule's evidence ("" for rules judged from settings or
// device facts alone, which no chart shows).
func evidenceAnchor(rule string) string {
	switch rule {
	case "sync-method-slow", "open-sync-with-small-buffers", "write-cache-unsafe":
		return anchorSync // judged from the probe's latencies
	case "wal-buffers-small", "wal-lock-contention":
		return anchorWAL // buffer-full writes and WAL flush waits under load
	case "writeback-stalls-wal":
		return anchorDirty
	case "checkpoint-stalls", "flush-after-disabled":
		return anchorCheckpoints // checkpoint sync times and what piled up around them
	}
	return ""
}

// chartsOf builds the series from one consistent state.
func chartsOf(st advisor.State) Charts {
	c := Charts{
		Evaluated:   st.Evaluated,
		SyncLatency: syncLatencyOf(st),
		WAL:         []WALPoint{},
		Dirty:       []DirtyPoint{},
		Checkpoints: []CheckpointPoint{},
	}
	h := st.History
	if h == nil {
		return c
	}
	c.WindowSeconds = h.Span().Seconds()
	c.WAL = walPointsOf(h)
	for _, s := range h.Snapshots() {
		if k := s.Kernel; k != nil {
			c.Dirty = append(c.Dirty, DirtyPoint{
				Time: s.Time, DirtyBytes: k.Meminfo.DirtyBytes, WritebackBytes: k.Meminfo.WritebackBytes,
				DirtyBackgroundThresholdBytes: k.DirtyBackgroundThresholdBytes, DirtyThresholdBytes: k.DirtyThresholdBytes,
			})
		}
	}
	for _, e := range h.CheckpointEnds() {
		c.Checkpoints = append(c.Checkpoints, CheckpointPoint{
			From: e.From, Time: e.To, Timed: e.Timed, Requested: e.Requested,
			WriteSeconds: e.WriteSeconds, SyncSeconds: e.SyncSeconds,
		})
	}
	return c
}

func syncLatencyOf(st advisor.State) SyncLatencyChart {
	c := SyncLatencyChart{Bars: []SyncBar{}}
	if st.Snapshot != nil && st.Snapshot.Postgres != nil {
		c.MethodInUse = st.Snapshot.Postgres.Settings[collector.WALSyncMethod].Value
	}
	switch {
	case !st.ProbeEnabled && st.ProbeDisabledReason != "":
		c.Missing = "sync probing is off: " + st.ProbeDisabledReason
		return c
	case st.Probe == nil:
		c.Missing = "no probe burst has finished yet"
		return c
	}
	for _, m := range st.Probe.Methods {
		// The same selection as the probe latency metric: the 8kB patterns the daemon runs.
		if !m.Available || m.Samples == 0 || m.WriteBytes != probes.BlockBytes {
			continue
		}
		l := m.LatencyUS
		c.Bars = append(c.Bars, SyncBar{
			Method: m.Name, WritesPerSync: m.WritesPerSync, DirectIO: m.DirectIO,
			InUse: m.Name == c.MethodInUse, Samples: m.Samples,
			MeanSeconds: l.Mean / 1e6, CILowSeconds: l.CILow / 1e6, CIHighSeconds: l.CIHigh / 1e6,
		})
	}
	sortBars(c.Bars)
	if len(c.Bars) == 0 {
		c.Missing = "the last probe burst measured no method"
	}
	return c
}

// walPointsOf joins the intervals of the WAL counters by their end; an interval across a
// counter reset is missing from a counter's list and so from the chart.
func walPointsOf(h *rules.History) []WALPoint {
	full := deltasByEnd(h.Intervals(rules.WALBuffersFull))
	writes := deltasByEnd(h.Intervals(rules.WALWrites))
	out := []WALPoint{}
	for _, iv := range h.Intervals(rules.WALBytes) {
		secs := iv.To.Sub(iv.From).Seconds()
		p := WALPoint{Time: iv.To, BytesPerSecond: iv.Delta / secs}
		if w, ok := writes[iv.To.UnixNano()]; ok && w > 0 {
			p.BuffersFullShare = min(full[iv.To.UnixNano()]/w, 1)
		}
		out = append(out, p)
	}
	return out
}

func deltasByEnd(ivs []rules.Interval) map[int64]float64 {
	m := make(map[int64]float64, len(ivs))
	for _, iv := range ivs {
		m[iv.To.UnixNano()] = iv.Delta
	}
	return m
}

// charts serves /api/v1/charts.
func (a api) charts(w http.ResponseWriter, _ *http.Request) {
	st, ok := a.ready(w)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, chartsOf(st))
}

// sortBars orders bars as a reader compares them: by write pattern, then by method name.
func sortBars(bars []SyncBar) {
	slices.SortStableFunc(bars, func(a, b SyncBar) int {
		if a.WritesPerSync != b.WritesPerSync {
			return a.WritesPerSync - b.WritesPerSync
		}
		if a.DirectIO != b.DirectIO {
			if a.DirectIO {
				return 1
			}
			return -1
		}
		switch {
		case a.Method < b.Method:
			return -1
		case a.Method > b.Method:
			return 1
		}
		return 0
	})
}

// noIcon answers a browser's request for /favicon.ico with no content: without it every visit
// to the landing page logs a failed request (a 404) in the browser's console.
func noIcon(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "max-age=86400")
	w.WriteHeader(http.StatusNoContent)
}
