package apply

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// Kinds of journal records.
const (
	// KindIntent is written, and fsynced, before a change is made.
	KindIntent = "intent"
	// KindOutcome follows an intent: what became of the change.
	KindOutcome = "outcome"
	// KindDryRun records what dry-run mode would have changed.
	KindDryRun = "dry_run"
)

// Outcome is what became of a change.
type Outcome string

// Outcomes, in the order a change can go through them.
const (
	// Applied: the running value is the new one (confirmed after the reload, the write to
	// /proc/sys, or a restart for a restart-context setting). Verification follows.
	Applied Outcome = "applied"
	// PendingRestart: written (postgresql.auto.conf) and waiting for a restart of PostgreSQL,
	// which the advisor never does itself.
	PendingRestart Outcome = "pending_restart"
	// Verified: the figures the change was meant to improve were not worse beyond noise over the
	// verification window. The change stays.
	Verified Outcome = "verified"
	// RolledBack: the old value was restored (by the daemon after a regression, or by
	// `pgwal-advisor rollback`).
	RolledBack Outcome = "rolled_back"
	// Rejected: the recommendation is not proposed again until RejectedUntil.
	Rejected Outcome = "rejected"
	// Failed: the change did not take effect (an error, a timeout, a crash before it was made);
	// whatever part of it was made was undone.
	Failed Outcome = "failed"
	// Abandoned: someone else changed the setting; the advisor no longer manages it.
	Abandoned Outcome = "abandoned"
)

// Origins of records.
const (
	OriginDaemon   = "daemon"
	OriginApply    = "apply"
	OriginRollback = "rollback"
)

// Record is one line of the journal. An intent carries the change (setting, old and new values,
// why, and the figures before it); an outcome carries the change's ID, what happened and the
// figures that decided it.
type Record struct {
	// ID numbers a change; its outcomes carry the same ID.
	ID     int       `json:"id"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Origin string    `json:"origin,omitempty"`

	Outcome Outcome `json:"outcome,omitempty"`
	Setting string  `json:"setting"`
	// Action is the finding's action class (reload, restart, sysctl).
	Action rules.Action `json:"action,omitempty"`
	// Old is the live value before the change, with what restoring it needs.
	Old *Value `json:"old,omitempty"`
	// New is the value the change sets.
	New string `json:"new,omitempty"`
	// Rule, Summary and Evidence are the finding's.
	Rule     string           `json:"rule,omitempty"`
	Summary  string           `json:"summary,omitempty"`
	Evidence []rules.Evidence `json:"evidence,omitempty"`
	// Before are the figures of the window before the change; After those of the window after.
	Before *Figures `json:"before,omitempty"`
	After  *Figures `json:"after,omitempty"`
	// Comparison is the verdict per figure, for verified and rolled_back outcomes.
	Comparison []FigureChange `json:"comparison,omitempty"`
	// Predicted is the finding's prediction, on intents and dry runs (absent from journals
	// written before predictions existed, and for findings that predict nothing).
	Predicted *rules.Predicted `json:"predicted,omitempty"`
	// PredictionCheck is the prediction against what the window after the change measured, on
	// verified and rolled_back outcomes whose figure the history could measure.
	PredictionCheck *rules.PredictionCheck `json:"prediction_check,omitempty"`
	// Live is the live value when the outcome was recorded.
	Live *Value `json:"live,omitempty"`
	// Reason says why: what failed, why it was rolled back, what the operator changed.
	Reason string `json:"reason,omitempty"`
	// Until ends a rejection, or the hands-off period after an operator's change.
	Until *time.Time `json:"until,omitempty"`
}

// Journal is the append-only journal file. Each record is written with one write(2) and
// fsynced before Append returns; appends from several processes (the daemon and the apply and
// rollback commands) are serialized with an exclusive flock, under which new IDs are drawn.
type Journal struct {
	path string
}

// NewJournal returns the journal at path; nothing is opened until Read or Append.
func NewJournal(path string) *Journal { return &Journal{path: path} }

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Read returns the journal's records, oldest first; a missing file is an empty journal. A last
// line cut short by a crash mid-write (a prefix of a record, or NUL bytes where the rest of it
// never reached the disk) is skipped and reported in torn; any other line that is
// not a record is an error, since the state it held is lost.
func (j *Journal) Read() (recs []Record, torn string, err error) {
	b, err := os.ReadFile(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read apply journal %s: %w", j.path, err)
	}
	return parseJournal(j.path, b)
}

func parseJournal(path string, b []byte) ([]Record, string, error) {
	var recs []Record
	var torn []string
	for i, raw := range bytes.Split(b, []byte("\n")) {
		// A crash mid-write can also leave the file longer than what reached the disk: the
		// rest reads as NUL bytes (delayed allocation). A tail of NULs is a cut record too.
		text := bytes.TrimSpace(raw)
		cut := bytes.TrimSpace(bytes.TrimRight(text, "\x00"))
		if len(cut) == 0 {
			if len(text) > 0 {
				torn = append(torn, strconv.Itoa(i+1))
			}
			continue
		}
		text = cut
		var r Record
		err := json.Unmarshal(text, &r)
		if err == nil && r.Kind == "" {
			err = errors.New("no kind")
		}
		if err == nil {
			recs = append(recs, r)
			continue
		}
		// A record cut short by a crash mid-write is a prefix of one: JSON that ends early.
		// Append ends such a line before writing the next record, so it may be anywhere.
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) && strings.Contains(err.Error(), "unexpected end of JSON input") {
			torn = append(torn, strconv.Itoa(i+1))
			continue
		}
		return nil, "", fmt.Errorf("apply journal %s line %d is not a journal record (%v): repair or move the file; nothing is applied until then", path, i+1, err)
	}
	msg := ""
	if len(torn) > 0 {
		msg = fmt.Sprintf("line(s) %s of %s were cut short by a crash while being written and are ignored", strings.Join(torn, ", "), path)
	}
	return recs, msg, nil
}

// Append writes records in order, fsyncing each. An intent with ID 0 gets the next free ID;
// the records are returned as written.
func (j *Journal) Append(recs ...Record) ([]Record, error) {
	dir := filepath.Dir(j.path)
	_, statErr := os.Stat(j.path)
	created := errors.Is(statErr, fs.ErrNotExist)
	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open apply journal: %w (the directory %s must exist and be writable: see deploy/systemd/apply.conf)", err, dir)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock apply journal %s: %w", j.path, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // closing unlocks too
	if created {
		// The new file's name must survive a crash as well as its contents.
		if err := syncDir(dir); err != nil {
			return nil, err
		}
	}
	existing, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	if err != nil {
		return nil, fmt.Errorf("read apply journal %s: %w", j.path, err)
	}
	// A torn last line (a crash mid-write) is ended so that the next record starts a line of
	// its own; Read then skips the torn one.
	if len(existing) > 0 && existing[len(existing)-1] != '\n' {
		if _, err := f.Write([]byte("\n")); err != nil {
			return nil, fmt.Errorf("write apply journal %s: %w", j.path, err)
		}
	}
	next := 0
	needID := false
	for _, r := range recs {
		needID = needID || (r.Kind == KindIntent || r.Kind == KindDryRun) && r.ID == 0
	}
	if needID {
		old, _, err := parseJournal(j.path, existing)
		if err != nil {
			return nil, err
		}
		for _, r := range old {
			next = max(next, r.ID)
		}
	}
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		if (r.Kind == KindIntent || r.Kind == KindDryRun) && r.ID == 0 {
			next++
			r.ID = next
		}
		b, err := json.Marshal(r)
		if err != nil {
			return out, fmt.Errorf("encode apply journal record: %w", err)
		}
		b = append(b, '\n')
		if _, err := f.Write(b); err != nil {
			return out, fmt.Errorf("write apply journal %s: %w", j.path, err)
		}
		if err := f.Sync(); err != nil {
			return out, fmt.Errorf("fsync apply journal %s: %w", j.path, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// syncDir fsyncs a directory, so that a file created or renamed in it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s to fsync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// change is one change as the journal tells it: its intent and the outcomes that followed.
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

// InEffect reports whether the change's new value is (or waits for a restart to be) in place
// as far as the journal knows: applied, pending restart or verified, and neither rolled back,
// failed nor abandoned since.
func (c *change) InEffect() bool {
	switch c.Last() {
	case Applied, PendingRestart, Verified:
		return true
	}
	return false
}

// Ended is when the change stopped needing attention: verified, rolled back, failed or
// abandoned (the zero time while it is being applied or verified).
func (c *change) Ended() time.Time {
	switch c.Last() {
	case Verified, RolledBack, Rejected, Failed, Abandoned:
		return c.lastRecord().Time
	}
	return time.Time{}
}

// ledger is what the journal says: the changes in order, and the rejections and hands-off
// periods that are still running.
type ledger struct {
	changes []*change
	byID    map[int]*change
	dryRuns []Record
}

func newLedger(recs []Record) *ledger {
	l := &ledger{byID: map[int]*change{}}
	for _, r := range recs {
		l.add(r)
	}
	return l
}

// add takes in one record, as newLedger does for each record read.
func (l *ledger) add(r Record) {
	switch r.Kind {
	case KindIntent:
		c := &change{Intent: r}
		l.changes = append(l.changes, c)
		l.byID[r.ID] = c
	case KindOutcome:
		if c := l.byID[r.ID]; c != nil {
			c.Outcomes = append(c.Outcomes, r)
		}
	case KindDryRun:
		l.dryRuns = append(l.dryRuns, r)
	}
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

// lockChanges takes the journal's change lock, an exclusive flock on <journal>.lock that a
// process holds from an intent to its outcome. Reconciliation takes it without blocking: an
// intent without an outcome while nobody holds the lock is a crash's leftover, not another
// process's change in flight. The lock file is never removed (removing it would let two
// processes lock two different files).
func (j *Journal) lockChanges(block bool) (unlock func(), ok bool, err error) {
	f, err := os.OpenFile(j.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open the apply journal's lock file: %w (the directory %s must be writable)", err, filepath.Dir(j.path))
	}
	how := unix.LOCK_EX
	if !block {
		how |= unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s.lock: %w", j.path, err)
	}
	return func() { f.Close() }, true, nil
}
