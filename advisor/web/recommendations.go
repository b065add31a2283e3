package web

import (
	"net/http"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Recommendation is the recommendation for one setting, as the advisor resolved the findings
// (rules.Resolve: one per setting, with the rules behind it and the ones it overruled), and a
// link to the deciding rule's documentation.
type Recommendation struct {
	rules.Recommendation
	DocsURL string `json:"docs_url"`
}

// RecommendationsResponse is the body of /api/v1/recommendations.
type RecommendationsResponse struct {
	Recommendations []Recommendation `json:"recommendations"`
	Evaluated       time.Time        `json:"evaluated"`
}

// recommendations serves one entry per setting; /api/v1/findings keeps every finding.
func (a api) recommendations(w http.ResponseWriter, _ *http.Request) {
	st, ok := a.ready(w)
	if !ok {
		return
	}
	resp := RecommendationsResponse{Recommendations: make([]Recommendation, 0, len(st.Recommendations)), Evaluated: st.Evaluated}
	for _, r := range st.Recommendations {
		resp.Recommendations = append(resp.Recommendations, Recommendation{Recommendation: withLists(r), DocsURL: RuleDocURL(r.Rule)})
	}
	writeJSON(w, http.StatusOK, resp)
}

// withLists makes a recommendation's evidence, because and overruled lists in JSON even when
// they are empty, so that clients iterate without a nil check.
func withLists(r rules.Recommendation) rules.Recommendation {
	if r.Evidence == nil {
		r.Evidence = []rules.Evidence{}
	}
	if r.Because == nil {
		r.Because = []rules.Support{}
	}
	if r.Overruled == nil {
		r.Overruled = []rules.Overruled{}
	}
	return r
}

// landingRec is one recommendation in the landing page's table.
type landingRec struct {
	Setting, Current, Recommended, Action, Severity string
	Because, Overruled                              []landingNote
}

func landingRecs(st advisor.State) []landingRec {
	var out []landingRec
	for _, r := range st.Recommendations {
		row := landingRec{Setting: r.Setting, Current: r.Current, Recommended: r.Recommended, Action: string(r.Action), Severity: r.Severity.String()}
		for _, b := range r.Because {
			row.Because = append(row.Because, landingNote{Rule: b.Rule, DocsURL: RuleDocURL(b.Rule), Reason: b.Summary})
		}
		for _, o := range r.Overruled {
			row.Overruled = append(row.Overruled, landingNote{Rule: o.Rule, DocsURL: RuleDocURL(o.Rule), Reason: o.Recommended + ": " + o.Reason})
		}
		out = append(out, row)
	}
	return out
}

// recommendationsTemplate is the landing page's recommendations section, one row per setting;
// html/template escapes every field by its context.
const recommendationsTemplate = `
      {{- if .Recs}}
      <h2>Recommendations</h2>
      <p>One per setting: where rules disagree, the order in docs/rules.md ("One recommendation per setting") decides.</p>
      <table class="findings recommendations">
        <thead><tr><th>setting</th><th>severity</th><th>current &rarr; recommended</th><th>action</th><th>because</th><th>overruled</th></tr></thead>
        <tbody>
        {{- range .Recs}}
          <tr class="severity-{{.Severity}}">
            <td>{{.Setting}}</td>
            <td>{{.Severity}}</td>
            <td>{{.Current}} &rarr; {{.Recommended}}</td>
            <td>{{.Action}}</td>
            <td>{{range .Because}}<a href="{{.DocsURL}}">{{.Rule}}</a> {{end}}</td>
            <td>{{range .Overruled}}<a href="{{.DocsURL}}">{{.Rule}}</a> ({{.Reason}}) {{end}}</td>
          </tr>
        {{- end}}
        </tbody>
      </table>
      {{- end}}`
