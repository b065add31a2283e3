package rules

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// seed003 is docs/benchmarks.md's seed 003 start with both flush-after settings at 0: pgbench at
// 600 tps, checkpoint_timeout 30s, checkpoints ending with 93MB dirty and a 6.9 s sync, the
// device writing 80 MB/s, kernel dirty limits at their 10%/20% defaults. Fifteen minutes.
func seed003() scenario {
	return scenario{
		steps: 61,
		settings: with(collector.SharedBuffers, "1GB", collector.MaxWALSize, "8GB", collector.CheckpointTimeout, "30",
			collector.CheckpointFlushAfter, "0kB", collector.BgwriterFlushAfter, "0kB"),
		walBytes: 15 * 5 * float64(mB), writes: 15 * 600, syncs: 15 * 580,
		ckptEvery: 2, ckptWrite: 20, ckptSync: 6.9, ckptBuffers: 20000,
		dirtyBase: 40 * mB, dirtyAtCkpt: 93 * mB, diskBytes: 15 * 80 * float64(mB),
	}
}

// seed003Fixed is the lab's third row: PostgreSQL's default flush-after settings, Dirty
// peaking at 1MB and checkpoint syncs of 0.04-0.09 s.
func seed003Fixed() scenario {
	sc := seed003()
	sc.settings = with(collector.SharedBuffers, "1GB", collector.MaxWALSize, "8GB", collector.CheckpointTimeout, "30")
	sc.ckptSync, sc.dirtyBase, sc.dirtyAtCkpt = 0.07, 512*kB, 1*mB
	return sc
}

func TestFlushAfterDisabled(t *testing.T) {
	notLinux := seed003()
	notLinux.noKernel = true
	for _, name := range []string{collector.CheckpointFlushAfter, collector.BgwriterFlushAfter} {
		s := notLinux.settings[name]
		s.Source = "default"
		notLinux.settings[name] = s
	}
	setButNoKernel := seed003()
	setButNoKernel.noKernel = true
	onlyCheckpointer := seed003Fixed()
	onlyCheckpointer.settings = with(collector.CheckpointFlushAfter, "0kB")
	noSettings := defaultSettings()
	delete(noSettings, collector.CheckpointFlushAfter)
	delete(noSettings, collector.BgwriterFlushAfter)

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "defaults", in: healthy().input(nil)},
		{name: "seed 003: both 0", in: seed003().input(nil), want: []wantFinding{
			{collector.CheckpointFlushAfter, Warning, "256kB"}, {collector.BgwriterFlushAfter, Warning, "512kB"}}},
		{name: "only checkpoint_flush_after 0", in: onlyCheckpointer.input(nil),
			want: []wantFinding{{collector.CheckpointFlushAfter, Warning, "256kB"}}},
		{name: "0 as the platform default off Linux", in: notLinux.input(nil)},
		{name: "0 set explicitly, kernel facts missing", in: setButNoKernel.input(nil), want: []wantFinding{
			{collector.CheckpointFlushAfter, Warning, "256kB"}, {collector.BgwriterFlushAfter, Warning, "512kB"}}},
		{name: "settings missing", in: scenario{settings: noSettings}.input(nil), notEnough: true},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalFlushAfterDisabled(tt.in), tt.notEnough, tt.want...)
		})
	}
	t.Run("seed 003: symptoms in the evidence", func(t *testing.T) {
		f := evalFlushAfterDisabled(seed003().input(nil)).Findings[0]
		if got, _ := evidence(f, "checkpoint_sync_mean_seconds"); got != 6.9 {
			t.Errorf("checkpoint_sync_mean_seconds = %v, want 6.9", got)
		}
		if got, _ := evidence(f, "checkpoint_dirty_writeback_peak_bytes"); got != float64(93*mB) {
			t.Errorf("checkpoint_dirty_writeback_peak_bytes = %v, want 93MB", got)
		}
	})
}

func TestCheckpointStalls(t *testing.T) {
	// oldDefaults is seed 003 as reported (PostgreSQL 8.2 era): completion target 0.5, long
	// checkpoint syncs, flush-after as today's defaults so that only the target is at fault.
	oldDefaults := seed003Fixed()
	oldDefaults.settings = with(collector.CheckpointCompletionTarget, "0.5", collector.CheckpointTimeout, "30")
	oldDefaults.ckptSync = 6.9
	// walDriven writes 10 MB/s with max_wal_size 1GB: a checkpoint every minute, requested.
	walDriven := func() scenario {
		return scenario{steps: 121, walBytes: 15 * 10 * float64(mB), writes: 15 * 500, syncs: 15 * 500,
			ckptEvery: 4, ckptRequested: true, ckptSync: 0.1, ckptWrite: 30, diskBytes: 15 * 50 * float64(mB)}
	}
	capped := walDriven()
	capped.storage = &collector.Storage{FSType: "ext4", Device: "8:1", FreeBytes: uint64(4 * gB), TotalBytes: uint64(20 * gB)}
	pg13 := walDriven()
	pg13.noWAL = true
	manual := walDriven()
	manual.walBytes = 15 * 10 * float64(kB)
	stalled := seed003Fixed()
	stalled.ckptSync = 6.9
	tooFew := healthy()
	tooFew.ckptEvery = 200
	noCheckpointer := healthy()
	noCheckpointer.mutate = func(_ int, s *collector.Snapshot) { s.Postgres.Checkpointer = nil }

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "healthy", in: healthy().input(nil)},
		{name: "seed 003 as reported: completion target 0.5 with 6.9 s syncs", in: oldDefaults.input(nil),
			want: []wantFinding{{collector.CheckpointCompletionTarget, Warning, "0.9"}}},
		{name: "requested checkpoints driven by WAL volume", in: walDriven().input(nil),
			want: []wantFinding{{collector.MaxWALSize, Warning, "8GB"}}},
		{name: "growth capped by free space", in: capped.input(nil),
			want: []wantFinding{{collector.MaxWALSize, Warning, "3GB"}}},
		{name: "PostgreSQL 13: doubles", in: pg13.input(nil),
			want: []wantFinding{{collector.MaxWALSize, Warning, "2GB"}}},
		{name: "requested checkpoints with little WAL are manual", in: manual.input(nil)},
		{name: "long syncs with timed, spread checkpoints: info", in: stalled.input(nil),
			want: []wantFinding{{"", Info, ""}}},
		{name: "seed 003 with flush-after at 0: that rule says it", in: seed003().input(nil)},
		{name: "too few checkpoints", in: tooFew.input(nil), notEnough: true},
		{name: "no checkpoint statistics", in: noCheckpointer.input(nil), notEnough: true},
		{name: "cold start", in: scenario{steps: 2}.input(nil), notEnough: true},
		{name: "no history", in: Input{Now: t0()}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkResult(t, evalCheckpointStalls(tt.in), tt.notEnough, tt.want...)
		})
	}
}
