package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

func writeAdvisor(b *strings.Builder, s *ScenarioResult) {
	if s.Advisor == nil {
		return
	}
	changes := "nothing"
	if len(s.AdvisorChanges) > 0 {
		changes = settingsText(s.AdvisorChanges, nil)
	}
	fmt.Fprintf(b, "The advisor's configuration: %s changed from the start, in %d round(s)", changes, len(s.Advisor.Rounds))
	if !s.Advisor.Converged {
		b.WriteString(" (stopped at the round limit with changes still coming)")
	}
	b.WriteString(":\n\n")
	for _, r := range s.Advisor.Rounds {
		fmt.Fprintf(b, "- round %d (%.0f s watched): ", r.Round, r.WindowSeconds)
		if len(r.Findings) == 0 {
			b.WriteString("no findings")
		}
		var fs []string
		for _, f := range r.Findings {
			fs = append(fs, fmt.Sprintf("%s %s (%s)", f.Severity, f.Rule, f.change()))
		}
		b.WriteString(strings.Join(fs, "; "))
		if len(r.Applied) > 0 {
			var as []string
			for _, a := range r.Applied {
				as = append(as, a.Setting+"="+a.To)
			}
			fmt.Fprintf(b, "; applied %s", strings.Join(as, ", "))
			if r.Restarted {
				b.WriteString(" (restarted)")
			}
		}
		if len(r.Refused) > 0 {
			var why []string
			for _, x := range r.Refused {
				x, _, _ = strings.Cut(x, " (allowed:")
				why = append(why, x)
			}
			fmt.Fprintf(b, "; not applied: %s", strings.Join(why, "; "))
		}
		if r.ProbeSkipped != "" {
			fmt.Fprintf(b, "; probe skipped: %s", r.ProbeSkipped)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	var rows [][]string
	for _, r := range s.Advisor.Rounds {
		for _, p := range r.Predictions {
			c := p.Check
			rows = append(rows, []string{strconv.Itoa(r.Round - 1), p.Setting, p.Rule, c.Name + " (" + c.Unit + ")", num(c.Current), num(c.Predicted), num(c.Measured),
				fmt.Sprintf("%+.0f%%", 100*c.Error)})
		}
	}
	if len(rows) > 0 {
		b.WriteString("Predicted effect, checked: each applied change's predicted figure (the finding's `.predicted`) against the same figure " +
			"measured over the next round's window with the change in force (rules.MeasurePredicted; error as rules.CheckPrediction, " +
			"relative to the larger of the prediction and the predicted change). Changes applied in one round move one figure together " +
			"while each prediction is for its own change alone, so they are also checked together (\"together\": the product of their " +
			"predicted factors), and the target scores that.\n\n")
		table(b, []string{"applied in round", "setting", "rule", "figure", "before", "predicted", "measured", "error"}, rows)
		b.WriteString("\n")
	}
}

// predictionTarget: the prediction error of the applied changes within 30%.
func predictionTarget(s *ScenarioResult) Target {
	t := Target{Name: "prediction error of the applied changes within 30%", Want: "|error| <= 30% for every checked prediction"}
	if s.Advisor == nil {
		t.Got = "not measured"
		return t
	}
	var got []string
	t.Met = true
	for _, r := range s.Advisor.Rounds {
		// Changes applied together are scored together: one figure measured both.
		together := map[string]bool{}
		for _, p := range r.Predictions {
			if p.Joint {
				for _, set := range strings.Split(p.Setting, " + ") {
					together[set] = true
				}
			}
		}
		for _, p := range r.Predictions {
			if !p.Joint && together[p.Setting] {
				continue
			}
			t.Scored = true
			t.Met = t.Met && math.Abs(p.Check.Error) <= 0.3
			got = append(got, fmt.Sprintf("%s %+.0f%%", p.Setting, 100*p.Check.Error))
		}
	}
	if !t.Scored {
		t.Got = "no applied change's prediction could be measured"
		return t
	}
	t.Got = strings.Join(got, ", ")
	return t
}

// writeTiming is seed 001's timing lab: when the daemon showed each recommendation pending and
// firing, and what check said when started into the statement.
func writeTiming(b *strings.Builder, tm *Timing) {
	state := "ran to its end"
	if !tm.Completed {
		state = "was cut by the lab at the end of its watch"
	}
	fmt.Fprintf(b, "Timing lab: the daemon (`pgwal-advisor run`, its defaults: 15 s snapshots, RaiseAfter %.0f s, probing on) ran for %.0f s, "+
		"then one INSERT of %d rows started on the starting configuration; it took %.1f s and %s. Seconds from the statement's start to the "+
		"first time /api/v1/findings showed the recommendation:\n\n", tm.RaiseAfterSeconds, tm.HeadStartSeconds, tm.Rows, tm.StatementSeconds, state)
	var rows [][]string
	for _, s := range tm.Seen {
		rows = append(rows, []string{s.Setting, s.Rule, s.Recommended, secondsOrNever(s.PendingSeconds), secondsOrNever(s.FiringSeconds)})
	}
	if len(rows) == 0 {
		b.WriteString("(the daemon recommended nothing)\n\n")
	} else {
		table(b, []string{"setting", "rule (first)", "recommended", "pending", "firing"}, rows)
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "`pgwal-advisor check --window %.0fs`, started %.0f s into the statement, exited %d", tm.CheckWindowSeconds, tm.CheckStartSeconds, tm.CheckExit)
	if tm.CheckError != "" {
		fmt.Fprintf(b, " and failed: %s.\n\n", tm.CheckError)
		return
	}
	keys := slices.Sorted(maps.Keys(tm.CheckRecommends))
	var recs []string
	for _, k := range keys {
		recs = append(recs, k+"="+tm.CheckRecommends[k])
	}
	if len(recs) == 0 {
		b.WriteString(" recommending nothing.\n\n")
		return
	}
	fmt.Fprintf(b, " recommending %s.\n\n", strings.Join(recs, ", "))
}
