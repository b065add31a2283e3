package advisor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/writers"
)

func TestWALDirOf(t *testing.T) {
	reported := collector.Snapshot{Postgres: &collector.Postgres{WALDir: "/srv/pg/wal"}}
	for _, tc := range []struct {
		name    string
		flag    string
		snap    collector.Snapshot
		wantDir string
	}{
		{"--wal-dir wins", "/mnt/wal", reported, "/mnt/wal"},
		{"--wal-dir with the server down", "/mnt/wal", collector.Snapshot{}, "/mnt/wal"},
		{"the server's", "", reported, "/srv/pg/wal"},
		{"unknown", "", collector.Snapshot{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sampler{WALDir: tc.flag}
			if got := s.WALDirOf(tc.snap); got != tc.wantDir {
				t.Errorf("WALDirOf = %q, want %q", got, tc.wantDir)
			}
		})
	}
}

type writersFunc func(ctx context.Context) (*collector.Writers, error)

func (f writersFunc) Collect(ctx context.Context) (*collector.Writers, error) { return f(ctx) }

// TestSampleWriters: the writers part is collected into its own field and part, and its
// failure leaves the rest of the snapshot alone.
func TestSampleWriters(t *testing.T) {
	ok := writersFunc(func(context.Context) (*collector.Writers, error) {
		return &collector.Writers{IntervalSeconds: 15, Processes: []collector.ProcessWrites{{PID: 4711, Comm: "dd", NetWriteBytes: 1 << 30}}}, nil
	})
	failing := writersFunc(func(context.Context) (*collector.Writers, error) {
		return nil, errors.New("list processes: no /proc")
	})
	snap := (&Sampler{Writers: ok}).Sample(context.Background())
	if p, found := snap.Part(collector.PartWriters); !found || !p.OK || snap.Writers == nil || snap.Writers.Processes[0].PID != 4711 {
		t.Errorf("writers part %+v (found %v), writers %+v; want ok with dd", p, found, snap.Writers)
	}
	snap = (&Sampler{Writers: failing}).Sample(context.Background())
	if p, _ := snap.Part(collector.PartWriters); p.OK || p.Error == "" || snap.Writers != nil {
		t.Errorf("failing writers: part %+v, writers %+v; want the error and no writers", p, snap.Writers)
	}
	if snap := (&Sampler{}).Sample(context.Background()); snap.Writers != nil || len(snap.Parts) != 0 {
		t.Errorf("no writers source: %+v", snap)
	}
}

// TestSampleWritersReal samples this machine twice through collector/writers: the second
// snapshot covers the time since the first.
func TestSampleWritersReal(t *testing.T) {
	s := &Sampler{Writers: writers.New("/proc", "/sys", writers.Options{})}
	first := s.Sample(context.Background())
	second := s.Sample(context.Background())
	if first.Writers == nil || second.Writers == nil || second.Writers.IntervalSeconds <= 0 || second.Writers.Read == 0 {
		t.Fatalf("writers %+v then %+v; want a baseline, then a reading covering the time between", first.Writers, second.Writers)
	}
	b, err := json.Marshal(second)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{`"writers":{`, `"cgroup_layout":{"version":`, `"interval_seconds":`} {
		if !strings.Contains(string(b), path) {
			t.Errorf("snapshot JSON has no %s: %s", path, b)
		}
	}
}

type fullPagesFunc func(ctx context.Context, walDir string, pg *collector.Postgres) (*collector.FullPages, error)

func (f fullPagesFunc) Collect(ctx context.Context, walDir string, pg *collector.Postgres) (*collector.FullPages, error) {
	return f(ctx, walDir, pg)
}

// TestSampleFullPages: the images' reading gets the WAL directory (--wal-dir first) and the
// server's snapshot, and its failure is its own part's.
func TestSampleFullPages(t *testing.T) {
	var gotDir string
	ok := fullPagesFunc(func(_ context.Context, dir string, _ *collector.Postgres) (*collector.FullPages, error) {
		gotDir = dir
		return &collector.FullPages{Segment: "000000010000000000000003", Images: 10}, nil
	})
	snap := (&Sampler{FullPages: ok, WALDir: "/mnt/wal"}).Sample(context.Background())
	if p, found := snap.Part(collector.PartFullPages); !found || !p.OK || snap.FullPages == nil || gotDir != "/mnt/wal" {
		t.Errorf("full_pages part %+v (found %v), reading %+v, dir %q", p, found, snap.FullPages, gotDir)
	}
	failing := fullPagesFunc(func(context.Context, string, *collector.Postgres) (*collector.FullPages, error) {
		return nil, errors.New("list the WAL directory: permission denied")
	})
	snap = (&Sampler{FullPages: failing}).Sample(context.Background())
	if p, _ := snap.Part(collector.PartFullPages); p.OK || !strings.Contains(p.Error, "permission denied") || snap.FullPages != nil {
		t.Errorf("failing reading: part %+v, reading %+v", p, snap.FullPages)
	}
}
