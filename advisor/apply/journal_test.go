package apply

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func TestJournalAppendRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "apply.journal")
	j := NewJournal(path)
	recs, torn, err := j.Read()
	if err != nil || torn != "" || len(recs) != 0 {
		t.Fatalf("a missing journal reads as %v, %q, %v; want empty", recs, torn, err)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	out, err := j.Append(Record{Time: t0, Kind: KindIntent, Setting: "wal_sync_method", Old: &Value{Value: "open_datasync"}, New: "fdatasync"})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].ID != 1 {
		t.Errorf("first intent got ID %d, want 1", out[0].ID)
	}
	if _, err := j.Append(Record{ID: 1, Time: t0, Kind: KindOutcome, Outcome: Applied, Setting: "wal_sync_method"}); err != nil {
		t.Fatal(err)
	}
	// A crash mid-write leaves half a record.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":2,"time":"2026-12-01T00:00:00Z","kind":"int`)
	f.Close()
	recs, torn, err = j.Read()
	if err != nil || len(recs) != 2 || !strings.Contains(torn, "line(s) 3") {
		t.Fatalf("read after a torn write: %d records, %q, %v; want 2 and the torn line named", len(recs), torn, err)
	}
	out, err = j.Append(Record{Time: t0, Kind: KindIntent, Setting: "wal_buffers", New: "16MB"})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].ID != 2 {
		t.Errorf("intent after the torn line got ID %d, want 2", out[0].ID)
	}
	recs, torn, err = j.Read()
	if err != nil || len(recs) != 3 || torn == "" {
		t.Fatalf("read: %d records, %q, %v; want 3, the torn line still reported", len(recs), torn, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("journal mode %v, want 0600", st.Mode().Perm())
	}

	// A line that is not a record is not silently skipped: its state would be lost.
	bad := filepath.Join(t.TempDir(), "bad.journal")
	os.WriteFile(bad, []byte("{\"id\":1,\"kind\":\"intent\"}\nnot json\n{\"id\":1,\"kind\":\"outcome\"}\n"), 0o600)
	if _, _, err := NewJournal(bad).Read(); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a corrupt journal read as %v, want an error naming line 2", err)
	}
}

func TestJournalChangeLock(t *testing.T) {
	j := NewJournal(filepath.Join(t.TempDir(), "apply.journal"))
	unlock, ok, err := j.lockChanges(true)
	if err != nil || !ok {
		t.Fatal(err)
	}
	// A second holder (another process in real life; another open file here) is refused.
	if _, ok, err := j.lockChanges(false); err != nil || ok {
		t.Errorf("the change lock was taken twice: ok %v, err %v", ok, err)
	}
	unlock()
	u2, ok, err := j.lockChanges(false)
	if err != nil || !ok {
		t.Errorf("the change lock is not free after unlock: %v", err)
	} else {
		u2()
	}
}

// TestJournalCutRecords: what a crash mid-write leaves - a prefix of a record, a prefix with a
// tail of NUL bytes, a line of NULs - is a cut record, reported and skipped; a NUL inside a
// line that goes on after it is corruption.
func TestJournalCutRecords(t *testing.T) {
	rec := `{"id":1,"time":"2026-12-01T00:00:00Z","kind":"intent","setting":"wal_buffers","new":"16MB"}`
	for _, tc := range []struct {
		name, text string
		recs       int
		torn, bad  bool
	}{
		{"prefix", rec + "\n" + `{"id":1,"kind":"out`, 1, true, false},
		{"prefix and NULs", rec + "\n" + `{"id":1,"kind":"out` + strings.Repeat("\x00", 300), 1, true, false},
		{"NULs only", rec + "\n" + strings.Repeat("\x00", 4096), 1, true, false},
		{"NULs then a record", rec + "\n" + strings.Repeat("\x00", 10) + "\n" + rec + "\n", 2, true, false},
		{"record then NULs", rec + strings.Repeat("\x00", 10), 1, false, false},
		{"NUL inside", `{"id":1,` + "\x00" + `"kind":"intent"}` + "\n", 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, torn, err := parseJournal("j", []byte(tc.text))
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want error %v", err, tc.bad)
			}
			if len(recs) != tc.recs || (torn != "") != tc.torn {
				t.Errorf("got %d records, torn %q; want %d, torn %v", len(recs), torn, tc.recs, tc.torn)
			}
		})
	}
}

// TestJournalPredictions: a journal written before predictions existed still loads (the fields
// are optional), and one with them reads back what was written.
func TestJournalPredictions(t *testing.T) {
	old := `{"id":1,"time":"2026-12-01T00:00:00Z","kind":"intent","setting":"wal_sync_method","new":"fdatasync","old":{"value":"open_datasync"}}` + "\n" +
		`{"id":1,"time":"2026-12-01T00:05:00Z","kind":"outcome","outcome":"verified","setting":"wal_sync_method","reason":"better"}` + "\n"
	recs, torn, err := parseJournal("j", []byte(old))
	if err != nil || torn != "" || len(recs) != 2 || recs[0].Predicted != nil || recs[1].PredictionCheck != nil {
		t.Fatalf("an older journal: %+v, torn %q, %v", recs, torn, err)
	}
	if st := changeStatuses(newLedger(recs)); len(st) != 1 || st[0].Predicted != nil || st[0].Prediction != nil || st[0].State != string(Verified) {
		t.Errorf("status of an older journal's change = %+v", st)
	}

	j := NewJournal(filepath.Join(t.TempDir(), "journal"))
	p := rules.Predicted{Name: rules.PredictWALWait, Current: 0.8, Value: 0.15, Unit: rules.UnitSecondsPerMB, Basis: "wait events"}
	check, _ := rules.CheckPrediction(p, 0.1)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := j.Append(Record{Time: t0, Kind: KindIntent, Setting: collector.WALSyncMethod, New: "fdatasync", Predicted: &p},
		Record{ID: 1, Time: t0.Add(time.Minute), Kind: KindOutcome, Outcome: Verified, Setting: collector.WALSyncMethod, PredictionCheck: &check}); err != nil {
		t.Fatal(err)
	}
	recs, _, err = j.Read()
	if err != nil || len(recs) != 2 || recs[0].Predicted == nil || *recs[0].Predicted != p || recs[1].PredictionCheck == nil || *recs[1].PredictionCheck != check {
		t.Fatalf("read back %+v, %v; want the prediction %+v and the check %+v", recs, err, p, check)
	}
	if st := changeStatuses(newLedger(recs)); st[0].Prediction == nil || *st[0].Prediction != check || st[0].Predicted == nil {
		t.Errorf("status = %+v, want the prediction and its check", st[0])
	}
}
