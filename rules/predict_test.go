package rules

import (
	"math"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestMeasurePredicted(t *testing.T) {
	waited := seed001()
	waited.waits = &collector.WaitEvents{Samples: 15, ActiveBackends: 30, Counts: map[string]int64{
		collector.EventIOWALWrite: 12, collector.EventLWLockWALBufMap: 3, collector.EventLWLockWALInsert: 9}}
	fewSamples := seed001()
	fewSamples.steps = 2
	fewSamples.waits = waited.waits
	timed := seed001()
	timed.settings = with(collector.TrackWALIOTiming, "on")
	timed.writeSec, timed.syncSec = 15*0.3, 15*0.1
	walDriven := scenario{steps: 121, walBytes: 15 * 10 * float64(mB), writes: 15 * 500, syncs: 15 * 500,
		ckptEvery: 4, ckptRequested: true, ckptSync: 0.1, ckptWrite: 30}
	tests := []struct {
		name   string
		figure string
		sc     scenario
		want   float64
		ok     bool
	}{
		// 12 + 3 backends waiting in 15 reads: one backend for each 15 s step, over 12 MB of WAL
		// per step. WALInsert is not a wait on the write path.
		{"wait per MB", PredictWALWait, waited, 15.0 / 12, true},
		// In flight: 18 of 20 reads in IO WALWrite, 13.5 s a step, over the insert LSN's 30 MB
		// (pg_stat_wal counts 0).
		{"wait per MB, in flight", PredictWALWait, singleInsert(0), 13.5 / 30, true},
		{"wait per MB, too few samples", PredictWALWait, fewSamples, 0, false},
		{"wait per MB, no samples", PredictWALWait, seed001(), 0, false},
		// 0.4 s a second at 0.8 MB a second.
		{"WAL I/O time", PredictWALIO, timed, 0.5, true},
		{"WAL I/O time per second", PredictWALIORate, timed, 0.4, true},
		{"WAL I/O time without track_wal_io_timing", PredictWALIO, seed001(), 0, false},
		{"checkpoint sync", PredictCheckpointSync, walDriven, 0.1, true},
		{"checkpoint write", PredictCheckpointWrite, walDriven, 30, true},
		{"checkpoint rate: one a minute", PredictCheckpointRate, walDriven, 1.0 / 60, true},
		{"no checkpoint", PredictCheckpointSync, seed001(), 0, false},
		{"the probes' figure", PredictFlushSeconds, seed001(), 0, false},
		{"unknown", "nonsense", seed001(), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := MeasurePredicted(tt.figure, tt.sc.history())
			if ok != tt.ok || math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("MeasurePredicted(%s) = %v, %v; want %v, %v", tt.figure, got, ok, tt.want, tt.ok)
			}
		})
	}
	if _, ok := MeasurePredicted(PredictWALWait, nil); ok {
		t.Error("a nil history measured something")
	}
}

func TestCheckPrediction(t *testing.T) {
	tests := []struct {
		name      string
		p         Predicted
		measured  float64
		wantError float64
		ok        bool
	}{
		{"exact", Predicted{Current: 0.9, Value: 0.1}, 0.1, 0, true},
		// Scaled by the predicted change (0.8), not by the small predicted value (0.1).
		{"fell less than predicted", Predicted{Current: 0.9, Value: 0.1}, 0.34, 0.3, true},
		{"fell more than predicted", Predicted{Current: 0.9, Value: 0.1}, 0.02, -0.1, true},
		// A small predicted change is scaled by the value instead.
		{"small change", Predicted{Current: 10, Value: 9}, 11, 2.0 / 9, true},
		{"a rise, as predicted for the checkpoint write phase", Predicted{Current: 20, Value: 36}, 30, -6.0 / 36, true},
		{"no scale", Predicted{}, 1, 0, false},
		{"NaN measured", Predicted{Current: 1, Value: 0.5}, math.NaN(), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := CheckPrediction(tt.p, tt.measured)
			if ok != tt.ok || math.Abs(got.Error-tt.wantError) > 1e-9 {
				t.Errorf("CheckPrediction(%+v, %v) = %+v, %v; want error %v, %v", tt.p, tt.measured, got, ok, tt.wantError, tt.ok)
			}
			if ok && (got.Measured != tt.measured || got.Predicted != tt.p.Value || got.Current != tt.p.Current) {
				t.Errorf("CheckPrediction kept %+v", got)
			}
		})
	}
}
