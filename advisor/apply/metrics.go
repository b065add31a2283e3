package apply

import (
	"github.com/prometheus/client_golang/prometheus"
)

// StatusSource is where the metrics read the apply mode's status; *Manager satisfies it.
type StatusSource interface {
	Status() Status
}

// Metrics exports the apply mode's status (docs/metrics.md, "Apply"). It reads the status at
// each scrape, so a change that is no longer pending disappears from the next one. Register it
// next to the advisor's collector.
type Metrics struct {
	src StatusSource

	mode, allowed, changeState, outcomes, last24h, lastChange, rejectedUntil, handsOffUntil, refused, journalOK, elsewhere, cluster, effect *prometheus.Desc
}

// NewMetrics returns the collector over src.
func NewMetrics(src StatusSource) *Metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("pgwal_advisor_apply_"+name, help, labels, nil)
	}
	return &Metrics{
		src:           src,
		mode:          d("mode_info", "1 for the apply mode: off, dry-run or on.", "mode"),
		allowed:       d("setting_allowed", "Per setting of --apply.settings: 1 when the advisor may change it, 0 when it stays advice (a missing privilege, a read-only /proc/sys; the API says why).", "setting"),
		changeState:   d("change_state", "1 for the state of the latest change of each setting: applied, verifying, verified, unconfirmed (verified, no gain shown), pending_restart, rolled_back, rejected, failed, abandoned or unresolved.", "setting", "value", "state"),
		outcomes:      d("outcomes_total", "Outcomes recorded in the apply journal, by outcome.", "outcome"),
		last24h:       d("changes_last_24h", "Changes the daemon started in the last 24 hours (capped by --apply.max-per-day)."),
		lastChange:    d("last_change_timestamp_seconds", "When the last change was started (Unix time)."),
		rejectedUntil: d("rejected_until_timestamp_seconds", "Until when a value that made things worse and was rolled back is not proposed again (Unix time).", "setting", "value"),
		handsOffUntil: d("hands_off_until_timestamp_seconds", "Until when the advisor leaves alone a setting someone else changed (Unix time).", "setting"),
		refused:       d("refused", "1 per current recommendation the apply mode does not apply (never-auto, advice, out of bounds, not allowed; the API says why).", "rule", "setting"),
		journalOK:     d("journal_ok", "1 when the apply journal can be read and written; 0 stops all changes."),
		effect:        d("verdict_effect_ratio", "Per setting's latest verified or rolled-back change and judged figure: the change of the figure's mean relative to before (-0.31 is 31% lower; every figure is lower-is-better), with its 95% interval's bounds: bound is low, estimate or high.", "setting", "value", "figure", "bound"),
		cluster:       d("cluster_change", "1 per change the advisor made in the cluster's configuration (Patroni's DCS), with how this member runs it: running, pending_restart or not_running (a local override, or Patroni has not reached it: after a failover this member would run its own value).", "setting", "value", "state"),
		elsewhere:     d("changes_elsewhere", "Changes of the journal made on another PostgreSQL server than --dsn reaches (another system identifier or data directory): left alone here; roll them back on their own server."),
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.mode, m.allowed, m.changeState, m.outcomes, m.last24h, m.lastChange, m.rejectedUntil, m.handsOffUntil, m.refused, m.journalOK, m.elsewhere, m.cluster, m.effect} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	st := m.src.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(m.mode, 1, string(st.Mode))
	for _, s := range st.Settings {
		v := 1.0
		if st.AdvisorOnly[s] != "" {
			v = 0
		}
		gauge(m.allowed, v, s)
	}
	seen := map[string]bool{}
	for _, c := range st.Changes { // newest first: the first of a setting is its latest change
		if seen[c.Setting] {
			continue
		}
		seen[c.Setting] = true
		gauge(m.changeState, 1, c.Setting, c.New, c.State)
		for _, f := range c.Verdict {
			if f.Effect != nil {
				gauge(m.effect, f.Effect.RelLow, c.Setting, c.New, f.Name, "low")
				gauge(m.effect, f.Effect.Rel, c.Setting, c.New, f.Name, "estimate")
				gauge(m.effect, f.Effect.RelHigh, c.Setting, c.New, f.Name, "high")
			}
		}
	}
	for _, o := range []Outcome{Applied, PendingRestart, Verified, RolledBack, Rejected, Failed, UndoFailed, Abandoned} {
		ch <- prometheus.MustNewConstMetric(m.outcomes, prometheus.CounterValue, float64(st.Outcomes[o]), string(o))
	}
	gauge(m.last24h, float64(st.ChangesLast24h))
	if !st.LastChange.IsZero() {
		gauge(m.lastChange, float64(st.LastChange.UnixNano())/1e9)
	}
	rejected := map[[2]string]float64{}
	handsOff := map[string]float64{}
	for _, h := range st.Holds {
		t := float64(h.Until.UnixNano()) / 1e9
		switch h.Kind {
		case Rejected:
			k := [2]string{h.Setting, h.Value}
			rejected[k] = max(rejected[k], t)
		case Abandoned:
			handsOff[h.Setting] = max(handsOff[h.Setting], t)
		}
	}
	for k, t := range rejected {
		gauge(m.rejectedUntil, t, k[0], k[1])
	}
	for s, t := range handsOff {
		gauge(m.handsOffUntil, t, s)
	}
	refused := map[[2]string]bool{}
	for _, r := range st.Refused {
		k := [2]string{r.Rule, r.Setting}
		if !refused[k] {
			refused[k] = true
			gauge(m.refused, 1, r.Rule, r.Setting)
		}
	}
	ok := 1.0
	if st.JournalError != "" {
		ok = 0
	}
	gauge(m.journalOK, ok)
	gauge(m.elsewhere, float64(len(st.Elsewhere)))
	for _, c := range st.Cluster {
		gauge(m.cluster, 1, c.Setting, c.New, c.State)
	}
}
