package apply

import (
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func TestJudge(t *testing.T) {
	kernel := &collector.Snapshot{Kernel: &collector.Kernel{
		VM:                            collector.VM{DirtyBackgroundRatio: 10, DirtyRatio: 20},
		DirtyBackgroundThresholdBytes: 1 << 30, DirtyThresholdBytes: 2 << 30,
	}}
	kernelBytes := &collector.Snapshot{Kernel: &collector.Kernel{
		VM:                            collector.VM{DirtyBackgroundBytes: 64 << 20, DirtyBytes: 256 << 20},
		DirtyBackgroundThresholdBytes: 64 << 20, DirtyThresholdBytes: 256 << 20,
	}}
	enum := &Value{EnumVals: []string{"fsync", "fdatasync", "open_sync", "open_datasync"}}
	tooFast := goodProbe()
	tooFast.Durability = probes.Verdict{Status: probes.VerdictTooFast, Reason: "fdatasync completes in 40 µs on a rotational disk"}
	lying := goodProbe()
	for i := range lying.Methods {
		if lying.Methods[i].Name == probes.OpenSync {
			lying.Methods[i].LatencyUS = probes.Latency{Mean: 110, P50: 110}
		}
	}
	find := func(setting, rec string, action rules.Action) rules.Finding {
		return rules.Finding{Rule: "r", Setting: setting, Recommended: rec, Action: action}
	}
	all := append(DefaultSettings(), collector.TrackWALIOTiming)
	for _, tc := range []struct {
		name string
		f    rules.Finding
		in   guardInput
		want string // "" when allowed, else a fragment of the refusal
	}{
		{"fsync never", find(collector.Fsync, "on", rules.ActionReload), guardInput{}, "never applied"},
		{"synchronous_commit never-auto", find(collector.SynchronousCommit, "on", rules.ActionNeverAuto), guardInput{}, "never applied"},
		{"full_page_writes never", find(collector.FullPageWrites, "on", rules.ActionReload), guardInput{}, "never applied"},
		{"never-auto action", find(collector.CommitDelay, "2000", rules.ActionNeverAuto), guardInput{}, "never-auto"},
		{"advice", find(collector.CommitDelay, "2000", rules.ActionAdvice), guardInput{}, "advice"},
		{"no setting", find("", "x", rules.ActionReload), guardInput{}, "no setting"},
		{"unknown setting", find("shared_buffers", "1GB", rules.ActionRestart), guardInput{allowed: all}, "no bounds"},
		{"not allowed", find(collector.TrackWALIOTiming, "on", rules.ActionReload), guardInput{allowed: DefaultSettings()}, "not in --apply.settings"},
		{"allowed when listed", find(collector.TrackWALIOTiming, "on", rules.ActionReload), guardInput{allowed: all}, ""},
		{"wal_buffers too small", find(collector.WALBuffers, "32kB", rules.ActionRestart), guardInput{allowed: all}, "outside the bounds"},
		{"wal_buffers too large", find(collector.WALBuffers, "512MB", rules.ActionRestart), guardInput{allowed: all}, "outside the bounds"},
		{"wal_buffers ok", find(collector.WALBuffers, "16MB", rules.ActionRestart), guardInput{allowed: all}, ""},
		{"wal_buffers 32MB, a step beyond 16MB", find(collector.WALBuffers, "32MB", rules.ActionRestart), guardInput{allowed: all}, ""},
		{"wal_buffers 64MB, the rules' most", find(collector.WALBuffers, "64MB", rules.ActionRestart), guardInput{allowed: all}, ""},
		{"wal_buffers above 64MB", find(collector.WALBuffers, "128MB", rules.ActionRestart), guardInput{allowed: all}, "outside the bounds"},
		{"wal_buffers just above 64MB", find(collector.WALBuffers, "65537kB", rules.ActionRestart), guardInput{allowed: all}, "outside the bounds"},
		{"wal_buffers garbage", find(collector.WALBuffers, "lots", rules.ActionRestart), guardInput{allowed: all}, "parse memory"},
		{"completion target above 1", find(collector.CheckpointCompletionTarget, "1.5", rules.ActionReload), guardInput{allowed: all}, "outside the bounds"},
		{"completion target ok", find(collector.CheckpointCompletionTarget, "0.9", rules.ActionReload), guardInput{allowed: all}, ""},
		{"max_wal_size below two segments", find(collector.MaxWALSize, "48MB", rules.ActionReload), guardInput{allowed: all, segmentBytes: 32 << 20}, "outside the bounds"},
		{"max_wal_size ok", find(collector.MaxWALSize, "2GB", rules.ActionReload), guardInput{allowed: all, segmentBytes: 16 << 20}, ""},
		{"flush after above 2MB", find(collector.CheckpointFlushAfter, "4MB", rules.ActionReload), guardInput{allowed: all}, "outside the bounds"},
		{"flush after ok", find(collector.CheckpointFlushAfter, "256kB", rules.ActionReload), guardInput{allowed: all}, ""},
		{"kernel knob with reload", find(KnobDirtyBackgroundBytes, "67108864", rules.ActionReload), guardInput{allowed: all, snapshot: kernel}, "does not fit"},
		{"background too small", find(KnobDirtyBackgroundBytes, "1048576", rules.ActionSysctl), guardInput{allowed: all, snapshot: kernel}, "outside the bounds"},
		{"background ok", find(KnobDirtyBackgroundBytes, "67108864", rules.ActionSysctl), guardInput{allowed: all, snapshot: kernel}, ""},
		{"background not below dirty", find(KnobDirtyBackgroundBytes, "4294967296", rules.ActionSysctl), guardInput{allowed: all, snapshot: kernel}, "not below the dirty threshold"},
		{"background not below dirty_bytes", find(KnobDirtyBackgroundBytes, "268435456", rules.ActionSysctl), guardInput{allowed: all, snapshot: kernelBytes}, "not below"},
		{"dirty not above background", find(KnobDirtyBytes, "33554432", rules.ActionSysctl), guardInput{allowed: all, snapshot: kernelBytes}, "not above the background"},
		{"dirty ok", find(KnobDirtyBytes, "268435456", rules.ActionSysctl), guardInput{allowed: all, snapshot: &collector.Snapshot{Kernel: &collector.Kernel{VM: collector.VM{DirtyBackgroundBytes: 64 << 20}, DirtyBackgroundThresholdBytes: 64 << 20, DirtyThresholdBytes: 2 << 30}}}, ""},
		{"kernel without facts", find(KnobDirtyBytes, "268435456", rules.ActionSysctl), guardInput{allowed: all}, "no kernel facts"},
		{"sync method without probe", find(collector.WALSyncMethod, "fdatasync", rules.ActionReload), guardInput{allowed: all, live: enum}, "no probe report"},
		{"sync method too fast", find(collector.WALSyncMethod, "fdatasync", rules.ActionReload), guardInput{allowed: all, live: enum, probe: tooFast}, "too_fast"},
		{"sync method not available", find(collector.WALSyncMethod, "fsync_writethrough", rules.ActionReload), guardInput{allowed: all, live: enum, probe: goodProbe()}, "not available"},
		{"sync method not syncing", find(collector.WALSyncMethod, "open_sync", rules.ActionReload), guardInput{allowed: all, live: enum, probe: lying}, "may not reach the device"},
		{"sync method not a method", find(collector.WALSyncMethod, "none", rules.ActionReload), guardInput{allowed: all, live: enum, probe: goodProbe()}, "not one of the syncing methods"},
		{"sync method not in enumvals", find(collector.WALSyncMethod, "open_sync", rules.ActionReload), guardInput{allowed: all, live: &Value{EnumVals: []string{"fsync", "fdatasync"}}, probe: goodProbe()}, "does not accept"},
		{"sync method enumvals unknown", find(collector.WALSyncMethod, "fdatasync", rules.ActionReload), guardInput{allowed: all, probe: goodProbe()}, "unknown"},
		{"sync method ok", find(collector.WALSyncMethod, "fdatasync", rules.ActionReload), guardInput{allowed: all, live: enum, probe: goodProbe()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judge(tc.f, tc.in)
			if tc.want == "" && got != "" {
				t.Errorf("refused: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("judge = %q, want a refusal containing %q", got, tc.want)
			}
		})
	}
}

func TestJudgeRejected(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	until := now.Add(time.Hour)
	l := newLedger([]Record{
		{ID: 1, Kind: KindIntent, Setting: collector.CheckpointCompletionTarget, New: "0.9", Old: &Value{Value: "0.5"}},
		{ID: 1, Kind: KindOutcome, Outcome: RolledBack, Setting: collector.CheckpointCompletionTarget},
		{ID: 1, Kind: KindOutcome, Outcome: Rejected, Setting: collector.CheckpointCompletionTarget, Until: &until, Reason: "worse beyond noise"},
	})
	f := rules.Finding{Setting: collector.CheckpointCompletionTarget, Recommended: "0.90", Action: rules.ActionReload}
	in := guardInput{allowed: DefaultSettings(), ledger: l, now: now}
	if got := judge(f, in); !strings.Contains(got, "not proposed again") {
		t.Errorf("judge = %q, want the rejection", got)
	}
	in.now = until.Add(time.Second)
	if got := judge(f, in); got != "" {
		t.Errorf("after the rejection ended: %q", got)
	}
	f.Recommended = "0.8"
	in.now = now
	if got := judge(f, in); got != "" {
		t.Errorf("another value is not rejected: %q", got)
	}
}

func TestSameValue(t *testing.T) {
	for _, tc := range []struct {
		setting, a, b string
		want          bool
	}{
		{collector.WALBuffers, "16MB", "16384kB", true},
		{collector.WALBuffers, "16MB", "8MB", false},
		{collector.WALSyncMethod, "fdatasync", "FDATASYNC", true},
		{collector.CheckpointCompletionTarget, "0.9", "0.90", true},
		{collector.CheckpointTimeout, "5min", "300s", true},
		{collector.TrackWALIOTiming, "on", "true", true},
		{KnobDirtyBackgroundBytes, "0 (ratio 10%)", "0", true},
		{KnobDirtyBackgroundBytes, "67108864", "0", false},
	} {
		if got := sameValue(tc.setting, tc.a, tc.b); got != tc.want {
			t.Errorf("sameValue(%s, %q, %q) = %v, want %v", tc.setting, tc.a, tc.b, got, tc.want)
		}
	}
}
