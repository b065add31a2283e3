package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindVersion reads a cache of fake server builds: a missing version, one whose postgres
// does not start, one that is another major version, and one that is right.
func TestFindVersion(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("PGWAL_PG_CACHE", cache)
	// Majors no distribution ships, so that /usr/lib/postgresql/<major> never answers first.
	fake := func(major, script string) {
		bin := filepath.Join(cache, major, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"initdb": "exit 0", "pg_ctl": "exit 0", "postgres": script} {
			if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	fake("91", "echo 'error while loading shared libraries: libicui18n.so.60' >&2; exit 127")
	fake("92", "echo 'postgres (PostgreSQL) 13.2'")
	fake("93", "echo 'postgres (PostgreSQL) 93.1'")
	for _, tc := range []struct {
		major   int
		wantErr string
	}{
		{90, "PostgreSQL 90 is not installed"},
		{91, "PostgreSQL 91 in " + filepath.Join(cache, "91", "bin") + " does not start: postgres --version: exit status 127: error while loading shared libraries: libicui18n.so.60"},
		{92, "holds PostgreSQL 13, not 92"},
		{93, ""},
	} {
		dir, err := FindVersion(context.Background(), tc.major)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("FindVersion(%d): %v", tc.major, err)
		case tc.wantErr == "" && dir != filepath.Join(cache, "93", "bin"):
			t.Errorf("FindVersion(%d) = %s", tc.major, dir)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("FindVersion(%d) error = %v, want it to contain %q", tc.major, err, tc.wantErr)
		case err != nil && (strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "make deps")):
			t.Errorf("FindVersion(%d) error is not one line saying what to do: %q", tc.major, err)
		}
	}
}
