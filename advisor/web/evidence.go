package web

import (
	"strconv"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// landingEvidence is what a finding's row shows of its evidence: the figures the rule judged,
// and a link to the chart that draws them (Anchor is empty when no chart does).
type landingEvidence struct {
	Anchor string
	Items  []string
}

func evidenceOf(f rules.Finding) landingEvidence {
	e := landingEvidence{Anchor: evidenceAnchor(f.Rule)}
	for _, ev := range f.Evidence {
		item := ev.Name + " = " + strconv.FormatFloat(ev.Value, 'g', 6, 64)
		if ev.Unit != "" {
			item += " " + ev.Unit
		}
		e.Items = append(e.Items, item)
	}
	return e
}

// evidenceTemplate is the evidence cell of a findings row; html/template escapes each item.
const evidenceTemplate = `
{{- define "evidence"}}
{{- with .Items}}<ul class="evidence">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{- with .Anchor}}<a class="evidence-link" href="#{{.}}">see the chart</a>{{end}}
{{- end}}`
