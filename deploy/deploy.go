// Package deploy holds what operators install next to the daemon: the Prometheus alerting
// rules and their promtool tests, an example scrape configuration, the Grafana dashboard, the
// systemd unit and the Kubernetes sidecar example. It is a Go package so that the alert rules
// ship inside the binary (the daemon can print them) and so that `go test ./...` checks every
// file here against promtool, docs/metrics.md and docs/runbook.md.
package deploy

import (
	_ "embed"
	"slices"
)

//go:embed prometheus/alerts.yml
var alertRules []byte

// AlertRules returns the Prometheus alerting rules file (deploy/prometheus/alerts.yml), ready to
// be written where Prometheus's rule_files points. Each call returns a fresh copy.
func AlertRules() []byte {
	return slices.Clone(alertRules)
}
