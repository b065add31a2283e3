package apply

import (
	"fmt"

	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
)

// Server identifies the PostgreSQL server a change was made on. Every value the Postgres
// actuator reads carries it, so an intent's old value records where the change was made and a
// live value where --dsn leads now: rollback, crash recovery and the daemon compare the two
// before they act, so that a journal never restores (or abandons) one server's change on
// another (docs/security.md, "The journal names its server").
type Server struct {
	// SystemIdentifier is drawn by initdb; a physical standby shares its primary's.
	SystemIdentifier string `json:"system_identifier"`
	// DataDirectory tells apart two servers of one system identifier on a host (a copy made
	// with pg_basebackup); "" where the role may not read it.
	DataDirectory string `json:"data_directory,omitempty"`
}

func serverOf(info postgres.ServerInfo) *Server {
	if info.SystemIdentifier == "" {
		return nil
	}
	return &Server{SystemIdentifier: info.SystemIdentifier, DataDirectory: info.DataDirectory}
}

func (s *Server) String() string {
	if s.DataDirectory == "" {
		return "system identifier " + s.SystemIdentifier
	}
	return fmt.Sprintf("system identifier %s, data directory %s", s.SystemIdentifier, s.DataDirectory)
}

// otherServer returns why change c cannot be judged against live: it was made on another server
// than the one live was read from. nil when both are the same, or when either side does not say
// (a kernel knob, a journal written before servers were recorded).
func otherServer(c *change, live Value) error {
	if c.Intent.Old == nil {
		return nil
	}
	was, is := c.Intent.Old.Server, live.Server
	if was == nil || is == nil {
		return nil
	}
	// A change made through Patroni is the cluster's: every member shares the system
	// identifier, and after a switchover another member's data directory answers.
	cluster := c.Intent.Old.Route == RoutePatroni
	if was.SystemIdentifier == is.SystemIdentifier &&
		(cluster || was.DataDirectory == "" || is.DataDirectory == "" || was.DataDirectory == is.DataDirectory) {
		return nil
	}
	return fmt.Errorf("change %d (%s) was made on the server with %s, but the connection reaches the server with %s: "+
		"point --dsn at the server the change was made on", c.ID(), c.Intent.Setting, was, is)
}
