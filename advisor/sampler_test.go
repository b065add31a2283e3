package advisor

import (
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
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
