package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// pendingState is a healthy server during a slow load: nothing fires yet, but wal-buffers-small
// holds and fires two minutes after it was first seen.
func pendingState() advisor.State {
	st := healthyState()
	since := fixtureTime().Add(-30 * time.Second)
	fires := since.Add(rules.DefaultThresholds().RaiseAfter)
	st.Pending = []rules.Finding{{
		Rule: "wal-buffers-small", Severity: rules.Warning, Setting: "wal_buffers", Current: "64kB", Recommended: "16MB",
		Action: rules.ActionRestart, Summary: "buffer-full writes cost 0.4 s per second",
		Evidence:  []rules.Evidence{{Name: "buffers_full_per_second", Value: 120, Unit: rules.UnitPerSecond}},
		FirstSeen: since, LastSeen: fixtureTime(), State: rules.StatePending, PendingSince: &since, FiresAt: &fires,
	}}
	return st
}

func TestPendingFindingsShown(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: pendingState()})
	fires := pendingState().Pending[0].FiresAt.UTC()

	code, _, body := get(t, h, http.MethodGet, "/api/v1/findings")
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/findings: %d\n%s", code, body)
	}
	resp := decode[FindingsResponse](t, body)
	if len(resp.Findings) != 1 {
		t.Fatalf("/api/v1/findings lists %d findings, want the pending one:\n%s", len(resp.Findings), body)
	}
	f := resp.Findings[0]
	if f.State != rules.StatePending || f.FiresAt == nil || !f.FiresAt.Equal(fires) || f.PendingSince == nil {
		t.Errorf("/api/v1/findings: state %q, pending_since %v, fires_at %v; want pending, firing at %v", f.State, f.PendingSince, f.FiresAt, fires)
	}
	for _, want := range []string{`"state": "pending"`, `"pending_since":`, `"fires_at":`} {
		if !strings.Contains(body, want) && !strings.Contains(strings.ReplaceAll(body, `":"`, `": "`), want) {
			t.Errorf("/api/v1/findings lacks %s:\n%s", want, body)
		}
	}

	_, _, page := get(t, h, http.MethodGet, "/")
	if strings.Contains(page, "No findings") {
		t.Errorf("landing page says no findings while one is pending:\n%s", page)
	}
	if want := "pending: fires at " + fires.Format(time.RFC3339); !strings.Contains(page, want) {
		t.Errorf("landing page lacks %q:\n%s", want, page)
	}

	_, _, metrics := get(t, h, http.MethodGet, "/metrics")
	if want := `pgwal_advisor_finding{rule="wal-buffers-small",setting="wal_buffers",severity="warning",state="pending"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
}
