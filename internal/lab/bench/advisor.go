package bench

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/advisor/apply"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/probes/compression"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Change is one setting the applier changed.
type Change struct {
	Rule    string       `json:"rule"`
	Setting string       `json:"setting"`
	From    string       `json:"from"`
	To      string       `json:"to"`
	Action  rules.Action `json:"action"`
	// PendingRestart is set when the change waits for a restart of PostgreSQL (the caller, who
	// owns the lab cluster, restarts it).
	PendingRestart bool `json:"pending_restart,omitempty"`
}

// ApplyTarget is what an Applier changes: a server and the kernel it runs on. Dir holds the
// applier's journal and its sysctl.d file, so that the suite never writes /etc or /var/lib.
type ApplyTarget struct {
	DSN    string
	ProcFS string
	Dir    string
}

// Applied is what an Applier did with one round's state: the changes it made and, for the
// report, why it left the other findings alone.
type Applied struct {
	Changes []Change
	// Refused lists "setting: why" for findings apply mode would not apply.
	Refused []string
}

// Applier applies what the advisor's apply mode would apply by itself, once. Restarting the
// server for restart-context changes is the caller's: the lab owns its cluster, the advisor
// never restarts a server. OnceApplier is advisor/apply's one-shot path; the interface lets
// another stand in.
type Applier interface {
	Apply(ctx context.Context, t ApplyTarget, st advisor.State) (Applied, error)
}

// OnceApplier is `pgwal-advisor apply --yes` in-process: advisor/apply's manager in mode on
// with its default settings (apply.DefaultSettings), its guard, its journal, its Postgres
// (ALTER SYSTEM, pg_reload_conf(), confirmed) and Kernel (/proc/sys/vm) actuators, through
// Plan and ApplyPlan.
type OnceApplier struct {
	Logger *zap.Logger
}

// Apply implements Applier.
func (o OnceApplier) Apply(ctx context.Context, t ApplyTarget, st advisor.State) (Applied, error) {
	logger := o.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	pg := apply.NewPostgres(t.DSN, apply.PostgresOptions{Logger: logger})
	defer pg.Close(context.WithoutCancel(ctx))
	acts := []apply.Actuator{pg, apply.NewKernel(t.ProcFS, filepath.Join(t.Dir, "90-pgwal-advisor.conf"), logger)}
	m, err := apply.New(apply.Config{Mode: apply.ModeOn, Journal: filepath.Join(t.Dir, "apply.journal")}, nil, acts, logger)
	if err != nil {
		return Applied{}, fmt.Errorf("apply mode: %w", err)
	}
	plan, err := m.Plan(ctx, st)
	if err != nil {
		return Applied{}, fmt.Errorf("apply plan: %w", err)
	}
	var out Applied
	for _, p := range plan {
		switch {
		case p.Refused != "":
			out.Refused = append(out.Refused, p.Finding.Setting+": "+p.Refused)
		case p.Skipped != "":
			out.Refused = append(out.Refused, p.Finding.Setting+": skipped: "+p.Skipped)
		}
	}
	plan, err = m.ApplyPlan(ctx, plan)
	for _, p := range plan {
		if p.Error != "" {
			out.Refused = append(out.Refused, p.Finding.Setting+": failed: "+p.Error)
			continue
		}
		if p.ID == 0 {
			continue
		}
		f := p.Finding
		from := f.Current
		if p.Live != nil {
			from = p.Live.Value
		}
		out.Changes = append(out.Changes, Change{Rule: f.Rule, Setting: f.Setting, From: from, To: f.Recommended, Action: f.Action,
			PendingRestart: p.Outcome == apply.PendingRestart})
	}
	if err != nil {
		return out, fmt.Errorf("apply: %w", err)
	}
	return out, nil
}

// FindingBrief is a finding as the report shows it.
type FindingBrief struct {
	Rule        string       `json:"rule"`
	Severity    string       `json:"severity"`
	Setting     string       `json:"setting"`
	Current     string       `json:"current"`
	Recommended string       `json:"recommended"`
	Action      rules.Action `json:"action"`
}

// change is what the finding recommends, "setting current -> recommended, action", or the
// action alone for a finding that recommends no value (information with its figures).
func (f FindingBrief) change() string {
	if f.Setting == "" && f.Recommended == "" {
		return string(f.Action)
	}
	return fmt.Sprintf("%s %s -> %s, %s", f.Setting, f.Current, f.Recommended, f.Action)
}

// AdvisorRound is one check->apply round.
type AdvisorRound struct {
	Round         int            `json:"round"`
	WindowSeconds float64        `json:"window_seconds"`
	Findings      []FindingBrief `json:"findings"`
	Applied       []Change       `json:"applied"`
	// Refused lists "setting: why" for the findings apply mode would not apply.
	Refused       []string          `json:"refused,omitempty"`
	NotEnoughData map[string]string `json:"not_enough_data,omitempty"`
	ProbeSkipped  string            `json:"probe_skipped,omitempty"`
	// Restarted says whether the server was restarted for a restart-context change.
	Restarted bool `json:"restarted"`
	// Predictions check the figures the changes of the round before predicted against what
	// this round's window measured with them in force.
	Predictions []PredictionResult `json:"predictions,omitempty"`
}

// PredictionResult is one applied change's predicted figure, measured a round later.
type PredictionResult struct {
	Setting string `json:"setting"`
	Rule    string `json:"rule"`
	// Joint is set on the check of changes applied together (Setting "a + b"): the product of
	// their predicted factors against the one figure measured with all of them in force.
	Joint bool                  `json:"joint,omitempty"`
	Check rules.PredictionCheck `json:"check"`
}

// AdvisorRun is how the advisor's configuration was reached.
type AdvisorRun struct {
	Rounds []AdvisorRound `json:"rounds"`
	// Converged is true when the last round recommended nothing new.
	Converged bool `json:"converged"`
}

// watchSpec says what the advisor watches: the running cluster, a probe directory on the
// WAL's file system, and the scenario's workload running while it watches.
type watchSpec struct {
	cluster  *lab.Cluster
	probeDir string
	window   time.Duration
	// load runs the workload until its context ends; an error while the context is live
	// spoils the round.
	load func(ctx context.Context) error
	// rounds caps the check->apply rounds (0: the suite's, sizes.rounds).
	rounds int
	// checkpoint starts each round from a CHECKPOINT and sync(2), as the default-host matrix's
	// runs start: full-page images fall through a checkpoint cycle, so a round watched later in
	// the cycle than the one before it would credit a change with the fall (the PostgreSQL 17
	// cloud cell: wal_compression's prediction checked 35-70 s into the cycle against 0-35 s).
	checkpoint bool
}

// check runs advisor.Check once over the window while the workload runs, and returns what it
// found as the state apply mode judges (with a snapshot taken after the window, as
// `pgwal-advisor apply` takes one: the guard checks against the state as it is now).
func (r *runner) check(ctx context.Context, w watchSpec) (*advisor.CheckResult, advisor.State, error) {
	if w.checkpoint {
		if err := equipment.Checkpoint(ctx, w.cluster); err != nil {
			return nil, advisor.State{}, err
		}
		unix.Sync()
	}
	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg      sync.WaitGroup
		loadErr error
	)
	if w.load != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.load(loadCtx); err != nil && loadCtx.Err() == nil {
				loadErr = err
			}
		}()
	}
	pg := postgres.New(w.cluster.DSN(), postgres.Options{Logger: r.logger})
	defer pg.Close(context.Background())
	s := &advisor.Sampler{Postgres: pg, Kernel: kernel.New(r.opts.ProcFS), Storage: storage.New(r.opts.ProcFS, r.opts.SysFS),
		FullPages: &compression.Source{Gather: w.window}}
	res, err := advisor.Check(ctx, s, advisor.CheckConfig{
		Window: w.window, Interval: time.Second, WaitInterval: 250 * time.Millisecond,
		ProbeDir: w.probeDir, ProbeBudget: r.sz.probeBudget,
	}, r.logger)
	stop()
	wg.Wait()
	if err != nil {
		return nil, advisor.State{}, fmt.Errorf("advisor check: %w", err)
	}
	if loadErr != nil {
		return nil, advisor.State{}, fmt.Errorf("workload while the advisor watched: %w", loadErr)
	}
	snap := s.Sample(ctx)
	// Apply acts on the recommendations, one per setting, resolved from the findings.
	st := advisor.State{Snapshot: &snap, Findings: res.Findings, Recommendations: res.Recommendations, NotEnoughData: res.NotEnoughData, Probe: res.Probe,
		ProbeEnabled: res.Probe != nil, ProbeDisabledReason: res.ProbeSkipped, Evaluated: snap.Time}
	return res, st, nil
}

// advise runs the advisor with apply on against a cluster already configured with start:
// check, apply once what apply mode would apply, restart for what waits for a restart, and
// again until a round changes nothing (at most r.sz.rounds rounds). It returns the rounds and
// the advisor's configuration: start with every applied change. dir keeps the applier's
// journal across the rounds.
func (r *runner) advise(ctx context.Context, id string, w watchSpec, start Config, dir string) (*AdvisorRun, Config, error) {
	run := &AdvisorRun{}
	cfg := start.with("advisor", nil)
	type prediction struct {
		setting, rule string
		pred          rules.Predicted
	}
	var predicted []prediction
	rounds := r.sz.rounds
	if w.rounds > 0 {
		rounds = w.rounds
	}
	for round := 1; round <= rounds; round++ {
		r.say("%s: advisor round %d: watching the workload for %s", id, round, w.window)
		res, st, err := r.check(ctx, w)
		if err != nil {
			return run, cfg, err
		}
		ar := AdvisorRound{Round: round, WindowSeconds: res.WindowSeconds, NotEnoughData: res.NotEnoughData, ProbeSkipped: res.ProbeSkipped}
		// Changes applied in one round that predict the same figure move it together: each is
		// checked alone (its prediction is for itself) and, jointly, the product of their
		// predicted factors (each scales the figure it found), which is what was measured.
		joint := map[string][]prediction{}
		var names []string
		for _, p := range predicted {
			measured, ok := rules.MeasurePredicted(p.pred.Name, res.History)
			if !ok {
				r.say("%s:   %s's prediction (%s) could not be measured in this window", id, p.setting, p.pred.Name)
				continue
			}
			if chk, ok := rules.CheckPrediction(p.pred, measured); ok {
				ar.Predictions = append(ar.Predictions, PredictionResult{Setting: p.setting, Rule: p.rule, Check: chk})
				r.say("%s:   %s (%s): %s", id, p.setting, p.rule, chk)
			}
			if _, seen := joint[p.pred.Name]; !seen {
				names = append(names, p.pred.Name)
			}
			joint[p.pred.Name] = append(joint[p.pred.Name], p)
		}
		for _, name := range names {
			ps := joint[name]
			if len(ps) < 2 {
				continue
			}
			comb := ps[0].pred
			var settings []string
			for _, p := range ps {
				settings = append(settings, p.setting)
			}
			for _, p := range ps {
				if p.pred.Current > 0 {
					comb.Value *= p.pred.Value / p.pred.Current
				}
			}
			measured, _ := rules.MeasurePredicted(name, res.History)
			if chk, ok := rules.CheckPrediction(comb, measured); ok {
				ar.Predictions = append(ar.Predictions, PredictionResult{Setting: strings.Join(settings, " + "), Rule: "together", Joint: true, Check: chk})
				r.say("%s:   %s together: %s", id, strings.Join(settings, " + "), chk)
			}
		}
		predicted = predicted[:0]
		for _, f := range res.Findings {
			fb := FindingBrief{Rule: f.Rule, Severity: f.Severity.String(), Setting: f.Setting,
				Current: f.Current, Recommended: f.Recommended, Action: f.Action}
			ar.Findings = append(ar.Findings, fb)
			r.say("%s:   finding %s %s (%s)", id, f.Severity, f.Rule, fb.change())
			if f.Predicted != nil {
				// What a prediction rested on, for the report's reader to check a miss against.
				r.say("%s:     %s; predicted %s %.4g -> %.4g: %s", id, f.Summary, f.Predicted.Name, f.Predicted.Current, f.Predicted.Value, f.Predicted.Basis)
			}
		}
		applied, err := r.opts.Applier.Apply(ctx, ApplyTarget{DSN: w.cluster.DSN(), ProcFS: r.opts.ProcFS, Dir: dir}, st)
		ar.Applied, ar.Refused = applied.Changes, applied.Refused
		restart := false
		for _, ch := range applied.Changes {
			r.say("%s:   applied %s: %s -> %s (%s)", id, ch.Setting, ch.From, ch.To, ch.Action)
			for _, rec := range res.Recommendations {
				if rec.Setting == ch.Setting && rec.Predicted != nil {
					predicted = append(predicted, prediction{setting: ch.Setting, rule: rec.Rule, pred: *rec.Predicted})
				}
			}
			if knob, ok := strings.CutPrefix(ch.Setting, "vm."); ok {
				r.kernel.noteChanged()
				if cfg.Kernel == nil {
					cfg.Kernel = map[string]string{}
				}
				if ch.Setting != apply.KnobDirtyThresholds {
					cfg.Kernel[knob] = ch.To
					continue
				}
				pair, err := pairKnobs(ch.To)
				if err != nil {
					return run, cfg, err
				}
				maps.Copy(cfg.Kernel, pair)
				continue
			}
			cfg.Settings[ch.Setting] = ch.To
			restart = restart || ch.PendingRestart
		}
		if err != nil {
			run.Rounds = append(run.Rounds, ar)
			return run, cfg, err
		}
		if restart {
			if err := w.cluster.Restart(ctx); err != nil {
				run.Rounds = append(run.Rounds, ar)
				return run, cfg, fmt.Errorf("restart after applying: %w", err)
			}
			ar.Restarted = true
		}
		run.Rounds = append(run.Rounds, ar)
		if len(applied.Changes) == 0 {
			run.Converged = true
			r.say("%s: advisor round %d: nothing new to apply", id, round)
			break
		}
	}
	if err := checkApplied(ctx, w.cluster, "postgresql.auto.conf"); err != nil {
		return run, cfg, err
	}
	return run, cfg, nil
}

// advisorSettings lists what the advisor changed from start, for the report.
func advisorSettings(start, adv Config) map[string]string {
	out := map[string]string{}
	for k, v := range adv.Settings {
		if start.Settings[k] != v {
			out[k] = v
		}
	}
	for k, v := range adv.Kernel {
		out["vm."+k] = v
	}
	return out
}

// criticalFindings returns the critical findings' rule IDs.
func criticalFindings(res *advisor.CheckResult) []string {
	var ids []string
	for _, f := range res.Findings {
		if f.Severity == rules.Critical && !slices.Contains(ids, f.Rule) {
			ids = append(ids, f.Rule)
		}
	}
	return ids
}
