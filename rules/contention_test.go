package rules

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// seed002 is docs/benchmarks.md's seed 002 at 64 clients: single-row INSERT commits on the 4 ms device,
// about 6000 tps, nearly every active backend waiting on the WAL flush.
func seed002(clients int64, waitingShare float64) scenario {
	waiting := int64(float64(clients) * waitingShare)
	return scenario{
		walBytes: 15 * 6000 * 200, writes: 15 * 240, syncs: 15 * 220, records: 15 * 6000 * 2,
		waits: &collector.WaitEvents{Samples: 15, ActiveBackends: 15 * clients, Counts: map[string]int64{
			collector.EventLWLockWALWrite: 15 * waiting * 3 / 4, collector.EventIOWALSync: 15 * waiting / 4,
		}},
	}
}

func TestWALLockContention(t *testing.T) {
	delayed := seed002(64, 0.9)
	delayed.settings = with(collector.CommitDelay, "2000")
	timed := seed002(64, 0.9)
	timed.settings = with(collector.TrackWALIOTiming, "on")
	timed.syncSec = 15 * 220 * 0.0046
	timed16 := seed002(16, 0.4)
	timed16.settings = with(collector.TrackWALIOTiming, "on")
	timed16.syncSec = 15 * 220 * 0.0011
	timed16slow := seed002(16, 0.4)
	timed16slow.settings = with(collector.TrackWALIOTiming, "on")
	timed16slow.syncSec = 15 * 220 * 0.0046
	siblings := seed002(10, 0.9)
	siblings.settings = with(collector.CommitSiblings, "10")
	fsyncOff := seed002(64, 0.9)
	fsyncOff.settings = with(collector.Fsync, "off")
	fewSamples := seed002(64, 0.9)
	fewSamples.waits.Samples, fewSamples.steps = 1, 5

	tests := []struct {
		name      string
		in        Input
		notEnough bool
		want      []wantFinding
	}{
		{name: "healthy", in: healthy().input(fastDiskProbe())},
		// docs/benchmarks.md, commit grouping table: no gain at 64 clients, so information only.
		{name: "seed 002: 64 clients on a 4 ms device: info, nothing recommended", in: seed002(64, 0.9).input(slowDiskProbe()),
			want: []wantFinding{{"", Info, ""}}},
		{name: "many waiters on a fast device: info", in: seed002(64, 0.9).input(fastDiskProbe()),
			want: []wantFinding{{"", Info, ""}}},
		// The measured region: about 16 committers on a 1 ms device, +12%.
		{name: "16 clients on a 1 ms device: the measured gain", in: seed002(16, 0.4).input(oneMsProbe()),
			want: []wantFinding{{collector.CommitDelay, Warning, "500"}}},
		// docs/benchmarks.md, commit grouping table: +13% on the 4 ms device, within the spread.
		{name: "16 clients on a 4 ms device: within the spread, info", in: seed002(16, 0.4).input(slowDiskProbe()),
			want: []wantFinding{{"", Info, ""}}},
		{name: "16 clients on a 0.1 ms device: outside the measured flush times", in: seed002(16, 0.4).input(fastDiskProbe()),
			want: []wantFinding{{"", Info, ""}}},
		{name: "few clients", in: seed002(4, 0.9).input(slowDiskProbe())},
		{name: "commit_delay already set", in: delayed.input(slowDiskProbe())},
		{name: "flush time from wal_sync_time without probes, 64 clients: info", in: timed.input(nil),
			want: []wantFinding{{"", Info, ""}}},
		{name: "flush time from wal_sync_time without probes, 16 clients, 1.1 ms: the gain", in: timed16.input(nil),
			want: []wantFinding{{collector.CommitDelay, Warning, "500"}}},
		{name: "flush time from wal_sync_time without probes, 16 clients, 4.6 ms: info", in: timed16slow.input(nil),
			want: []wantFinding{{"", Info, ""}}},
		{name: "commit_siblings too high for the load", in: siblings.input(oneMsProbe()), want: []wantFinding{
			{collector.CommitDelay, Warning, "500"}, {collector.CommitSiblings, Warning, "5"}}},
		{name: "fsync off: nothing to share", in: fsyncOff.input(slowDiskProbe())},
		{name: "flush time unknown", in: seed002(64, 0.9).input(nil), notEnough: true},
		{name: "too few wait samples", in: fewSamples.input(slowDiskProbe()), notEnough: true},
		{name: "cold start", in: scenario{steps: 2}.input(slowDiskProbe()), notEnough: true},
		{name: "no history", in: Input{Now: t0(), Probe: probeAt(mres(probes.Fdatasync, 1, 4600, 60, 200))}, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := evalWALLockContention(tt.in)
			checkResult(t, res, tt.notEnough, tt.want...)
			// In the region the prediction is the measured gain, and measurable.
			for _, f := range res.Findings {
				if f.Severity != Warning {
					continue
				}
				p := f.Predicted
				if p == nil || p.Name != PredictWALRecordRate || p.Value <= p.Current {
					t.Errorf("%s: predicted %+v, want %s rising", f.Setting, p, PredictWALRecordRate)
					continue
				}
				if cur, ok := MeasurePredicted(p.Name, tt.in.History); !ok || !near(cur, p.Current) {
					t.Errorf("%s: predicted current %v, measured %v (%v)", f.Setting, p.Current, cur, ok)
				}
			}
		})
	}
}

// oneMsProbe is the lab's 1 ms simulated device, where the commit grid measured commit_delay
// gaining: a single 8kB fdatasync about 1.1 ms.
func oneMsProbe() *probes.Report {
	return probeAt(
		mres(probes.Fdatasync, 1, 1100, 30, 200), mres(probes.Fdatasync, 2, 1150, 30, 200),
		mres(probes.Write, 1, 20, 2, 200),
	)
}
