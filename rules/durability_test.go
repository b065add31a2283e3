package rules

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

func TestFsyncOff(t *testing.T) {
	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "fsync on", in: scenario{}.input(nil)},
		{
			name: "seed 000: fsync off",
			in:   scenario{settings: with(collector.Fsync, "off", collector.WALSyncMethod, "open_sync")}.input(slowDiskProbe()),
			want: []wantFinding{{collector.Fsync, Critical, "on"}},
		},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
		{name: "postgres unreachable", in: scenario{missingPgAtEnd: true}.input(nil), notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalFsyncOff(tt.in), tt.notEnough, tt.want...)
		})
	}
	t.Run("seed 000: effect names the measured flush", func(t *testing.T) {
		got := evalFsyncOff(scenario{settings: with(collector.Fsync, "off")}.input(slowDiskProbe()))
		if v, ok := evidence(got.Findings[0], "flush_seconds"); !ok || v != 0.0046 {
			t.Errorf("flush_seconds = %v, %v; want 0.0046", v, ok)
		}
		if !strings.Contains(got.Findings[0].ExpectedEffect, "4.6ms") {
			t.Errorf("effect %q does not name 4.6ms", got.Findings[0].ExpectedEffect)
		}
	})
}

func TestWALOnVolatileStorage(t *testing.T) {
	storage := func(fs string, volatile bool, opts ...string) *collector.Storage {
		return &collector.Storage{Path: "/mnt/wal", MountPoint: "/mnt/wal", FSType: fs, Volatile: volatile,
			MountOptions: append([]string{"rw"}, opts...), WriteCache: "write back"}
	}
	throughOnly := storage("ext4", false, "nobarrier")
	throughOnly.WriteCache = "write through"
	throughOnly.Disks = []collector.Disk{{Name: "sda", WriteCache: "write through"}}
	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "ext4", in: scenario{storage: storage("ext4", false)}.input(nil)},
		{name: "seed 002: WAL on tmpfs", in: scenario{storage: storage("tmpfs", true), noDisk: true}.input(nil),
			want: []wantFinding{{"wal_file_system", Critical, ""}}},
		{name: "ramfs even if not flagged volatile", in: scenario{storage: storage("ramfs", false), noDisk: true}.input(nil),
			want: []wantFinding{{"wal_file_system", Critical, ""}}},
		{name: "nobarrier on a write-back disk", in: scenario{storage: storage("ext4", false, "nobarrier")}.input(nil),
			want: []wantFinding{{"mount_options", Warning, "barrier (remove nobarrier)"}}},
		{name: "barrier=0", in: scenario{storage: storage("ext4", false, "barrier=0")}.input(nil),
			want: []wantFinding{{"mount_options", Warning, "barrier (remove barrier=0)"}}},
		{name: "nobarrier on write-through disks only", in: scenario{storage: throughOnly}.input(nil),
			want: []wantFinding{{"mount_options", Info, ""}}},
		{name: "no storage facts", in: scenario{mutate: func(_ int, s *collector.Snapshot) {
			s.WALStorage = nil
			s.Parts = []collector.Part{{Name: collector.PartWALStorage, Error: "stat pg_wal: permission denied"}}
		}}.input(nil), notEnough: true},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalWALOnVolatileStorage(tt.in), tt.notEnough, tt.want...)
		})
	}
}

func TestWriteCacheUnsafe(t *testing.T) {
	yes, no := true, false
	verdict := func(status string, rotational *bool, cache string) *probes.Report {
		p := slowDiskProbe()
		p.Durability = probes.Verdict{Status: status, Reason: "fdatasync p50 0.2 ms on a rotating disk.",
			Evidence: map[string]float64{"fdatasync_p50_us": 200, "write_p50_us": 15},
			Facts:    probes.DeviceFacts{FSType: "ext4", Rotational: rotational, WriteCache: cache}}
		return p
	}
	stale := verdict(probes.VerdictTooFast, &yes, "write back")
	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "plausible", in: scenario{}.input(verdict(probes.VerdictPlausible, &yes, "write through"))},
		{name: "seed 004: rotational write-back, sync p50 0.2 ms",
			in:   scenario{}.input(verdict(probes.VerdictTooFast, &yes, "write back")),
			want: []wantFinding{{"write_cache", Critical, ""}}},
		{name: "too fast on an SSD", in: scenario{}.input(verdict(probes.VerdictTooFast, &no, "write back")),
			want: []wantFinding{{"write_cache", Warning, ""}}},
		{name: "too fast, rotation unknown", in: scenario{}.input(verdict(probes.VerdictTooFast, nil, "")),
			want: []wantFinding{{"write_cache", Warning, ""}}},
		{name: "rotation from the collector when the verdict lacks it", in: scenario{storage: &collector.Storage{
			FSType: "ext4", Rotational: &yes, WriteCache: "write back"}}.input(verdict(probes.VerdictTooFast, nil, "")),
			want: []wantFinding{{"write_cache", Critical, ""}}},
		{name: "unknown with a write-back cache", in: scenario{}.input(verdict(probes.VerdictUnknown, &no, "write back")),
			want: []wantFinding{{"write_cache", Info, "confirm power-loss protection"}}},
		{name: "unknown with a write-through cache", in: scenario{}.input(verdict(probes.VerdictUnknown, &no, "write through"))},
		{name: "no probe", in: scenario{}.input(nil), notEnough: true},
		{name: "stale probe", in: func() Input {
			in := scenario{}.input(stale)
			in.Probe.Finished = in.Now.Add(-2 * time.Hour)
			return in
		}(), notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalWriteCacheUnsafe(tt.in), tt.notEnough, tt.want...)
		})
	}
	t.Run("seed 004: evidence in seconds", func(t *testing.T) {
		got := evalWriteCacheUnsafe(scenario{}.input(verdict(probes.VerdictTooFast, &yes, "write back")))
		if v, ok := evidence(got.Findings[0], "fdatasync_p50_seconds"); !ok || v != 0.0002 {
			t.Errorf("fdatasync_p50_seconds = %v, %v; want 0.0002", v, ok)
		}
	})
}

func TestDurabilityTradedOff(t *testing.T) {
	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "defaults", in: scenario{}.input(nil)},
		{name: "synchronous_commit=local is durable locally", in: scenario{settings: with(collector.SynchronousCommit, "local")}.input(nil)},
		{name: "synchronous_commit off", in: scenario{settings: with(collector.SynchronousCommit, "off")}.input(nil),
			want: []wantFinding{{collector.SynchronousCommit, Info, "on"}}},
		{name: "both off", in: scenario{settings: with(collector.SynchronousCommit, "off", collector.FullPageWrites, "off")}.input(nil),
			want: []wantFinding{{collector.SynchronousCommit, Info, "on"}, {collector.FullPageWrites, Info, "on"}}},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := evalDurabilityTradedOff(tt.in)
			checkResult(t, got, tt.notEnough, tt.want...)
			for _, f := range got.Findings {
				if f.Action != ActionNeverAuto {
					t.Errorf("%s: action %s, want never-auto", f.Setting, f.Action)
				}
			}
		})
	}
	t.Run("says how much is at risk", func(t *testing.T) {
		got := evalDurabilityTradedOff(scenario{settings: with(collector.SynchronousCommit, "off")}.input(nil))
		if !strings.Contains(got.Findings[0].Summary, "600ms") {
			t.Errorf("summary %q does not name 3 x wal_writer_delay = 600ms", got.Findings[0].Summary)
		}
	})
}

func TestTrackWALIOTimingOff(t *testing.T) {
	pg13 := defaultSettings()
	delete(pg13, collector.TrackWALIOTiming)
	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "default off", in: scenario{}.input(nil), want: []wantFinding{{collector.TrackWALIOTiming, Info, "on"}}},
		{name: "on", in: scenario{settings: with(collector.TrackWALIOTiming, "on")}.input(nil)},
		{name: "PostgreSQL 13 has no such setting", in: scenario{settings: pg13, noWAL: true}.input(nil)},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalTrackWALIOTimingOff(tt.in), tt.notEnough, tt.want...)
		})
	}
}

func TestProbeDisabled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		want   int
	}{
		{"probing", "", 0},
		{"no dir", "no probe directory: set --probe.dir", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := probeDisabled().Eval(Input{ProbeDisabled: tc.reason})
			if got := len(res.Findings); got != tc.want {
				t.Fatalf("findings = %d, want %d", got, tc.want)
			}
			if tc.want == 1 && !strings.Contains(res.Findings[0].Summary, tc.reason) {
				t.Errorf("summary %q lacks the reason %q", res.Findings[0].Summary, tc.reason)
			}
		})
	}
}

// Every finding Run returns has a list of evidence, [] when the rule cites none (probe-disabled
// cites none): `check --format json` and /api/v1/findings promise a list, never null.
func TestRunEvidenceIsAList(t *testing.T) {
	in := scenario{}.input(nil)
	in.ProbeDisabled = "no probe directory"
	var n int
	for _, o := range Run(All(), in) {
		for _, f := range o.Findings {
			n++
			if f.Evidence == nil {
				t.Errorf("%s: evidence is nil", f.Rule)
			}
			if b, _ := json.Marshal(f); strings.Contains(string(b), `"evidence":null`) {
				t.Errorf("%s: JSON %s", f.Rule, b)
			}
		}
	}
	if n == 0 {
		t.Fatal("no finding to check: the probe-disabled finding was expected")
	}
}

// The verdict probes.Judge gives already cites rotational (and the rule adds it from the
// snapshot only when the verdict lacks it): it is cited once, as a bool.
func TestWriteCacheUnsafeCitesRotationalOnce(t *testing.T) {
	yes := true
	ext4 := &collector.Storage{FSType: "ext4", Rotational: &yes, WriteCache: "write back"}
	for name, facts := range map[string]probes.DeviceFacts{
		"from the verdict":  {FSType: "ext4", Rotational: &yes, WriteCache: "write back"},
		"from the snapshot": {FSType: "ext4", WriteCache: "write back"},
	} {
		t.Run(name, func(t *testing.T) {
			p := fastDiskProbe()
			p.Durability = probes.Judge(p, facts)
			got := evalWriteCacheUnsafe(scenario{storage: ext4}.input(p))
			if len(got.Findings) != 1 {
				t.Fatalf("got %d findings, want 1: %+v", len(got.Findings), got)
			}
			var cited []Evidence
			for _, e := range got.Findings[0].Evidence {
				if e.Name == "rotational" {
					cited = append(cited, e)
				}
			}
			if len(cited) != 1 || cited[0].Value != 1 || cited[0].Unit != UnitBool {
				t.Errorf("rotational cited as %+v, want once, 1, bool", cited)
			}
		})
	}
}
