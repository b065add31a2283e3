package rules

import (
	"testing"
	"time"
)

// scripted is a rule whose outcome at each evaluation time comes from a script: 'W' a
// warning, 'C' critical, 'I' info, '.' nothing, '?' not enough data. Each character is one
// 15 s evaluation from t0(). Being a function of in.Now only, it stays pure.
func scripted(id string, immediate bool, script string) Rule {
	return Rule{
		ID: id, Title: id, Severity: Critical, Settings: []string{"s"}, Immediate: immediate,
		Eval: func(in Input) Result {
			i := int(in.Now.Sub(t0()) / (15 * time.Second))
			if i < 0 || i >= len(script) {
				return found()
			}
			switch script[i] {
			case 'W':
				return found(Finding{Severity: Warning, Setting: "s", Summary: id})
			case 'C':
				return found(Finding{Severity: Critical, Setting: "s", Summary: id})
			case 'I':
				return found(Finding{Severity: Info, Setting: "s", Summary: id})
			case '?':
				return notEnough("scripted")
			}
			return found()
		},
	}
}

// shownScript runs a tracker over a script and returns, per evaluation, the severity shown
// ('.' for none), in the same alphabet.
func shownScript(t *testing.T, r Rule, cfg Thresholds) string {
	t.Helper()
	tr := NewTracker([]Rule{r})
	out := []byte{}
	for i := 0; i < 64; i++ {
		fs := tr.Evaluate(Input{Now: t0().Add(time.Duration(i) * 15 * time.Second), Config: cfg})
		switch {
		case len(fs) == 0:
			out = append(out, '.')
		case len(fs) > 1:
			t.Fatalf("evaluation %d: %d findings for one setting", i, len(fs))
		default:
			out = append(out, map[Severity]byte{Info: 'I', Warning: 'W', Critical: 'C'}[fs[0].Severity])
		}
	}
	return string(out)
}

func TestTracker(t *testing.T) {
	cfg := DefaultThresholds()
	cfg.RaiseAfter, cfg.ClearAfter, cfg.StaleAfter = time.Minute, time.Minute, 2*time.Minute
	// With 15 s evaluations: a condition shows on its 5th consecutive evaluation (60 s after
	// the first), and a shown one clears on the 5th evaluation without it.
	tests := []struct {
		name      string
		immediate bool
		script    string
		want      string
	}{
		{name: "a warning shows only after the raise span",
			script: "WWWWWWWW", want: "....WWWW"},
		{name: "a short spike never shows",
			script: "WWW.WWW.WWW.", want: "............"},
		{name: "hysteresis: a gap shorter than the clear span keeps it",
			script: "WWWWWW..WWW", want: "....WWWWWWW"},
		{name: "clears after the clear span",
			script: "WWWWW......", want: "....WWWW..."},
		{name: "info shows at once",
			script: "II..", want: "IIII"},
		{name: "a configuration fact shows and clears at once", immediate: true,
			script: "CCC..C", want: "CCC..C"},
		{name: "not enough data neither confirms nor clears",
			script: "WWWWW??????????.", want: "....WWWWWWWW...."},
		{name: "not enough data does not break a pending episode",
			script: "WW??WWW", want: "....WWW"},
		{name: "severity changes while shown",
			script: "WWWWWCC", want: "....WCC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shownScript(t, scripted("r", tt.immediate, tt.script), cfg)[:len(tt.want)]
			if got != tt.want {
				t.Errorf("script %s\n got %s\nwant %s", tt.script, got, tt.want)
			}
		})
	}
}

func TestTrackerSeen(t *testing.T) {
	cfg := DefaultThresholds()
	tr := NewTracker([]Rule{scripted("r", false, "WWWWWWWWWWWWW.W")})
	var last []Finding
	for i := 0; i < 15; i++ {
		last = tr.Evaluate(Input{Now: t0().Add(time.Duration(i) * 15 * time.Second), Config: cfg})
		if i == 7 && len(last) != 0 {
			t.Fatalf("shown at %ds, before the 2m default raise span", i*15)
		}
		if i == 13 {
			if len(last) != 1 || !last[0].LastSeen.Equal(t0().Add(12*15*time.Second)) {
				t.Fatalf("during a gap: %+v, want the finding with LastSeen at its last sighting", last)
			}
		}
	}
	if len(last) != 1 {
		t.Fatalf("got %d findings, want 1", len(last))
	}
	f := last[0]
	if f.Rule != "r" || !f.FirstSeen.Equal(t0()) || !f.LastSeen.Equal(t0().Add(14*15*time.Second)) {
		t.Errorf("finding %s first %v last %v; want rule r, first seen at t0(), last seen now", f.Rule, f.FirstSeen, f.LastSeen)
	}
}

func TestTrackerOrder(t *testing.T) {
	rules := []Rule{scripted("b-info", false, "I"), scripted("a-crit", true, "C"), scripted("c-info", false, "I")}
	got := NewTracker(rules).Evaluate(Input{Now: t0()})
	var ids []string
	for _, f := range got {
		ids = append(ids, f.Rule)
	}
	if want := []string{"a-crit", "b-info", "c-info"}; len(ids) != 3 || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Errorf("order = %v, want %v (most severe first, then by rule)", ids, want)
	}
}

func TestRunSetsRuleAndTimes(t *testing.T) {
	out := Run([]Rule{scripted("r", false, "W")}, Input{Now: t0()})
	if len(out) != 1 || len(out[0].Findings) != 1 {
		t.Fatalf("Run = %+v", out)
	}
	f := out[0].Findings[0]
	if f.Rule != "r" || !f.FirstSeen.Equal(t0()) || !f.LastSeen.Equal(t0()) {
		t.Errorf("finding = %+v, want rule r seen at t0()", f)
	}
	if got := Findings(out); len(got) != 1 {
		t.Errorf("Findings = %v", got)
	}
}

// stateScript runs a tracker over a script and returns, per evaluation, 'p' while the finding is
// pending, its severity letter while it fires and '.' for neither. It checks every pending
// finding's times on the way: PendingSince is the episode's first evaluation, FiresAt that plus
// RaiseAfter, and a firing finding carries neither.
func stateScript(t *testing.T, r Rule, cfg Thresholds) string {
	t.Helper()
	tr := NewTracker([]Rule{r})
	out := []byte{}
	for i := 0; i < 24; i++ {
		in := Input{Now: t0().Add(time.Duration(i) * 15 * time.Second), Config: cfg}
		firing, pending := tr.ObservePending(in, Run([]Rule{r}, in))
		if len(firing)+len(pending) > 1 {
			t.Fatalf("evaluation %d: %d firing and %d pending findings for one setting", i, len(firing), len(pending))
		}
		switch {
		case len(pending) == 1:
			p := pending[0]
			if p.State != StatePending || p.PendingSince == nil || p.FiresAt == nil {
				t.Fatalf("evaluation %d: pending finding %+v lacks its state or times", i, p)
			}
			if !p.PendingSince.Equal(p.FirstSeen) || !p.FiresAt.Equal(p.FirstSeen.Add(cfg.RaiseAfter)) {
				t.Errorf("evaluation %d: pending_since %v, fires_at %v; want %v and %v", i, p.PendingSince, p.FiresAt, p.FirstSeen, p.FirstSeen.Add(cfg.RaiseAfter))
			}
			out = append(out, 'p')
		case len(firing) == 1:
			f := firing[0]
			if f.State != StateFiring || f.PendingSince != nil || f.FiresAt != nil {
				t.Fatalf("evaluation %d: firing finding %+v: want state firing without pending times", i, f)
			}
			out = append(out, map[Severity]byte{Info: 'I', Warning: 'W', Critical: 'C'}[f.Severity])
		default:
			out = append(out, '.')
		}
	}
	return string(out)
}

func TestTrackerPending(t *testing.T) {
	cfg := DefaultThresholds()
	cfg.RaiseAfter, cfg.ClearAfter, cfg.StaleAfter = time.Minute, time.Minute, 2*time.Minute
	tests := []struct {
		name      string
		immediate bool
		script    string
		want      string
	}{
		{name: "pending until the raise span, then firing",
			script: "WWWWWW", want: "ppppWW"},
		{name: "a short spike is pending, then gone",
			script: "WW..", want: "pp.."},
		{name: "a broken-off episode starts pending over",
			script: "WWW.WWWWW", want: "ppp.ppppW"},
		{name: "not enough data keeps a pending episode pending",
			script: "WW??WWW", want: "ppppWWW"},
		{name: "info is never pending",
			script: "II.", want: "III"}, // info clears after the clear span, as before
		{name: "a configuration fact is never pending", immediate: true,
			script: "CC.", want: "CC."},
		{name: "a firing finding waiting to clear stays firing",
			script: "WWWWW..", want: "ppppWWW"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := stateScript(t, scripted("r", tt.immediate, tt.script), cfg)[:len(tt.want)]
			if got != tt.want {
				t.Errorf("states %q, want %q (script %q)", got, tt.want, tt.script)
			}
		})
	}
}

// Evaluation times jitter with the sampling's duration: an evaluation due RaiseAfter after the
// first one fires even when its clock reads a little short of it.
func TestTrackerFiresOnTheDueEvaluation(t *testing.T) {
	cfg := DefaultThresholds()
	r := scripted("r", false, "WWWWWWWWWWWW")
	tr := NewTracker([]Rule{r})
	first := t0().Add(10*time.Second + 40*time.Millisecond) // the first sampling took longer
	for i := 0; i <= 8; i++ {
		now := first.Add(time.Duration(i)*15*time.Second - time.Duration(min(i, 1))*40*time.Millisecond)
		in := Input{Now: now, Config: cfg}
		firing, _ := tr.ObservePending(in, Run([]Rule{r}, in))
		if want := i == 8; (len(firing) == 1) != want {
			t.Errorf("evaluation %d at +%v after the first: firing %v, want %v", i, now.Sub(first), len(firing) == 1, want)
		}
	}
}

// Observe is ObservePending's firing half: what the advisor shows, alerts on and applies.
func TestObserveReturnsFiringOnly(t *testing.T) {
	cfg := DefaultThresholds()
	r := scripted("r", false, "WWWWWWWWWWWW")
	a, b := NewTracker([]Rule{r}), NewTracker([]Rule{r})
	for i := 0; i < 12; i++ {
		in := Input{Now: t0().Add(time.Duration(i) * 15 * time.Second), Config: cfg}
		outcomes := Run([]Rule{r}, in)
		shown := a.Observe(in, outcomes)
		firing, pending := b.ObservePending(in, outcomes)
		if len(shown) != len(firing) {
			t.Fatalf("evaluation %d: Observe shows %d findings, ObservePending fires %d", i, len(shown), len(firing))
		}
		if wantPending := i < 8; (len(pending) == 1) != wantPending {
			t.Errorf("evaluation %d: %d pending, want pending %v (RaiseAfter %v)", i, len(pending), wantPending, cfg.RaiseAfter)
		}
	}
}
