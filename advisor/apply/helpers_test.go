package apply

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

// fakePG is a PostgreSQL actuator over a map: postmaster-context settings wait for restart().
type fakePG struct {
	mu       sync.Mutex
	values   map[string]*Value
	conf     map[string]string // what the configuration files (not auto.conf) say
	writeErr map[string]error
	setErr   error
	reads    map[string]int
	sets     []string
}

func newFakePG(vals map[string]string, contexts map[string]string) *fakePG {
	f := &fakePG{values: map[string]*Value{}, conf: map[string]string{}, writeErr: map[string]error{}, reads: map[string]int{}}
	for k, v := range vals {
		ctx := contexts[k]
		if ctx == "" {
			ctx = "sighup"
		}
		val := &Value{Value: v, Source: "configuration file", SourceFile: "/data/lab.conf", Context: ctx}
		if k == collector.WALSyncMethod {
			val.EnumVals = []string{"fsync", "fdatasync", "open_sync", "open_datasync"}
		}
		f.values[k] = val
		f.conf[k] = v
	}
	return f
}

func (f *fakePG) Owns(s string) bool { return !strings.HasPrefix(s, "vm.") }

func (f *fakePG) Read(_ context.Context, s string) (Value, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[s]++
	v, ok := f.values[s]
	if !ok {
		return Value{}, fmt.Errorf("no setting %s", s)
	}
	return *v, nil
}

func (f *fakePG) Writable(_ context.Context, s string) error { return f.writeErr[s] }

func (f *fakePG) Set(_ context.Context, s, value string) (Value, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, s+"="+value)
	if f.setErr != nil {
		return Value{}, f.setErr
	}
	v := f.values[s]
	auto := value
	v.AutoConf = &auto
	v.Source, v.SourceFile = "configuration file", "/data/postgresql.auto.conf"
	if v.Context == "postmaster" {
		v.PendingRestart = !sameValue(s, v.Value, value)
	} else {
		v.Value = value
	}
	return *v, nil
}

func (f *fakePG) Restore(_ context.Context, s string, old Value) (Value, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.values[s]
	v.AutoConf = old.AutoConf
	want := f.conf[s]
	if old.AutoConf != nil {
		want = *old.AutoConf
	}
	v.Source, v.SourceFile = old.Source, old.SourceFile
	if v.Context == "postmaster" {
		v.PendingRestart = !sameValue(s, v.Value, want)
	} else {
		v.Value = want
	}
	return *v, nil
}

// operator changes a setting behind the manager's back (ALTER SYSTEM and a reload).
func (f *fakePG) operator(s, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	auto := value
	f.values[s].AutoConf = &auto
	f.values[s].Value = value
}

// restart brings pending values into effect.
func (f *fakePG) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.values {
		if v.PendingRestart && v.AutoConf != nil {
			v.Value = *v.AutoConf
			v.PendingRestart = false
		}
	}
}

func (f *fakePG) value(s string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.values[s]; ok {
		return v.Value
	}
	return ""
}

func (f *fakePG) setCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sets...)
}

// world is a simulated server: every tick its counters advance by what the live
// wal_sync_method costs, so the figures follow the settings the manager changes.
type world struct {
	mu       sync.Mutex
	pg       *fakePG
	now      time.Time
	start    time.Time
	wal      collector.WALStats
	findings []rules.Finding
	probe    *probes.Report
	snap     *collector.Snapshot
	// cost per wal_sync_method: seconds of WAL I/O per MB, and the flush wait share.
	cost map[string][2]float64
	// kernel, when set, finishes each snapshot: the kernel's part of the simulated server.
	kernel func(s *collector.Snapshot)
	// sysid and standby are the server's identity and role in each snapshot.
	sysid   string
	standby bool
}

func newWorld(pg *fakePG) *world {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	return &world{
		pg: pg, now: t0, start: t0,
		probe: goodProbe(),
		cost: map[string][2]float64{
			"open_datasync": {0.200, 0.85},
			"fdatasync":     {0.004, 0.10},
			"fsync":         {0.005, 0.11},
		},
	}
}

// tick advances the world by one second and takes a snapshot.
func (w *world) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(time.Second)
	method := w.pg.value(collector.WALSyncMethod)
	c := w.cost[method]
	const mb = 8
	w.wal.Bytes += mb << 20
	w.wal.Writes += 100
	w.wal.WriteTimeSeconds += c[0] * mb / 2
	w.wal.SyncTimeSeconds += c[0] * mb / 2
	w.wal.BuffersFull += 10
	settings := map[string]collector.Setting{
		collector.TrackWALIOTiming: {Value: "on"},
		collector.WALSyncMethod:    {Value: method, EnumVals: []string{"fsync", "fdatasync", "open_sync", "open_datasync"}},
	}
	wal := w.wal
	s := collector.Snapshot{
		Time: w.now,
		Postgres: &collector.Postgres{
			VersionNum: 150000, StartTime: w.start, Settings: settings, WAL: &wal, SystemIdentifier: w.sysid, InRecovery: w.standby,
			WaitEvents: &collector.WaitEvents{Samples: 10, ActiveBackends: 10,
				Counts: map[string]int64{collector.EventIOWALWrite: int64(c[1] * 10)}},
		},
		Kernel: &collector.Kernel{DirtyBackgroundThresholdBytes: 1 << 30, DirtyThresholdBytes: 2 << 30, VM: collector.VM{DirtyBackgroundRatio: 10, DirtyRatio: 20}},
	}
	if w.kernel != nil {
		w.kernel(&s)
	}
	w.snap = &s
}

func (w *world) setFindings(fs ...rules.Finding) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.findings = fs
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) State() advisor.State {
	w.mu.Lock()
	defer w.mu.Unlock()
	fs := append([]rules.Finding(nil), w.findings...)
	// As the advisor does: the recommendations are the findings resolved.
	return advisor.State{Snapshot: w.snap, Findings: fs, Recommendations: rules.Resolve(rules.All(), fs).Recommendations,
		Probe: w.probe, ProbeEnabled: w.probe != nil}
}

// goodProbe says every method syncs at 4 ms, well above a 0.1 ms write, on a device of
// unknown durability.
func goodProbe() *probes.Report {
	r := &probes.Report{Durability: probes.Verdict{Status: probes.VerdictUnknown}}
	for _, m := range []string{probes.OpenDatasync, probes.Fdatasync, probes.Fsync, probes.OpenSync} {
		r.Methods = append(r.Methods, probes.MethodResult{Name: m, WritesPerSync: 1, WriteBytes: probes.BlockBytes, Available: true, Samples: 50, LatencyUS: probes.Latency{Mean: 4000, P50: 4000}})
	}
	r.Methods = append(r.Methods,
		probes.MethodResult{Name: probes.FsyncWritethrough, WritesPerSync: 1, WriteBytes: probes.BlockBytes, Available: false, Error: "not on Linux"},
		probes.MethodResult{Name: probes.Write, WritesPerSync: 1, WriteBytes: probes.BlockBytes, Available: true, Samples: 50, LatencyUS: probes.Latency{Mean: 100, P50: 100}})
	return r
}

// syncFinding is a sync-method-slow finding with a prediction of the WAL wait per MB that is
// near, not at, what the world measures (world.cost and tick: 8 of 10 reads waiting over 8 MB a
// second, 0.1 s/MB, under open_datasync; 1 of 10, 0.0125 s/MB, under fdatasync), as a rule's
// model would be.
func syncFinding(current, recommended string) rules.Finding {
	perMB := map[string]float64{"open_datasync": 0.1, "fdatasync": 0.02, "fsync": 0.02}
	return rules.Finding{Rule: "sync-method-slow", Severity: rules.Warning, Setting: collector.WALSyncMethod,
		Current: current, Recommended: recommended, Action: rules.ActionReload, Summary: "test",
		Predicted: &rules.Predicted{Name: rules.PredictWALWait, Current: perMB[current], Value: perMB[recommended],
			Unit: rules.UnitSecondsPerMB, Basis: "test"}}
}

// testConfig is a manager configuration for simulated seconds.
func testConfig(t *testing.T, w *world, mode Mode) Config {
	return Config{
		Mode: mode, Journal: filepath.Join(t.TempDir(), "apply.journal"), VerifyWindow: 10 * time.Second,
		Cooldown: 5 * time.Second, MaxPerDay: 4, RejectFor: time.Hour, Now: w.clock,
	}
}

func newTestManager(t *testing.T, cfg Config, w *world, acts ...Actuator) *Manager {
	t.Helper()
	m, err := New(cfg, w, acts, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// run ticks the world and steps the manager n times.
func run(t *testing.T, m *Manager, w *world, n int) {
	t.Helper()
	for range n {
		w.tick()
		if err := m.Step(context.Background()); err != nil {
			t.Logf("step: %v", err)
		}
	}
}

// runUntil ticks until cond holds, failing after limit ticks.
func runUntil(t *testing.T, m *Manager, w *world, limit int, what string, cond func() bool) {
	t.Helper()
	for range limit {
		if cond() {
			return
		}
		run(t, m, w, 1)
	}
	if !cond() {
		t.Fatalf("after %d snapshots: %s did not happen; status: %+v", limit, what, m.Status())
	}
}

// outcomes lists the journal's records of a change as "intent", "applied", ...
func outcomes(t *testing.T, j *Journal, id int) []string {
	t.Helper()
	recs, _, err := j.Read()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if r.ID != id {
			continue
		}
		if r.Kind == KindOutcome {
			out = append(out, string(r.Outcome))
		} else {
			out = append(out, r.Kind)
		}
	}
	return out
}

func hasOutcome(t *testing.T, j *Journal, id int, o Outcome) bool {
	for _, x := range outcomes(t, j, id) {
		if x == string(o) {
			return true
		}
	}
	return false
}

// lastRecord returns the latest record of a change with the given outcome.
func recordOf(t *testing.T, j *Journal, id int, o Outcome) Record {
	t.Helper()
	recs, _, err := j.Read()
	if err != nil {
		t.Fatal(err)
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].ID == id && recs[i].Outcome == o {
			return recs[i]
		}
	}
	t.Fatalf("change %d has no %s record", id, o)
	return Record{}
}
