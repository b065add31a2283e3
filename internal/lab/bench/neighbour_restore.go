package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// NeighbourRestore is the neighbour scenario started from tuned's lowered thresholds
// (64MB/512MB) with the daemon in apply mode, as an operator runs it: what it recommended, the
// one change it made, the stall before and after the change as the lab and the daemon
// measured them, the verification's verdict, and `pgwal-advisor rollback`.
type NeighbourRestore struct {
	// Start is vm.dirty_thresholds at the start; VerifyWindowSeconds the daemon's
	// --apply.verify-window.
	Start               string          `json:"start"`
	VerifyWindowSeconds float64         `json:"verify_window_seconds"`
	Rounds              []*RestoreRound `json:"rounds"`
}

// RestoreRound is one pass: a run at the start, the daemon's change, a run after it, its
// verdict and the rollback.
type RestoreRound struct {
	Round int `json:"round"`
	// Before and After are the lab's runs: the one the daemon saw stall, and the one in its
	// verification window.
	Before *neighbour.Run `json:"before,omitempty"`
	After  *neighbour.Run `json:"after,omitempty"`
	// The change the daemon made: its journal id, rule, old and new value, and when (seconds
	// after the first run began).
	ChangeID     int     `json:"change_id,omitempty"`
	Setting      string  `json:"setting,omitempty"`
	Rule         string  `json:"rule,omitempty"`
	Old          string  `json:"old,omitempty"`
	New          string  `json:"new,omitempty"`
	AppliedAfter float64 `json:"applied_after_seconds,omitempty"`
	// Intents counts the journal's intent records: one change is one record.
	Intents int `json:"intents"`
	// Outcome is the verification's (verified, rolled_back), with its reason, figures and the
	// prediction's check.
	Outcome    apply.Outcome          `json:"outcome,omitempty"`
	Reason     string                 `json:"reason,omitempty"`
	Comparison []apply.FigureChange   `json:"comparison,omitempty"`
	Prediction *rules.PredictionCheck `json:"prediction,omitempty"`
	// Rollback is what `pgwal-advisor rollback --id` printed and its exit status; Knobs are the
	// four vm.dirty_* files after it (background bytes, background ratio, bytes, ratio).
	RollbackExit   int    `json:"rollback_exit"`
	RollbackOutput string `json:"rollback_output,omitempty"`
	Knobs          string `json:"knobs_after_rollback,omitempty"`
	Error          string `json:"error,omitempty"`
}

// Tuned's throughput-performance thresholds: the start of the restore phase.
const (
	restoreBgBytes    = "67108864"
	restoreDirtyBytes = "536870912"
)

// restoreVerifyWindow is the daemon's verification window: the lead-in and the first run's
// whole stall before the change (the daemon changes nothing in its first window), the second
// run's whole stall after it (docs/benchmarks.md, neighbour restore).
func restoreVerifyWindow(secs int) time.Duration {
	return time.Duration(secs)*time.Second + 65*time.Second
}

// neighbourRestore runs the restore phase on rig: rounds passes of daemon, run, change, run,
// verdict and rollback, each from 64MB/512MB.
func (r *runner) neighbourRestore(ctx context.Context, res *ScenarioResult, rig *neighbour.Rig, probeDir string, rounds, secs int) (err error) {
	bin, err := advisorBinary()
	if err != nil {
		return err
	}
	nr := &NeighbourRestore{Start: restoreBgBytes + "/" + restoreDirtyBytes, VerifyWindowSeconds: restoreVerifyWindow(secs).Seconds()}
	res.Restore = nr
	defer func() {
		res.Targets = append(res.Targets, restoreTarget(nr))
		if rerr := r.kernel.restore(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for round := 1; round <= rounds; round++ {
		rr := &RestoreRound{Round: round}
		nr.Rounds = append(nr.Rounds, rr)
		if err := r.restoreRound(ctx, bin, rig, probeDir, rr, secs); err != nil {
			rr.Error = err.Error()
			if ctx.Err() != nil {
				return err
			}
			r.say("%s: restore round %d: %v", Neighbour, round, err)
		}
	}
	return nil
}

func (r *runner) restoreRound(ctx context.Context, bin string, rig *neighbour.Rig, probeDir string, rr *RestoreRound, secs int) error {
	if err := r.kernel.set(map[string]string{"dirty_background_bytes": restoreBgBytes, "dirty_bytes": restoreDirtyBytes}); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(rig.Cluster.DataDir()), "restore-")
	if err != nil {
		return fmt.Errorf("restore phase: %w", err)
	}
	defer os.RemoveAll(dir)
	// The daemon takes a sysctl.d file only directly in a sysctl.d directory of its own.
	journal, sysctlFile := filepath.Join(dir, "apply.journal"), filepath.Join(dir, "sysctl.d", "90-pgwal-advisor.conf")
	if err := os.Mkdir(filepath.Dir(sysctlFile), 0o755); err != nil {
		return fmt.Errorf("restore phase: %w", err)
	}
	addr, err := lab.FreeAddr()
	if err != nil {
		return err
	}
	window := restoreVerifyWindow(secs)
	args := []string{"run", "--dsn", rig.Cluster.DSN(), "--web.listen-address", addr, "--probe.dir", probeDir, "--interval", "1s",
		"--apply", "on", "--apply.journal", journal, "--apply.sysctl-file", sysctlFile, "--apply.verify-window", window.String(),
		"--apply.cooldown", "0s", "--apply.settings", apply.KnobDirtyThresholds,
		// One stall a run: a crossover trial's periods after the run would hold none to pair.
		"--apply.crossover=false"}
	if r.opts.ProcFS != "" {
		args = append(args, "--path.procfs", r.opts.ProcFS)
	}
	d, err := startDaemon(ctx, bin, args...)
	if err != nil {
		return err
	}
	defer d.stop()
	if err := lab.WaitHTTPOK(ctx, "http://"+addr+"/readyz", 30*time.Second); err != nil {
		d.stop()
		return fmt.Errorf("the daemon did not get ready: %w\n%s", err, d.logs.String())
	}
	r.kernel.noteChanged()
	// pgbench runs as the cluster's owner: its logs go beside the data directory, as the grid's
	// do, not into the journal's root-only directory.
	prefix := filepath.Join(filepath.Dir(rig.Cluster.DataDir()), fmt.Sprintf("neighbour-restore-%d", rr.Round))
	begin := time.Now()
	r.say("%s: restore round %d: from %s/%s, the daemon in apply mode (verification window %s); the first run", Neighbour, rr.Round, restoreBgBytes, restoreDirtyBytes, window)
	if rr.Before, err = rig.Measure(ctx, neighbour.RunConfig{Queue: simdisk.QueueSerial}, secs, prefix+"-1"); err != nil {
		return err
	}
	r.say("%s:   before the change: %d stall s, p99 %s ms", Neighbour, rr.Before.StallSeconds, num(rr.Before.P99LatencyMS))
	// The daemon changes nothing in its first window, nor while the stall runs.
	applied, err := waitJournal(ctx, journal, begin.Add(window+3*time.Minute), func(c journalChange) bool { return c.applied != nil })
	if err != nil {
		return err
	}
	if applied == nil {
		return fmt.Errorf("the daemon applied nothing within %s of the first run; its log:\n%s", window+3*time.Minute, lastLines(d.logs.String(), 20))
	}
	rr.fill(*applied)
	rr.AppliedAfter = applied.applied.Time.Sub(begin).Seconds()
	r.say("%s:   change %d at %.0f s: %s %s -> %s (%s); the second run", Neighbour, rr.ChangeID, rr.AppliedAfter, rr.Setting, rr.Old, rr.New, rr.Rule)
	if rr.After, err = rig.Measure(ctx, neighbour.RunConfig{Queue: simdisk.QueueSerial}, secs, prefix+"-2"); err != nil {
		return err
	}
	r.say("%s:   after the change: %d stall s, p99 %s ms", Neighbour, rr.After.StallSeconds, num(rr.After.P99LatencyMS))
	judged, err := waitJournal(ctx, journal, applied.applied.Time.Add(3*window+time.Minute), func(c journalChange) bool { return c.verdict != nil })
	if err != nil {
		return err
	}
	if judged != nil {
		rr.fill(*judged)
		r.say("%s:   %s: %s", Neighbour, rr.Outcome, rr.Reason)
	}
	d.stop()

	// `rollback` as an operator runs it, with the daemon stopped.
	cmd := exec.CommandContext(ctx, bin, "rollback", "--journal", journal, "--id", strconv.Itoa(rr.ChangeID), "--dsn", rig.Cluster.DSN(),
		"--apply.sysctl-file", sysctlFile)
	if r.opts.ProcFS != "" {
		cmd.Args = append(cmd.Args, "--path.procfs", r.opts.ProcFS)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		rr.RollbackExit = exit.ExitCode()
	case err != nil:
		return fmt.Errorf("pgwal-advisor rollback: %w", err)
	}
	rr.RollbackOutput = strings.TrimSpace(out.String())
	if rr.Knobs, err = r.kernel.dirtyFour(); err != nil {
		return err
	}
	r.say("%s:   rollback --id %d exited %d; vm.dirty_* now %s", Neighbour, rr.ChangeID, rr.RollbackExit, rr.Knobs)
	return nil
}

// journalChange is one change of a journal: its intent, its applied outcome and its verdict.
type journalChange struct {
	intent, applied, verdict *apply.Record
	intents                  int
}

// waitJournal polls the journal every second until the first change satisfies done or the
// deadline passes; nil when it never did.
func waitJournal(ctx context.Context, path string, deadline time.Time, done func(journalChange) bool) (*journalChange, error) {
	j := apply.NewJournal(path)
	for {
		recs, _, err := j.Read()
		if err != nil {
			return nil, fmt.Errorf("read the daemon's journal: %w", err)
		}
		if c := firstChange(recs); c != nil && done(*c) {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, nil
		}
		if err := lab.Sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
}

// firstChange gathers the first change's records; nil before its intent.
func firstChange(recs []apply.Record) *journalChange {
	var c *journalChange
	for i := range recs {
		rec := &recs[i]
		if rec.Kind == apply.KindIntent {
			if c == nil {
				c = &journalChange{intent: rec}
			}
			c.intents++
			continue
		}
		if c == nil || rec.ID != c.intent.ID {
			continue
		}
		switch rec.Outcome {
		case apply.Applied:
			c.applied = rec
		case apply.Verified, apply.RolledBack:
			if c.verdict == nil {
				c.verdict = rec
			}
		}
	}
	return c
}

// fill copies what the journal says of the change into the round.
func (rr *RestoreRound) fill(c journalChange) {
	in := c.intent
	rr.ChangeID, rr.Setting, rr.Rule, rr.New, rr.Intents = in.ID, in.Setting, in.Rule, in.New, c.intents
	if in.Old != nil {
		rr.Old = in.Old.Value
	}
	if v := c.verdict; v != nil {
		rr.Outcome, rr.Reason, rr.Comparison, rr.Prediction = v.Outcome, v.Reason, v.Comparison, v.PredictionCheck
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// restoreTarget: every pass recommended the kernel's ratios, applied them as one change (one
// intent), the daemon verified it by the stall, and `rollback` put 64MB/512MB back.
func restoreTarget(nr *NeighbourRestore) Target {
	t := Target{Name: "from 64MB/512MB the daemon restores the kernel's ratios as one change, verified by the stall, and rollback restores 64MB/512MB",
		Want: "vm.dirty_thresholds -> 10%/20%, one intent, verified, rollback exit 0, vm.dirty_* 67108864 0 536870912 0"}
	if nr == nil || len(nr.Rounds) == 0 {
		t.Got = "not measured"
		return t
	}
	t.Scored, t.Met = true, true
	var got []string
	for _, rr := range nr.Rounds {
		ok := rr.Error == "" && rr.Setting == apply.KnobDirtyThresholds && rr.New == "10%/20%" && rr.Intents == 1 &&
			rr.Outcome == apply.Verified && rr.RollbackExit == 0 && rr.Knobs == "67108864 0 536870912 0"
		t.Met = t.Met && ok
		if rr.Error != "" {
			got = append(got, fmt.Sprintf("pass %d failed: %s", rr.Round, firstLine(rr.Error)))
			continue
		}
		got = append(got, fmt.Sprintf("pass %d: %s -> %s (%d intent), %s, rollback exit %d, vm.dirty_* %s", rr.Round, rr.Setting, rr.New,
			rr.Intents, rr.Outcome, rr.RollbackExit, rr.Knobs))
	}
	t.Got = strings.Join(got, "; ")
	return t
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// writeNeighbourRestore renders the restore phase.
func writeNeighbourRestore(b *strings.Builder, nr *NeighbourRestore) {
	b.WriteString("### From tuned's 64MB/512MB: the daemon restores the kernel's ratios\n\n")
	fmt.Fprintf(b, "Restore phase: each pass starts from vm.dirty_background_bytes=64MB, vm.dirty_bytes=512MB (tuned's "+
		"throughput-performance) with `pgwal-advisor run --apply on --apply.settings vm.dirty_thresholds --interval 1s "+
		"--apply.verify-window %.0fs --apply.cooldown 0s --apply.crossover=false`; a run, the daemon's change, a run in its verification window, its "+
		"verdict, then the daemon stopped and `pgwal-advisor rollback --id ID`:\n\n", nr.VerifyWindowSeconds)
	head := []string{"pass", "before: stall s, p99", "the change (journal id, at s)", "intent records", "after: stall s, p99",
		"the daemon's verdict", "the daemon's figures", "prediction", "rollback", "vm.dirty_* after it"}
	var rows [][]string
	run := func(r *neighbour.Run) string {
		if r == nil {
			return "-"
		}
		return fmt.Sprintf("%d s, %s", r.StallSeconds, ms(r.P99LatencyMS))
	}
	for _, rr := range nr.Rounds {
		if rr.Error != "" && rr.ChangeID == 0 {
			rows = append(rows, []string{strconv.Itoa(rr.Round), run(rr.Before), "failed: " + firstLine(rr.Error), "-", "-", "-", "-", "-", "-", "-"})
			continue
		}
		var figs []string
		for _, c := range rr.Comparison {
			if c.Verdict == "reported" {
				continue
			}
			f := fmt.Sprintf("%s %s -> %s (%s", c.Name, num(c.Before), num(c.After), c.Verdict)
			if e := c.Effect; e != nil {
				// The interval and what the window before could detect, side by side.
				f += fmt.Sprintf(", %+.0f%%, 95%% interval %+.0f%%..%+.0f%%", 100*e.Rel, 100*e.RelLow, 100*e.RelHigh)
				if c.MDE != nil {
					f += fmt.Sprintf(", detectable %.0f%%", 100**c.MDE)
				}
			}
			figs = append(figs, f+")")
		}
		pred := "-"
		if p := rr.Prediction; p != nil {
			pred = fmt.Sprintf("%s -> %s, measured %s (%+.0f%%)", num(p.Current), num(p.Predicted), num(p.Measured), p.Error*100)
		}
		rows = append(rows, []string{strconv.Itoa(rr.Round), run(rr.Before),
			fmt.Sprintf("%d: %s %s -> %s (%s, %.0f s)", rr.ChangeID, rr.Setting, rr.Old, rr.New, rr.Rule, rr.AppliedAfter),
			strconv.Itoa(rr.Intents), run(rr.After), string(rr.Outcome), strings.Join(figs, "; "), pred,
			fmt.Sprintf("exit %d: %s", rr.RollbackExit, firstLine(rr.RollbackOutput)), rr.Knobs})
	}
	table(b, head, rows)
	b.WriteString("\n")
	if text, ok := proseFor(restoreProseID); ok {
		writeProse(b, restoreProseID, text)
	}
}
