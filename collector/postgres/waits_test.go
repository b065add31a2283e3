package postgres

import (
	"reflect"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestWaitEventKey(t *testing.T) {
	tests := []struct {
		eventType, event, want string
	}{
		// IO events: 16 and earlier, then 17's spelling.
		{"IO", "WALWrite", collector.EventIOWALWrite},
		{"IO", "WalWrite", collector.EventIOWALWrite},
		{"IO", "WALSync", collector.EventIOWALSync},
		{"IO", "WalSync", collector.EventIOWALSync},
		{"IO", "WALInitWrite", collector.EventIOWALInitWrite},
		{"IO", "WalInitWrite", collector.EventIOWALInitWrite},
		{"IO", "WALInitSync", collector.EventIOWALInitSync},
		{"IO", "WalInitSync", collector.EventIOWALInitSync},
		// LWLocks: 13+ names, then the older ones.
		{"LWLock", "WALInsert", collector.EventLWLockWALInsert},
		{"LWLock", "WALWrite", collector.EventLWLockWALWrite},
		{"LWLock", "WALBufMapping", collector.EventLWLockWALBufMap},
		{"LWLock", "WALWriteLock", collector.EventLWLockWALWrite},
		{"LWLock", "WALBufMappingLock", collector.EventLWLockWALBufMap},
		{"LWLock", "wal_insert", collector.EventLWLockWALInsert},
		// The same name under another type is another event.
		{"LWLock", "WalSync", ""},
		{"IO", "WALInsert", ""},
		{"IO", "WalRead", ""},
		{"IO", "DataFileRead", ""},
		{"Client", "ClientRead", ""},
		{"", "", ""},
		// Only ASCII folds: the Kelvin sign lowercases to k, but no server spells a name so.
		{"LWLock", "WALWriteLoc\u212a", ""},
		{"LWLock", "WALBufMappingLoc\u212a", ""},
	}
	for _, tt := range tests {
		if got := waitEventKey(tt.eventType, tt.event); got != tt.want {
			t.Errorf("waitEventKey(%q, %q) = %q, want %q", tt.eventType, tt.event, got, tt.want)
		}
	}
}

func TestWaitTally(t *testing.T) {
	var tally waitTally
	if w, failures, _ := tally.take(); w != nil || failures != 0 {
		t.Fatalf("empty tally = %+v, %d failures; want nil, 0", w, failures)
	}
	tally.add([]waitCount{
		{eventType: "IO", event: "WalSync", n: 3},
		{eventType: "LWLock", event: "WALWrite", n: 5},
		{n: 2}, // active, not waiting
	})
	tally.add([]waitCount{{eventType: "IO", event: "WALSync", n: 1}, {eventType: "Lock", event: "transactionid", n: 4}})
	tally.add(nil)                                                     // an idle server
	tally.add([]waitCount{{eventType: "IO", event: "WalSync", n: -7}}) // a broken row
	tally.fail(errString("boom"))

	w, failures, lastErr := tally.take()
	want := &collector.WaitEvents{Samples: 4, ActiveBackends: 15, Counts: map[string]int64{
		collector.EventIOWALWrite: 0, collector.EventIOWALSync: 4, collector.EventIOWALInitWrite: 0,
		collector.EventIOWALInitSync: 0, collector.EventLWLockWALInsert: 0, collector.EventLWLockWALWrite: 5,
		collector.EventLWLockWALBufMap: 0,
	}}
	if !reflect.DeepEqual(w, want) {
		t.Errorf("take() = %+v, want %+v", w, want)
	}
	if failures != 1 || lastErr != "boom" {
		t.Errorf("failures = %d, %q; want 1, boom", failures, lastErr)
	}
	if w, failures, _ := tally.take(); w != nil || failures != 0 {
		t.Errorf("tally after take = %+v, %d; want it reset", w, failures)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
