package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// StateSource is where the manager reads the advisor's findings, snapshots and probe report;
// *advisor.Advisor and the daemon satisfy it.
type StateSource interface {
	State() advisor.State
}

// Actuator changes one family of settings: Postgres for PostgreSQL's, Kernel for vm.dirty_*.
type Actuator interface {
	// Owns reports whether the actuator changes setting.
	Owns(setting string) bool
	// Read returns the live value, with what restoring it exactly needs.
	Read(ctx context.Context, setting string) (Value, error)
	// Writable returns nil when the actuator may change setting, else why not and what to do.
	Writable(ctx context.Context, setting string) error
	// Set changes setting and confirms it took effect (or waits for a restart); on failure it
	// leaves the old configuration in place.
	Set(ctx context.Context, setting, value string) (Value, error)
	// Restore puts back what old recorded.
	Restore(ctx context.Context, setting string, old Value) (Value, error)
}

// segmentSizer is what the guard asks for max_wal_size's lower bound (Postgres has it).
type segmentSizer interface {
	SegmentBytes(ctx context.Context) (int64, error)
}

// privilegeRecheck is how often settings the manager may not change are checked again, so that
// a GRANT takes effect without a restart of the daemon.
const privilegeRecheck = 10 * time.Minute

// Manager is the apply mode's loop: each time the advisor has a new snapshot it reconciles the
// journal with the live values, watches the changes it manages (an operator's change, a
// restart that a pending change waited for), finishes verifications (verified, or rolled back
// and rejected), and starts at most one new change, within the cool-down and the daily cap.
// Create it with New, drive it with Run (or Step), read it with Status from any goroutine.
type Manager struct {
	cfg     Config
	src     StateSource
	acts    []Actuator
	journal *Journal
	logger  *zap.Logger

	// Owned by the goroutine that calls Step.
	history     *rules.History
	lastSnap    time.Time
	firstSnap   time.Time
	advisorOnly map[string]string
	privChecked time.Time
	said        map[string]bool
	dryRunSeen  map[string]string

	mu     sync.RWMutex
	status Status
}

// New returns a manager over the advisor's state and the actuators. It does no I/O: the first
// Step reads the journal, reconciles it and checks the privileges. src may be nil for a manager
// used only for Plan and ApplyPlan (`pgwal-advisor apply`).
func New(cfg Config, src StateSource, acts []Actuator, logger *zap.Logger) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m := &Manager{
		cfg:         cfg,
		src:         src,
		acts:        acts,
		journal:     NewJournal(cfg.Journal),
		logger:      logger.With(zap.String("component", "apply")),
		history:     rules.NewHistory(historyLimit),
		advisorOnly: map[string]string{},
		said:        map[string]bool{},
		dryRunSeen:  map[string]string{},
	}
	m.status = Status{Mode: cfg.Mode, Settings: slices.Clone(cfg.Settings), Reason: modeReason(cfg.Mode)}
	return m, nil
}

// historyLimit bounds the snapshots kept; trimHistory keeps the span to what verification needs.
const historyLimit = 4096

func modeReason(m Mode) string {
	switch m {
	case ModeOff:
		return "apply mode is off (--apply=off): the advisor only recommends"
	case ModeDryRun:
		return "apply mode is dry-run (--apply=dry-run): what would change is journaled and logged, nothing is changed"
	}
	return ""
}

// Journal is the manager's journal.
func (m *Manager) Journal() *Journal { return m.journal }

// Run calls Step every PollInterval until ctx ends; Step does work only when the advisor has a
// new snapshot. Step's errors are logged, never fatal: the advisor keeps advising. With the mode
// off Run returns at once.
func (m *Manager) Run(ctx context.Context) error {
	if m.cfg.Mode == ModeOff || m.src == nil {
		m.logger.Info("apply mode is off: the advisor only recommends")
		return nil
	}
	m.logger.Info("apply mode running", zap.String("mode", string(m.cfg.Mode)), zap.Strings("settings", m.cfg.Settings),
		zap.String("journal", m.cfg.Journal), zap.Duration("verify_window", m.cfg.VerifyWindow),
		zap.Duration("cooldown", m.cfg.Cooldown), zap.Int("max_per_day", m.cfg.MaxPerDay))
	t := time.NewTicker(m.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := m.Step(ctx); err != nil && ctx.Err() == nil {
			m.once("step:"+err.Error(), func() { m.logger.Warn("apply step failed", zap.Error(err)) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// once runs fn the first time key is seen: "say so once".
func (m *Manager) once(key string, fn func()) {
	if len(m.said) > 1000 {
		// Bounded: after a thousand different messages, saying one again is no harm.
		clear(m.said)
	}
	if !m.said[key] {
		m.said[key] = true
		fn()
	}
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

// actuator returns the actuator of setting, nil when none owns it.
func (m *Manager) actuator(setting string) Actuator {
	for _, a := range m.acts {
		if a != nil && a.Owns(setting) {
			return a
		}
	}
	return nil
}

// Step runs one cycle over the advisor's latest state; it does nothing unless a snapshot newer
// than the last one has arrived. It returns the errors that stopped parts of the cycle.
func (m *Manager) Step(ctx context.Context) error {
	if m.src == nil {
		return errors.New("apply: the manager has no state source to step over")
	}
	st := m.src.State()
	if st.Snapshot == nil || !st.Snapshot.Time.After(m.lastSnap) {
		return nil
	}
	m.lastSnap = st.Snapshot.Time
	if m.firstSnap.IsZero() {
		m.firstSnap = st.Snapshot.Time
	}
	m.history.Add(*st.Snapshot)
	m.trimHistory()
	if m.cfg.Mode == ModeOff {
		return nil
	}

	recs, torn, err := m.journal.Read()
	if err != nil {
		m.setJournalErr(err)
		return err
	}
	if torn != "" {
		m.once("torn:"+torn, func() { m.logger.Warn("apply journal: a record was cut short", zap.String("detail", torn)) })
	}
	l := newLedger(recs)
	if m.now().Sub(m.privChecked) >= privilegeRecheck || m.privChecked.IsZero() {
		m.checkPrivileges(ctx)
	}
	var errs []error
	blocked := ""
	if m.cfg.Mode == ModeOn {
		if err := m.journalWritable(); err != nil {
			m.setJournalErr(err)
			return err
		}
		m.mu.Lock()
		m.status.JournalError = ""
		m.mu.Unlock()
		if why, err := m.reconcile(ctx, l); err != nil {
			errs = append(errs, err)
			blocked = why
		} else if why != "" {
			blocked = why
		}
		if err := m.watch(ctx, l); err != nil {
			errs = append(errs, err)
		}
	}
	props := m.evaluate(ctx, l, st)
	if gate := m.gate(l); blocked == "" {
		blocked = gate
	}
	if err := m.propose(ctx, l, props, blocked); err != nil {
		errs = append(errs, err)
	}
	m.publish(l, props, blocked)
	return errors.Join(errs...)
}

// trimHistory keeps what verification needs: three windows (the window before a change, and
// the window after it, extended twice when it had too little data), and some room.
func (m *Manager) trimHistory() {
	keep := 4 * m.cfg.VerifyWindow
	if m.history.Span() > keep+keep/4 {
		latest, _ := m.history.Latest()
		m.history = m.history.Since(latest.Time.Add(-keep))
		// Since sizes the copy to what it holds: give it room to grow again.
		h := rules.NewHistory(historyLimit)
		for _, s := range m.history.Snapshots() {
			h.Add(s)
		}
		m.history = h
	}
}

func (m *Manager) setJournalErr(err error) {
	m.mu.Lock()
	m.status.JournalError = err.Error()
	m.mu.Unlock()
	m.once("journal:"+err.Error(), func() {
		m.logger.Error("apply journal unusable: nothing is applied until it is fixed (the advisor keeps advising)", zap.Error(err))
	})
}

// journalWritable checks that the journal can be appended to: without a journal nothing is
// changed.
func (m *Manager) journalWritable() error {
	unlock, _, err := m.journal.lockChanges(false)
	if err != nil {
		return err
	}
	if unlock != nil {
		unlock()
	}
	return nil
}

// checkPrivileges asks each actuator whether it may change each allowed setting, and says once
// per reason why a setting stays advice.
func (m *Manager) checkPrivileges(ctx context.Context) {
	m.privChecked = m.now()
	for _, s := range m.cfg.Settings {
		a := m.actuator(s)
		var why string
		if a == nil {
			why = "no actuator for " + s + " is configured"
		} else if err := a.Writable(ctx, s); err != nil {
			why = err.Error()
		}
		if why == "" {
			if m.advisorOnly[s] != "" {
				m.logger.Info("apply mode may now change a setting it could not", zap.String("setting", s))
			}
			delete(m.advisorOnly, s)
			continue
		}
		m.advisorOnly[s] = why
		m.once("priv:"+s+why, func() {
			m.logger.Warn("apply mode cannot change this setting: it stays advice", zap.String("setting", s), zap.String("reason", why))
		})
	}
}

// record appends records to the journal and to the ledger.
func (m *Manager) record(l *ledger, recs ...Record) ([]Record, error) {
	out, err := m.journal.Append(recs...)
	for _, r := range out {
		l.add(r)
	}
	if err != nil {
		m.setJournalErr(err)
		return out, err
	}
	m.mu.Lock()
	m.status.JournalError = ""
	m.mu.Unlock()
	return out, nil
}

func (m *Manager) outcome(c *change, o Outcome, reason string, live *Value) Record {
	return Record{ID: c.ID(), Time: m.now(), Kind: KindOutcome, Origin: OriginDaemon, Outcome: o, Setting: c.Intent.Setting, New: c.Intent.New, Reason: reason, Live: live}
}

// reconcile settles intents without an outcome, left by a crash between the intent and its
// outcome, against the live values:
//   - the new value is live: applied, and verification goes on with the figures the intent
//     recorded from before the change;
//   - the old value is live: the change never took effect; its old configuration is restored
//     (ALTER SYSTEM may have written the file without the reload, a sysctl.d line may be
//     written) and the change recorded failed;
//   - anything else: someone else changed the setting meanwhile; abandoned.
//
// It returns why new changes must wait (an intent that could not be settled yet).
func (m *Manager) reconcile(ctx context.Context, l *ledger) (string, error) {
	var open []*change
	for _, c := range l.changes {
		if c.Last() == "" {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return "", nil
	}
	unlock, ok, err := m.journal.lockChanges(false)
	if err != nil {
		return "an unresolved intent in the journal", err
	}
	if !ok {
		return "another process is making a change (the journal's change lock is held)", nil
	}
	defer unlock()
	for _, c := range open {
		if err := m.reconcileOne(ctx, l, c); err != nil {
			return fmt.Sprintf("change %d (%s) has an intent without an outcome that could not be reconciled yet", c.ID(), c.Intent.Setting), err
		}
	}
	return "", nil
}

func (m *Manager) reconcileOne(ctx context.Context, l *ledger, c *change) error {
	in := c.Intent
	a := m.actuator(in.Setting)
	if a == nil || in.Old == nil {
		_, err := m.record(l, m.outcome(c, Failed, "reconciled after a crash: no actuator or no recorded old value to check the change against; check "+in.Setting+" by hand", nil))
		return err
	}
	live, err := a.Read(ctx, in.Setting)
	if err != nil {
		return fmt.Errorf("reconcile change %d: %w", c.ID(), err)
	}
	restartCtx := in.Old.Context == "postmaster"
	var rec Record
	switch {
	case sameValue(in.Setting, live.Value, in.New):
		rec = m.outcome(c, Applied, "reconciled after a crash between intent and outcome: the new value is live; verification goes on", &live)
	case restartCtx && live.PendingRestart && live.AutoConf != nil && sameValue(in.Setting, *live.AutoConf, in.New):
		rec = m.outcome(c, PendingRestart, "reconciled after a crash between intent and outcome: written and waiting for a restart of PostgreSQL", &live)
	case sameValue(in.Setting, live.Value, in.Old.Value):
		restored, err := a.Restore(ctx, in.Setting, *in.Old)
		if err != nil {
			return fmt.Errorf("reconcile change %d: restore the old configuration of %s: %w", c.ID(), in.Setting, err)
		}
		rec = m.outcome(c, Failed, "reconciled after a crash between intent and outcome: the change had not taken effect; the old configuration was restored", &restored)
	default:
		until := m.now().Add(m.cfg.RejectFor)
		rec = m.outcome(c, Abandoned, fmt.Sprintf("reconciled after a crash: %s is %s, neither the old %s nor the new %s: someone else changed it", in.Setting, live.Value, in.Old.Value, in.New), &live)
		rec.Until = &until
	}
	m.logger.Warn("apply: reconciled a change interrupted by a crash", zap.Int("id", c.ID()), zap.String("setting", in.Setting),
		zap.String("outcome", string(rec.Outcome)), zap.String("live", live.Value))
	_, err = m.record(l, rec)
	return err
}

// watch checks each change in effect: an operator's change makes the manager back off; a
// restart brings a pending change into effect; a verification window that has passed decides
// between verified and rolled back.
func (m *Manager) watch(ctx context.Context, l *ledger) error {
	var errs []error
	seen := map[string]bool{}
	for i := len(l.changes) - 1; i >= 0; i-- {
		c := l.changes[i]
		s := c.Intent.Setting
		if seen[s] {
			continue
		}
		seen[s] = true
		if !c.InEffect() {
			continue
		}
		a := m.actuator(s)
		if a == nil {
			continue
		}
		live, err := a.Read(ctx, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("watch change %d (%s): %w", c.ID(), s, err))
			continue
		}
		if err := m.watchOne(ctx, l, c, a, live); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) watchOne(ctx context.Context, l *ledger, c *change, a Actuator, live Value) error {
	in := c.Intent
	s := in.Setting
	if c.Last() == PendingRestart {
		switch {
		case sameValue(s, live.Value, in.New):
			_, err := m.record(l, m.outcome(c, Applied, "PostgreSQL restarted: the new value is running", &live))
			m.logger.Info("apply: a pending change took effect after a restart", zap.Int("id", c.ID()), zap.String("setting", s), zap.String("value", live.Value))
			return err
		case live.PendingRestart && (live.AutoConf == nil || sameValue(s, *live.AutoConf, in.New)):
			return nil // still waiting for the restart
		}
		return m.abandon(l, c, live, fmt.Sprintf("%s no longer waits for a restart with %s: it is %s (pending_restart %v)", s, in.New, live.Value, live.PendingRestart))
	}
	if !sameValue(s, live.Value, in.New) {
		return m.abandon(l, c, live, fmt.Sprintf("%s is %s, not the %s the advisor applied: someone else changed it", s, live.Value, in.New))
	}
	if c.Last() != Applied || in.Before == nil || in.Origin != OriginDaemon {
		return nil // verified, or applied by hand with `apply --yes`: managed, not verified
	}
	return m.verify(ctx, l, c, a)
}

// abandon records that someone else changed a managed setting: the manager keeps its hands off
// it for RejectFor.
func (m *Manager) abandon(l *ledger, c *change, live Value, reason string) error {
	until := m.now().Add(m.cfg.RejectFor)
	rec := m.outcome(c, Abandoned, reason, &live)
	rec.Until = &until
	m.logger.Warn("apply: a managed setting was changed by someone else; the advisor stops managing it",
		zap.Int("id", c.ID()), zap.String("setting", c.Intent.Setting), zap.String("live", live.Value),
		zap.String("applied", c.Intent.New), zap.Time("hands_off_until", until))
	_, err := m.record(l, rec)
	return err
}

// verifyingSince is when the change's verification window starts: its applied outcome, or the
// manager's first snapshot when it was started after that (the window must hold snapshots).
func (m *Manager) verifyingSince(c *change) time.Time {
	r, _ := c.outcome(Applied)
	if m.firstSnap.After(r.Time) {
		return m.firstSnap
	}
	return r.Time
}

func (m *Manager) verify(ctx context.Context, l *ledger, c *change, a Actuator) error {
	in := c.Intent
	start := m.verifyingSince(c)
	latest := m.lastSnap
	if latest.Before(start.Add(m.cfg.VerifyWindow)) {
		return nil
	}
	after := measure(m.history, in.Setting, start)
	v := compare(in.Before, after, m.cfg.Regression)
	if !v.decided && latest.Before(start.Add(3*m.cfg.VerifyWindow)) {
		m.once(fmt.Sprintf("extend:%d", c.ID()), func() {
			m.logger.Info("apply: not enough data to judge the change yet; the verification window is extended",
				zap.Int("id", c.ID()), zap.String("setting", in.Setting))
		})
		return nil
	}
	if !v.worse {
		reason := v.reason
		if !v.decided {
			reason = "inconclusive, kept: " + reason
		}
		rec := m.outcome(c, Verified, reason, nil)
		rec.Before, rec.After, rec.Comparison = in.Before, after, v.changes
		m.logger.Info("apply: change verified", zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("value", in.New), zap.String("figures", reason))
		_, err := m.record(l, rec)
		return err
	}
	live, err := a.Restore(ctx, in.Setting, *in.Old)
	if err != nil {
		m.once(fmt.Sprintf("rollback:%d:%v", c.ID(), err), func() {
			m.logger.Error("apply: rolling back a change that made things worse failed; retrying at the next snapshot",
				zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.Error(err))
		})
		return fmt.Errorf("roll back change %d (%s): %w", c.ID(), in.Setting, err)
	}
	until := m.now().Add(m.cfg.RejectFor)
	rb := m.outcome(c, RolledBack, v.reason, &live)
	rb.Before, rb.After, rb.Comparison = in.Before, after, v.changes
	rej := m.outcome(c, Rejected, v.reason, nil)
	rej.Until = &until
	m.logger.Warn("apply: change made things worse and was rolled back; the recommendation is rejected",
		zap.Int("id", c.ID()), zap.String("setting", in.Setting), zap.String("value", in.New),
		zap.String("restored", live.Value), zap.String("figures", v.reason), zap.Time("rejected_until", until))
	_, err = m.record(l, rb, rej)
	return err
}

// Proposal is what the manager makes of one finding: a change it would make, or why not.
type Proposal struct {
	Finding rules.Finding `json:"finding"`
	// Live is the setting's live value, when it was read.
	Live *Value `json:"live,omitempty"`
	// Refused says why the finding is not applied, whatever the flags say ("" when it may be).
	Refused string `json:"refused,omitempty"`
	// Skipped says why nothing is to be done (already live, pending restart, out of date).
	Skipped string `json:"skipped,omitempty"`
	// Note says how the finding was chosen among disagreeing ones (journaled with the intent).
	Note string `json:"note,omitempty"`
	// ID and Outcome are set once the change was made; Error when it failed.
	ID      int     `json:"id,omitempty"`
	Outcome Outcome `json:"outcome,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// Allowed reports whether the proposal is a change to make.
func (p Proposal) Allowed() bool { return p.Refused == "" && p.Skipped == "" }

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
	p.Refused = m.advisorOnly[f.Setting]
	return p
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
	for _, method := range durableMethods() {
		for _, g := range fs {
			if g.Recommended == method {
				return g, why + fmt.Sprintf("; %s comes first in the order %s, and verification judges it", method, strings.Join(durableMethods(), ", "))
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
			New: f.Recommended, Rule: f.Rule, Summary: f.Summary, Evidence: f.Evidence}
		if blocked != "" {
			rec.Reason = "in apply mode it would wait: " + blocked
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
	intent := Record{Time: m.now(), Kind: KindIntent, Origin: origin, Setting: f.Setting, Action: f.Action, Old: &old,
		New: f.Recommended, Rule: f.Rule, Summary: f.Summary, Evidence: f.Evidence, Before: before, Reason: p.Note}
	recs, err := m.record(l, intent)
	if err != nil {
		return Record{}, fmt.Errorf("journal the intent to change %s (nothing was changed): %w", f.Setting, err)
	}
	intent = recs[0]
	c := l.byID[intent.ID]
	live, err := a.Set(ctx, f.Setting, f.Recommended)
	if err != nil {
		rec := m.outcome(c, Failed, err.Error(), nil)
		rec.Origin = origin
		if cur, rerr := a.Read(ctx, f.Setting); rerr == nil {
			rec.Live = &cur
		}
		m.logger.Warn("apply: change failed", zap.Int("id", intent.ID), zap.String("setting", f.Setting), zap.String("value", f.Recommended), zap.Error(err))
		if _, jerr := m.record(l, rec); jerr != nil {
			return rec, errors.Join(err, jerr)
		}
		return rec, fmt.Errorf("change %d: %w", intent.ID, err)
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

// Status is what the apply mode is doing, for the metrics and the API.
type Status struct {
	Mode     Mode     `json:"mode"`
	Settings []string `json:"settings"`
	// Reason says why nothing at all is applied now (mode off or dry-run); "" in mode on.
	Reason string `json:"reason,omitempty"`
	// AdvisorOnly maps the allowed settings the manager may not change to why (a missing
	// privilege, a read-only /proc/sys).
	AdvisorOnly map[string]string `json:"advisor_only,omitempty"`
	// Waiting says why no new change may start now (verification, cool-down, the cap).
	Waiting string `json:"waiting,omitempty"`
	// Changes are the journal's changes, newest first.
	Changes []ChangeStatus `json:"changes"`
	// Refused are the current findings the manager does not apply, and why.
	Refused []Refusal `json:"refused,omitempty"`
	// Holds are the running rejections (a value rolled back for making things worse) and
	// hands-off periods (a setting someone else changed).
	Holds []Hold `json:"holds,omitempty"`
	// Outcomes counts the journal's outcome records by outcome.
	Outcomes       map[Outcome]int `json:"outcomes"`
	ChangesLast24h int             `json:"changes_last_24h"`
	LastChange     time.Time       `json:"last_change,omitempty"`
	JournalError   string          `json:"journal_error,omitempty"`
	Updated        time.Time       `json:"updated"`
}

// ChangeStatus is one change and where it stands.
type ChangeStatus struct {
	ID      int    `json:"id"`
	Setting string `json:"setting"`
	Old     string `json:"old"`
	New     string `json:"new"`
	Rule    string `json:"rule,omitempty"`
	Origin  string `json:"origin,omitempty"`
	// State is the latest outcome, "verifying" while an applied change is being verified, or
	// "unresolved" for an intent without an outcome.
	State  string     `json:"state"`
	Since  time.Time  `json:"since"`
	Reason string     `json:"reason,omitempty"`
	Until  *time.Time `json:"until,omitempty"`
}

// States of a change besides its outcomes.
const (
	StateVerifying  = "verifying"
	StateUnresolved = "unresolved"
)

// Refusal is a finding the manager does not apply.
type Refusal struct {
	Rule        string `json:"rule"`
	Setting     string `json:"setting"`
	Recommended string `json:"recommended"`
	Reason      string `json:"reason"`
}

// Hold is a running rejection or hands-off period.
type Hold struct {
	Setting string `json:"setting"`
	// Value is the rejected value; empty for a hands-off period, which covers any value.
	Value  string    `json:"value,omitempty"`
	Kind   Outcome   `json:"kind"` // rejected or abandoned
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// Status returns the latest status; safe for concurrent use.
func (m *Manager) Status() Status {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st := m.status
	st.Settings = slices.Clone(st.Settings)
	st.Changes = slices.Clone(st.Changes)
	st.Refused = slices.Clone(st.Refused)
	st.Holds = slices.Clone(st.Holds)
	return st
}

func (m *Manager) publish(l *ledger, props []Proposal, waiting string) {
	now := m.now()
	st := Status{
		Mode: m.cfg.Mode, Settings: slices.Clone(m.cfg.Settings), Reason: modeReason(m.cfg.Mode),
		Waiting: waiting, Outcomes: map[Outcome]int{}, Updated: now,
	}
	if len(m.advisorOnly) > 0 {
		st.AdvisorOnly = map[string]string{}
		for k, v := range m.advisorOnly {
			st.AdvisorOnly[k] = v
		}
	}
	st.Changes = changeStatuses(l)
	for _, c := range l.changes {
		for _, o := range c.Outcomes {
			st.Outcomes[o.Outcome]++
		}
		if c.Intent.Origin == OriginDaemon && now.Sub(c.Intent.Time) < 24*time.Hour {
			st.ChangesLast24h++
		}
		if c.Intent.Time.After(st.LastChange) {
			st.LastChange = c.Intent.Time
		}
		if r, ok := c.outcome(Rejected); ok && r.Until != nil && now.Before(*r.Until) {
			st.Holds = append(st.Holds, Hold{Setting: c.Intent.Setting, Value: c.Intent.New, Kind: Rejected, Until: *r.Until, Reason: r.Reason})
		}
		if r, ok := c.outcome(Abandoned); ok && r.Until != nil && now.Before(*r.Until) {
			st.Holds = append(st.Holds, Hold{Setting: c.Intent.Setting, Kind: Abandoned, Until: *r.Until, Reason: r.Reason})
		}
	}
	for _, p := range props {
		if p.Refused != "" {
			st.Refused = append(st.Refused, Refusal{Rule: p.Finding.Rule, Setting: p.Finding.Setting, Recommended: p.Finding.Recommended, Reason: p.Refused})
		}
	}
	m.mu.Lock()
	st.JournalError = m.status.JournalError
	m.status = st
	m.mu.Unlock()
}

// changeStatuses lists the ledger's changes, newest first.
func changeStatuses(l *ledger) []ChangeStatus {
	out := make([]ChangeStatus, 0, len(l.changes))
	for i := len(l.changes) - 1; i >= 0; i-- {
		c := l.changes[i]
		last := c.lastRecord()
		cs := ChangeStatus{ID: c.ID(), Setting: c.Intent.Setting, New: c.Intent.New, Rule: c.Intent.Rule, Origin: c.Intent.Origin,
			State: string(c.Last()), Since: last.Time, Reason: last.Reason, Until: last.Until}
		if c.Intent.Old != nil {
			cs.Old = c.Intent.Old.Value
		}
		switch {
		case c.Last() == "":
			cs.State = StateUnresolved
		case c.Last() == Applied && c.Intent.Before != nil && c.Intent.Origin == OriginDaemon:
			cs.State = StateVerifying
		case c.Last() == Rejected:
			// The rollback before it says what happened; the rejection when it ends.
			if rb, ok := c.outcome(RolledBack); ok {
				cs.Reason = rb.Reason
			}
		}
		out = append(out, cs)
	}
	return out
}
