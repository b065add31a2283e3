package apply

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// compactBytes is the size past which an append compacts the journal (docs/apply.md, "The
// journal"): years of a daemon's changes at four a day, and a second's read.
const compactBytes = 8 << 20

// compact rewrites the journal with what the ledger holds - the changes in effect or
// unsettled with their whole history, those of the last keepRecent, the latest of each setting,
// those whose rejection or hands-off period still runs - and the dry runs of the last
// keepRecent, and ends it with a compacted record. The whole journal as it was is kept first as
// <journal>.1 (replacing the one before), so that what is dropped is still there for an
// operator. Both files are written beside the journal and renamed into place: the journal's
// name always holds a whole journal. It runs under the journal's lock; f is the locked file,
// read to its end.
func (j *Journal) compact(dir, f *os.File) error {
	base := filepath.Base(j.path)
	size := j.seen.size
	err := writeFileAtomic(dir, base+".1", func(w io.Writer) error {
		_, err := io.Copy(w, io.NewSectionReader(f, 0, size))
		return err
	})
	if err != nil {
		return err
	}
	j.led.prune()
	ref := j.led.ref()
	kept := map[Outcome]int{}
	lines, dropped := 0, 0
	err = writeFileAtomic(dir, base, func(w io.Writer) error {
		_, err := scanJournal(j.path, io.NewSectionReader(f, 0, size), 0, func(r Record, line []byte) error {
			if !j.keeps(r, ref) {
				dropped++
				return nil
			}
			if r.Kind == KindOutcome && knownOutcome(r.Outcome) {
				kept[r.Outcome]++
			}
			lines++
			if _, err := w.Write(line); err != nil {
				return err
			}
			_, err := w.Write([]byte{'\n'})
			return err
		})
		if err != nil {
			return err
		}
		lines++
		return j.writeCompacted(w, ref, kept, dropped, base+".1")
	})
	if err != nil {
		return err
	}
	// The ledger is what it was; the file it stands for is the new one.
	nf, _, err := openJournalFile(dir, j.path, os.O_RDONLY, false)
	if err != nil {
		j.reset()
		return fmt.Errorf("open the compacted apply journal: %w", err)
	}
	defer nf.Close()
	if j.seen, err = stateOf(nf); err != nil {
		j.reset()
		return err
	}
	j.read = scanned{lines: lines, bytes: j.seen.size}
	j.compacted = j.seen.size
	return nil
}

// keeps reports whether compaction keeps r.
func (j *Journal) keeps(r Record, ref time.Time) bool {
	switch r.Kind {
	case KindIntent, KindOutcome:
		return j.led.byID[r.ID] != nil
	case KindDryRun:
		return ref.Sub(r.Time) < keepRecent
	}
	// Compacted records: the new one carries their counts.
	return false
}

// writeCompacted writes the compacted record: the highest ID drawn (IDs go on after it), and
// the outcomes of the records dropped, so that the counts stay what they were.
func (j *Journal) writeCompacted(w io.Writer, ref time.Time, kept map[Outcome]int, dropped int, rotated string) error {
	counts := map[Outcome]int{}
	for o, n := range j.led.counts {
		if d := n - kept[o]; d > 0 {
			counts[o] = d
		}
	}
	rec := Record{ID: j.maxID, Time: ref, Kind: KindCompacted, Counts: counts,
		Reason: fmt.Sprintf("compacted: %d records of changes that ended before %s, and older dry runs, are in %s",
			dropped, ref.Add(-keepRecent).UTC().Format(time.RFC3339), rotated)}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode the compacted record: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
