package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// refusedBackoff is how long settings stay advice after the server refused ALTER SYSTEM for
// every setting (ErrAlterSystemRefused): a retry fails the same way until its operator changes
// the server, and each try would spend one of the day's changes. allow_alter_system = off is
// seen before any try (Writable); an unwritable postgresql.auto.conf costs one failed change,
// then one try an hour at most.
const refusedBackoff = time.Hour

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
	// backoff holds settings whose actuator's server refused ALTER SYSTEM until that time:
	// checkPrivileges leaves them advice until then.
	backoff map[string]time.Time
	// serverRefuses holds the advice-only settings whose server refuses ALTER SYSTEM as a whole
	// (ErrAlterSystemRefused), not just this role: `apply --yes` then could not do its job.
	serverRefuses map[string]bool
	privChecked   time.Time
	said          map[string]bool
	dryRunSeen    map[string]string
	// elsewhere holds the changes of the journal made on another server than --dsn reaches,
	// by ID, with why they are left alone (otherServer).
	elsewhere map[int]string
	// restartAfter holds, per change, when a failed restart request may be tried again.
	restartAfter map[int]time.Time
	// server is the system identifier and role of the last snapshot (serverChanged).
	server string
	// cluster is how this member runs the advisor's changes in the cluster's configuration.
	cluster []ClusterChangeStatus
	// trial is the crossover trial this manager runs, nil when none (crossover.go).
	trial *trial

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
		cfg:           cfg,
		src:           src,
		acts:          acts,
		journal:       NewJournal(cfg.Journal),
		logger:        logger.With(zap.String("component", "apply")),
		history:       rules.NewHistory(historyLimit),
		advisorOnly:   map[string]string{},
		backoff:       map[string]time.Time{},
		serverRefuses: map[string]bool{},
		said:          map[string]bool{},
		dryRunSeen:    map[string]string{},
		elsewhere:     map[int]string{},
		restartAfter:  map[int]time.Time{},
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
	if m.cfg.Mode == ModeOn && m.cfg.MaxPerDay == 0 {
		m.logger.Warn("apply.max-per-day is 0: no changes will be made (the advisor keeps advising)")
	}
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
func (m *Manager) actuator(setting string) Actuator { return actuatorFor(m.acts, setting) }

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
	m.serverChanged(st.Snapshot)
	if m.firstSnap.IsZero() {
		m.firstSnap = st.Snapshot.Time
	}
	m.history.Add(*st.Snapshot)
	m.trimHistory()
	if m.cfg.Mode == ModeOff {
		return nil
	}

	// The journal's ledger: read once, then only what was added since.
	l, note, err := m.journal.load()
	if err != nil {
		m.setJournalErr(err)
		return err
	}
	if note != "" {
		m.once("note:"+note, func() { m.logger.Warn("apply journal needs attention", zap.String("detail", note)) })
	}
	if pg := st.Snapshot.Postgres; pg != nil && pg.InRecovery {
		// A standby's settings are its operator's decision at failover time: no attempt, no
		// rollback, nothing counted against the daily cap while the server is in recovery.
		m.once("standby", func() { m.logger.Warn("apply: " + standbyReason) })
		err := m.readCluster(ctx, false)
		m.publish(l, nil, standbyReason)
		return err
	}
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
		if err := m.readCluster(ctx, true); err != nil {
			errs = append(errs, err)
		}
		if err := m.watch(ctx, l); err != nil {
			errs = append(errs, err)
		}
	} else if err := m.readCluster(ctx, false); err != nil {
		errs = append(errs, err)
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

// serverChanged starts the figures afresh when the snapshot's server is another one, or the
// same one in another role, than the last snapshot's: a switchover, a failover, --dsn led
// elsewhere. Figures from before it describe another server's load (a primary's commits, a
// standby's replay), so no window may hold both: the history restarts, and with it every
// verification window (verifyingSince) and the figures a new change is judged against.
func (m *Manager) serverChanged(snap *collector.Snapshot) {
	pg := snap.Postgres
	if pg == nil || pg.SystemIdentifier == "" {
		return
	}
	role := "primary"
	if pg.InRecovery {
		role = "standby"
	}
	key := pg.SystemIdentifier + " " + role
	if m.server != "" && key != m.server {
		m.logger.Info("apply: the server's identity or role changed: the figures, and every verification window, start again",
			zap.String("was", m.server), zap.String("is", key))
		m.history = rules.NewHistory(historyLimit)
		m.firstSnap = snap.Time
	}
	m.server = key
}

// standbyReason is why nothing is applied on a server in recovery.
const standbyReason = "the server is a standby (in recovery): its settings are its operator's decision at failover time; nothing is applied here (apply on the primary)"

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
		if m.now().Before(m.backoff[s]) {
			continue
		}
		a := m.actuator(s)
		var why string
		m.serverRefuses[s] = false
		if a == nil {
			why = "no actuator for " + s + " is configured"
		} else if err := a.Writable(ctx, s); err != nil {
			why = err.Error()
			m.serverRefuses[s] = errors.Is(err, ErrAlterSystemRefused)
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

// backOff keeps every allowed setting of actuator a advice for refusedBackoff after its server
// refused ALTER SYSTEM as a whole (ErrAlterSystemRefused), with the reason in the status.
func (m *Manager) backOff(a Actuator, err error) {
	until := m.now().Add(refusedBackoff)
	why := fmt.Sprintf("%v; no change is tried before %s", err, until.UTC().Format(time.RFC3339))
	for _, s := range m.cfg.Settings {
		if m.actuator(s) == a {
			m.advisorOnly[s] = why
			m.backoff[s] = until
			m.serverRefuses[s] = true
		}
	}
	m.logger.Warn("apply: the server refuses ALTER SYSTEM for every setting; they stay advice until it allows it", zap.Error(err),
		zap.Time("retry_after", until))
}

// record appends records to the journal, whose ledger l is: the journal adds them to it.
func (m *Manager) record(_ *ledger, recs ...Record) ([]Record, error) {
	out, err := m.journal.Append(recs...)
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
