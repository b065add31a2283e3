package web

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
)

// landingChangesShown bounds the changes the landing page lists (the journal has them all).
const landingChangesShown = 10

// landingApply is the landing page's section on the apply mode: its mode, why it waits, and the
// latest changes with their verdicts' intervals.
type landingApply struct {
	Mode, Reason, Waiting string
	Changes               []landingChange
	More                  int
}

// landingChange is one change of the journal as the landing page shows it.
type landingChange struct {
	ID                        int
	Setting, Old, New, State  string
	Since, Reason             string
	Verdict                   []string
	Unconfirmed, InTrial, Bad bool
}

func landingChanges(st apply.Status) *landingApply {
	v := &landingApply{Mode: string(st.Mode), Reason: st.Reason, Waiting: st.Waiting}
	for i, c := range st.Changes {
		if i == landingChangesShown {
			v.More = len(st.Changes) - i
			break
		}
		lc := landingChange{ID: c.ID, Setting: c.Setting, Old: c.Old, New: c.New, State: c.State, Reason: c.Reason,
			Since: c.Since.UTC().Format(time.RFC3339), Unconfirmed: c.State == apply.StateUnconfirmed, InTrial: c.State == string(apply.Trial),
			Bad: c.State == string(apply.RolledBack) || c.State == string(apply.Rejected) || c.State == string(apply.Failed) || c.State == string(apply.UndoFailed)}
		for _, f := range c.Verdict {
			if f.Effect != nil {
				lc.Verdict = append(lc.Verdict, fmt.Sprintf("%s %s: %s", f.Name, f.Verdict, f.Effect))
			}
		}
		v.Changes = append(v.Changes, lc)
	}
	return v
}

// changesTemplate is the landing page's apply section; html/template escapes every field.
const changesTemplate = `
      <h2>Applied changes</h2>
      <p>Apply mode: {{.Mode}}{{with .Reason}} ({{.}}){{end}}.{{with .Waiting}} No new change now: {{.}}.{{end}}</p>
      {{- if .Changes}}
      <table class="findings changes">
        <thead><tr><th>id</th><th>setting</th><th>old &rarr; new</th><th>state</th><th>since</th><th>effect (95% interval)</th></tr></thead>
        <tbody>
        {{- range .Changes}}
          <tr class="{{if .Bad}}change-bad{{else if .Unconfirmed}}change-unconfirmed{{else if .InTrial}}change-trial{{end}}">
            <td>{{.ID}}</td>
            <td>{{.Setting}}</td>
            <td>{{.Old}} &rarr; {{.New}}</td>
            <td>{{.State}}</td>
            <td>{{.Since}}</td>
            <td>{{if .Verdict}}{{range $i, $v := .Verdict}}{{if $i}}<br>{{end}}{{$v}}{{end}}{{else}}{{.Reason}}{{end}}</td>
          </tr>
        {{- end}}
        </tbody>
      </table>
      {{- with .More}}<p>{{.}} older changes are in the journal.</p>{{end}}
      {{- else}}
      <p>No change in the journal.</p>
      {{- end}}
`

// changesCSS marks a change rolled back or failed, unconfirmed, or in a crossover trial.
var changesCSS = strings.TrimSpace(`
tr.change-bad td:nth-child(4) { color: #b00020; font-weight: bold; }
tr.change-unconfirmed td:nth-child(4) { color: #b26a00; }
tr.change-trial td:nth-child(4) { font-style: italic; }
`) + "\n"
