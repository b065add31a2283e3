package probes

import (
	"strings"
	"testing"
)

// fakeReport builds a report whose methods have the given p50 latencies (microseconds) at one
// 8kB write per sync; Write is the unsynced baseline.
func fakeReport(p50 map[string]float64) *Report {
	r := &Report{}
	for _, name := range append(SyncMethods(), Write) {
		m := MethodResult{Name: name, WritesPerSync: 1, WriteBytes: BlockBytes, Available: true}
		if name == FsyncWritethrough {
			m.Available, m.Error = false, notOnLinux
		}
		if v, ok := p50[name]; ok {
			m.Samples = 100
			m.LatencyUS = Latency{Mean: v, P50: v, P90: v, P99: v, Max: v, CILow: v, CIHigh: v}
			m.OpsPerSec = 1e6 / v
		}
		r.Methods = append(r.Methods, m)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

func TestJudge(t *testing.T) {
	hdd := DeviceFacts{FSType: "ext4", Rotational: ptr(true), WriteCache: "write back", FUA: ptr(false)}
	hddNoCache := DeviceFacts{FSType: "ext4", Rotational: ptr(true), WriteCache: "write through", FUA: ptr(false)}
	ssd := DeviceFacts{FSType: "xfs", Rotational: ptr(false), WriteCache: "write back", FUA: ptr(false)}
	all := func(sync, write float64) map[string]float64 {
		return map[string]float64{OpenDatasync: sync, Fdatasync: sync, Fsync: sync * 1.1, OpenSync: sync, Write: write}
	}
	tests := []struct {
		name         string
		p50          map[string]float64
		facts        DeviceFacts
		want         string
		reasonHas    []string
		wantEvidence map[string]float64
	}{
		{
			name:      "seed 004: rotational disk with its write cache on syncs in 200 µs",
			p50:       all(200, 2),
			facts:     hdd,
			want:      VerdictTooFast,
			reasonHas: []string{"rotational disk", "200 µs", `write cache ("write back")`, "hdparm -W0", "battery"},
			wantEvidence: map[string]float64{
				"fdatasync_p50_us": 200, "write_p50_us": 2, "sync_write_ratio": 100,
				"rotational": 1, "write_cache_write_back": 1, "fua": 0, "rotational_min_sync_us": RotationalMinSyncUS,
			},
		},
		{
			name:         "seed 004 with the cache off: 8 ms syncs on a platter",
			p50:          all(8000, 2),
			facts:        hddNoCache,
			want:         VerdictPlausible,
			reasonHas:    []string{"8.0 ms", "rotational"},
			wantEvidence: map[string]float64{"fdatasync_p50_us": 8000, "rotational": 1, "write_cache_write_back": 0},
		},
		{
			name: "seed 000: open_sync is not really syncing on a rotational disk",
			p50: map[string]float64{
				OpenDatasync: 8000, Fdatasync: 8300, Fsync: 8400, OpenSync: 150, Write: 3,
			},
			facts:     hddNoCache,
			want:      VerdictTooFast,
			reasonHas: []string{"open_sync completes a sync in 150 µs"},
		},
		{
			name:         "virtio disk claiming rotational with 100 µs syncs: the flags are the emulation's",
			p50:          all(100, 2),
			facts:        DeviceFacts{FSType: "ext4", Rotational: ptr(true), WriteCache: "write back", FUA: ptr(false), Virtual: true},
			want:         VerdictUnknown,
			reasonHas:    []string{"virtual disk", "100 µs", "hypervisor"},
			wantEvidence: map[string]float64{"fdatasync_p50_us": 100, "rotational": 1, "virtual": 1},
		},
		{
			name:         "ssd at 50 µs: latency cannot tell",
			p50:          all(50, 2),
			facts:        ssd,
			want:         VerdictUnknown,
			reasonHas:    []string{"power-loss protection", "look alike from latency alone", "50 µs", "25.0 times an unsynced write"},
			wantEvidence: map[string]float64{"fdatasync_p50_us": 50, "sync_write_ratio": 25, "rotational": 0},
		},
		{
			name:      "ssd whose syncs cost no more than writes, write back without FUA: suspect",
			p50:       all(3, 2.5),
			facts:     ssd,
			want:      VerdictUnknown,
			reasonHas: []string{"suspect that cache", "power-loss protection"},
		},
		{
			name:      "tmpfs: too fast and not durable at all",
			p50:       all(1.5, 1.2),
			facts:     DeviceFacts{FSType: "tmpfs", Volatile: true},
			want:      VerdictTooFast,
			reasonHas: []string{"tmpfs", "lives in memory", "not durable"},
			wantEvidence: map[string]float64{
				"volatile": 1, "write_p50_us": 1.2,
			},
		},
		{
			name:      "tmpfs named but not flagged volatile",
			p50:       all(1.5, 1.2),
			facts:     DeviceFacts{FSType: "tmpfs"},
			want:      VerdictTooFast,
			reasonHas: []string{"tmpfs"},
		},
		{
			name:      "no device facts",
			p50:       all(100, 2),
			facts:     DeviceFacts{FSType: "ext2/ext3/ext4"},
			want:      VerdictUnknown,
			reasonHas: []string{"not known", "power-loss protection"},
		},
		{
			name:      "nothing synced was measured",
			p50:       map[string]float64{Write: 2},
			facts:     hdd,
			want:      VerdictUnknown,
			reasonHas: []string{"No sync method was measured"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Judge(fakeReport(tt.p50), tt.facts)
			if got.Status != tt.want {
				t.Errorf("Status = %q, want %q; reason: %s", got.Status, tt.want, got.Reason)
			}
			for _, s := range tt.reasonHas {
				if !strings.Contains(got.Reason, s) {
					t.Errorf("reason lacks %q: %s", s, got.Reason)
				}
			}
			for k, want := range tt.wantEvidence {
				if v, ok := got.Evidence[k]; !ok || !near(v, want, 1e-9) {
					t.Errorf("evidence %s = %v (present %v), want %v", k, v, ok, want)
				}
			}
			if got.Facts != tt.facts {
				t.Errorf("Facts = %+v, want the facts judged on, %+v", got.Facts, tt.facts)
			}
		})
	}
}

func TestServerIODirect(t *testing.T) {
	tests := []struct {
		name   string
		server ServerIO
		direct []string // methods opened with O_DIRECT
	}{
		{"no server: like pg_test_fsync", ServerIO{}, []string{OpenDatasync, OpenSync}},
		{"15, replica", ServerIO{VersionNum: 150004, WALLevel: "replica"}, nil},
		{"15, default wal_level", ServerIO{VersionNum: 150004}, nil},
		{"15, minimal", ServerIO{VersionNum: 150004, WALLevel: "minimal"}, []string{OpenDatasync, OpenSync}},
		{"12, minimal", ServerIO{VersionNum: 120000, WALLevel: "minimal"}, []string{OpenDatasync, OpenSync}},
		{"16, minimal no longer matters", ServerIO{VersionNum: 160000, WALLevel: "minimal"}, nil},
		{"16, debug_io_direct=wal: every method", ServerIO{VersionNum: 160002, DebugIODirect: "wal"}, []string{OpenDatasync, Fdatasync, Fsync, FsyncWritethrough, OpenSync}},
		{"17, data, wal", ServerIO{VersionNum: 170000, DebugIODirect: "data, WAL"}, []string{OpenDatasync, Fdatasync, Fsync, FsyncWritethrough, OpenSync}},
		{"17, wal_init only", ServerIO{VersionNum: 170000, DebugIODirect: "wal_init"}, nil},
		{"17, data", ServerIO{VersionNum: 170000, DebugIODirect: "data"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, m := range append(SyncMethods(), Write) {
				want := false
				for _, d := range tt.direct {
					want = want || d == m
				}
				if got := tt.server.Direct(m); got != want {
					t.Errorf("Direct(%s) = %v, want %v", m, got, want)
				}
			}
			if tt.server.Describe() == "" {
				t.Error("Describe is empty")
			}
		})
	}
}
