package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// TargetStatus classifies the outcome of the last Collect for readiness and exit codes: err is
// what Collect returned. A server that answered but to a role without pg_read_all_settings or
// pg_read_all_stats (both come with pg_monitor) is collector.TargetMissingPrivileges: the
// advisor then sees neither the WAL directory nor the application's wait events.
func (c *Collector) TargetStatus(err error) string {
	if err != nil {
		return statusOf(err)
	}
	if c.acquire(context.Background()) != nil {
		return collector.TargetOK
	}
	defer c.release()
	if server := c.session.Server(); c.session.Open() && (!server.ReadAllSettings || !server.ReadAllStats) {
		return collector.TargetMissingPrivileges
	}
	return collector.TargetOK
}

// statusOf classifies a failed Collect by its cause. Everything that is not a refusal of the
// role (a closed port, a timeout of a stopped or overloaded server, a shutdown) is unreachable.
func statusOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "28P01" || pgErr.Code == "28000":
			// 28000 is also "role does not exist" and "no pg_hba.conf entry".
			return collector.TargetUnauthenticated
		case pgErr.Code == "42501":
			return collector.TargetMissingPrivileges
		case strings.HasPrefix(pgErr.Code, "3D"):
			// An unknown database: the server answered, but not for the advisor.
			return collector.TargetUnauthenticated
		}
	}
	return collector.TargetUnreachable
}
