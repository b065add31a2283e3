package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
)

type staticApply struct{ st apply.Status }

func (s staticApply) Status() apply.Status { return s.st }

// TestLandingChanges (issue 32): the landing page lists the apply mode's changes with each
// judged figure's effect and its interval, marks an unconfirmed change, and escapes the journal's
// text (a reason is input).
func TestLandingChanges(t *testing.T) {
	since := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	st := apply.Status{Mode: apply.ModeOn, Waiting: "cooling down", Changes: []apply.ChangeStatus{
		{ID: 2, Setting: "vm.dirty_thresholds", Old: "67108864/536870912", New: "10%/20%", State: string(apply.Trial), Since: since, Reason: "crossover period 2 of 6: the old value <b>"},
		{ID: 1, Setting: "wal_sync_method", Old: "open_datasync", New: "fdatasync", State: apply.StateUnconfirmed, Since: since,
			Verdict: []apply.FigureChange{{Name: apply.FigureIOSecondsPerMB, Verdict: apply.VerdictSame, Effect: &apply.Effect{Rel: -0.04, RelLow: -0.12, RelHigh: 0.03, NBefore: 12, NAfter: 12}}}},
	}}
	h, err := NewHandler(&staticSource{st: healthyState()}, HandlerOptions{Apply: staticApply{st}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := get(t, h, http.MethodGet, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d", code)
	}
	for _, want := range []string{
		"<h2>Applied changes</h2>", "Apply mode: on.", "No new change now: cooling down.",
		`<tr class="change-unconfirmed">`, "wal_io_seconds_per_mb same: -4% (95% interval -12%..&#43;3%, 12 before, 12 after)",
		`<tr class="change-trial">`, "crossover period 2 of 6: the old value &lt;b&gt;",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the landing page lacks %q", want)
		}
	}
	// Without an apply status, no section.
	h, _ = NewHandler(&staticSource{st: healthyState()}, HandlerOptions{})
	if _, _, body := get(t, h, http.MethodGet, "/"); strings.Contains(body, "Applied changes") {
		t.Error("the landing page shows an apply section without an apply status")
	}
}
