package apply

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// verdictCell is one row of the simulation: the change's true effect on the figure (a fall,
// lower is better), the noise of the figure over one part of a window (its standard deviation,
// relative to its level), and whether the load drifts across the two windows.
type verdictCell struct {
	effect, noise float64
	drift         bool
}

// verdictDrift is the drift's size: the figure rises by this much (relative) from the first part
// of the window before to the last part of the window after, whatever the change does.
const verdictDrift = 0.10

// verdictRates are a cell's verdicts over its seeds, and the median MDE (relative).
type verdictRates struct {
	better, worse, same float64
	mde                 float64
}

// simulateVerdicts runs compare over seeds synthetic pairs of windows of one cell: twelve parts
// a side of wal_io_seconds_per_mb around 0.1 s/MB (its floor, 2 ms/MB, is 2% of that), normal
// noise, the effect in the window after, the drift a line through both.
func simulateVerdicts(c verdictCell, seeds int) verdictRates {
	const level = 0.1
	var r verdictRates
	var mdes []float64
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(c.effect*1000+c.noise*100)+boolBit(c.drift)))
		part := func(i int, after bool) float64 {
			v := level
			if c.drift {
				v *= 1 + verdictDrift*float64(i)/float64(2*subWindows-1)
			}
			if after {
				v *= 1 - c.effect
			}
			return v * (1 + c.noise*rng.NormFloat64())
		}
		var b, a []float64
		for i := range subWindows {
			b = append(b, part(i, false))
		}
		for i := range subWindows {
			a = append(a, part(subWindows+i, true))
		}
		before := &Figures{Figures: []Figure{fig(FigureIOSecondsPerMB, 10, b...)}}
		after := &Figures{Figures: []Figure{fig(FigureIOSecondsPerMB, 10, a...)}}
		v := compare(before, after)
		switch v.changes[0].Verdict {
		case VerdictBetter:
			r.better++
		case VerdictWorse:
			r.worse++
		default:
			r.same++
		}
		if m := before.Figures[0].MDE; m != nil {
			mdes = append(mdes, *m)
		}
	}
	n := float64(seeds)
	r.better, r.worse, r.same = r.better/n, r.worse/n, r.same/n
	slices.Sort(mdes)
	r.mde = mdes[len(mdes)/2]
	return r
}

func boolBit(b bool) uint64 {
	if b {
		return 1 << 32
	}
	return 0
}

// TestVerdictRates (issue 32) measures the verdicts' error rates on seeded synthetic windows
// and holds them to the targets: with no effect and no drift, "worse" and "better" each at most
// 5%; an effect of at least twice the MDE detected at least 80% of the time. Drift is reported,
// not held: a before/after comparison cannot tell a drifting load from a change (a crossover
// trial can). The table is docs/apply.md's; PGWAL_UPDATE_DOCS=1 writes it there.
func TestVerdictRates(t *testing.T) {
	const seeds = 400
	var rows []string
	for _, drift := range []bool{false, true} {
		for _, noise := range []float64{0.05, 0.15} {
			for _, effect := range []float64{0, 0.05, 0.15, 0.30} {
				c := verdictCell{effect: effect, noise: noise, drift: drift}
				r := simulateVerdicts(c, seeds)
				d := "off"
				if drift {
					d = fmt.Sprintf("+%.0f%%", 100*verdictDrift)
				}
				rows = append(rows, fmt.Sprintf("| %.0f%% | %.0f%% | %s | %.1f%% | %.1f%% | %.1f%% | %.1f%% |",
					100*effect, 100*noise, d, 100*r.mde, 100*r.better, 100*r.worse, 100*r.same))
				switch {
				case drift:
				case effect == 0 && (r.worse > 0.05 || r.better > 0.05):
					t.Errorf("no effect, noise %.0f%%: better %.1f%%, worse %.1f%%; want each at most 5%%", 100*noise, 100*r.better, 100*r.worse)
				case effect >= 2*r.mde && r.better < 0.80:
					t.Errorf("effect %.0f%% (MDE %.1f%%), noise %.0f%%: detected %.1f%%; want at least 80%%", 100*effect, 100*r.mde, 100*noise, 100*r.better)
				case effect > 0 && r.worse > 0.025:
					t.Errorf("a gain of %.0f%%, noise %.0f%%: called worse %.1f%% of the time, more than the interval's 2.5%% a side", 100*effect, 100*noise, 100*r.worse)
				}
			}
		}
	}
	table := "| effect (fall) | noise per part | drift | MDE (median) | better | worse | same |\n|---|---|---|---|---|---|---|\n" +
		strings.Join(rows, "\n") + "\n"
	t.Logf("verdicts over %d seeds a cell, 12 parts a side:\n%s", seeds, table)
	const begin, end = "<!-- verdict-rates (TestVerdictRates) -->\n", "<!-- /verdict-rates -->"
	doc, err := os.ReadFile("../../docs/apply.md")
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("docs/apply.md has no %q ... %q block for the table", strings.TrimSpace(begin), end)
	}
	if got := string(doc[i+len(begin) : j]); got != table {
		if os.Getenv("PGWAL_UPDATE_DOCS") == "1" {
			out := string(doc[:i+len(begin)]) + table + string(doc[j:])
			if err := os.WriteFile("../../docs/apply.md", []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/apply.md's table is not what the simulation gives; PGWAL_UPDATE_DOCS=1 go test -run TestVerdictRates ./advisor/apply writes it:\n%s", table)
	}
}
