package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	toolkit "github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// RulesDocURL is where each rule is explained; a rule ID is an anchor on that page.
const RulesDocURL = "https://github.com/pgwal-advisor/pgwal-advisor/blob/main/docs/rules.md"

// RuleDocURL returns the link to a rule's section of docs/rules.md.
func RuleDocURL(rule string) string {
	return RulesDocURL + "#" + url.PathEscape(rule)
}

// HandlerOptions configure NewHandler.
type HandlerOptions struct {
	// Version and GoVersion label pgwal_advisor_build_info and show on the landing page.
	Version   string
	GoVersion string
	// Logger receives errors of the metrics handler; nil logs nothing.
	Logger *zap.Logger
	// Collectors are served on /metrics beside the advisor's, the Go runtime's and the
	// process's (the apply mode's apply.NewMetrics).
	Collectors []prometheus.Collector
	// Apply is the apply mode's status, shown on the landing page; nil shows nothing.
	Apply apply.StatusSource
}

// notReadyReason is what the API and /readyz say before the first snapshot.
const notReadyReason = "no snapshot yet: the first collection has not finished (see the daemon's log if this lasts longer than --interval)"

// NewHandler returns the daemon's HTTP handler: /metrics, /api/v1/findings,
// /api/v1/recommendations, /api/v1/snapshot, /healthz, /readyz and the landing page at /.
// Every endpoint is read-only: anything but GET and HEAD is refused with 405.
func NewHandler(src StateSource, opts HandlerOptions) (http.Handler, error) {
	logger := opts.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	reg := prometheus.NewRegistry()
	for _, c := range append([]prometheus.Collector{
		NewCollector(src, opts.Version, opts.GoVersion),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, opts.Collectors...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	metrics := promhttp.InstrumentMetricHandler(reg, newScrapeCache(src, reg, logger.With(zap.String("component", "metrics"))))

	tmpl, err := template.New("findings").Parse(findingsTemplate + evidenceTemplate)
	if err != nil {
		return nil, fmt.Errorf("parse the landing page's findings template: %w", err)
	}
	if _, err := tmpl.New("recommendations").Parse(recommendationsTemplate); err != nil {
		return nil, fmt.Errorf("parse the landing page's recommendations template: %w", err)
	}
	if _, err := tmpl.New("changes").Parse(changesTemplate); err != nil {
		return nil, fmt.Errorf("parse the landing page's changes template: %w", err)
	}
	a := api{src: src, apply: opts.Apply, version: opts.Version, findingsTmpl: tmpl}
	mux := http.NewServeMux()
	mux.Handle("/metrics", readOnly(metrics))
	mux.Handle("/api/v1/findings", readOnly(http.HandlerFunc(a.findings)))
	mux.Handle("/api/v1/recommendations", readOnly(http.HandlerFunc(a.recommendations)))
	mux.Handle("/api/v1/snapshot", readOnly(http.HandlerFunc(a.snapshot)))
	mux.Handle("/api/v1/charts", readOnly(http.HandlerFunc(a.charts)))
	mux.Handle("/favicon.ico", readOnly(http.HandlerFunc(noIcon)))
	mux.Handle("/healthz", readOnly(http.HandlerFunc(a.healthz)))
	mux.Handle("/readyz", readOnly(http.HandlerFunc(a.readyz)))
	mux.Handle("/{$}", readOnly(http.HandlerFunc(a.landing)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %q: see / for the list", r.URL.Path))
	})
	return mux, nil
}

// readOnly refuses methods that could change something: this endpoints only read.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: the endpoints are read-only (GET, HEAD)", r.Method))
			return
		}
		h.ServeHTTP(w, r)
	})
}

type api struct {
	src          StateSource
	apply        apply.StatusSource
	version      string
	findingsTmpl *template.Template
}

// Finding is a finding as the API shows it: the rule's finding (the same fields as
// `check --format json`) and a link to the rule's documentation.
type Finding struct {
	rules.Finding
	DocsURL string `json:"docs_url"`
}

// ProbeStatus says whether sync probing runs and, when it does not, why.
type ProbeStatus struct {
	Enabled        bool   `json:"enabled"`
	DisabledReason string `json:"disabled_reason,omitempty"`
}

// FindingsResponse is the body of /api/v1/findings.
type FindingsResponse struct {
	Findings  []Finding `json:"findings"`
	Evaluated time.Time `json:"evaluated"`
	// NotEnoughData names, per rule ID, what the rule still lacks to judge.
	NotEnoughData map[string]string `json:"not_enough_data"`
	Probe         ProbeStatus       `json:"probe"`
}

// ErrorResponse is the body of every error.
type ErrorResponse struct {
	Error string `json:"error"`
}

// StatusResponse is the body of /healthz and /readyz.
type StatusResponse struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Target is, on /readyz, whether PostgreSQL could be used at the latest snapshot: ok,
	// unreachable, unauthenticated or missing_privileges.
	Target string `json:"target,omitempty"`
}

// ready returns the state, or answers 503 before the first snapshot: "no findings yet" must not
// read as "nothing to change".
func (a api) ready(w http.ResponseWriter) (advisor.State, bool) {
	st := a.src.State()
	if st.Snapshot == nil {
		writeError(w, http.StatusServiceUnavailable, notReadyReason)
		return st, false
	}
	return st, true
}

func (a api) findings(w http.ResponseWriter, _ *http.Request) {
	st, ok := a.ready(w)
	if !ok {
		return
	}
	resp := FindingsResponse{
		Findings:      make([]Finding, 0, len(st.Findings)+len(st.Pending)),
		Evaluated:     st.Evaluated,
		NotEnoughData: st.NotEnoughData,
		Probe:         probeStatus(st),
	}
	if resp.NotEnoughData == nil {
		resp.NotEnoughData = map[string]string{}
	}
	// Firing findings first, then the pending ones (state, pending_since, fires_at): during a
	// slow load the operator sees what is ripening instead of "all clear".
	for _, f := range slices.Concat(st.Findings, st.Pending) {
		resp.Findings = append(resp.Findings, Finding{Finding: withEvidence(f), DocsURL: RuleDocURL(f.Rule)})
	}
	writeJSON(w, http.StatusOK, resp)
}

// withEvidence makes a finding's evidence a list in JSON even when the rule gave none.
func withEvidence(f rules.Finding) rules.Finding {
	if f.Evidence == nil {
		f.Evidence = []rules.Evidence{}
	}
	return f
}

func probeStatus(st advisor.State) ProbeStatus {
	p := ProbeStatus{Enabled: st.ProbeEnabled}
	if !st.ProbeEnabled {
		p.DisabledReason = st.ProbeDisabledReason
	}
	return p
}

func (a api) snapshot(w http.ResponseWriter, _ *http.Request) {
	st, ok := a.ready(w)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, st.Snapshot)
}

// healthz answers while the process serves: a liveness check, not a judgement of PostgreSQL
// (pgwal_advisor_up says that).
func (a api) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, StatusResponse{Status: "ok"})
}

func (a api) readyz(w http.ResponseWriter, _ *http.Request) {
	if a.src.State().Snapshot == nil {
		writeJSON(w, http.StatusServiceUnavailable, StatusResponse{Status: "not ready", Reason: notReadyReason})
		return
	}
	// Findings judged without the server's statistics would read as "all clear": not ready.
	if target, reason := a.src.State().Target(); target != collector.TargetOK && target != "" {
		writeJSON(w, http.StatusServiceUnavailable, StatusResponse{Status: "not ready", Target: target, Reason: reason})
		return
	}
	writeJSON(w, http.StatusOK, StatusResponse{Status: "ready", Target: collector.TargetOK})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	// Encode first: a value that cannot be encoded becomes a 500, not half a body.
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorResponse{Error: fmt.Sprintf("encode response: %v", err)})
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, ErrorResponse{Error: msg})
}

// landing serves exporter-toolkit's landing page with the current findings in it. The
// toolkit renders its page once, with text/template; the findings change at every
// evaluation, so the page is rendered per request (it is not on the scrape path), and the
// findings table is rendered with html/template, which escapes every value a rule or the server
// put there, before the toolkit embeds it as ExtraHTML.
func (a api) landing(w http.ResponseWriter, r *http.Request) {
	st := a.src.State()
	var extra bytes.Buffer
	view := landingData(st)
	if a.apply != nil {
		view.Changes = landingChanges(a.apply.Status())
	}
	if err := a.findingsTmpl.Execute(&extra, view); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("render findings: %v", err))
		return
	}
	extra.WriteString(chartsHTML(chartsOf(st)))
	description := "PostgreSQL WAL and write-back settings advisor"
	if target, _ := st.Target(); target != collector.TargetOK && target != "" {
		// The toolkit does not escape; the status is one of four constants, escaped anyway.
		description = html.EscapeString("PostgreSQL " + strings.ReplaceAll(target, "_", " ") + ": the findings below are not a judgement of the server")
	}
	page, err := toolkit.NewLandingPage(toolkit.LandingConfig{
		Name:        "pgwal-advisor",
		Description: description,
		// The toolkit's template does not escape; the version comes from the build, but
		// escaping costs nothing.
		Version: html.EscapeString(a.version),
		Links: []toolkit.LandingLinks{
			{Address: "metrics", Text: "Metrics", Description: "Prometheus metrics (docs/metrics.md)"},
			{Address: "api/v1/findings", Text: "Findings", Description: "current findings with their evidence (JSON)"},
			{Address: "api/v1/recommendations", Text: "Recommendations", Description: "recommended changes (JSON)"},
			{Address: "api/v1/snapshot", Text: "Snapshot", Description: "the latest raw snapshot (JSON)"},
			{Address: "api/v1/charts", Text: "Charts", Description: "the series the charts below draw (JSON)"},
			{Address: "readyz", Text: "Readiness", Description: "ready once a snapshot has read PostgreSQL with the privileges the advisor needs"},
			{Address: "healthz", Text: "Health", Description: "the process serves"},
		},
		ExtraHTML: extra.String(),
		ExtraCSS:  landingCSS + chartsCSS + changesCSS,
		// No /debug/pprof is served: do not link to it.
		Profiling: "false",
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("render landing page: %v", err))
		return
	}
	page.ServeHTTP(w, r)
}

// landingRow is one finding in the landing page's table.
type landingRow struct {
	Rule, DocsURL, Severity, Setting, Current, Recommended, Action, Summary string
	// FiresAt is set on a pending finding: when it fires if its condition keeps holding.
	FiresAt string

	// Evidence links the row to the chart that shows what the rule saw.
	Evidence landingEvidence
}

type landingView struct {
	Ready bool
	// Target and TargetReason say, unless PostgreSQL could be used, what is wrong.
	Target, TargetReason string
	Evaluated            string
	Rows                 []landingRow
	Recs                 []landingRec
	NotEnoughData        []landingNote
	Probe                ProbeStatus
	// HAManager is the HA manager that runs the server; nil when PostgreSQL was not read.
	HAManager *collector.HAManager
	// Changes is the apply mode's section; nil when the daemon serves no apply status.
	Changes *landingApply
}

type landingNote struct{ Rule, DocsURL, Reason string }

func landingData(st advisor.State) landingView {
	v := landingView{Ready: st.Snapshot != nil, Probe: probeStatus(st)}
	if st.Snapshot != nil && st.Snapshot.Postgres != nil {
		v.HAManager = st.Snapshot.Postgres.HAManager
	}
	if target, reason := st.Target(); target != collector.TargetOK {
		v.Target, v.TargetReason = target, reason
	}
	if !st.Evaluated.IsZero() {
		v.Evaluated = st.Evaluated.UTC().Format(time.RFC3339)
	}
	for _, f := range slices.Concat(st.Findings, st.Pending) {
		row := landingRow{
			Rule: f.Rule, DocsURL: RuleDocURL(f.Rule), Severity: f.Severity.String(), Setting: f.Setting,
			Current: f.Current, Recommended: f.Recommended, Action: string(f.Action), Summary: f.Summary,
			Evidence: evidenceOf(f),
		}
		if f.State == rules.StatePending && f.FiresAt != nil {
			row.FiresAt = f.FiresAt.UTC().Format(time.RFC3339)
		}
		v.Rows = append(v.Rows, row)
	}
	v.Recs = landingRecs(st)
	for _, rule := range slices.Sorted(maps.Keys(st.NotEnoughData)) {
		v.NotEnoughData = append(v.NotEnoughData, landingNote{Rule: rule, DocsURL: RuleDocURL(rule), Reason: st.NotEnoughData[rule]})
	}
	return v
}

// findingsTemplate is the landing page's findings section; html/template escapes every field by
// its context (text, attribute, URL).
const findingsTemplate = `
      {{- if .Target}}
      <p class="target-down">PostgreSQL {{.Target}}: {{.TargetReason}}. Until this is fixed the findings below do not judge the server.</p>
      {{- end}}
      <h2>Findings</h2>
      {{- if not .Ready}}
      <p>No snapshot yet: the first collection has not finished.</p>
      {{- else}}
      <p>Evaluated {{.Evaluated}}.</p>
      {{- if .Rows}}
      <table class="findings">
        <thead><tr><th>rule</th><th>severity</th><th>setting</th><th>current &rarr; recommended</th><th>action</th><th>summary</th><th>evidence</th></tr></thead>
        <tbody>
        {{- range .Rows}}
          <tr class="severity-{{.Severity}}{{if .FiresAt}} pending{{end}}">
            <td><a href="{{.DocsURL}}">{{.Rule}}</a></td>
            <td>{{.Severity}}{{with .FiresAt}}<br><span class="pending">pending: fires at {{.}} if it still holds</span>{{end}}</td>
            <td>{{.Setting}}</td>
            <td>{{if .Recommended}}{{.Current}} &rarr; {{.Recommended}}{{else}}{{.Current}}{{end}}</td>
            <td>{{.Action}}</td>
            <td>{{.Summary}}</td>
            <td>{{template "evidence" .Evidence}}</td>
          </tr>
        {{- end}}
        </tbody>
      </table>
      {{- else if .Target}}
      <p>No findings, but PostgreSQL is {{.Target}}: nothing could be judged.</p>
      {{- else}}
      <p>No findings: nothing to change.</p>
      {{- end}}
      {{- template "recommendations" .}}
      {{- if .NotEnoughData}}
      <details>
        <summary>Rules still gathering data ({{len .NotEnoughData}})</summary>
        <ul>
        {{- range .NotEnoughData}}
          <li><a href="{{.DocsURL}}">{{.Rule}}</a>: {{.Reason}}</li>
        {{- end}}
        </ul>
      </details>
      {{- end}}
      {{- end}}
      <p>Sync probing: {{if .Probe.Enabled}}on{{else}}off{{with .Probe.DisabledReason}} ({{.}}){{end}}{{end}}.</p>
      {{- with .HAManager}}
      <p>HA manager: {{.Name}}{{with .Cluster}}, cluster {{.}}{{end}}{{with .Evidence}} ({{.}}){{end}}.</p>
      {{- end}}
      {{- with .Changes}}{{template "changes" .}}{{end}}
`

const landingCSS = `
p.target-down { background-color: #fde8e8; border: 2px solid #b00020; padding: 0.6rem; font-weight: bold; }
table.findings { border-collapse: collapse; margin-bottom: 1rem; }
table.findings th, table.findings td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
table.findings th { background-color: #f4f4f4; }
tr.severity-critical td:nth-child(2) { color: #b00020; font-weight: bold; }
tr.severity-warning td:nth-child(2) { color: #b26a00; font-weight: bold; }
tr.pending td { color: #666; font-style: italic; }
span.pending { font-weight: normal; }
`
