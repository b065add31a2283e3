package advisor

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Rates are the per-second changes of the cumulative counters between two snapshots, as
// `collect --interval` prints them. A counter that was reset in between (server restart,
// stats reset) or is missing from either snapshot is listed in Skipped instead of giving a
// negative or huge rate.
type Rates struct {
	Seconds   float64            `json:"seconds"`
	PerSecond map[string]float64 `json:"per_second"`
	// WALWriteSecondsPerWrite and WALSyncSecondsPerSync are the mean cost of one WAL write and
	// one WAL sync (0 without track_wal_io_timing or without writes).
	WALWriteSecondsPerWrite float64  `json:"wal_write_seconds_per_write"`
	WALSyncSecondsPerSync   float64  `json:"wal_sync_seconds_per_sync"`
	Skipped                 []string `json:"skipped,omitempty"`
}

// rateCounters are the counters collect prints: every counter the rules read, in the counter
// table's order, so that a counter added for a rule shows in `collect --interval` too.
func rateCounters() []rules.Counter { return rules.Counters() }

// RatesBetween computes the rates from prev to cur.
func RatesBetween(prev, cur collector.Snapshot) Rates {
	h := rules.NewHistory(2)
	h.Add(prev)
	h.Add(cur)
	r := Rates{Seconds: cur.Time.Sub(prev.Time).Seconds(), PerSecond: map[string]float64{}}
	for _, c := range rateCounters() {
		ch := h.Change(c)
		if !ch.OK() {
			r.Skipped = append(r.Skipped, c.String())
			continue
		}
		r.PerSecond[c.String()] = ch.Rate()
	}
	if w := r.PerSecond[rules.WALWrites.String()]; w > 0 {
		r.WALWriteSecondsPerWrite = r.PerSecond[rules.WALWriteSeconds.String()] / w
	}
	if s := r.PerSecond[rules.WALSyncs.String()]; s > 0 {
		r.WALSyncSecondsPerSync = r.PerSecond[rules.WALSyncSeconds.String()] / s
	}
	return r
}

// WriteRatesTable prints rates for people, one line per counter.
func WriteRatesTable(w io.Writer, r Rates) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Rates over %.1f s\n", r.Seconds)
	for _, c := range rateCounters() {
		if v, ok := r.PerSecond[c.String()]; ok {
			fmt.Fprintf(tw, "  %s\t%.2f/s\n", c, v)
		}
	}
	if r.WALWriteSecondsPerWrite > 0 || r.WALSyncSecondsPerSync > 0 {
		fmt.Fprintf(tw, "  WAL write / sync cost\t%.0f us / %.0f us\n", r.WALWriteSecondsPerWrite*1e6, r.WALSyncSecondsPerSync*1e6)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(tw, "  %s\t(reset or missing)\n", s)
	}
	return tw.Flush()
}
