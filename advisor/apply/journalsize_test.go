package apply

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// longJournal writes at least size bytes of a journal that ended before end: changes that
// ended (failed, rolled back and rejected, abandoned), with the evidence and figures the daemon
// records, one every ten minutes, and a dry run between each. It returns the last ID.
func longJournal(t testing.TB, path string, size int64, end time.Time) int {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var written int64
	put := func(r Record) {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := w.Write(append(b, '\n'))
		written += int64(n)
	}
	var ev []rules.Evidence
	var figs []Figure
	for i := range 8 {
		ev = append(ev, rules.Evidence{Name: fmt.Sprintf("wal_write_wait_seconds_per_mb_%d", i), Value: 0.25 * float64(i), Unit: "seconds_per_mb"})
		figs = append(figs, Figure{Name: fmt.Sprintf("figure_%d", i), Value: 0.5, Unit: "ratio", Samples: 100, Enough: true, Judged: i < 2})
	}
	settings := []string{collector.WALSyncMethod, "checkpoint_completion_target", "max_wal_size", "checkpoint_flush_after"}
	n := int(size/2600) + 1
	id := 0
	for t0 := end.Add(-time.Duration(n) * 10 * time.Minute); written < size; t0 = t0.Add(10 * time.Minute) {
		id++
		s := settings[id%len(settings)]
		before := &Figures{From: t0.Add(-5 * time.Minute), To: t0, Figures: figs}
		put(Record{ID: id, Time: t0, Kind: KindIntent, Origin: OriginDaemon, Setting: s, Action: rules.ActionReload,
			Old: &Value{Value: "1", Source: "default", Context: "sighup"}, New: "2", Rule: "some-rule",
			Summary: strings.Repeat("a finding's summary. ", 8), Evidence: ev, Before: before})
		at := t0.Add(6 * time.Minute)
		until := at.Add(time.Hour)
		switch id % 3 {
		case 0:
			put(Record{ID: id, Time: at, Kind: KindOutcome, Outcome: Failed, Setting: s, New: "2", Reason: "pg_reload_conf() returned false"})
		case 1:
			put(Record{ID: id, Time: at, Kind: KindOutcome, Outcome: RolledBack, Setting: s, New: "2", Reason: "worse", Before: before, After: before})
			put(Record{ID: id, Time: at, Kind: KindOutcome, Outcome: Rejected, Setting: s, New: "2", Reason: "worse", Until: &until})
		default:
			put(Record{ID: id, Time: at, Kind: KindOutcome, Outcome: Abandoned, Setting: s, New: "2", Reason: "someone else", Until: &until})
		}
		id++
		put(Record{ID: id, Time: at, Kind: KindDryRun, Setting: s, New: "3", Evidence: ev})
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestJournalLargeBoundedHeap stands for the memory limit of issue 24's fifth row where no
// cgroup can be made (cmd/pgwal-advisor's TestLargeJournalUnderMemoryLimit runs the binary
// under one): reading a 100 MB journal, and rolling back the changes it holds in effect, keeps
// the heap under 64 MB throughout, and what stays after it under 16 MB.
func TestJournalLargeBoundedHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 100 MB journal")
	}
	path := filepath.Join(t.TempDir(), "apply.journal")
	now := time.Now()
	last := longJournal(t, path, 100<<20, now.Add(-48*time.Hour))
	pg := newFakePG(map[string]string{"checkpoint_completion_target": "0.9", "max_wal_size": "1GB"}, nil)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range [][2]string{{"checkpoint_completion_target", "0.7"}, {"max_wal_size", "2GB"}} {
		old, _ := pg.Read(context.Background(), c[0])
		id := last + 1 + i
		for _, r := range []Record{
			{ID: id, Time: now, Kind: KindIntent, Setting: c[0], New: c[1], Old: &old},
			{ID: id, Time: now, Kind: KindOutcome, Outcome: Applied, Setting: c[0], New: c[1]},
		} {
			b, _ := json.Marshal(r)
			f.Write(append(b, '\n'))
		}
		pg.operator(c[0], c[1])
	}
	f.Close()

	runtime.GC()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	fresh := NewJournal(path)
	results, err := Rollback(context.Background(), fresh, []Actuator{pg}, 0, nil, zaptest.NewLogger(t))
	close(stop)
	wg.Wait()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	l, _, lerr := fresh.load()
	t.Logf("rollback of a 100 MB journal: peak heap %d MB, after it %d MB; %d changes kept of %d", peak>>20, ms.HeapAlloc>>20, len(l.changes), last/2+2)
	if err != nil || lerr != nil || len(results) != 2 || pg.value("max_wal_size") != "1GB" || pg.value("checkpoint_completion_target") != "0.9" {
		t.Fatalf("rollback = %+v, %v, %v; want both changes rolled back", results, err, lerr)
	}
	if peak > 64<<20 || ms.HeapAlloc > 16<<20 {
		t.Errorf("peak heap %d MB, %d MB after: want under 64 MB and 16 MB", peak>>20, ms.HeapAlloc>>20)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > compactBytes {
		t.Errorf("journal after the rollback's appends: %v, %v; want it compacted below %d bytes", fi.Size(), err, compactBytes)
	}
	if fi, err := os.Stat(path + ".1"); err != nil || fi.Size() < 100<<20 {
		t.Errorf("%s.1: %v; want the whole journal kept there", path, err)
	}
}

// TestJournalReadsOnlyWhatWasAdded: a journal read once is not read again when unchanged, and
// only its new lines when another process appended: a line spoiled in place before them is not
// read again (a fresh reader trips on it).
func TestJournalReadsOnlyWhatWasAdded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "apply.journal")
	j := NewJournal(path)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	_, err := j.Append(Record{Time: t0, Kind: KindIntent, Setting: "wal_buffers", New: "16MB", Old: &Value{Value: "4MB"}},
		Record{Time: t0, Kind: KindIntent, Setting: "max_wal_size", New: "2GB", Old: &Value{Value: "1GB"}})
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := j.load()
	if err != nil || len(l.changes) != 2 {
		t.Fatalf("load: %d changes, %v", len(l.changes), err)
	}
	b, _ := os.ReadFile(path)
	first := bytes.IndexByte(b, '\n')
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("x"), first), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, _, err := NewJournal(path).load(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a fresh read of the spoiled journal: %v; want an error naming line 1", err)
	}
	// Another process appends (an outcome of change 2).
	rec, _ := json.Marshal(Record{ID: 2, Time: t0, Kind: KindOutcome, Outcome: Applied, Setting: "max_wal_size"})
	f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(append(rec, '\n'))
	f.Close()
	l2, _, err := j.load()
	if err != nil || l2 != l || !l.byID[2].InEffect() {
		t.Fatalf("after another process's append: %v (same ledger %v); want change 2 in effect, read from the new line only", err, l2 == l)
	}
	if _, err := j.Append(Record{Time: t0, Kind: KindIntent, Setting: "checkpoint_flush_after", New: "0"}); err != nil {
		t.Errorf("append after the new line: %v", err)
	}
	if c := l.byID[3]; c == nil || c.Intent.Setting != "checkpoint_flush_after" {
		t.Errorf("the ledger does not follow the append: %+v", c)
	}
}

// TestJournalCompaction: past compactBytes an append compacts the journal. The old journal is
// kept whole as apply.journal.1; the new one holds the changes in effect with their history,
// the unsettled ones, the last 24 hours, the latest change of each setting and the running
// holds, and a compacted record that keeps IDs and counts going. Another process that read the
// old journal reads the new one, and sees the same changes.
func TestJournalCompaction(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "apply.journal")
	now := time.Now().UTC().Truncate(time.Second)
	last := longJournal(t, path, compactBytes, now.Add(-72*time.Hour))
	j := NewJournal(path)
	// In effect for a year; unsettled; recent and ended; an old one whose hold still runs.
	long := now.Add(-365 * 24 * time.Hour)
	until := now.Add(time.Hour)
	recs := []Record{
		{ID: last + 1, Time: long, Kind: KindIntent, Setting: "bgwriter_flush_after", New: "0", Old: &Value{Value: "512kB"}},
		{ID: last + 1, Time: long, Kind: KindOutcome, Outcome: Applied, Setting: "bgwriter_flush_after"},
		{ID: last + 1, Time: long.Add(time.Hour), Kind: KindOutcome, Outcome: Verified, Setting: "bgwriter_flush_after"},
		{ID: last + 2, Time: now.Add(-2 * time.Hour), Kind: KindIntent, Setting: "wal_buffers", New: "16MB", Old: &Value{Value: "4MB"}},
		{ID: last + 2, Time: now.Add(-2 * time.Hour), Kind: KindOutcome, Outcome: UndoFailed, Setting: "wal_buffers"},
		{ID: last + 3, Time: now.Add(-3 * time.Hour), Kind: KindIntent, Setting: "min_wal_size", New: "1GB", Old: &Value{Value: "80MB"}},
		{ID: last + 3, Time: now.Add(-3 * time.Hour), Kind: KindOutcome, Outcome: Failed, Setting: "min_wal_size"},
		{ID: last + 4, Time: now.Add(-96 * time.Hour), Kind: KindIntent, Setting: collector.WALSyncMethod, New: "fsync", Old: &Value{Value: "fdatasync"}},
		{ID: last + 4, Time: now.Add(-96 * time.Hour), Kind: KindOutcome, Outcome: Rejected, Setting: collector.WALSyncMethod, Until: &until},
	}
	other := NewJournal(path)
	before, _, err := other.load()
	if err != nil {
		t.Fatal(err)
	}
	countsBefore := map[Outcome]int{}
	for k, v := range before.counts {
		countsBefore[k] = v
	}
	if _, err := j.Append(recs...); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Kind == KindOutcome {
			countsBefore[r.Outcome]++
		}
	}
	old, _ := os.ReadFile(path + ".1")
	if fi, err := os.Stat(path); err != nil || fi.Size() > 64<<10 || len(old) < compactBytes || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after the append past %d bytes: journal %v, %v, %s.1 of %d bytes; want it compacted (0600) and the old one kept", compactBytes, fi.Size(), err, path, len(old))
	}
	kept, torn, err := NewJournal(path).Read()
	if err != nil || torn != "" {
		t.Fatal(err, torn)
	}
	ids := map[int]int{}
	for _, r := range kept {
		if r.Kind != KindCompacted {
			ids[r.ID]++
		}
	}
	// bgwriter 3 records, wal_buffers 2, min_wal_size 2, wal_sync_method 2; the latest change of
	// each other setting (an intent and its outcomes) and the compacted record.
	for id, want := range map[int]int{last + 1: 3, last + 2: 2, last + 3: 2, last + 4: 2} {
		if ids[id] != want {
			t.Errorf("change %d: %d records kept, want %d", id, ids[id], want)
		}
	}
	if c := kept[len(kept)-1]; c.Kind != KindCompacted || c.ID != last+4 || !strings.Contains(c.Reason, "apply.journal.1") {
		t.Errorf("last record %+v, want the compacted record with ID %d naming apply.journal.1", c, last+4)
	}
	after, note, err := other.load()
	if err != nil || note != "" {
		t.Fatal(err, note)
	}
	if len(after.changes) > 12 || after.byID[last+1] == nil || !after.byID[last+1].InEffect() || after.byID[last+2].Last() != UndoFailed {
		t.Errorf("another reader after the compaction: %d changes; want the few that matter", len(after.changes))
	}
	if _, blocked := after.blocked(collector.WALSyncMethod, "fsync", now); !blocked {
		t.Errorf("the running rejection was lost")
	}
	for o, n := range countsBefore {
		if after.counts[o] != n {
			t.Errorf("%s outcomes: %d after compaction, want %d", o, after.counts[o], n)
		}
	}
	out, err := other.Append(Record{Time: now, Kind: KindIntent, Setting: "checkpoint_flush_after", New: "0"})
	if err != nil || out[0].ID != last+5 {
		t.Errorf("the next intent after compaction got ID %d (%v), want %d", out[0].ID, err, last+5)
	}
}

// TestJournalBoundsTheLedger: a journal with more changes in effect than maxLedgerChanges (no
// daemon writes one) is refused with what to do, rather than held in memory.
func TestJournalBoundsTheLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "apply.journal")
	var b bytes.Buffer
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for id := 1; id <= maxLedgerChanges+1; id++ {
		for _, r := range []Record{
			{ID: id, Time: t0, Kind: KindIntent, Setting: "max_wal_size", New: "2GB", Old: &Value{Value: "1GB"}},
			{ID: id, Time: t0, Kind: KindOutcome, Outcome: Verified, Setting: "max_wal_size"},
		} {
			line, _ := json.Marshal(r)
			b.Write(append(line, '\n'))
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := NewJournal(path).load()
	if err == nil || !strings.Contains(err.Error(), "move it aside") || !strings.Contains(err.Error(), "10000") {
		t.Errorf("load of %d changes in effect: %v; want a refusal saying what to do", maxLedgerChanges+1, err)
	}
}
