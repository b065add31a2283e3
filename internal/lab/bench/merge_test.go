package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestMergeReports(t *testing.T) {
	m := Machine{CPUs: 2, MemoryBytes: 1 << 34, PostgreSQL: "postgres (PostgreSQL) 15.18"}
	t0 := time.Date(2026, 12, 4, 1, 0, 0, 0, time.UTC)
	a := &Report{Mode: "full", Started: t0.Add(time.Hour), DurationSeconds: 60, Command: "pgwal-lab bench --scenario neighbour", Machine: m,
		Scenarios: []*ScenarioResult{{ID: Neighbour, Title: "N"}}}
	b := &Report{Mode: "full", Started: t0, DurationSeconds: 120, Command: "pgwal-lab bench --scenario seed003,seed000", Machine: m,
		Scenarios: []*ScenarioResult{{ID: Seed003, Title: "S3"}, {ID: Seed000, Title: "S0"}}}
	rep, err := MergeReports(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range rep.Scenarios {
		ids = append(ids, s.ID)
	}
	if got := strings.Join(ids, ","); got != "seed000,seed003,neighbour" {
		t.Errorf("scenarios %s, want the suite's order seed000,seed003,neighbour", got)
	}
	if !rep.Started.Equal(t0) || rep.DurationSeconds != 180 || len(rep.Runs) != 2 || rep.Runs[0].Command != b.Command {
		t.Errorf("merged: started %v, %v s, runs %+v", rep.Started, rep.DurationSeconds, rep.Runs)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Measured in parts", "seed003, seed000: measured 2026-12-04 01:00 UTC", "neighbour: measured 2026-12-04 02:00 UTC"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}

	// The same scenario twice, another machine, a merged report: refused, naming why.
	for name, tc := range map[string]struct {
		reps []*Report
		want string
	}{
		"twice":   {[]*Report{a, a}, "scenario neighbour is in more than one report"},
		"machine": {[]*Report{b, {Started: t0, Machine: Machine{CPUs: 8}, Scenarios: []*ScenarioResult{{ID: Seed001}}}}, "another machine"},
		"merged":  {[]*Report{rep}, "is itself merged"},
		"nothing": {nil, "none given"},
	} {
		if _, err := MergeReports(tc.reps...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
	}
}

func TestReadJSON(t *testing.T) {
	rep := &Report{Mode: "full", Started: time.Now(), Scenarios: []*ScenarioResult{{ID: Seed001, Commit: &CommitGrid{}}}}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(&js)
	if err != nil || len(got.Scenarios) != 1 || got.Scenarios[0].Commit == nil {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{"", "{}", `{"started": "2026-12-04T00:00:00Z", "scenarios": []}`, "[1,2]", `{"started": 5}`} {
		if _, err := ReadJSON(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadJSON(%q): no error", bad)
		}
	}
}
