package rules

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// fnd builds a finding as the rules write them, for the resolver tables.
func fnd(rule string, sev Severity, setting, cur, rec string, pred ...float64) Finding {
	f := Finding{Rule: rule, Severity: sev, Setting: setting, Current: cur, Recommended: rec, Action: ActionReload,
		Summary: rule + " summary", FirstSeen: t0(), LastSeen: t0()}
	if len(pred) > 0 {
		f.Prediction = &Prediction{SavedSecondsPerSecond: pred[0], Basis: "test"}
	}
	return f
}

// Rules that are not in All(), for the steps of the order that no pair of today's rules reaches:
// a measured rule that lowers a size, and one more measured and one more fact rule.
const (
	lowersBuffers = "test-lowers-wal-buffers"
	measuredFlush = "test-measured-flush-after"
	factBuffers   = "test-fact-wal-buffers"
)

func resolverRules() []Rule {
	return append(All(),
		Rule{ID: lowersBuffers, Settings: []string{collector.WALBuffers}},
		Rule{ID: measuredFlush, Settings: []string{collector.CheckpointFlushAfter}},
		Rule{ID: factBuffers, Settings: []string{collector.WALBuffers}, Immediate: true},
	)
}

// wantRec is the part of a recommendation a table case checks.
type wantRec struct {
	setting, recommended, rule string
	severity                   Severity
	because                    []string
	overruled                  []string
	// reason must appear in every overruled entry's reason.
	reason string
	// prediction is the expected saved seconds per second; 0 means none.
	prediction float64
}

type resolveCase struct {
	name      string
	in        []Finding
	want      []wantRec
	conflicts []string // settings with a recommendations-conflict finding
}

// resolveCases cover every pair of rules in All() that share a setting (TestResolvePairsCovered
// keeps it so), each setting family the rules recommend, and every step of the order.
// pending marks a finding as the Tracker marks one that has not yet lasted RaiseAfter.
func pending(f Finding) Finding {
	f.State = StatePending
	return f
}

func resolveCases() []resolveCase {
	const (
		osb  = "open-sync-with-small-buffers"
		sms  = "sync-method-slow"
		wbs  = "wal-buffers-small"
		fad  = "flush-after-disabled"
		cps  = "checkpoint-stalls"
		dbtl = "dirty-background-too-large"
		ws   = collector.WALSyncMethod
	)
	return []resolveCase{
		// wal_sync_method: open-sync-with-small-buffers and sync-method-slow.
		{name: "wal_sync_method: both rules agree on fdatasync",
			in:   []Finding{fnd(osb, Warning, ws, "open_datasync", "fdatasync", 0.46), fnd(sms, Warning, ws, "open_datasync", "fdatasync", 0.2)},
			want: []wantRec{{setting: ws, recommended: "fdatasync", rule: osb, severity: Warning, because: []string{osb, sms}, prediction: 0.46}}},
		{name: "wal_sync_method: the larger predicted gain wins (buffer-full writes)",
			in: []Finding{fnd(osb, Warning, ws, "open_datasync", "fdatasync", 0.46), fnd(sms, Warning, ws, "open_datasync", "fsync", 0.12)},
			want: []wantRec{{setting: ws, recommended: "fdatasync", rule: osb, severity: Warning, because: []string{osb},
				overruled: []string{sms}, reason: "larger predicted gain", prediction: 0.46}}},
		{name: "wal_sync_method: the larger predicted gain wins (probe comparison)",
			in: []Finding{fnd(osb, Warning, ws, "open_datasync", "fdatasync", 0.46), fnd(sms, Warning, ws, "open_datasync", "fsync", 0.9)},
			want: []wantRec{{setting: ws, recommended: "fsync", rule: sms, severity: Warning, because: []string{sms},
				overruled: []string{osb}, reason: "larger predicted gain", prediction: 0.9}}},
		{name: "wal_sync_method: equal gains go to the preferred method order",
			in: []Finding{fnd(osb, Warning, ws, "open_sync", "fsync", 0.3), fnd(sms, Warning, ws, "open_sync", "fdatasync", 0.3)},
			want: []wantRec{{setting: ws, recommended: "fdatasync", rule: sms, severity: Warning, because: []string{sms},
				overruled: []string{osb}, reason: "preferred wal_sync_method order", prediction: 0.3}}},
		{name: "wal_sync_method: no predictions, preferred method order",
			in: []Finding{fnd(osb, Warning, ws, "open_sync", "fsync"), fnd(sms, Warning, ws, "open_sync", "open_datasync")},
			want: []wantRec{{setting: ws, recommended: "fsync", rule: osb, severity: Warning, because: []string{osb},
				overruled: []string{sms}, reason: "preferred wal_sync_method order"}}},
		{name: "wal_sync_method: a prediction beats none (PostgreSQL 13 has no flush counts)",
			in: []Finding{fnd(osb, Warning, ws, "open_datasync", "fsync", 0.05), fnd(sms, Warning, ws, "open_datasync", "fdatasync")},
			want: []wantRec{{setting: ws, recommended: "fsync", rule: osb, severity: Warning, because: []string{osb},
				overruled: []string{sms}, reason: "predicts none", prediction: 0.05}}},
		{name: "wal_sync_method: one rule alone",
			in:   []Finding{fnd(sms, Warning, ws, "open_sync", "fdatasync", 1.38)},
			want: []wantRec{{setting: ws, recommended: "fdatasync", rule: sms, severity: Warning, because: []string{sms}, prediction: 1.38}}},

		{name: "wal_sync_method: a pending finding is not resolved",
			in:   []Finding{pending(fnd(osb, Warning, ws, "open_datasync", "fdatasync", 0.46)), fnd(sms, Warning, ws, "open_datasync", "fsync", 0.2)},
			want: []wantRec{{setting: ws, recommended: "fsync", rule: sms, severity: Warning, because: []string{sms}, prediction: 0.2}}},
		{name: "pending findings alone recommend nothing",
			in: []Finding{pending(fnd(osb, Warning, ws, "open_datasync", "fdatasync", 0.46)), pending(fnd(wbs, Warning, "wal_buffers", "64kB", "16MB"))}},

		// wal_buffers: wal-buffers-small is the one rule of today's set; the others show each step.
		{name: "wal_buffers: one rule alone",
			in:   []Finding{fnd(wbs, Warning, collector.WALBuffers, "64kB", "16MB")},
			want: []wantRec{{setting: collector.WALBuffers, recommended: "16MB", rule: wbs, severity: Warning, because: []string{wbs}}}},
		{name: "wal_buffers: up and down is a conflict, no recommendation",
			in:        []Finding{fnd(wbs, Warning, collector.WALBuffers, "4MB", "16MB"), fnd(lowersBuffers, Info, collector.WALBuffers, "4MB", "1MB")},
			conflicts: []string{collector.WALBuffers}},
		{name: "wal_buffers: same direction, the smaller step",
			in: []Finding{fnd(wbs, Warning, collector.WALBuffers, "64kB", "16MB"), fnd(lowersBuffers, Info, collector.WALBuffers, "64kB", "1MB")},
			want: []wantRec{{setting: collector.WALBuffers, recommended: "1MB", rule: lowersBuffers, severity: Info,
				because: []string{lowersBuffers}, overruled: []string{wbs}, reason: "smaller step"}}},
		{name: "wal_buffers: measured evidence over a configuration fact",
			in: []Finding{fnd(factBuffers, Critical, collector.WALBuffers, "64kB", "1MB"), fnd(wbs, Warning, collector.WALBuffers, "64kB", "16MB")},
			want: []wantRec{{setting: collector.WALBuffers, recommended: "16MB", rule: wbs, severity: Warning,
				because: []string{wbs}, overruled: []string{factBuffers}, reason: "measured evidence"}}},
		{name: "wal_buffers: the same value written two ways agrees; severity is the highest",
			in:   []Finding{fnd(factBuffers, Critical, collector.WALBuffers, "64kB", "16384kB"), fnd(wbs, Warning, collector.WALBuffers, "64kB", "16MB")},
			want: []wantRec{{setting: collector.WALBuffers, recommended: "16MB", rule: wbs, severity: Critical, because: []string{factBuffers, wbs}}}},

		// ha_manager.configuration: ha-override (a Patroni member) and ha-standby-differs (a
		// repmgr standby) are advice, never both on one server; together they still make no
		// recommendation and no conflict.
		{name: "ha_manager.configuration: the HA findings are advice, no recommendation",
			in: []Finding{fnd("ha-override", Warning, collector.HostHAConfig, "wal_buffers = 16MB (the cluster's: 64kB)", ""),
				fnd("ha-standby-differs", Warning, collector.HostHAConfig, "wal_buffers = 64kB here, 16MB on the primary", "")}},

		// Checkpoint settings: flush-after-disabled and checkpoint-stalls recommend different
		// settings; each stays its own recommendation, and checkpoint-stalls' advice without a
		// setting stays a finding only.
		{name: "checkpoint settings: one recommendation per setting",
			in: []Finding{
				fnd(fad, Warning, collector.CheckpointFlushAfter, "0", "256kB"), fnd(fad, Warning, collector.BgwriterFlushAfter, "0", "512kB"),
				fnd(cps, Warning, collector.MaxWALSize, "1GB", "8GB"), fnd(cps, Warning, collector.CheckpointCompletionTarget, "0.5", "0.9"),
				fnd(cps, Info, "", "7.0 s per checkpoint sync", "see dirty-background-too-large"),
			},
			want: []wantRec{
				{setting: collector.BgwriterFlushAfter, recommended: "512kB", rule: fad, severity: Warning, because: []string{fad}},
				{setting: collector.CheckpointCompletionTarget, recommended: "0.9", rule: cps, severity: Warning, because: []string{cps}},
				{setting: collector.CheckpointFlushAfter, recommended: "256kB", rule: fad, severity: Warning, because: []string{fad}},
				{setting: collector.MaxWALSize, recommended: "8GB", rule: cps, severity: Warning, because: []string{cps}},
			}},
		{name: "checkpoint_flush_after: measured evidence over the configuration fact",
			in: []Finding{fnd(fad, Warning, collector.CheckpointFlushAfter, "0", "256kB"), fnd(measuredFlush, Info, collector.CheckpointFlushAfter, "0", "1MB")},
			want: []wantRec{{setting: collector.CheckpointFlushAfter, recommended: "1MB", rule: measuredFlush, severity: Info,
				because: []string{measuredFlush}, overruled: []string{fad}, reason: "measured evidence"}}},

		// vm.dirty_*: the current value may be a ratio in force, which is no magnitude to compare.
		{name: "vm.dirty_*: one recommendation per knob",
			in: []Finding{fnd(dbtl, Warning, "vm.dirty_background_bytes", "0 (ratio 10%)", "67108864"), fnd(dbtl, Warning, "vm.dirty_bytes", "0 (ratio 20%)", "268435456")},
			want: []wantRec{
				{setting: "vm.dirty_background_bytes", recommended: "67108864", rule: dbtl, severity: Warning, because: []string{dbtl}},
				{setting: "vm.dirty_bytes", recommended: "268435456", rule: dbtl, severity: Warning, because: []string{dbtl}},
			}},
		{name: "vm.dirty_bytes: up and down in bytes is a conflict",
			in:        []Finding{fnd(dbtl, Warning, "vm.dirty_bytes", "536870912", "268435456"), fnd(lowersBuffers, Warning, "vm.dirty_bytes", "536870912", "1073741824")},
			conflicts: []string{"vm.dirty_bytes"}},

		{name: "nothing recommended", in: nil},
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range resolveCases() {
		t.Run(tc.name, func(t *testing.T) {
			got := Resolve(resolverRules(), tc.in)
			checkResolution(t, got, tc)
			// Order-independent: every shuffle of the input resolves the same.
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.in))))
			for range 20 {
				in := slices.Clone(tc.in)
				rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
				if again := Resolve(resolverRules(), in); !reflect.DeepEqual(again, got) {
					t.Fatalf("input order %v resolves differently:\n%+v\nwant\n%+v", rulesOf(in), again, got)
				}
			}
		})
	}
}

func rulesOf(fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Rule + ":" + f.Setting + "=" + f.Recommended
	}
	return out
}

func checkResolution(t *testing.T, got Resolution, tc resolveCase) {
	t.Helper()
	if len(got.Recommendations) != len(tc.want) {
		t.Fatalf("got %d recommendations %+v, want %d", len(got.Recommendations), got.Recommendations, len(tc.want))
	}
	for i, w := range tc.want {
		r := got.Recommendations[i]
		if r.Setting != w.setting || r.Recommended != w.recommended || r.Rule != w.rule || r.Severity != w.severity {
			t.Errorf("recommendation %d = %s=%s by %s (%s), want %s=%s by %s (%s)", i, r.Setting, r.Recommended, r.Rule, r.Severity,
				w.setting, w.recommended, w.rule, w.severity)
		}
		var because, overruled []string
		for _, b := range r.Because {
			because = append(because, b.Rule)
			if b.Summary != b.Rule+" summary" {
				t.Errorf("%s: because %s has summary %q, want the rule's", r.Setting, b.Rule, b.Summary)
			}
		}
		for _, o := range r.Overruled {
			overruled = append(overruled, o.Rule)
			if !strings.Contains(o.Reason, w.reason) || !strings.Contains(o.Reason, r.Rule) {
				t.Errorf("%s: %s overruled because %q, want it to name %s and say %q", r.Setting, o.Rule, o.Reason, r.Rule, w.reason)
			}
		}
		slices.Sort(because)
		if !slices.Equal(because, w.because) || !slices.Equal(overruled, w.overruled) {
			t.Errorf("%s: because %v, overruled %v; want %v, %v", r.Setting, because, overruled, w.because, w.overruled)
		}
		switch {
		case w.prediction == 0 && r.Prediction != nil:
			t.Errorf("%s: prediction %+v, want none", r.Setting, r.Prediction)
		case w.prediction != 0 && (r.Prediction == nil || r.Prediction.SavedSecondsPerSecond != w.prediction):
			t.Errorf("%s: prediction %+v, want %v", r.Setting, r.Prediction, w.prediction)
		}
	}
	var conflicts []string
	for _, c := range got.Conflicts {
		conflicts = append(conflicts, c.Setting)
		if c.Rule != ConflictRuleID || c.Severity != Warning || c.Recommended != "" || !strings.Contains(c.Summary, "up (") {
			t.Errorf("conflict finding = %+v, want a %s warning without a recommended value", c, ConflictRuleID)
		}
	}
	if !slices.Equal(conflicts, tc.conflicts) {
		t.Errorf("conflicts on %v, want %v", conflicts, tc.conflicts)
	}
}

// TestResolvePairsCovered fails when two rules of All() share a setting and no case of the
// resolver's table has both of them: a new rule for an old setting must say how it is resolved.
func TestResolvePairsCovered(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range resolveCases() {
		for _, a := range tc.in {
			for _, b := range tc.in {
				if a.Setting == b.Setting && a.Rule < b.Rule {
					covered[a.Rule+" "+b.Rule] = true
				}
			}
		}
	}
	all := All()
	pairs := 0
	for i, a := range all {
		for _, b := range all[i+1:] {
			for _, s := range a.Settings {
				if !slices.Contains(b.Settings, s) {
					continue
				}
				pairs++
				x, y := min(a.ID, b.ID), max(a.ID, b.ID)
				if !covered[x+" "+y] {
					t.Errorf("%s and %s both recommend %s, and no resolver case has both", x, y, s)
				}
			}
		}
	}
	if pairs == 0 {
		t.Error("no two rules share a setting: the wal_sync_method pair is gone?")
	}
}

// TestResolveSeed001 resolves what the real rules find on seed 001's bulk load: both
// wal_sync_method rules fire, and one recommendation per setting comes out.
func TestResolveSeed001(t *testing.T) {
	fs := Findings(Run(All(), seed001().input(slowDiskProbe())))
	n := 0
	for _, f := range fs {
		if f.Setting == collector.WALSyncMethod {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("want both wal_sync_method rules to fire on seed 001, got %v", summarize(fs))
	}
	res := Resolve(All(), fs)
	seen := map[string]bool{}
	for _, r := range res.Recommendations {
		if seen[r.Setting] {
			t.Errorf("two recommendations for %s", r.Setting)
		}
		seen[r.Setting] = true
		if r.Setting == collector.WALSyncMethod {
			if r.Recommended != "fdatasync" || len(r.Because) != 2 || len(r.Overruled) != 0 {
				t.Errorf("wal_sync_method: %+v, want fdatasync because of both rules", r)
			}
			if r.Prediction == nil || r.Prediction.SavedSecondsPerSecond < 0.4 {
				t.Errorf("wal_sync_method: prediction %+v, want open-sync-with-small-buffers' 0.46 s/s", r.Prediction)
			}
		}
	}
	if !seen[collector.WALSyncMethod] || !seen[collector.WALBuffers] {
		t.Errorf("recommendations for %v, want wal_sync_method and wal_buffers", seen)
	}
	if len(res.Conflicts) != 0 {
		t.Errorf("conflicts %+v, want none", res.Conflicts)
	}
}

func TestRecommendationJSON(t *testing.T) {
	res := Resolve(All(), []Finding{
		fnd("open-sync-with-small-buffers", Warning, collector.WALSyncMethod, "open_datasync", "fdatasync", 0.46),
		fnd("sync-method-slow", Warning, collector.WALSyncMethod, "open_datasync", "fsync", 0.1),
	})
	b, err := json.Marshal(res.Recommendations[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"setting", "current", "recommended", "action", "severity", "rule", "summary", "evidence", "because", "overruled", "prediction"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	over := m["overruled"].([]any)[0].(map[string]any)
	if over["rule"] != "sync-method-slow" || over["recommended"] != "fsync" || over["reason"] == "" {
		t.Errorf("overruled = %v", over)
	}
	if got := fmt.Sprint(m["severity"]); got != "warning" {
		t.Errorf("severity = %s, want warning", got)
	}
}
