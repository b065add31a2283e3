package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// downState is a daemon whose latest snapshot could not read PostgreSQL.
func downState(status, reason string) advisor.State {
	st := healthyState()
	snap := *st.Snapshot
	snap.Postgres, snap.WALStorage = nil, nil
	snap.Parts = []collector.Part{
		{Name: collector.PartPostgres, OK: false, Error: reason, Status: status},
		{Name: collector.PartKernel, OK: true},
	}
	st.Snapshot, st.Findings = &snap, nil
	return st
}

func TestReadinessFollowsTarget(t *testing.T) {
	noMonitor := healthyState()
	snap := *noMonitor.Snapshot
	snap.Parts = []collector.Part{{Name: collector.PartPostgres, OK: true, Status: collector.TargetMissingPrivileges}}
	noMonitor.Snapshot = &snap
	tests := []struct {
		name   string
		st     advisor.State
		code   int
		target string
		reason string // in the /readyz body and on the landing page
	}{
		{"healthy", healthyState(), http.StatusOK, collector.TargetOK, ""},
		{"down", downState(collector.TargetUnreachable, "connect to PostgreSQL at host=h port=1: connection refused"),
			http.StatusServiceUnavailable, collector.TargetUnreachable, "connection refused"},
		{"wrong password", downState(collector.TargetUnauthenticated, "password authentication failed for user \"x\""),
			http.StatusServiceUnavailable, collector.TargetUnauthenticated, "password authentication failed"},
		{"no pg_monitor", noMonitor, http.StatusServiceUnavailable, collector.TargetMissingPrivileges, "GRANT pg_monitor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newTestHandler(t, &staticSource{st: tt.st})
			code, _, body := get(t, h, http.MethodGet, "/readyz")
			got := decode[StatusResponse](t, body)
			if code != tt.code || got.Target != tt.target || !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("/readyz = %d %+v, want %d, target %s, a reason with %q", code, got, tt.code, tt.target, tt.reason)
			}
			_, _, page := get(t, h, http.MethodGet, "/")
			if tt.code == http.StatusOK {
				if strings.Contains(page, `class="target-down"`) {
					t.Errorf("landing page of a healthy target shows the down banner")
				}
				return
			}
			banner := strings.Index(page, `class="target-down"`)
			findings := strings.Index(page, "<h2>Findings</h2>")
			if banner < 0 || banner > findings {
				t.Errorf("landing page: want the target banner above the findings:\n%s", page)
			}
			if want := "PostgreSQL " + strings.ReplaceAll(tt.target, "_", " "); !strings.Contains(page[:banner], want) {
				t.Errorf("landing page header does not say %q", want)
			}
			if strings.Contains(page, "nothing to change") {
				t.Errorf("landing page says nothing to change while the target is %s", tt.target)
			}
		})
	}
}
