package apply

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type staticStatus struct{ st Status }

func (s staticStatus) Status() Status { return s.st }

func fullStatus() Status {
	t0 := time.Unix(1764583200, 0).UTC()
	until := t0.Add(7 * 24 * time.Hour)
	return Status{
		Mode:        ModeOn,
		Settings:    []string{"wal_sync_method", "wal_buffers", KnobDirtyBytes},
		AdvisorOnly: map[string]string{KnobDirtyBytes: "/proc/sys is read-only here"},
		Changes: []ChangeStatus{
			{ID: 3, Setting: "wal_buffers", Old: "64kB", New: "16MB", State: string(PendingRestart)},
			{ID: 2, Setting: "wal_sync_method", Old: "fdatasync", New: "open_datasync", State: string(Rejected),
				Verdict: []FigureChange{{Name: FigureIOSecondsPerMB, Verdict: VerdictWorse, Effect: &Effect{Rel: 2.5, RelLow: 1.5, RelHigh: 3.5, NBefore: 12, NAfter: 12}},
					{Name: FigureWALRate, Verdict: verdictReported}}},
			{ID: 1, Setting: "wal_sync_method", Old: "open_datasync", New: "fdatasync", State: string(Verified)},
		},
		Refused:        []Refusal{{Rule: "fsync-off", Setting: "fsync", Recommended: "on", Reason: "never"}},
		Holds:          []Hold{{Setting: "wal_sync_method", Value: "open_datasync", Kind: Rejected, Until: until}, {Setting: "max_wal_size", Kind: Abandoned, Until: until}},
		Elsewhere:      []string{"change 4 (checkpoint_timeout) was made on the server with system identifier 1, but the connection reaches the server with system identifier 2"},
		Cluster:        []ClusterChangeStatus{{Setting: "wal_buffers", New: "16MB", Live: "64kB", State: ClusterPendingRestart}},
		Outcomes:       map[Outcome]int{Applied: 1, PendingRestart: 1, Verified: 1, RolledBack: 1, Rejected: 1},
		ChangesLast24h: 3,
		LastChange:     t0,
	}
}

func TestMetrics(t *testing.T) {
	const want = `
# HELP pgwal_advisor_apply_change_state 1 for the state of the latest change of each setting: applied, verifying, verified, unconfirmed (verified, no gain shown), pending_restart, rolled_back, rejected, failed, abandoned or unresolved.
# TYPE pgwal_advisor_apply_change_state gauge
pgwal_advisor_apply_change_state{setting="wal_buffers",state="pending_restart",value="16MB"} 1
pgwal_advisor_apply_change_state{setting="wal_sync_method",state="rejected",value="open_datasync"} 1
# HELP pgwal_advisor_apply_changes_last_24h Changes the daemon started in the last 24 hours (capped by --apply.max-per-day).
# TYPE pgwal_advisor_apply_changes_last_24h gauge
pgwal_advisor_apply_changes_last_24h 3
# HELP pgwal_advisor_apply_cluster_change 1 per change the advisor made in the cluster's configuration (Patroni's DCS), with how this member runs it: running, pending_restart or not_running (a local override, or Patroni has not reached it: after a failover this member would run its own value).
# TYPE pgwal_advisor_apply_cluster_change gauge
pgwal_advisor_apply_cluster_change{setting="wal_buffers",state="pending_restart",value="16MB"} 1
# HELP pgwal_advisor_apply_verdict_effect_ratio Per setting's latest verified or rolled-back change and judged figure: the change of the figure's mean relative to before (-0.31 is 31% lower; every figure is lower-is-better), with its 95% interval's bounds: bound is low, estimate or high.
# TYPE pgwal_advisor_apply_verdict_effect_ratio gauge
pgwal_advisor_apply_verdict_effect_ratio{bound="estimate",figure="wal_io_seconds_per_mb",setting="wal_sync_method",value="open_datasync"} 2.5
pgwal_advisor_apply_verdict_effect_ratio{bound="high",figure="wal_io_seconds_per_mb",setting="wal_sync_method",value="open_datasync"} 3.5
pgwal_advisor_apply_verdict_effect_ratio{bound="low",figure="wal_io_seconds_per_mb",setting="wal_sync_method",value="open_datasync"} 1.5
# HELP pgwal_advisor_apply_hands_off_until_timestamp_seconds Until when the advisor leaves alone a setting someone else changed (Unix time).
# TYPE pgwal_advisor_apply_hands_off_until_timestamp_seconds gauge
pgwal_advisor_apply_hands_off_until_timestamp_seconds{setting="max_wal_size"} 1.7651880e+09
# HELP pgwal_advisor_apply_changes_elsewhere Changes of the journal made on another PostgreSQL server than --dsn reaches (another system identifier or data directory): left alone here; roll them back on their own server.
# TYPE pgwal_advisor_apply_changes_elsewhere gauge
pgwal_advisor_apply_changes_elsewhere 1
# HELP pgwal_advisor_apply_journal_ok 1 when the apply journal can be read and written; 0 stops all changes.
# TYPE pgwal_advisor_apply_journal_ok gauge
pgwal_advisor_apply_journal_ok 1
# HELP pgwal_advisor_apply_last_change_timestamp_seconds When the last change was started (Unix time).
# TYPE pgwal_advisor_apply_last_change_timestamp_seconds gauge
pgwal_advisor_apply_last_change_timestamp_seconds 1.7645832e+09
# HELP pgwal_advisor_apply_mode_info 1 for the apply mode: off, dry-run or on.
# TYPE pgwal_advisor_apply_mode_info gauge
pgwal_advisor_apply_mode_info{mode="on"} 1
# HELP pgwal_advisor_apply_outcomes_total Outcomes recorded in the apply journal, by outcome.
# TYPE pgwal_advisor_apply_outcomes_total counter
pgwal_advisor_apply_outcomes_total{outcome="abandoned"} 0
pgwal_advisor_apply_outcomes_total{outcome="applied"} 1
pgwal_advisor_apply_outcomes_total{outcome="failed"} 0
pgwal_advisor_apply_outcomes_total{outcome="undo_failed"} 0
pgwal_advisor_apply_outcomes_total{outcome="pending_restart"} 1
pgwal_advisor_apply_outcomes_total{outcome="rejected"} 1
pgwal_advisor_apply_outcomes_total{outcome="rolled_back"} 1
pgwal_advisor_apply_outcomes_total{outcome="verified"} 1
# HELP pgwal_advisor_apply_refused 1 per current recommendation the apply mode does not apply (never-auto, advice, out of bounds, not allowed; the API says why).
# TYPE pgwal_advisor_apply_refused gauge
pgwal_advisor_apply_refused{rule="fsync-off",setting="fsync"} 1
# HELP pgwal_advisor_apply_rejected_until_timestamp_seconds Until when a value that made things worse and was rolled back is not proposed again (Unix time).
# TYPE pgwal_advisor_apply_rejected_until_timestamp_seconds gauge
pgwal_advisor_apply_rejected_until_timestamp_seconds{setting="wal_sync_method",value="open_datasync"} 1.7651880e+09
# HELP pgwal_advisor_apply_setting_allowed Per setting of --apply.settings: 1 when the advisor may change it, 0 when it stays advice (a missing privilege, a read-only /proc/sys; the API says why).
# TYPE pgwal_advisor_apply_setting_allowed gauge
pgwal_advisor_apply_setting_allowed{setting="vm.dirty_bytes"} 0
pgwal_advisor_apply_setting_allowed{setting="wal_buffers"} 1
pgwal_advisor_apply_setting_allowed{setting="wal_sync_method"} 1
`
	if err := testutil.CollectAndCompare(NewMetrics(staticStatus{fullStatus()}), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// A fresh manager's status (nothing happened yet) gathers cleanly too.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewMetrics(staticStatus{Status{Mode: ModeOff, Settings: DefaultSettings()}}))
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestMetricsDocumented checks docs/metrics.md's Apply section against the collector both ways.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "| `pgwal_advisor_apply_"); ok {
			name, _, _ = strings.Cut(name, "`")
			documented["pgwal_advisor_apply_"+name] = true
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewMetrics(staticStatus{fullStatus()}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, mf := range mfs {
		emitted[mf.GetName()] = true
		if !documented[mf.GetName()] {
			t.Errorf("%s is not documented in docs/metrics.md", mf.GetName())
		}
	}
	for name := range documented {
		if !emitted[name] {
			t.Errorf("%s is documented in docs/metrics.md but not emitted", name)
		}
	}
}
