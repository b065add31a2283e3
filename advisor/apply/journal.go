package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	// KindCompacted ends a compacted journal: its ID is the highest ID drawn so far, its
	// counts the outcomes of the records moved to <journal>.1.
	KindCompacted = "compacted"
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
	// Verified: no figure the change was meant to improve was shown worse (its interval above
	// zero) over the verification window, or a crossover trial's pairs. The change stays; with
	// Unconfirmed set, no figure was shown better either.
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
	// UndoFailed: the change failed and undoing it could not be confirmed (the server went
	// away right after ALTER SYSTEM, say): the new value may be in place, now or after a
	// restart. Rollback and the daemon's crash recovery compare the live value with the
	// journal's and settle it.
	UndoFailed Outcome = "undo_failed"
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
	// Trial is a crossover trial's switch (outcome trial): the period it starts and its value.
	Trial *TrialStep `json:"trial,omitempty"`
	// Unconfirmed marks a verified outcome whose figures showed no gain: no interval excluded
	// no change, and the change was kept (figures.go, compare).
	Unconfirmed bool `json:"unconfirmed,omitempty"`
	// Live is the live value when the outcome was recorded.
	Live *Value `json:"live,omitempty"`
	// Reason says why: what failed, why it was rolled back, what the operator changed.
	Reason string `json:"reason,omitempty"`
	// Until ends a rejection, or the hands-off period after an operator's change.
	Until *time.Time `json:"until,omitempty"`
	// Counts are a compacted record's: the outcomes of the records moved out of the journal.
	Counts map[Outcome]int `json:"counts,omitempty"`
}

// Journal is the append-only journal file. Each record is written with one write(2) and
// fsynced before Append returns; appends from several processes (the daemon and the apply and
// rollback commands) are serialized with an exclusive flock, under which new IDs are drawn.
//
// A Journal keeps the ledger of what it read, and what the file was then (device, inode, size,
// modification time): reading again after an append or on the next snapshot reads only what
// another process added, and nothing when the file is as it was. The file is read as a stream,
// one line at a time, and the ledger keeps only what can still matter (ledger), so a journal
// of any length costs a few megabytes. Past compactBytes an append compacts it (compact.go).
type Journal struct {
	path string

	mu sync.Mutex
	// led is the ledger as of seen; its pointer never changes, so a caller's ledger follows
	// the appends.
	led    *ledger
	loaded bool
	seen   fileState
	// read counts the lines and bytes read into led, and the torn lines met.
	read  scanned
	maxID int
	// compacted is the journal's size after the last compaction by this process.
	compacted int64
	// compactErr is why the last compaction failed: the next append past the bound tries again.
	compactErr error
}

// fileState is what tells whether the file changed since it was read.
type fileState struct {
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
}

func stateOf(f *os.File) (fileState, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileState{}, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	return fileState{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim}, nil
}

// NewJournal returns the journal at path; nothing is opened until it is read or appended to.
func NewJournal(path string) *Journal {
	j := &Journal{path: path, led: &ledger{}}
	j.led.reset()
	return j
}

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Read returns every record of the journal, oldest first, and which lines were cut short by a
// crash; a missing file is an empty journal. It holds the whole journal in memory: the
// manager and rollback read the ledger instead.
func (j *Journal) Read() ([]Record, string, error) {
	dir, err := openJournalDir(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	defer dir.Close()
	f, _, err := openJournalFile(dir, j.path, os.O_RDONLY, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("open apply journal: %w", err)
	}
	defer f.Close()
	var recs []Record
	s, err := scanJournal(j.path, f, 0, func(r Record, _ []byte) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return recs, tornMessage(j.path, s.torn), nil
}

// load brings the ledger up to date with the file and returns it, with what the operator
// should hear of ("" when nothing): lines cut short by a crash, a compaction that failed. A
// missing file is an empty journal.
func (j *Journal) load() (*ledger, string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	dir, err := openJournalDir(j.path)
	if errors.Is(err, fs.ErrNotExist) {
		j.reset()
		return j.led, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	defer dir.Close()
	f, _, err := openJournalFile(dir, j.path, os.O_RDONLY, false)
	if errors.Is(err, fs.ErrNotExist) {
		j.reset()
		return j.led, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("open apply journal: %w", err)
	}
	defer f.Close()
	if err := j.catchUp(f); err != nil {
		return nil, "", err
	}
	note := tornMessage(j.path, j.read.torn)
	if j.compactErr != nil {
		note = strings.TrimPrefix(note+"; compacting the journal failed (it is retried at the next append): "+j.compactErr.Error(), "; ")
	}
	return j.led, note, nil
}

// reset forgets what was read.
func (j *Journal) reset() {
	j.led.reset()
	j.loaded, j.seen, j.read, j.maxID = false, fileState{}, scanned{}, 0
}

// catchUp reads into the ledger what f holds beyond what was read: nothing when the file is as
// it was, the lines added when it grew, all of it when it was replaced or rewritten.
func (j *Journal) catchUp(f *os.File) error {
	st, err := stateOf(f)
	if err != nil {
		return err
	}
	if j.loaded && st == j.seen {
		return nil
	}
	if !j.loaded || st.dev != j.seen.dev || st.ino != j.seen.ino || st.size < j.read.bytes || st.size == j.seen.size {
		j.reset()
	}
	s, err := scanJournal(j.path, io.NewSectionReader(f, j.read.bytes, st.size-j.read.bytes), j.read.lines, func(r Record, _ []byte) error {
		return j.take(r)
	})
	if j.led.prune(); err == nil && len(j.led.changes) > maxLedgerChanges {
		err = fmt.Errorf("%w (%d)", errLedgerFull, maxLedgerChanges)
	}
	if err != nil {
		j.reset()
		if errors.Is(err, errLedgerFull) {
			err = fmt.Errorf("apply journal %s: %w: it is not a journal the advisor wrote; move it aside and check the settings it names by hand", j.path, err)
		}
		return err
	}
	j.read.lines += s.lines
	j.read.bytes += s.bytes
	for _, n := range s.torn {
		if !slices.Contains(j.read.torn, n) {
			j.read.torn = append(j.read.torn, n)
		}
	}
	j.seen, j.loaded = st, true
	return nil
}

// take adds a record read or written to the ledger.
func (j *Journal) take(r Record) error {
	j.maxID = max(j.maxID, r.ID)
	return j.led.add(r)
}

// Append writes records in order, fsyncing each. An intent or dry run with ID 0 gets the next
// free ID; the records are returned as written, and are in the ledger.
func (j *Journal) Append(recs ...Record) ([]Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	dir, err := openJournalDir(j.path)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, err := j.openLocked(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close() // closing unlocks
	if err := j.catchUp(f); err != nil {
		return nil, err
	}
	// A torn last line (a crash mid-write) is ended so that the next record starts a line of
	// its own; reading skips the torn one.
	if ended, err := endLastLine(f, j.seen.size); err != nil {
		return nil, fmt.Errorf("write apply journal %s: %w", j.path, err)
	} else if ended {
		j.read.lines++
	}
	out := make([]Record, 0, len(recs))
	for _, r := range recs {
		if (r.Kind == KindIntent || r.Kind == KindDryRun) && r.ID == 0 {
			r.ID = j.maxID + 1
		}
		b, err := json.Marshal(r)
		if err != nil {
			return out, fmt.Errorf("encode apply journal record: %w", err)
		}
		if _, err := f.Write(append(b, '\n')); err != nil {
			return out, fmt.Errorf("write apply journal %s: %w", j.path, err)
		}
		if err := f.Sync(); err != nil {
			return out, fmt.Errorf("fsync apply journal %s: %w", j.path, err)
		}
		j.read.lines++
		j.take(r) //nolint:errcheck // a record just written: the ledger's bound is the reader's
		out = append(out, r)
	}
	// What was written is in the ledger: the file as it stands is the one the ledger holds.
	if j.seen, err = stateOf(f); err != nil {
		return out, err
	}
	j.read.bytes = j.seen.size
	if j.seen.size > max(compactBytes, 2*j.compacted) {
		j.compactErr = j.compact(dir, f)
	}
	return out, nil
}

// openLocked opens the journal for appending (created when missing, its name fsynced into the
// directory) and locks it. A file that lost its name while this process waited for the lock
// (a compaction put a new one in place) is let go, and the new one locked.
func (j *Journal) openLocked(dir *os.File) (*os.File, error) {
	for range 10 {
		f, created, err := openJournalFile(dir, j.path, os.O_RDWR|os.O_APPEND, true)
		if err != nil {
			return nil, fmt.Errorf("open apply journal: %w (the directory %s must exist and be writable: see deploy/systemd/apply.conf)", err, filepath.Dir(j.path))
		}
		if created {
			if err := syncDirFile(dir); err != nil {
				f.Close()
				return nil, err
			}
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock apply journal %s: %w", j.path, err)
		}
		same, err := stillNamed(dir, f, j.path)
		if err != nil || same {
			if err != nil {
				f.Close()
				f = nil
			}
			return f, err
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock apply journal %s: it was replaced each time this process got its lock; is another process compacting it in a loop?", j.path)
}

// endLastLine writes a newline when the file of size bytes does not end with one.
func endLastLine(f *os.File, size int64) (bool, error) {
	if size == 0 {
		return false, nil
	}
	last := make([]byte, 1)
	if _, err := f.ReadAt(last, size-1); err != nil {
		return false, err
	}
	if last[0] == '\n' {
		return false, nil
	}
	_, err := f.Write([]byte("\n"))
	return err == nil, err
}

// lockChanges takes the journal's change lock, an exclusive flock on <journal>.lock that a
// process holds from an intent to its outcome. Reconciliation takes it without blocking: an
// intent without an outcome while nobody holds the lock is a crash's leftover, not another
// process's change in flight. The lock file is never removed (removing it would let two
// processes lock two different files); it is opened as the journal is, never through a link.
func (j *Journal) lockChanges(block bool) (unlock func(), ok bool, err error) {
	dir, err := openJournalDir(j.path)
	if err != nil {
		return nil, false, err
	}
	defer dir.Close()
	f, _, err := openJournalFile(dir, j.path+".lock", os.O_RDWR, true)
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
