package rules

// Evaluation is what one evaluation of a rule set gives its readers: the findings to show, those
// still pending, one recommendation per setting, and what each rule lacked to judge.
type Evaluation struct {
	// Findings fire: shown, alerted on, resolved and acted on. They include the resolver's
	// recommendations-conflict findings, most severe first. Never nil: JSON contracts promise
	// a list.
	Findings []Finding
	// Pending are measured findings the Tracker holds back until they have lasted RaiseAfter;
	// nothing acts on them. None without a Tracker.
	Pending []Finding
	// Recommendations are the firing findings resolved into one per setting. Never nil.
	Recommendations []Recommendation
	// NotEnoughData names, per rule ID, what the rule lacked to judge. Never nil.
	NotEnoughData map[string]string
}

// Evaluate judges in by rules once: it runs them, applies the tracker's noise control, resolves
// the firing findings into one recommendation per setting, and marks and orders what it shows.
// The daemon passes its Tracker (over the same rules), so that measured findings fire only once
// they have lasted; check passes none, since its window is itself the span of evidence, and every
// finding fires at once.
func Evaluate(rules []Rule, in Input, tracker *Tracker) Evaluation {
	outcomes := Run(rules, in)
	var ev Evaluation
	if tracker != nil {
		ev.Findings, ev.Pending = tracker.ObservePending(in, outcomes)
	} else {
		ev.Findings = Findings(outcomes)
		MarkFiring(ev.Findings)
	}
	resolved := Resolve(rules, ev.Findings)
	MarkFiring(resolved.Conflicts)
	ev.Findings = append(ev.Findings, resolved.Conflicts...)
	SortFindings(ev.Findings)
	ev.Recommendations = resolved.Recommendations
	if ev.Findings == nil {
		ev.Findings = []Finding{}
	}
	if ev.Recommendations == nil {
		ev.Recommendations = []Recommendation{}
	}
	ev.NotEnoughData = map[string]string{}
	for _, o := range outcomes {
		if o.NotEnoughData != "" {
			ev.NotEnoughData[o.Rule] = o.NotEnoughData
		}
	}
	return ev
}
