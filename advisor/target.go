package advisor

import (
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// failureRepeat is how often a failure that does not change is logged again: often enough that
// a log tail shows it, rarely enough that a server down for a day does not flood the log.
const failureRepeat = 5 * time.Minute

// Target says whether the latest snapshot could use PostgreSQL: its status (one of the
// collector.Target* values; "" before the first snapshot) and, unless ok, why and what to do.
func (s State) Target() (status, reason string) {
	if s.Snapshot == nil {
		return "", ""
	}
	p, ok := s.Snapshot.Part(collector.PartPostgres)
	if !ok {
		return "", ""
	}
	status = p.Status
	if status == "" {
		status = collector.TargetOK
		if !p.OK {
			status = collector.TargetUnreachable
		}
	}
	switch {
	case !p.OK:
		return status, p.Error
	case status == collector.TargetMissingPrivileges:
		return status, privilegesReason(s.Snapshot)
	}
	return status, ""
}

// privilegesReason names what a role without pg_monitor misses, with the server's own note
// (which names the role) where there is one.
func privilegesReason(s *collector.Snapshot) string {
	msg := "the advisor's role lacks pg_monitor (pg_read_all_settings and pg_read_all_stats): it cannot see the WAL directory or the application's wait events"
	if s.Postgres != nil {
		for _, n := range s.Postgres.Notes {
			if strings.Contains(n, "GRANT pg_monitor") {
				return msg + "; " + n
			}
		}
	}
	return msg + "; GRANT pg_monitor TO the advisor's role"
}

// walDirUnknownReason says why the snapshot holds no WAL directory.
func walDirUnknownReason(s collector.Snapshot) string {
	if p, failed := PostgresFailure(s); failed {
		return "PostgreSQL could not be read (" + p.Error + ")"
	}
	if p, ok := s.Part(collector.PartPostgres); ok && p.Status == collector.TargetMissingPrivileges {
		return "the role cannot read data_directory: GRANT pg_monitor TO the advisor's role, or set --wal-dir"
	}
	return "the server did not say; set --wal-dir"
}

// failureLog logs each failure to read PostgreSQL from the first one on: again when the reason
// changes, otherwise at most every failureRepeat, and once when the server can be read again.
// Part errors are already free of passwords (collector/postgres redacts them).
type failureLog struct {
	last       string // status and reason last logged; "" while the target is fine
	lastLogged time.Time
	suppressed int
}

func (f *failureLog) observe(logger *zap.Logger, s collector.Snapshot) {
	status, reason := State{Snapshot: &s}.Target()
	if status == "" || status == collector.TargetOK {
		if f.last != "" {
			logger.Info("postgresql can be read again")
		}
		*f = failureLog{}
		return
	}
	key := status + "\x00" + reason
	if key == f.last && s.Time.Sub(f.lastLogged) < failureRepeat {
		f.suppressed++
		return
	}
	logger.Warn("cannot use postgresql",
		zap.String("target", status), zap.String("error", reason), zap.Int("repeats_not_logged", f.suppressed))
	f.last, f.lastLogged, f.suppressed = key, s.Time, 0
}
