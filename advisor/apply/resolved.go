package apply

import (
	"fmt"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// resolvedFindings are what the apply mode acts on: the advisor's recommendations, one per
// setting, each as the finding of the rule that decided it. The findings themselves are not
// used: two rules may recommend different values for one setting, and only the resolver
// (rules.Resolve, docs/rules.md "One recommendation per setting") says which one stands.
func resolvedFindings(st advisor.State) []rules.Finding {
	fs := make([]rules.Finding, 0, len(st.Recommendations))
	for _, r := range st.Recommendations {
		fs = append(fs, r.Finding())
	}
	return fs
}

// withOverruled notes in a proposal the rules its recommendation overruled, so that the
// journal's intent says why their values were not chosen.
func withOverruled(p Proposal, st advisor.State) Proposal {
	if p.Note != "" {
		return p
	}
	for _, r := range st.Recommendations {
		if r.Setting != p.Finding.Setting || len(r.Overruled) == 0 {
			continue
		}
		notes := make([]string, len(r.Overruled))
		for i, o := range r.Overruled {
			notes[i] = fmt.Sprintf("%s recommended %s (overruled: %s)", o.Rule, o.Recommended, o.Reason)
		}
		p.Note = strings.Join(notes, "; ")
	}
	return p
}
