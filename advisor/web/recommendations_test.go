package web

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// disagreeState is the issue a new user hit: both wal_sync_method rules fire with different
// values, and two rules want wal_buffers moved in opposite directions. The state is built as the
// advisor builds it: findings, resolved, conflicts added to the findings.
func disagreeState() advisor.State {
	st := healthyState()
	f := func(rule, setting, cur, rec string, pred float64) rules.Finding {
		fnd := rules.Finding{Rule: rule, Severity: rules.Warning, Setting: setting, Current: cur, Recommended: rec,
			Action: rules.ActionReload, Summary: rule + " found something", FirstSeen: fixtureTime(), LastSeen: fixtureTime()}
		if pred > 0 {
			fnd.Prediction = &rules.Prediction{SavedSecondsPerSecond: pred, Basis: "test"}
		}
		return fnd
	}
	st.Findings = []rules.Finding{
		f("open-sync-with-small-buffers", collector.WALSyncMethod, "open_datasync", "fdatasync", 0.46),
		f("sync-method-slow", collector.WALSyncMethod, "open_datasync", "fsync", 0.12),
		f("wal-buffers-small", collector.WALBuffers, "4MB", "16MB", 0),
		f("some-future-rule", collector.WALBuffers, "4MB", "1MB", 0),
	}
	res := rules.Resolve(rules.All(), st.Findings)
	st.Findings = append(st.Findings, res.Conflicts...)
	rules.SortFindings(st.Findings)
	st.Recommendations = res.Recommendations
	return st
}

func TestRecommendationsOnePerSetting(t *testing.T) {
	h := newTestHandler(t, &staticSource{st: disagreeState()})

	_, _, body := get(t, h, http.MethodGet, "/api/v1/recommendations")
	got := decode[RecommendationsResponse](t, body)
	if len(got.Recommendations) != 1 {
		t.Fatalf("got %d recommendations, want 1 (wal_sync_method; wal_buffers is in conflict):\n%s", len(got.Recommendations), body)
	}
	r := got.Recommendations[0]
	if r.Setting != collector.WALSyncMethod || r.Recommended != "fdatasync" || r.Rule != "open-sync-with-small-buffers" || r.Severity != rules.Warning {
		t.Errorf("recommendation = %+v, want wal_sync_method=fdatasync decided by open-sync-with-small-buffers", r)
	}
	if len(r.Because) != 1 || r.Because[0].Rule != "open-sync-with-small-buffers" || r.Because[0].Summary == "" {
		t.Errorf("because = %+v, want open-sync-with-small-buffers with its summary", r.Because)
	}
	if len(r.Overruled) != 1 || r.Overruled[0].Rule != "sync-method-slow" || r.Overruled[0].Recommended != "fsync" ||
		!strings.Contains(r.Overruled[0].Reason, "larger predicted gain") {
		t.Errorf("overruled = %+v, want sync-method-slow's fsync, by the larger predicted gain", r.Overruled)
	}
	if r.Prediction == nil || r.Prediction.SavedSecondsPerSecond != 0.46 {
		t.Errorf("prediction = %+v, want 0.46", r.Prediction)
	}

	// Every finding stays, and the conflict is one of them.
	_, _, body = get(t, h, http.MethodGet, "/api/v1/findings")
	fs := decode[FindingsResponse](t, body)
	rulesSeen := map[string]int{}
	for _, f := range fs.Findings {
		rulesSeen[f.Rule]++
	}
	for _, id := range []string{"open-sync-with-small-buffers", "sync-method-slow", "wal-buffers-small", "some-future-rule", rules.ConflictRuleID} {
		if rulesSeen[id] != 1 {
			t.Errorf("/api/v1/findings has %d findings of %s, want 1:\n%s", rulesSeen[id], id, body)
		}
	}

	// One series per setting.
	c := NewCollector(&staticSource{st: disagreeState()}, "v", "go")
	if n := testutil.CollectAndCount(c, "pgwal_advisor_recommendation_info"); n != 1 {
		t.Errorf("pgwal_advisor_recommendation_info: %d series, want 1", n)
	}
	want := `# HELP pgwal_advisor_recommendation_info 1 per recommended change.
# TYPE pgwal_advisor_recommendation_info gauge
pgwal_advisor_recommendation_info{action="reload",current="open_datasync",recommended="fdatasync",rule="open-sync-with-small-buffers",setting="wal_sync_method"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "pgwal_advisor_recommendation_info"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "pgwal_advisor_finding"); n != 5 {
		t.Errorf("pgwal_advisor_finding: %d series, want 5 (every finding and the conflict)", n)
	}

	// The landing page's section.
	_, _, body = get(t, h, http.MethodGet, "/")
	for _, s := range []string{
		"<h2>Recommendations</h2>", "<td>open_datasync &rarr; fdatasync</td>",
		`<a href="https://github.com/pgwal-advisor/pgwal-advisor/blob/main/docs/rules.md#sync-method-slow">sync-method-slow</a> (fsync: open-sync-with-small-buffers recommends`,
		`docs/rules.md#recommendations-conflict">recommendations-conflict</a>`,
	} {
		if !strings.Contains(body, s) {
			t.Errorf("landing page lacks %q", s)
		}
	}
	if t.Failed() {
		t.Logf("landing page:\n%s", body)
	}

	// No recommendation: no section.
	h = newTestHandler(t, &staticSource{st: healthyState()})
	if _, _, body = get(t, h, http.MethodGet, "/"); strings.Contains(body, "<h2>Recommendations</h2>") {
		t.Error("landing page of a healthy server has a recommendations section")
	}
}
