package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Proposal is what the manager makes of one finding: a change it would make, or why not.
type Proposal struct {
	Finding rules.Finding `json:"finding"`
	// Live is the setting's live value, when it was read.
	Live *Value `json:"live,omitempty"`
	// Refused says why the finding is not applied, whatever the flags say ("" when it may be).
	Refused string `json:"refused,omitempty"`
	// Skipped says why nothing is to be done (already live, pending restart, out of date).
	Skipped string `json:"skipped,omitempty"`
	// Wait says why a change that may be made is not made yet (a write-back stall still runs).
	Wait string `json:"wait,omitempty"`
	// Note says how the finding was chosen among disagreeing ones (journaled with the intent).
	Note string `json:"note,omitempty"`
	// ID and Outcome are set once the change was made; Error when it failed.
	ID      int     `json:"id,omitempty"`
	Outcome Outcome `json:"outcome,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// Allowed reports whether the proposal is a change to make.
func (p Proposal) Allowed() bool { return p.Refused == "" && p.Skipped == "" && p.Wait == "" }

// evaluate judges the resolved recommendations (one per setting, rules.Resolve) setting by
// setting. Refusals that need no live value come first, so that never-auto findings never cause
// a read. Only a recommendation whose current value is the live one counts (the tracker keeps a
// finding shown for a while after its condition is gone).
func (m *Manager) evaluate(ctx context.Context, l *ledger, st advisor.State) []Proposal {
	fs := resolvedFindings(st)
	// Verifiable now before waiting for a restart; then the findings' own order.
	sort.SliceStable(fs, func(i, j int) bool {
		return (fs[i].Action == rules.ActionRestart) != (fs[j].Action == rules.ActionRestart) && fs[j].Action == rules.ActionRestart
	})
	var order []string
	bySetting := map[string][]rules.Finding{}
	for _, f := range fs {
		if f.Setting == "" {
			continue
		}
		if _, ok := bySetting[f.Setting]; !ok {
			order = append(order, f.Setting)
		}
		bySetting[f.Setting] = append(bySetting[f.Setting], f)
	}
	out := make([]Proposal, 0, len(order))
	for _, s := range order {
		out = append(out, withOverruled(m.evaluateSetting(ctx, l, st, bySetting[s]), st))
	}
	return out
}

// evaluateSetting judges the findings of one setting.
func (m *Manager) evaluateSetting(ctx context.Context, l *ledger, st advisor.State, group []rules.Finding) Proposal {
	f := group[0]
	p := Proposal{Finding: f}
	if why := staticRefusal(f); why != "" {
		p.Refused = why
		return p
	}
	static := guardInput{allowed: m.cfg.Settings, snapshot: st.Snapshot, probe: st.Probe, ledger: l, now: m.now()}
	a := m.actuator(f.Setting)
	if a == nil || !slices.Contains(m.cfg.Settings, f.Setting) {
		p.Refused = judge(f, static)
		if p.Refused == "" {
			p.Refused = "no actuator for " + f.Setting + " is configured"
		}
		return p
	}
	live, err := a.Read(ctx, f.Setting)
	if err != nil {
		p.Refused = "cannot read the live value: " + err.Error()
		return p
	}
	p.Live = &live
	var fresh []rules.Finding
	for _, g := range group {
		if sameValue(g.Setting, live.Value, g.Current) && staticRefusal(g) == "" {
			fresh = append(fresh, g)
		}
	}
	if len(fresh) == 0 {
		for _, g := range group {
			if sameValue(g.Setting, live.Value, g.Recommended) {
				p.Skipped = fmt.Sprintf("%s is already %s", f.Setting, live.Value)
				return p
			}
		}
		p.Skipped = fmt.Sprintf("the finding says %s is %s but it is %s: the finding is out of date", f.Setting, f.Current, live.Value)
		return p
	}
	f, p.Note = pick(fresh)
	p.Finding = f
	if f.Setting == "" {
		p.Finding, p.Refused = fresh[0], p.Note
		p.Note = ""
		return p
	}
	if c := l.managing(f.Setting); c != nil && c.Last() == PendingRestart && sameValue(f.Setting, c.Intent.New, f.Recommended) {
		p.Skipped = fmt.Sprintf("%s=%s is written and waits for a restart of PostgreSQL (change %d)", f.Setting, f.Recommended, c.ID())
		return p
	}
	if live.PendingRestart && live.AutoConf != nil && sameValue(f.Setting, *live.AutoConf, f.Recommended) {
		p.Skipped = fmt.Sprintf("%s=%s is written and waits for a restart of PostgreSQL", f.Setting, f.Recommended)
		return p
	}
	in := static
	in.live = &live
	if f.Setting == "max_wal_size" || f.Setting == "min_wal_size" {
		if ss, ok := a.(segmentSizer); ok {
			in.segmentBytes, _ = ss.SegmentBytes(ctx)
		}
	}
	if why := judge(f, in); why != "" {
		p.Refused = why
		return p
	}
	if sp, _ := specFor(f.Setting); sp.family == kernelFamily {
		if why := m.stallInProgress(); why != "" {
			p.Wait = why
			return p
		}
	}
	p.Refused = m.advisorOnly[f.Setting]
	return p
}

// stallInProgress says why a change judged by the write-back stall waits, or "": the stall
// still runs and began within the verification window. Made now, the window before the change
// would hold the stall's start and the window after its rest, so the same stall would be
// judged against itself; made once it is over, the window before holds all of it and the one
// after the next. A stall longer than the window fills the window before anyway.
func (m *Manager) stallInProgress() string {
	from := m.lastSnap.Add(-m.cfg.VerifyWindow)
	st := rules.Stall(m.history.Since(from), rules.DefaultThresholds())
	begin, end := st.Span()
	if st.Seconds <= 0 || end.Before(m.lastSnap) || !begin.After(from) {
		return ""
	}
	return fmt.Sprintf("the write-back stall that began %s ago still runs: the change waits for its end, so that the figures "+
		"before it hold the whole stall and verification compares the next one with it", m.lastSnap.Sub(begin).Round(time.Second))
}

// pick chooses among findings of one setting that are all current. When they recommend
// different values, the setting is refused (pick returns a zero Finding and the reason), except
// wal_sync_method: rules that measure different things (sync-method-slow compares the probes'
// latencies, open-sync-with-small-buffers counts buffer-full writes) can each find a better
// method than the current one while noise decides which is fastest. Then the first of them in
// the order fdatasync, fsync, open_datasync, open_sync (Linux's default first, as the rules'
// tie-break) is chosen, and verification judges it like any change.
func pick(fs []rules.Finding) (rules.Finding, string) {
	first := fs[0]
	var other *rules.Finding
	for i := range fs[1:] {
		if g := &fs[i+1]; !sameValue(g.Setting, g.Recommended, first.Recommended) {
			other = g
			break
		}
	}
	if other == nil {
		return first, ""
	}
	why := fmt.Sprintf("the rules disagree on %s: %s recommends %s, %s recommends %s", first.Setting, first.Rule, first.Recommended, other.Rule, other.Recommended)
	if first.Setting != collector.WALSyncMethod {
		return rules.Finding{}, why
	}
	for _, method := range probes.DurableMethods() {
		for _, g := range fs {
			if g.Recommended == method {
				return g, why + fmt.Sprintf("; %s comes first in the order %s, and verification judges it", method, strings.Join(probes.DurableMethods(), ", "))
			}
		}
	}
	return rules.Finding{}, why
}

// gate says why no new change may start now ("" when one may): a change being verified, the
// cool-down, the daily cap, too little history for the figures before a change.
func (m *Manager) gate(l *ledger) string {
	now := m.now()
	var lastEnd time.Time
	started := 0
	for _, c := range l.changes {
		if c.Intent.Origin != OriginDaemon {
			continue
		}
		if now.Sub(c.Intent.Time) < 24*time.Hour {
			started++
		}
		if c.Last() == Applied && c.Intent.Before != nil {
			return fmt.Sprintf("change %d (%s=%s) is being verified", c.ID(), c.Intent.Setting, c.Intent.New)
		}
		if c.Last() == Trial {
			return fmt.Sprintf("change %d (%s=%s) is in a crossover trial", c.ID(), c.Intent.Setting, c.Intent.New)
		}
		end := c.Ended()
		if c.Last() == PendingRestart || c.Last() == Applied {
			end = c.lastRecord().Time
		}
		if end.After(lastEnd) {
			lastEnd = end
		}
	}
	if started >= m.cfg.MaxPerDay {
		return fmt.Sprintf("%d changes were started in the last 24 hours, the most --apply.max-per-day allows", started)
	}
	if !lastEnd.IsZero() && now.Before(lastEnd.Add(m.cfg.Cooldown)) {
		return fmt.Sprintf("cooling down after the last change until %s", lastEnd.Add(m.cfg.Cooldown).UTC().Format(time.RFC3339))
	}
	if span := m.history.Span(); span < m.cfg.VerifyWindow {
		return fmt.Sprintf("the figures before a change need %s of snapshots, have %s", m.cfg.VerifyWindow, span.Round(time.Second))
	}
	return ""
}

// beforeFrom is where the window before a change starts: VerifyWindow ago, but not before the
// last change ended, whose effect the figures must not mix in.
func (m *Manager) beforeFrom(l *ledger) time.Time {
	from := m.lastSnap.Add(-m.cfg.VerifyWindow)
	for _, c := range l.changes {
		if t := c.lastRecord().Time; t.After(from) && c.Last() != Rejected {
			from = t
		}
	}
	return from
}

// propose starts the first allowed change (mode on) or journals it (dry-run).
func (m *Manager) propose(ctx context.Context, l *ledger, props []Proposal, blocked string) error {
	for _, p := range props {
		if p.Refused != "" {
			f := p.Finding
			m.once("refuse:"+f.Setting+"="+f.Recommended+":"+p.Refused, func() {
				m.logger.Info("apply: recommendation not applied", zap.String("setting", f.Setting), zap.String("recommended", f.Recommended),
					zap.String("rule", f.Rule), zap.String("reason", p.Refused))
			})
		}
	}
	i := slices.IndexFunc(props, Proposal.Allowed)
	if i < 0 {
		return nil
	}
	p := props[i]
	f := p.Finding
	if m.cfg.Mode == ModeDryRun {
		if m.dryRunSeen[f.Setting] == f.Recommended {
			return nil
		}
		m.dryRunSeen[f.Setting] = f.Recommended
		rec := Record{Time: m.now(), Kind: KindDryRun, Origin: OriginDaemon, Setting: f.Setting, Action: f.Action, Old: p.Live,
			New: f.Recommended, Rule: f.Rule, Summary: f.Summary, Evidence: f.Evidence, Predicted: f.Predicted}
		if blocked != "" {
			rec.Reason = "in apply mode it would wait: " + blocked
		}
		if d := detectability(measure(m.history, f.Setting, m.beforeFrom(l)), f.Predicted); d != "" {
			rec.Reason = strings.TrimPrefix(rec.Reason+"; "+d, "; ")
		}
		m.logger.Info("apply dry-run: would change a setting", zap.String("setting", f.Setting), zap.String("current", p.Live.Value),
			zap.String("recommended", f.Recommended), zap.String("action", string(f.Action)), zap.String("rule", f.Rule))
		_, err := m.record(l, rec)
		return err
	}
	if blocked != "" {
		return nil
	}
	_, err := m.change(ctx, l, p, OriginDaemon, measure(m.history, f.Setting, m.beforeFrom(l)))
	return err
}

// change makes one change: the intent (fsynced) first, then the actuator, then the outcome.
func (m *Manager) change(ctx context.Context, l *ledger, p Proposal, origin string, before *Figures) (Record, error) {
	f := p.Finding
	a := m.actuator(f.Setting)
	if a == nil || p.Live == nil {
		return Record{}, fmt.Errorf("change %s: no actuator or no live value", f.Setting)
	}
	unlock, _, err := m.journal.lockChanges(true)
	if err != nil {
		return Record{}, err
	}
	defer unlock()
	old := *p.Live
	reason := p.Note
	if d := detectability(before, f.Predicted); d != "" {
		reason = strings.TrimPrefix(reason+"; "+d, "; ")
		m.logger.Info("apply: what the verification of the next change can detect", zap.String("setting", f.Setting), zap.String("detectable", d))
	}
	intent := Record{Time: m.now(), Kind: KindIntent, Origin: origin, Setting: f.Setting, Action: f.Action, Old: &old,
		New: f.Recommended, Rule: f.Rule, Summary: f.Summary, Evidence: f.Evidence, Before: before, Reason: reason,
		Predicted: f.Predicted}
	recs, err := m.record(l, intent)
	if err != nil {
		return Record{}, fmt.Errorf("journal the intent to change %s (nothing was changed): %w", f.Setting, err)
	}
	intent = recs[0]
	c := l.byID[intent.ID]
	live, err := a.Set(ctx, f.Setting, f.Recommended)
	if err != nil {
		// failed or undo_failed: the live value says whether the undo left the old configuration.
		if errors.Is(err, ErrAlterSystemRefused) {
			m.backOff(a, err)
		}
		rec, err := m.failed(ctx, c, a, origin, err)
		m.logger.Warn("apply: change failed", zap.Int("id", intent.ID), zap.String("setting", f.Setting), zap.String("value", f.Recommended),
			zap.String("outcome", string(rec.Outcome)), zap.Error(err))
		if _, jerr := m.record(l, rec); jerr != nil {
			return rec, errors.Join(err, jerr)
		}
		return rec, err
	}
	o, reason := Applied, "the running value is the new one"
	if live.PendingRestart && !sameValue(f.Setting, live.Value, f.Recommended) {
		o, reason = PendingRestart, "written; takes effect when PostgreSQL is restarted (the advisor never restarts it)"
	}
	rec := m.outcome(c, o, reason, &live)
	rec.Origin = origin
	m.logger.Info("apply: setting changed", zap.Int("id", intent.ID), zap.String("setting", f.Setting), zap.String("old", old.Value),
		zap.String("new", f.Recommended), zap.String("outcome", string(o)), zap.String("rule", f.Rule))
	if _, err := m.record(l, rec); err != nil {
		return rec, fmt.Errorf("journal the outcome of change %d (%s is changed; the next start reconciles it): %w", intent.ID, f.Setting, err)
	}
	return rec, nil
}
