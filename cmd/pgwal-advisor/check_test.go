package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// check --format json gives every finding a list of evidence, [] when its rule cites none (the
// probe-disabled finding of a check without --probe.dir), as its help and docs/rules.md promise.
func TestCheckJSONEvidenceIsAList(t *testing.T) {
	lab.RequireServer(t)
	t.Parallel()
	c := lab.NewTestCluster(t, lab.ClusterOptions{})
	out, stderr, code := runCLI(t, "check", "--format", "json", "--window", "30s", "--interval", "1s", "--dsn", c.URL())
	if code > 2 {
		t.Fatalf("check: exit %d: %s", code, stderr)
	}
	if strings.Contains(out, `"evidence": null`) {
		t.Errorf("check JSON has a null evidence:\n%s", out)
	}
	var res struct {
		Findings []map[string]json.RawMessage `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("check JSON: %v\n%s", err, out)
	}
	if len(res.Findings) == 0 {
		t.Fatalf("no findings to check (the probe-disabled one was expected):\n%s", out)
	}
	for _, f := range res.Findings {
		if ev := string(f["evidence"]); !strings.HasPrefix(ev, "[") {
			t.Errorf("finding %s: evidence %s, want a list", f["rule"], ev)
		}
	}
}
