package advisor

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// checkResultWithDisagreement is a check where both wal_sync_method rules fire with different
// values, resolved as Check resolves them.
func checkResultWithDisagreement() *CheckResult {
	fs := []rules.Finding{
		{Rule: "open-sync-with-small-buffers", Severity: rules.Warning, Setting: "wal_sync_method", Current: "open_datasync",
			Recommended: "fdatasync", Action: rules.ActionReload, Summary: "buffer-full writes wait",
			Prediction: &rules.Prediction{SavedSecondsPerSecond: 0.46, Basis: "buffer-full writes"},
			Predicted: &rules.Predicted{Name: rules.PredictWALWait, Current: 0.87, Value: 0.41, Unit: rules.UnitSecondsPerMB,
				Basis: "wait events"}},
		{Rule: "sync-method-slow", Severity: rules.Warning, Setting: "wal_sync_method", Current: "open_datasync",
			Recommended: "fsync", Action: rules.ActionReload, Summary: "fsync is faster",
			Prediction: &rules.Prediction{SavedSecondsPerSecond: 0.1, Basis: "flushes"}},
	}
	res := rules.Resolve(rules.All(), fs)
	return &CheckResult{Findings: fs, Recommendations: res.Recommendations, Snapshots: 3, WindowSeconds: 30}
}

func TestCheckTableShowsRecommendations(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCheckTable(&b, checkResultWithDisagreement()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Recommendations (one per setting):",
		"wal_sync_method  open_datasync -> fdatasync  reload  WARNING",
		"because open-sync-with-small-buffers",
		"predicted: 0.460 s of waiting saved per second (buffer-full writes)",
		// Once under the finding, once under the recommendation it decided.
		"  predicted: wal_write_wait_seconds_per_mb 870.00 ms/MB now -> 410.00 ms/MB (wait events)\n",
		"    predicted: wal_write_wait_seconds_per_mb 870.00 ms/MB now -> 410.00 ms/MB (wait events)\n",
		"overruled sync-method-slow (fsync): open-sync-with-small-buffers recommends wal_sync_method=fdatasync instead: a larger predicted gain",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckJSONRecommendations(t *testing.T) {
	b, err := json.Marshal(checkResultWithDisagreement())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Findings        []map[string]any `json:"findings"`
		Recommendations []map[string]any `json:"recommendations"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Findings) != 2 || len(doc.Recommendations) != 1 {
		t.Fatalf("findings %d, recommendations %d; want 2 and 1:\n%s", len(doc.Findings), len(doc.Recommendations), b)
	}
	r := doc.Recommendations[0]
	for _, k := range []string{"setting", "recommended", "action", "severity", "because", "overruled"} {
		if _, ok := r[k]; !ok {
			t.Errorf(".recommendations[0] lacks .%s: %s", k, b)
		}
	}
	if r["setting"] != "wal_sync_method" || r["recommended"] != "fdatasync" || r["severity"] != "warning" {
		t.Errorf(".recommendations[0] = %v", r)
	}
	// .predicted of the deciding finding, on it and on the recommendation.
	for where, m := range map[string]map[string]any{"findings[0]": doc.Findings[0], "recommendations[0]": r} {
		p, _ := m["predicted"].(map[string]any)
		if p["name"] != rules.PredictWALWait || p["current"] != 0.87 || p["value"] != 0.41 || p["unit"] != rules.UnitSecondsPerMB || p["basis"] != "wait events" {
			t.Errorf(".%s.predicted = %v", where, m["predicted"])
		}
	}
	if _, ok := doc.Findings[1]["predicted"]; ok {
		t.Errorf(".findings[1] predicts nothing, yet has .predicted: %s", b)
	}
}
