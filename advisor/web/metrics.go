// Package web is the daemon's face: the Prometheus collector over the advisor's state, the
// JSON API (/api/v1/findings, /api/v1/recommendations, /api/v1/snapshot), the health
// endpoints, the landing page with the current findings, and the HTTP server that serves them
// through prometheus/exporter-toolkit (TLS and basic auth from --web.config.file).
//
// Everything here reads advisor.State and nothing else: the collector builds its metrics from
// the state at each scrape, so a finding that clears disappears from the next scrape instead
// of lingering as a stale series.
package web

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
)

// StateSource is where the collector and the handlers read the advisor's state; *advisor.Advisor
// satisfies it. State must be safe for concurrent use and its result must not be modified.
type StateSource interface {
	State() advisor.State
}

// namespace is the one metric prefix (docs/metrics.md).
const namespace = "pgwal_advisor"

// Collector turns the advisor's state into metrics at each scrape. Create it with NewCollector.
type Collector struct {
	src       StateSource
	version   string
	goVersion string
	metrics   []metric
}

// metric is a table entry with its descriptor.
type metric struct {
	def  metricDef
	desc *prometheus.Desc
}

// NewCollector returns a collector over src; version and goVersion label build_info.
func NewCollector(src StateSource, version, goVersion string) *Collector {
	c := &Collector{src: src, version: version, goVersion: goVersion}
	for _, d := range metricTable() {
		c.metrics = append(c.metrics, metric{def: d, desc: prometheus.NewDesc(namespace+"_"+d.name, d.help, d.labels, nil)})
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector: one consistent read of the state, turned into
// constant metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	sc := scrapeState{state: c.src.State(), version: c.version, goVersion: c.goVersion}
	e := emitter{ch: ch}
	for _, m := range c.metrics {
		m.def.read(sc, metricOut{e: e, desc: m.desc, kind: m.def.kind})
	}
}

// metricOut sends the series of one metric.
type metricOut struct {
	e    emitter
	desc *prometheus.Desc
	kind prometheus.ValueType
}

func (s metricOut) add(v float64, labels ...string) { s.e.send(s.desc, s.kind, v, labels...) }

func (s metricOut) summary(count uint64, sum float64, quantiles map[float64]float64, labels ...string) {
	s.e.summary(s.desc, count, sum, quantiles, labels...)
}

// emitter sends constant metrics; a metric that cannot be built (a label value that is not
// UTF-8) becomes an invalid metric, which promhttp reports while serving the rest.
type emitter struct {
	ch chan<- prometheus.Metric
}

func (e emitter) send(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- m
}

func (e emitter) summary(d *prometheus.Desc, count uint64, sum float64, quantiles map[float64]float64, labels ...string) {
	m, err := prometheus.NewConstSummary(d, count, sum, quantiles, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- m
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
