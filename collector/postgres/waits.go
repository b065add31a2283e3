package postgres

import (
	"strings"
	"unicode/utf8"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// waitEventsQuery counts the active client backends per wait event, or "" below 14, where the
// collector reads settings only.
//
// Only client backends count: a commit that waits on WAL is a client waiting, and that is the
// latency the advice is about. The WAL writer and the checkpointer write and sync WAL all the
// time in the background; counting them would report WAL waits on an idle server. The sampler's
// own backend is left out: it is always active while it samples.
//
// Roles without pg_read_all_stats (pg_monitor has it) see other roles' sessions with a NULL state
// and wait event, so those sessions drop out here; Collect says so in a Note.
func waitEventsQuery(versionNum int) string {
	if versionNum < minWALStatsVersion {
		return ""
	}
	return "SELECT wait_event_type, wait_event, pg_catalog.count(*) FROM pg_catalog.pg_stat_activity " +
		"WHERE backend_type OPERATOR(pg_catalog.=) 'client backend'::pg_catalog.text AND state OPERATOR(pg_catalog.=) 'active'::pg_catalog.text " +
		"AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() GROUP BY 1, 2"
}

// waitEventKey maps a wait event to its collector.Event* key, or "" when it is not a WAL wait.
// It matches on type and name because the names changed: 17 renamed the IO events (WALWrite
// became WalWrite, WALSync WalSync, ...), and 13 dropped the "Lock" suffix of the LWLocks
// (WALWriteLock became WALWrite) and renamed the wal_insert tranche WALInsert.
func waitEventKey(eventType, event string) string {
	// The names are ASCII; strings.ToLower would also fold the Kelvin sign (U+212A) to k and
	// match "WALWriteLoc\u212a", a name no server reports.
	for i := 0; i < len(event); i++ {
		if event[i] >= utf8.RuneSelf {
			return ""
		}
	}
	name := strings.ToLower(event)
	switch eventType {
	case "IO":
		switch name {
		case "walwrite":
			return collector.EventIOWALWrite
		case "walsync":
			return collector.EventIOWALSync
		case "walinitwrite":
			return collector.EventIOWALInitWrite
		case "walinitsync":
			return collector.EventIOWALInitSync
		}
	case "LWLock":
		switch name {
		case "walinsert", "wal_insert":
			return collector.EventLWLockWALInsert
		case "walwrite", "walwritelock":
			return collector.EventLWLockWALWrite
		case "walbufmapping", "walbufmappinglock":
			return collector.EventLWLockWALBufMap
		}
	}
	return ""
}

// waitTally accumulates wait-event samples between two snapshots.
type waitTally struct {
	samples int64
	active  int64
	counts  map[string]int64
	// failures counts the samples that could not be taken; lastErr says why.
	failures int
	lastErr  string
}

// waitCount is one row of waitEventsQuery.
type waitCount struct {
	eventType, event string
	n                int64
}

// add records one successful sample.
func (t *waitTally) add(rows []waitCount) {
	if t.counts == nil {
		// Every key is present, zero or not, so that consumers see "no waits" rather than "unknown".
		t.counts = map[string]int64{
			collector.EventIOWALWrite: 0, collector.EventIOWALSync: 0, collector.EventIOWALInitWrite: 0,
			collector.EventIOWALInitSync: 0, collector.EventLWLockWALInsert: 0, collector.EventLWLockWALWrite: 0,
			collector.EventLWLockWALBufMap: 0,
		}
	}
	t.samples++
	for _, r := range rows {
		// count(*) is never negative; a row that says so is dropped rather than let it cancel
		// the backends of another.
		if r.n < 0 {
			continue
		}
		t.active += r.n
		if k := waitEventKey(r.eventType, r.event); k != "" {
			t.counts[k] += r.n
		}
	}
}

func (t *waitTally) fail(err error) {
	t.failures++
	t.lastErr = err.Error()
}

// take returns the tally since the last take (nil when no sample was taken) and the failures,
// and starts a new tally.
func (t *waitTally) take() (*collector.WaitEvents, int, string) {
	var w *collector.WaitEvents
	if t.samples > 0 {
		w = &collector.WaitEvents{Samples: t.samples, ActiveBackends: t.active, Counts: t.counts}
	}
	failures, lastErr := t.failures, t.lastErr
	*t = waitTally{}
	return w, failures, lastErr
}
