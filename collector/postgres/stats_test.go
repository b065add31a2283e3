package postgres

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func ptr[T any](v T) *T { return &v }

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

func readFixture(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStatsByVersion(t *testing.T) {
	tests := []struct {
		name       string
		versionNum int
		dir        string
		// The query chosen must name these and must not name those.
		walQueryHas, walQueryHasNot []string
		cpView, cpFile              string
		wantWAL                     collector.WALStats
		wantCP                      collector.CheckpointStats
	}{
		{
			name: "14", versionNum: 140011, dir: "pg14",
			walQueryHas: []string{"pg_stat_wal"}, walQueryHasNot: []string{"pg_stat_io"},
			cpView: "pg_stat_bgwriter", cpFile: "pg_stat_bgwriter.json",
			wantWAL: collector.WALStats{
				Records: 2500000, FPI: 1520, Bytes: 987654321, BuffersFull: 3100, Writes: 4200, Syncs: 310,
				WriteTimeSeconds: 0.25025, SyncTimeSeconds: 1.2345, StatsReset: mustTime(t, "2024-03-01T08:00:00.5Z"),
			},
			wantCP: collector.CheckpointStats{
				Timed: 40, Requested: 3, WriteTimeSeconds: 270, SyncTimeSeconds: 1.5, BuffersWritten: 70000,
				StatsReset: mustTime(t, "2024-03-01T08:00:00.5Z"),
			},
		},
		{
			name: "15 recorded", versionNum: 150008, dir: "pg15",
			walQueryHas: []string{"pg_stat_wal"}, walQueryHasNot: []string{"pg_stat_io"},
			cpView: "pg_stat_bgwriter", cpFile: "pg_stat_bgwriter.json",
			wantWAL: collector.WALStats{
				Records: 24056, FPI: 490, Bytes: 5190743, Writes: 731,
				StatsReset: mustTime(t, "2026-12-02T09:55:21.054294Z"),
			},
			wantCP: collector.CheckpointStats{StatsReset: mustTime(t, "2026-12-02T09:55:21.054294Z")},
		},
		{
			// Stats never reset read as the zero time; wal_bytes beyond 32 bits stays exact.
			name: "16", versionNum: 160004, dir: "pg16",
			walQueryHas: []string{"pg_stat_wal"}, walQueryHasNot: []string{"pg_stat_io"},
			cpView: "pg_stat_bgwriter", cpFile: "pg_stat_bgwriter.json",
			wantWAL: collector.WALStats{Records: 1000, FPI: 88, Bytes: 12345678901, BuffersFull: 12, Writes: 90, Syncs: 7},
			wantCP:  collector.CheckpointStats{Timed: 2, Requested: 1, WriteTimeSeconds: 2.50075, SyncTimeSeconds: 0.0125, BuffersWritten: 300},
		},
		{
			name: "17", versionNum: 170002, dir: "pg17",
			walQueryHas: []string{"pg_stat_wal"}, walQueryHasNot: []string{"pg_stat_io"},
			cpView: "pg_stat_checkpointer", cpFile: "pg_stat_checkpointer.json",
			wantWAL: collector.WALStats{
				Records: 300000, FPI: 11, Bytes: 44000000, Writes: 2100, Syncs: 2000,
				WriteTimeSeconds: 0.6, SyncTimeSeconds: 4, StatsReset: mustTime(t, "2025-01-15T12:30:00Z"),
			},
			wantCP: collector.CheckpointStats{
				Timed: 96, Requested: 4, WriteTimeSeconds: 540, SyncTimeSeconds: 0.8, BuffersWritten: 123456,
				StatsReset: mustTime(t, "2025-01-15T12:30:00Z"),
			},
		},
		{
			// Writes and syncs are pg_stat_io's context 'normal' summed over backend types; the
			// later of the two views' resets bounds the counters.
			name: "18", versionNum: 180001, dir: "pg18",
			walQueryHas: []string{"pg_stat_wal", "pg_stat_io", "object OPERATOR(pg_catalog.=) 'wal'"}, walQueryHasNot: []string{"wal_write"},
			cpView: "pg_stat_checkpointer", cpFile: "pg_stat_checkpointer.json",
			wantWAL: collector.WALStats{
				Records: 500000, FPI: 2048, Bytes: 73400320, BuffersFull: 640, Writes: 4000, Syncs: 1908,
				WriteTimeSeconds: 0.4, SyncTimeSeconds: 3.8145, StatsReset: mustTime(t, "2025-10-02T06:00:00Z"),
			},
			wantCP: collector.CheckpointStats{
				Timed: 100, Requested: 7, Done: ptr[int64](90), WriteTimeSeconds: 600, SyncTimeSeconds: 0.9505,
				BuffersWritten: 222222, StatsReset: mustTime(t, "2025-10-01T00:00:00Z"),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := walStatsQuery(tt.versionNum)
			for _, s := range tt.walQueryHas {
				if !strings.Contains(q, s) {
					t.Errorf("walStatsQuery(%d) = %q, want it to contain %q", tt.versionNum, q, s)
				}
			}
			for _, s := range tt.walQueryHasNot {
				if strings.Contains(q, s) {
					t.Errorf("walStatsQuery(%d) = %q, want it not to contain %q", tt.versionNum, q, s)
				}
			}
			if cq := checkpointQuery(tt.versionNum); !strings.Contains(cq, tt.cpView) {
				t.Errorf("checkpointQuery(%d) = %q, want it to read %s", tt.versionNum, cq, tt.cpView)
			}

			var ioRows []byte
			if tt.versionNum >= walIOVersion {
				ioRows = readFixture(t, tt.dir, "pg_stat_io_wal.json")
			}
			gotWAL, err := parseWAL(tt.versionNum, readFixture(t, tt.dir, "pg_stat_wal.json"), ioRows)
			if err != nil {
				t.Fatalf("parseWAL: %v", err)
			}
			if !approxEqual(*gotWAL, tt.wantWAL) {
				t.Errorf("parseWAL = %+v, want %+v", *gotWAL, tt.wantWAL)
			}
			gotCP, err := parseCheckpoints(tt.versionNum, readFixture(t, tt.dir, tt.cpFile))
			if err != nil {
				t.Fatalf("parseCheckpoints: %v", err)
			}
			if !approxEqual(*gotCP, tt.wantCP) {
				t.Errorf("parseCheckpoints = %+v, want %+v", *gotCP, tt.wantCP)
			}
		})
	}
}

// approxEqual compares after rounding float fields to microseconds: the times are sums of
// milliseconds divided by 1000.
func approxEqual[T any](got, want T) bool {
	round := func(v reflect.Value) {
		for i := 0; i < v.NumField(); i++ {
			if f := v.Field(i); f.Kind() == reflect.Float64 {
				f.SetFloat(float64(int64(f.Float()*1e6+0.5)) / 1e6)
			}
		}
	}
	round(reflect.ValueOf(&got).Elem())
	round(reflect.ValueOf(&want).Elem())
	return reflect.DeepEqual(got, want)
}

func TestStatsBelow14(t *testing.T) {
	for _, v := range []int{90624, 130016} {
		if q := walStatsQuery(v); q != "" {
			t.Errorf("walStatsQuery(%d) = %q, want none", v, q)
		}
		if q := checkpointQuery(v); q != "" {
			t.Errorf("checkpointQuery(%d) = %q, want none", v, q)
		}
		if q := waitEventsQuery(v); q != "" {
			t.Errorf("waitEventsQuery(%d) = %q, want none", v, q)
		}
	}
}

// A view row of the wrong version must fail loudly rather than read as zero counters.
func TestStatsWrongLayout(t *testing.T) {
	tests := []struct {
		name       string
		versionNum int
		parse      func(v int) error
		wantErr    string
	}{
		{
			name: "17 row read as 18 checkpointer", versionNum: 180000, wantErr: "num_done",
			parse: func(v int) error {
				_, err := parseCheckpoints(v, readFixture(t, "pg17", "pg_stat_checkpointer.json"))
				return err
			},
		},
		{
			name: "18 pg_stat_wal read as 17", versionNum: 170000, wantErr: "wal_sync, wal_sync_time, wal_write, wal_write_time",
			parse: func(v int) error {
				_, err := parseWAL(v, readFixture(t, "pg18", "pg_stat_wal.json"), nil)
				return err
			},
		},
		{
			name: "17 checkpointer read as bgwriter", versionNum: 160000, wantErr: "checkpoints_timed",
			parse: func(v int) error {
				_, err := parseCheckpoints(v, readFixture(t, "pg17", "pg_stat_checkpointer.json"))
				return err
			},
		},
		{
			name: "bad timestamp", versionNum: 150000, wantErr: "stats_reset",
			parse: func(v int) error {
				_, err := parseWAL(v, []byte(`{"wal_records":1,"wal_fpi":1,"wal_bytes":1,"wal_buffers_full":1,"wal_write":1,"wal_sync":1,"wal_write_time":0,"wal_sync_time":0,"stats_reset":"yesterday"}`), nil)
				return err
			},
		},
		// Rows are untrusted: what no server writes is refused, not turned into a rate.
		{
			name: "negative counter", versionNum: 150000, wantErr: "pg_stat_wal.wal_records is negative",
			parse: func(v int) error {
				_, err := parseWAL(v, []byte(`{"wal_records":-1,"wal_fpi":1,"wal_bytes":1,"wal_buffers_full":1,"wal_write":1,"wal_sync":1,"wal_write_time":0,"wal_sync_time":0}`), nil)
				return err
			},
		},
		{
			name: "negative time", versionNum: 150000, wantErr: "pg_stat_wal.wal_sync_time is negative",
			parse: func(v int) error {
				_, err := parseWAL(v, []byte(`{"wal_records":1,"wal_fpi":1,"wal_bytes":1,"wal_buffers_full":1,"wal_write":1,"wal_sync":1,"wal_write_time":0,"wal_sync_time":-0.5}`), nil)
				return err
			},
		},
		{
			// numeric has no bound; converting 1e30 to int64 gave an arbitrary (negative) number.
			name: "wal_bytes past int64", versionNum: 150000, wantErr: "wal_bytes: 1000000000000000000000000000000 is out of range",
			parse: func(v int) error {
				_, err := parseWAL(v, []byte(`{"wal_records":1,"wal_fpi":1,"wal_bytes":1000000000000000000000000000000,"wal_buffers_full":1,"wal_write":1,"wal_sync":1,"wal_write_time":0,"wal_sync_time":0}`), nil)
				return err
			},
		},
		{
			name: "pg_stat_io writes adding past int64", versionNum: 180000, wantErr: "add up to more than an int64",
			parse: func(v int) error {
				row := `{"object":"wal","context":"normal","writes":9223372036854775807,"fsyncs":0,"write_time":0,"fsync_time":0}`
				_, err := parseWAL(v, readFixture(t, "pg18", "pg_stat_wal.json"), []byte("["+row+","+row+"]"))
				return err
			},
		},
		{
			name: "negative pg_stat_io fsyncs", versionNum: 180000, wantErr: "pg_stat_io.fsyncs is negative",
			parse: func(v int) error {
				_, err := parseWAL(v, readFixture(t, "pg18", "pg_stat_wal.json"), []byte(`[{"object":"wal","context":"normal","writes":1,"fsyncs":-3,"write_time":0,"fsync_time":0}]`))
				return err
			},
		},
		{
			name: "negative checkpoints", versionNum: 160000, wantErr: "pg_stat_bgwriter.checkpoints_req is negative",
			parse: func(v int) error {
				_, err := parseCheckpoints(v, []byte(`{"checkpoints_timed":1,"checkpoints_req":-1,"checkpoint_write_time":0,"checkpoint_sync_time":0,"buffers_checkpoint":0}`))
				return err
			},
		},
		{
			name: "negative num_done", versionNum: 180000, wantErr: "pg_stat_checkpointer.num_done is negative",
			parse: func(v int) error {
				_, err := parseCheckpoints(v, []byte(`{"num_timed":1,"num_requested":1,"num_done":-2,"write_time":0,"sync_time":0,"buffers_written":0}`))
				return err
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse(tt.versionNum)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got error %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseLSN(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{in: "0/0", want: 0},
		{in: "0/16B3748", want: 0x16B3748},
		{in: "16/B374D848", want: 0x16<<32 | 0xB374D848},
		{in: "FFFFFFFF/FFFFFFFF", want: 1<<64 - 1},
		{in: "", wantErr: true},
		{in: "16B374D848", wantErr: true},
		{in: "1/", wantErr: true},
		{in: "/1", wantErr: true},
		{in: "100000000/0", wantErr: true},
		{in: "0/G", wantErr: true},
		{in: "-1/0", wantErr: true},
		{in: "0x1/0", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseLSN(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseLSN(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
