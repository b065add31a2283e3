package apply

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// change is one change as the journal tells it: its intent and the outcomes that followed (the
// latest of each outcome, in the order they came; ledger.add keeps no more).
type change struct {
	Intent   Record
	Outcomes []Record
}

// ID is the change's ID.
func (c *change) ID() int { return c.Intent.ID }

// Last is the latest outcome, or "" while none was recorded.
func (c *change) Last() Outcome {
	if len(c.Outcomes) == 0 {
		return ""
	}
	return c.Outcomes[len(c.Outcomes)-1].Outcome
}

// lastRecord is the latest outcome record (the intent when there is none).
func (c *change) lastRecord() Record {
	if len(c.Outcomes) == 0 {
		return c.Intent
	}
	return c.Outcomes[len(c.Outcomes)-1]
}

// outcome returns the latest outcome record of kind o.
func (c *change) outcome(o Outcome) (Record, bool) {
	for i := len(c.Outcomes) - 1; i >= 0; i-- {
		if c.Outcomes[i].Outcome == o {
			return c.Outcomes[i], true
		}
	}
	return Record{}, false
}

// addOutcome keeps r as the latest outcome, and of its kind only r: what the manager and
// rollback read is the latest outcome and the latest of a kind, and a journal may hold any
// number of outcomes for one change.
func (c *change) addOutcome(r Record) {
	if !knownOutcome(r.Outcome) {
		r.Outcome = unknownOutcome
	}
	for i, o := range c.Outcomes {
		if o.Outcome == r.Outcome {
			c.Outcomes = append(c.Outcomes[:i:i], c.Outcomes[i+1:]...)
			break
		}
	}
	c.Outcomes = append(c.Outcomes, slim(r))
}

// InEffect reports whether the change's new value is (or waits for a restart to be) in place
// as far as the journal knows: applied, pending restart or verified, and neither rolled back,
// failed nor abandoned since; or in a crossover trial, where it may be (rollback restores the
// old value either way).
func (c *change) InEffect() bool {
	switch c.Last() {
	case Applied, PendingRestart, Verified, Trial:
		return true
	}
	return false
}

// unsettled reports whether the journal cannot tell if the change is in effect: an intent
// without an outcome (a crash), or a change whose undo failed. Crash recovery and rollback
// settle it against the live value.
func (c *change) unsettled() bool { return c.Last() == "" || c.Last() == UndoFailed }

// Ended is when the change stopped needing attention: verified, rolled back, failed or
// abandoned (the zero time while it is being applied or verified).
func (c *change) Ended() time.Time {
	switch c.Last() {
	case Verified, RolledBack, Rejected, Failed, Abandoned:
		return c.lastRecord().Time
	}
	return time.Time{}
}

// unknownOutcome stands for every outcome this version does not know: one slot of them per
// change, however many a journal holds.
const unknownOutcome Outcome = "unknown"

func knownOutcome(o Outcome) bool {
	switch o {
	case Applied, PendingRestart, Verified, RolledBack, Rejected, Failed, Abandoned, UndoFailed, Trial:
		return true
	}
	return false
}

// slim is a record as the ledger keeps it: without the evidence, summaries and figures that
// only the journal's reader needs. An intent keeps its figures before the change, which
// verification compares with.
func slim(r Record) Record {
	r.Evidence, r.Summary, r.After, r.Counts = nil, "", nil, nil
	// A verdict's comparison stays (the status shows its intervals), without the values the
	// intervals were computed from.
	r.Comparison = slices.Clone(r.Comparison)
	if r.Kind != KindIntent {
		r.Before, r.Old, r.Live = nil, nil, nil
	}
	return r
}

// keepRecent is how long ended changes stay in the ledger, and in the journal when it is
// compacted: the daily cap counts the changes of the last 24 hours.
const keepRecent = 24 * time.Hour

// maxLedgerChanges bounds the changes a ledger holds after pruning (a few kilobytes each): a
// journal with more changes in effect or unsettled is not one the advisor wrote.
const maxLedgerChanges = 10000

// errLedgerFull is returned when a journal needs more than maxLedgerChanges in memory.
var errLedgerFull = errors.New("more changes in effect, unsettled or recent than one process keeps in memory")

// ledger is what the journal says: the changes that can still matter, in order, and the count
// of every outcome ever recorded. Changes that ended more than keepRecent ago are pruned,
// except the latest of each setting and those whose rejection or hands-off period still runs:
// nothing the manager, the status or rollback reads is lost.
type ledger struct {
	changes []*change
	byID    map[int]*change
	// counts are the outcome records, by outcome, including those of pruned changes and of
	// records compaction moved out of the journal (the compacted record carries them).
	counts map[Outcome]int
	// newest is the latest record's time: pruning measures keepRecent from it (or from now, if
	// that is earlier), so that a journal of the past loses nothing a clock in the past needs.
	newest  time.Time
	pruneAt int
	now     func() time.Time
}

// minPruneAt is the fewest changes at which the ledger prunes while records are added.
const minPruneAt = 1024

func newLedger(recs []Record) *ledger {
	l := &ledger{}
	l.reset()
	for _, r := range recs {
		l.add(r) //nolint:errcheck // tests' small journals
	}
	return l
}

// reset empties the ledger. Its slices are replaced, never cleared in place: a caller ranging
// over the changes while a record is added (which may prune) goes on over what it had.
func (l *ledger) reset() {
	l.changes, l.byID, l.counts = nil, map[int]*change{}, map[Outcome]int{}
	l.newest, l.pruneAt = time.Time{}, minPruneAt
	if l.now == nil {
		l.now = time.Now
	}
}

// add takes in one record, in the journal's order.
func (l *ledger) add(r Record) error {
	if r.Time.After(l.newest) {
		l.newest = r.Time
	}
	switch r.Kind {
	case KindIntent:
		c := &change{Intent: slim(r)}
		l.changes = append(l.changes, c)
		l.byID[r.ID] = c
	case KindOutcome:
		if knownOutcome(r.Outcome) {
			l.counts[r.Outcome]++
		}
		if c := l.byID[r.ID]; c != nil {
			c.addOutcome(r)
		}
	case KindCompacted:
		for o, n := range r.Counts {
			if knownOutcome(o) && n > 0 {
				l.counts[o] += n
			}
		}
	}
	if len(l.changes) < l.pruneAt {
		return nil
	}
	l.prune()
	if len(l.changes) > maxLedgerChanges {
		return fmt.Errorf("%w (%d)", errLedgerFull, maxLedgerChanges)
	}
	return nil
}

// ref is the time pruning measures from: the newest record's, or now when that is earlier.
func (l *ledger) ref() time.Time {
	if now := l.now(); now.Before(l.newest) {
		return now
	}
	return l.newest
}

// prune drops the changes nothing reads any more (see ledger).
func (l *ledger) prune() {
	ref := l.ref()
	latest, settled := map[string]*change{}, map[string]*change{}
	for _, c := range l.changes {
		latest[c.Intent.Setting] = c
		if c.Last() != "" {
			settled[c.Intent.Setting] = c
		}
	}
	kept := make([]*change, 0, len(l.changes)/2+1)
	for _, c := range l.changes {
		// managing walks back past intents without an outcome to the latest settled change.
		if latest[c.Intent.Setting] == c || settled[c.Intent.Setting] == c || c.needed(ref) {
			kept = append(kept, c)
			continue
		}
		if l.byID[c.ID()] == c {
			delete(l.byID, c.ID())
		}
	}
	l.changes = kept
	l.pruneAt = max(2*len(kept), minPruneAt)
}

// needed reports whether the change matters at ref: in effect or unsettled (rollback), recent
// (the cool-down and the daily cap), or held (a rejection or hands-off period still running).
func (c *change) needed(ref time.Time) bool {
	if c.unsettled() || c.InEffect() {
		return true
	}
	if ref.Sub(c.Intent.Time) < keepRecent || ref.Sub(c.lastRecord().Time) < keepRecent {
		return true
	}
	for _, o := range c.Outcomes {
		if (o.Outcome == Rejected || o.Outcome == Abandoned) && o.Until != nil && o.Until.After(ref) {
			return true
		}
	}
	return false
}

// blocked says whether the journal forbids changing setting to value at now: a rejection of
// that value, or a hands-off period after an operator's change of the setting. It returns the
// reason.
func (l *ledger) blocked(setting, value string, now time.Time) (string, bool) {
	for i := len(l.changes) - 1; i >= 0; i-- {
		c := l.changes[i]
		if c.Intent.Setting != setting {
			continue
		}
		if r, ok := c.outcome(Rejected); ok && r.Until != nil && now.Before(*r.Until) && sameValue(setting, c.Intent.New, value) {
			return fmt.Sprintf("%s=%s was rolled back on %s (%s) and is not proposed again until %s",
				setting, value, r.Time.UTC().Format(time.RFC3339), r.Reason, r.Until.UTC().Format(time.RFC3339)), true
		}
		if r, ok := c.outcome(Abandoned); ok && r.Until != nil && now.Before(*r.Until) {
			return fmt.Sprintf("someone else changed %s on %s (%s): the advisor keeps its hands off it until %s",
				setting, r.Time.UTC().Format(time.RFC3339), r.Reason, r.Until.UTC().Format(time.RFC3339)), true
		}
	}
	return "", false
}

// managing returns the newest change of setting that is in effect, if any.
func (l *ledger) managing(setting string) *change {
	for i := len(l.changes) - 1; i >= 0; i-- {
		c := l.changes[i]
		if c.Intent.Setting != setting {
			continue
		}
		if c.InEffect() {
			return c
		}
		if c.Last() != "" {
			return nil
		}
	}
	return nil
}
