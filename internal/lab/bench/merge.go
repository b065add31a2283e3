package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// RunInfo is one run of the suite that a merged report holds scenarios of.
type RunInfo struct {
	Mode              string    `json:"mode"`
	Started           time.Time `json:"started"`
	DurationSeconds   float64   `json:"duration_seconds"`
	Command           string    `json:"command,omitempty"`
	Scenarios         []string  `json:"scenarios"`
	LoadAverageBefore string    `json:"load_average_before,omitempty"`
	LoadAverageAfter  string    `json:"load_average_after,omitempty"`
}

// ReadJSON reads a report WriteJSON wrote.
func ReadJSON(r io.Reader) (*Report, error) {
	var rep Report
	dec := json.NewDecoder(r)
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("read benchmark report: %w", err)
	}
	if rep.Started.IsZero() || len(rep.Scenarios) == 0 {
		return nil, fmt.Errorf("read benchmark report: no start time or no scenarios: not a report of pgwal-lab bench --format json")
	}
	return &rep, nil
}

// MergeReports joins reports of separate runs (the suite split in parts, so that each part runs
// on a quiet machine) into one, in the suite's scenario order. A scenario in more than one
// report is an error: which figures stand must be the operator's choice, not the order of
// the arguments. The merged report lists its runs; its machine is the first's, and the
// reports must come from one machine and one PostgreSQL.
func MergeReports(reps ...*Report) (*Report, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("merge benchmark reports: none given")
	}
	out := &Report{Mode: reps[0].Mode, Started: reps[0].Started, Machine: reps[0].Machine, StaticTuner: reps[0].StaticTuner}
	seen := map[string]bool{}
	for _, rep := range reps {
		if rep.Machine.CPUs != out.Machine.CPUs || rep.Machine.MemoryBytes != out.Machine.MemoryBytes || rep.Machine.PostgreSQL != out.Machine.PostgreSQL {
			return nil, fmt.Errorf("merge benchmark reports: the run of %s was on another machine or PostgreSQL (%d CPUs, %d bytes, %s)",
				rep.Started.UTC().Format(time.RFC3339), rep.Machine.CPUs, rep.Machine.MemoryBytes, rep.Machine.PostgreSQL)
		}
		info := RunInfo{Mode: rep.Mode, Started: rep.Started, DurationSeconds: rep.DurationSeconds, Command: rep.Command,
			LoadAverageBefore: rep.Machine.LoadAverageBefore, LoadAverageAfter: rep.Machine.LoadAverageAfter}
		if len(rep.Runs) > 0 {
			return nil, fmt.Errorf("merge benchmark reports: the report of %s is itself merged: merge the runs' own reports", rep.Started.UTC().Format(time.RFC3339))
		}
		for _, s := range rep.Scenarios {
			if seen[s.ID] {
				return nil, fmt.Errorf("merge benchmark reports: scenario %s is in more than one report: keep one", s.ID)
			}
			seen[s.ID] = true
			info.Scenarios = append(info.Scenarios, s.ID)
			out.Scenarios = append(out.Scenarios, s)
		}
		if rep.Mode != out.Mode {
			out.Mode = "mixed"
		}
		if rep.Started.Before(out.Started) {
			out.Started = rep.Started
		}
		out.DurationSeconds += rep.DurationSeconds
		out.Runs = append(out.Runs, info)
	}
	slices.SortStableFunc(out.Scenarios, func(a, b *ScenarioResult) int {
		return slices.Index(ScenarioIDs(), a.ID) - slices.Index(ScenarioIDs(), b.ID)
	})
	slices.SortStableFunc(out.Runs, func(a, b RunInfo) int { return a.Started.Compare(b.Started) })
	return out, nil
}
