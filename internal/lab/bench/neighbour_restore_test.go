package bench

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
)

// TestFirstChange reads a journal's first change as the daemon writes one: intent, applied,
// verified; a second change's records are not mixed in.
func TestFirstChange(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	old := apply.Value{Value: "67108864/536870912"}
	recs := []apply.Record{
		{ID: 1, Time: at, Kind: apply.KindIntent, Setting: apply.KnobDirtyThresholds, Old: &old, New: "10%/20%", Rule: "writeback-stalls-wal"},
		{ID: 1, Time: at, Kind: apply.KindOutcome, Outcome: apply.Applied},
		{ID: 2, Time: at, Kind: apply.KindIntent, Setting: "wal_buffers", New: "16MB"},
		{ID: 2, Time: at, Kind: apply.KindOutcome, Outcome: apply.RolledBack},
		{ID: 1, Time: at.Add(time.Minute), Kind: apply.KindOutcome, Outcome: apply.Verified, Reason: "better: writeback_stall_seconds 40 -> 20"},
	}
	if c := firstChange(nil); c != nil {
		t.Errorf("firstChange of an empty journal = %+v", c)
	}
	c := firstChange(recs[:1])
	if c == nil || c.applied != nil || c.verdict != nil {
		t.Fatalf("after the intent alone: %+v", c)
	}
	c = firstChange(recs)
	if c == nil || c.applied == nil || c.verdict == nil || c.verdict.Outcome != apply.Verified || c.intents != 2 {
		t.Fatalf("firstChange = %+v", c)
	}
	var rr RestoreRound
	rr.fill(*c)
	if rr.ChangeID != 1 || rr.Old != "67108864/536870912" || rr.New != "10%/20%" || rr.Outcome != apply.Verified {
		t.Errorf("fill = %+v", rr)
	}
}

func TestRestoreTargetAndReport(t *testing.T) {
	good := &RestoreRound{Round: 1, Setting: apply.KnobDirtyThresholds, Old: "67108864/536870912", New: "10%/20%", Rule: "writeback-stalls-wal",
		ChangeID: 1, Intents: 1, Outcome: apply.Verified, Knobs: "67108864 0 536870912 0", RollbackOutput: "change 1: restored",
		Before: &neighbour.Run{StallSeconds: 55, P99LatencyMS: 42000}, After: &neighbour.Run{StallSeconds: 45, P99LatencyMS: 18000},
		Comparison: []apply.FigureChange{{Name: apply.FigureWritebackStall, Before: 50, After: 35, Verdict: apply.VerdictBetter}}}
	nr := &NeighbourRestore{Start: "67108864/536870912", VerifyWindowSeconds: 150, Rounds: []*RestoreRound{good}}
	if tg := restoreTarget(nr); !tg.Met || !tg.Scored {
		t.Errorf("a good pass: %+v", tg)
	}
	for name, spoil := range map[string]func(*RestoreRound){
		"two intents":         func(r *RestoreRound) { r.Intents = 2 },
		"rolled back":         func(r *RestoreRound) { r.Outcome = apply.RolledBack },
		"rollback failed":     func(r *RestoreRound) { r.RollbackExit = 3 },
		"knobs not restored":  func(r *RestoreRound) { r.Knobs = "0 10 0 20" },
		"another value":       func(r *RestoreRound) { r.New = "5%/10%" },
		"the pass had failed": func(r *RestoreRound) { r.Error = "the daemon applied nothing" },
	} {
		bad := *good
		spoil(&bad)
		if tg := restoreTarget(&NeighbourRestore{Rounds: []*RestoreRound{good, &bad}}); tg.Met {
			t.Errorf("%s: target met: %s", name, tg.Got)
		}
	}
	if tg := restoreTarget(nil); tg.Scored || tg.Met {
		t.Errorf("nothing measured: %+v", tg)
	}
	var b strings.Builder
	writeNeighbourRestore(&b, nr)
	for _, want := range []string{"55 s, 42000 ms", "1: vm.dirty_thresholds 67108864/536870912 -> 10%/20%", "writeback_stall_seconds 50.0 -> 35.0 (better)",
		"exit 0: change 1: restored", "67108864 0 536870912 0", "--apply.verify-window 150s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

func TestPairKnobs(t *testing.T) {
	for in, want := range map[string]map[string]string{
		"10%/20%":            {"dirty_background_ratio": "10", "dirty_ratio": "20"},
		"67108864/536870912": {"dirty_background_bytes": "67108864", "dirty_bytes": "536870912"},
		"67108864/20%":       {"dirty_background_bytes": "67108864", "dirty_ratio": "20"},
	} {
		got, err := pairKnobs(in)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("pairKnobs(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"10%", "x/20%", "10%/"} {
		if _, err := pairKnobs(bad); err == nil {
			t.Errorf("pairKnobs(%q) accepted it", bad)
		}
	}
}
