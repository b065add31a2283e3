package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MatrixVersions are the PostgreSQL major versions the version matrix runs: the distribution's
// server (Debian 12's is 15) and the builds scripts/install-pg-versions.sh caches for the others.
// 14 is the first with pg_stat_wal; 17 moved the checkpoint counters to pg_stat_checkpointer
// and renamed the IO wait events; 18 moved WAL writes and syncs to pg_stat_io.
func MatrixVersions() []int { return []int{14, 15, 16, 17, 18} }

// VersionCacheDir is where scripts/install-pg-versions.sh puts the server builds, one directory
// per major version: $PGWAL_PG_CACHE, else /var/cache/pgwal-advisor/pg for root (one cache per
// machine) and ~/.cache/pgwal-advisor/pg for anyone else. The script computes the same.
func VersionCacheDir() string {
	if d := os.Getenv("PGWAL_PG_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/pgwal-advisor/pg"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "pgwal-advisor", "pg")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "pgwal-advisor", "pg")
}

var postgresVersion = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// FindVersion returns the bin directory of PostgreSQL major version major: the distribution's
// /usr/lib/postgresql/<major>/bin, else the cached build in VersionCacheDir()/<major>/bin. The
// server must start (postgres --version) and say it is that major version. The error is one
// line that says what to do.
func FindVersion(ctx context.Context, major int) (string, error) {
	candidates := []string{
		filepath.Join("/usr/lib/postgresql", strconv.Itoa(major), "bin"),
		filepath.Join(VersionCacheDir(), strconv.Itoa(major), "bin"),
	}
	for _, dir := range candidates {
		if !isExecutable(filepath.Join(dir, "initdb")) || !isExecutable(filepath.Join(dir, "pg_ctl")) {
			continue
		}
		got, err := serverMajor(ctx, dir)
		if err != nil {
			return "", fmt.Errorf("PostgreSQL %d in %s does not start: %w: run make deps (scripts/install-pg-versions.sh) to reinstall it", major, dir, err)
		}
		if got != major {
			return "", fmt.Errorf("%s holds PostgreSQL %d, not %d: remove it and run make deps (scripts/install-pg-versions.sh)", dir, got, major)
		}
		return dir, nil
	}
	return "", fmt.Errorf("PostgreSQL %d is not installed (neither %s nor %s has initdb and pg_ctl): run make deps (scripts/install-pg-versions.sh fetches it)",
		major, candidates[0], candidates[1])
}

// serverMajor runs postgres --version in binDir and returns its major version.
func serverMajor(ctx context.Context, binDir string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("postgres --version: %w: %s", err, lastLines(out, 1))
	}
	m := postgresVersion.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("postgres --version printed %q, not a PostgreSQL version", strings.TrimSpace(string(out)))
	}
	return strconv.Atoi(string(m[1]))
}
