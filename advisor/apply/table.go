package apply

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// WritePlan prints a plan for people: the changes as a diff (setting: current -> recommended,
// action, rule, why), then what is not applied and why, then what happened or what to run.
// applied says whether ApplyPlan ran; journal is named in the way back.
func WritePlan(w io.Writer, plan []Proposal, applied bool, journal string) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	var allowed, refused, skipped []Proposal
	for _, p := range plan {
		switch {
		case p.Refused != "":
			refused = append(refused, p)
		case p.Skipped != "" || p.Wait != "":
			skipped = append(skipped, p)
		default:
			allowed = append(allowed, p)
		}
	}
	diff := func(p Proposal) string {
		cur := p.Finding.Current
		if p.Live != nil {
			cur = p.Live.Value
		}
		if cur == "" && p.Finding.Recommended == "" {
			return "-"
		}
		return cur + " -> " + p.Finding.Recommended
	}
	fmt.Fprintf(tw, "Changes\n")
	if len(allowed) == 0 {
		fmt.Fprintf(tw, "  none: no recommendation is both safe and allowed to apply\n")
	}
	for _, p := range allowed {
		f := p.Finding
		fmt.Fprintf(tw, "  %s:\t%s\t%s\t%s\n", f.Setting, diff(p), f.Action, f.Rule)
		fmt.Fprintf(tw, "  \t%s\n", f.Summary)
		if p.Note != "" {
			fmt.Fprintf(tw, "  \t%s\n", p.Note)
		}
		if f.Action == rules.ActionRestart {
			fmt.Fprintf(tw, "  \ttakes effect when PostgreSQL is restarted; pgwal-advisor never restarts it\n")
		}
		if applied {
			switch {
			case p.Error != "":
				fmt.Fprintf(tw, "  \tFAILED (change %d): %s\n", p.ID, p.Error)
			case p.Outcome == PendingRestart:
				fmt.Fprintf(tw, "  \tchange %d: written, pending restart\n", p.ID)
			default:
				fmt.Fprintf(tw, "  \tchange %d: %s, the running value is %s\n", p.ID, p.Outcome, p.Finding.Recommended)
			}
		}
	}
	if len(refused) > 0 {
		fmt.Fprintf(tw, "\nNot applied\n")
		for _, p := range refused {
			f := p.Finding
			fmt.Fprintf(tw, "  %s:\t%s\t%s\t%s\n", f.Setting, diff(p), f.Action, f.Rule)
			fmt.Fprintf(tw, "  \t%s\n", p.Refused)
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(tw, "\nNothing to do\n")
		for _, p := range skipped {
			fmt.Fprintf(tw, "  %s:\t%s\n", p.Finding.Setting, p.Skipped+p.Wait)
		}
	}
	fmt.Fprintln(tw)
	switch {
	case len(allowed) == 0:
		fmt.Fprintf(tw, "Nothing changed.\n")
	case !applied:
		fmt.Fprintf(tw, "Nothing changed: run with --yes to apply the %d change(s) above.\n", len(allowed))
	default:
		fmt.Fprintf(tw, "Journaled in %s. Roll back with: pgwal-advisor rollback --journal %s --id ID (or --all)\n", journal, journal)
	}
	return tw.Flush()
}

// WriteRollback prints what a rollback did.
func WriteRollback(w io.Writer, results []RollbackResult) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if len(results) == 0 {
		fmt.Fprintf(tw, "Nothing to roll back: no change in the journal is in effect.\n")
	}
	for _, r := range results {
		switch {
		case r.Refused != "":
			fmt.Fprintf(tw, "change %d\t%s\tREFUSED: %s\n", r.ID, r.Setting, r.Refused)
		case r.Error != "":
			fmt.Fprintf(tw, "change %d\t%s\tFAILED: %s\n", r.ID, r.Setting, r.Error)
		case r.Skipped != "":
			fmt.Fprintf(tw, "change %d\t%s\t%s\n", r.ID, r.Setting, r.Skipped)
		case r.PendingRestart:
			fmt.Fprintf(tw, "change %d\t%s\t%s -> %s, pending restart: PostgreSQL runs %s until it is restarted\n", r.ID, r.Setting, r.From, r.Restored, r.From)
		default:
			fmt.Fprintf(tw, "change %d\t%s\t%s -> %s\n", r.ID, r.Setting, r.From, r.Restored)
		}
	}
	return tw.Flush()
}
