package rules

import (
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// contractIDs are the rule IDs alert rules and docs depend on.
func contractIDs() []string {
	return []string{
		"fsync-off", "wal-on-volatile-storage", "write-cache-unsafe", "sync-method-slow",
		"open-sync-with-small-buffers", "wal-buffers-small", "flush-after-disabled",
		"writeback-stalls-wal", "checkpoint-stalls", "wal-lock-contention",
		"track-wal-io-timing-off", "durability-traded-off",
	}
}

func TestAllMetadata(t *testing.T) {
	kebab := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, r := range All() {
		t.Run(r.ID, func(t *testing.T) {
			if !kebab.MatchString(r.ID) {
				t.Errorf("ID %q is not kebab-case", r.ID)
			}
			if seen[r.ID] {
				t.Errorf("ID %q repeated", r.ID)
			}
			seen[r.ID] = true
			if r.Title == "" || r.Rationale == "" || len(r.Sources) == 0 || len(r.Settings) == 0 || r.Eval == nil {
				t.Errorf("incomplete metadata: %+v", r)
			}
			if r.Severity < Info || r.Severity > Critical {
				t.Errorf("severity %v", r.Severity)
			}
		})
	}
	for _, id := range contractIDs() {
		if !seen[id] {
			t.Errorf("contract rule %q missing from All()", id)
		}
	}
}

// TestAllColdStart: on a cold start every rule that needs data says what is missing, and no
// rule guesses a warning.
func TestAllColdStart(t *testing.T) {
	inputs := map[string]Input{
		"no history":    {Now: t0()},
		"one snapshot":  scenario{steps: 1}.input(nil),
		"two snapshots": scenario{steps: 2}.input(slowDiskProbe()),
	}
	for name, in := range inputs {
		for _, o := range Run(All(), in) {
			t.Run(name+"/"+o.Rule, func(t *testing.T) {
				for _, f := range o.Findings {
					if f.Severity > Info && !immediateRule(o.Rule) {
						t.Errorf("measured finding on a cold start: %+v", f)
					}
				}
				// probe-disabled judges what the advisor says of its probes, not the history.
				if name == "no history" && o.NotEnoughData == "" && o.Rule != "probe-disabled" {
					t.Errorf("no history but no not-enough-data status")
				}
			})
		}
	}
}

func immediateRule(id string) bool {
	for _, r := range All() {
		if r.ID == id {
			return r.Immediate
		}
	}
	return false
}

// TestHealthyNoFalseAlarms: a default cluster under pgbench on a fast disk gets no warning or
// critical finding about its settings, however long the Tracker watches.
func TestHealthyNoFalseAlarms(t *testing.T) {
	for name, p := range map[string]*probes.Report{"fast disk probe": fastDiskProbe(), "no probe": nil} {
		t.Run(name, func(t *testing.T) {
			in := healthy().input(p)
			for _, f := range Findings(Run(All(), in)) {
				if f.Severity > Info {
					t.Errorf("false alarm: %s %s: %s", f.Rule, f.Severity, f.Summary)
				}
			}
			tr := NewTracker(All())
			h := in.History.Snapshots()
			for i := range h {
				w := NewHistory(DefaultHistoryLen)
				for _, s := range h[:i+1] {
					w.Add(s)
				}
				for _, f := range tr.Evaluate(Input{History: w, Probe: in.Probe, Now: h[i].Time}) {
					if f.Severity > Info {
						t.Fatalf("tracker at %v: false alarm %s: %s", h[i].Time, f.Rule, f.Summary)
					}
				}
			}
		})
	}
}

// TestSeeds runs the whole rule set on each seed's reproduction and checks the findings that
// matter, and that every finding respects its rule's metadata.
func TestSeeds(t *testing.T) {
	type key struct{ rule, setting, recommended string }
	tests := []struct {
		name string
		in   Input
		want []key
		sev  Severity
	}{
		{name: "seed 000: open_sync on a 4.6 ms device", in: scenario{settings: with("wal_sync_method", "open_sync"),
			writes: 15 * 200, syncs: 0}.input(seed000Probe()),
			want: []key{{"sync-method-slow", "wal_sync_method", "fdatasync"}}, sev: Warning},
		{name: "seed 001: 64kB, open_datasync, bulk insert", in: seed001().input(slowDiskProbe()),
			want: []key{
				{"open-sync-with-small-buffers", "wal_sync_method", "fdatasync"},
				{"sync-method-slow", "wal_sync_method", "fdatasync"},
				{"wal-buffers-small", "wal_buffers", "16MB"},
			}, sev: Warning},
		{name: "seed 002: WAL on tmpfs", in: scenario{storage: tmpfsStorage(), noDisk: true}.input(nil),
			want: []key{{"wal-on-volatile-storage", "wal_file_system", "a persistent file system on a durable device"}}, sev: Critical},
		// The contention shows as info only: the lab measured no gain from commit_delay
		// (docs/benchmarks.md, seed 002), so nothing warns.
		{name: "seed 002: 64 clients on a 4 ms device", in: seed002(64, 0.9).input(slowDiskProbe()), sev: Info},
		{name: "seed 003: flush-after at 0", in: seed003().input(nil),
			want: []key{
				{"flush-after-disabled", "bgwriter_flush_after", "512kB"},
				{"flush-after-disabled", "checkpoint_flush_after", "256kB"},
			}, sev: Warning},
		{name: "seed 004: rotational write-back, sync p50 0.2 ms", in: scenario{}.input(seed004Probe()),
			want: []key{{"write-cache-unsafe", "write_cache", "write through, or a cache with power-loss protection"}}, sev: Critical},
	}
	rules := map[string]Rule{}
	for _, r := range All() {
		rules[r.ID] = r
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := Findings(Run(All(), tt.in))
			var got []key
			for _, f := range fs {
				r := rules[f.Rule]
				if f.Severity > r.Severity {
					t.Errorf("%s: severity %s above the rule's %s", f.Rule, f.Severity, r.Severity)
				}
				if f.Setting != "" && !slices.Contains(r.Settings, f.Setting) {
					t.Errorf("%s: setting %q not among the rule's %v", f.Rule, f.Setting, r.Settings)
				}
				if f.Severity > Info {
					got = append(got, key{f.Rule, f.Setting, f.Recommended})
				}
			}
			sort.Slice(got, func(i, j int) bool { return got[i].rule+got[i].setting < got[j].rule+got[j].setting })
			if !slices.Equal(got, tt.want) {
				t.Errorf("warnings and criticals:\n got %v\nwant %v", got, tt.want)
			}
			if MaxSeverity(fs) != tt.sev {
				t.Errorf("MaxSeverity = %v, want %v", MaxSeverity(fs), tt.sev)
			}
		})
	}
}

func TestFindingJSON(t *testing.T) {
	b, err := json.Marshal(Finding{Rule: "fsync-off", Severity: Critical, Setting: "fsync", Current: "off",
		Recommended: "on", Action: ActionReload, Summary: "s", Evidence: []Evidence{{Name: "fsync", Value: 0, Unit: UnitBool}},
		ExpectedEffect: "e", FirstSeen: t0(), LastSeen: t0()})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rule", "severity", "setting", "current", "recommended", "action", "summary", "evidence", "expected_effect", "first_seen", "last_seen"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
	if m["severity"] != "critical" || m["action"] != "reload" {
		t.Errorf("severity %v, action %v; want strings critical, reload", m["severity"], m["action"])
	}
	ev := m["evidence"].([]any)[0].(map[string]any)
	if ev["name"] != "fsync" || ev["unit"] != "bool" {
		t.Errorf("evidence = %v", ev)
	}
	var back Finding
	if err := json.Unmarshal(b, &back); err != nil || back.Severity != Critical {
		t.Errorf("round trip: %v, %v", back.Severity, err)
	}
}

func TestSeverity(t *testing.T) {
	tests := []struct {
		in      string
		want    Severity
		wantErr bool
	}{
		{in: "info", want: Info}, {in: "warning", want: Warning}, {in: "critical", want: Critical},
		{in: "fatal", wantErr: true}, {in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSeverity(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseSeverity(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
	if !(Info < Warning && Warning < Critical) {
		t.Error("severities are not ordered")
	}
	if _, err := Severity(0).MarshalText(); err == nil {
		t.Error("zero severity marshalled")
	}
	if MaxSeverity(nil) != 0 {
		t.Error("MaxSeverity(nil) != 0")
	}
}

// TestMeasuredRecommendationsPredict: every recommendation a measured rule makes that the apply
// mode could carry out (reload, restart, sysctl) says what figure it expects to move, from what
// to what. The inputs make every such rule fire at least once, and a measured rule that is in
// neither list below fails the test until someone decides which one it belongs to.
func TestMeasuredRecommendationsPredict(t *testing.T) {
	recommending := []string{"sync-method-slow", "open-sync-with-small-buffers", "wal-buffers-small", "checkpoint-stalls", "full-page-images"}
	// Measured rules whose findings are advice for a person: nothing is applied, so nothing to
	// verify against a prediction. writeback-stalls-wal recommends vm.dirty_thresholds only for a
	// device shape and starting point a benchmark proved (ProvenDirtyRows); its table tests
	// check that path's prediction.
	adviceOnly := []string{"write-cache-unsafe", "wal-lock-contention", "writeback-stalls-wal"}
	for _, r := range All() {
		if !r.Immediate && !slices.Contains(recommending, r.ID) && !slices.Contains(adviceOnly, r.ID) {
			t.Errorf("measured rule %s is in neither list: does it recommend a value the apply mode can set?", r.ID)
		}
	}

	// The WAL rules with wait events sampled, with track_wal_io_timing, and with neither.
	waited := seed001()
	waited.waits = &collector.WaitEvents{Samples: 15, ActiveBackends: 15, Counts: map[string]int64{collector.EventIOWALWrite: 13}}
	timed := seed001()
	timed.settings[collector.TrackWALIOTiming] = plain("on")
	timed.writeSec = 15 * 106 * 0.0046
	big := seed001()
	big.settings = with(collector.WALBuffers, "16MB", collector.WALSyncMethod, "open_datasync", collector.SharedBuffers, "1GB")
	seed000 := scenario{settings: with("wal_sync_method", "open_sync"), writes: 15 * 200}
	seed000pg13 := seed000
	seed000pg13.noWAL = true
	oldDefaults := seed003Fixed()
	oldDefaults.settings = with(collector.CheckpointCompletionTarget, "0.5", collector.CheckpointTimeout, "30")
	oldDefaults.ckptSync = 6.9
	walDriven := scenario{steps: 121, walBytes: 15 * 10 * float64(mB), writes: 15 * 500, syncs: 15 * 500,
		ckptEvery: 4, ckptRequested: true, ckptSync: 0.1, ckptWrite: 30, diskBytes: 15 * 50 * float64(mB)}
	inputs := map[string]Input{
		"seed 001":                          seed001().input(slowDiskProbe()),
		"seed 001, wait events":             waited.input(slowDiskProbe()),
		"seed 001, track_wal_io_timing":     timed.input(slowDiskProbe()),
		"seed 001 in flight":                singleInsert(0).input(slowDiskProbe()),
		"seed 001 at 16MB":                  big.input(slowDiskProbe()),
		"seed 000":                          seed000.input(seed000Probe()),
		"seed 000 on PostgreSQL 13":         seed000pg13.input(seed000Probe()),
		"checkpoint_completion_target 0.5":  oldDefaults.input(nil),
		"checkpoints requested by WAL size": walDriven.input(nil),
		"full-page images":                  imagesScenario("off", enumvals15, 0.5, flushWaits30, 0).input(nil),
		"full-page images, CPU saturated":   imagesScenario("off", enumvals15, 0.05, flushWaits30, 0).input(nil),
	}
	fired := map[string]bool{}
	for name, in := range inputs {
		for _, f := range Findings(Run(All(), in)) {
			if immediateRule(f.Rule) || (f.Action != ActionReload && f.Action != ActionRestart && f.Action != ActionSysctl) {
				continue
			}
			t.Run(name+"/"+f.Rule+"/"+f.Setting, func(t *testing.T) {
				fired[f.Rule] = true
				checkPredicted(t, f)
				if p := f.Predicted; p != nil {
					if _, ok := MeasurePredicted(p.Name, in.History); !ok && p.Name != PredictFlushSeconds && !strings.HasPrefix(p.Basis, "modelled") {
						t.Errorf("predicted %s is not measurable from the history it was measured on", p.Name)
					}
				}
			})
		}
	}
	for _, id := range recommending {
		if !fired[id] {
			t.Errorf("no input made %s recommend anything: its prediction is untested", id)
		}
	}
}
