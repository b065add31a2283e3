package probes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults and limits of a probe run.
const (
	// DefaultDuration matches pg_test_fsync's 5 s per test, but for the whole run: a fifth of
	// its wall time or less is the target (docs/probes.md, "Accuracy and cost against pg_test_fsync").
	DefaultDuration = 5 * time.Second
	// MinDuration is the shortest budget accepted: below it even a fast disk gives too few
	// samples of each method for an interval, and a 4 ms disk none at all.
	MinDuration = 100 * time.Millisecond
	// DefaultPrecision ends a run early once every synced method's 95% interval is within
	// ±5% of its mean: finer than the run-to-run noise of identical benchmark runs (docs/benchmarks.md).
	DefaultPrecision = 0.05
	// DefaultMinSamples is the fewest samples per method before the precision rule may stop a
	// run: fewer, and a lucky low-variance start can end it on noise.
	DefaultMinSamples = 30
	// DefaultMinFreeBytes is the free space the probe leaves on the file system beyond its own
	// file, so that it never takes the last megabytes the WAL needs.
	DefaultMinFreeBytes = 64 << 20

	// FileBytes is the probe file's size: one WAL segment (PostgreSQL's default 16MB), as
	// pg_test_fsync uses.
	FileBytes = 16 << 20
	// BlockBytes is XLOG_BLCKSZ, the size of each WAL write.
	BlockBytes = 8 << 10
	// pieceBytes is what open_sync's optional size series writes per sync, as pg_test_fsync's
	// "Compare open_sync with different write sizes" does.
	pieceBytes = 16 << 10
)

// SyncMethods returns the wal_sync_method names in pg_test_fsync's order (PostgreSQL's
// preference order, except that fdatasync, Linux's default, comes second).
func SyncMethods() []string {
	return []string{OpenDatasync, Fdatasync, Fsync, FsyncWritethrough, OpenSync}
}

// Config says where and how long to probe.
type Config struct {
	// Dir is the directory the probe file is created in. It must be on the WAL's file system
	// and outside pg_wal and the data directory.
	Dir string
	// WALDir, when set, is the WAL directory: Dir must be on the same file system (same
	// st_dev), since a probe elsewhere measures another device.
	WALDir string
	// Duration is the measuring budget (default DefaultDuration); the run stops earlier once
	// Precision is reached.
	Duration time.Duration
	// MinSamples per method before the precision rule may stop the run (default 30).
	MinSamples int
	// Precision is the relative half-width of the 95% interval of every synced method's mean
	// that ends the run early (default 0.05).
	Precision float64
	// Methods to measure, wal_sync_method names (default: all of SyncMethods()). The unsynced
	// Write baseline is always measured: the durability verdict needs it.
	Methods []string
	// OpenSyncSizes adds open_sync writing 16kB per sync in 1, 2, 4, 8 and 16 pieces.
	OpenSyncSizes bool
	// Server decides where O_DIRECT is used; the zero value means no server is known.
	Server ServerIO
	// MinFreeBytes is the free space to leave beyond the probe file (default 64MB).
	MinFreeBytes int64
	// MaxOpsPerSec caps the rate of timed operations (0: as fast as the device goes); the
	// continuous mode uses it to bound the device time and the writes probing costs.
	MaxOpsPerSec float64
	// Facts are the storage facts for the durability verdict. When FSType is empty, Run fills
	// FSType and Volatile from statfs(2), so that tmpfs is recognised without the collector.
	Facts DeviceFacts
}

// ConfigError is a refusal to probe: the configuration or the probe directory is unsuitable.
// The message says what to change; callers may treat it as a usage error.
type ConfigError struct {
	Reason string
}

func (e *ConfigError) Error() string { return e.Reason }

func refuse(format string, args ...any) error {
	return &ConfigError{Reason: fmt.Sprintf(format, args...)}
}

// withDefaults fills zero fields and rejects values that cannot be measured with.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Duration == 0:
		c.Duration = DefaultDuration
	case c.Duration < MinDuration:
		return c, refuse("probe duration %v is too short: at least %v is needed for every method to give samples", c.Duration, MinDuration)
	}
	switch {
	case c.MinSamples == 0:
		c.MinSamples = DefaultMinSamples
	case c.MinSamples < 2:
		return c, refuse("minimum samples %d: at least 2 are needed for an interval", c.MinSamples)
	}
	switch {
	case c.Precision == 0:
		c.Precision = DefaultPrecision
	case c.Precision < 0 || c.Precision >= 1:
		return c, refuse("precision %g: want a fraction of the mean between 0 and 1, e.g. 0.05", c.Precision)
	}
	switch {
	case c.MinFreeBytes == 0:
		c.MinFreeBytes = DefaultMinFreeBytes
	case c.MinFreeBytes < 0:
		return c, refuse("minimum free space %d bytes: want a positive size", c.MinFreeBytes)
	}
	if c.MaxOpsPerSec < 0 {
		return c, refuse("rate limit %g ops/s: want 0 (none) or a positive rate", c.MaxOpsPerSec)
	}
	known := SyncMethods()
	if len(c.Methods) == 0 {
		c.Methods = known
	}
	for _, m := range c.Methods {
		if !slices.Contains(known, m) {
			return c, refuse("unknown sync method %q: want one of %s", m, strings.Join(known, ", "))
		}
	}
	return c, nil
}

// checkDir refuses a probe directory that is missing, not a directory, not writable, inside
// pg_wal or a data directory, on another file system than the WAL, or short of space.
func checkDir(c Config) error {
	if c.Dir == "" {
		return refuse("no probe directory given: name a directory on the WAL's file system, outside pg_wal and the data directory")
	}
	st, err := os.Stat(c.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return refuse("probe directory %q does not exist: create it on the WAL's file system, outside pg_wal and the data directory", c.Dir)
	case err != nil:
		return fmt.Errorf("probe directory: %w", err)
	case !st.IsDir():
		return refuse("probe directory %q is not a directory", c.Dir)
	}
	if err := checkNotPostgres(c.Dir, c.WALDir); err != nil {
		return err
	}
	// access(2) rather than a trial file: it answers for the caller's credentials and for a
	// read-only mount without creating anything that would have to be cleaned up.
	switch err := unix.Access(c.Dir, unix.W_OK); {
	case errors.Is(err, unix.EROFS):
		return refuse("probe directory %q is on a read-only file system: the probe has to write", c.Dir)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return refuse("probe directory %q is not writable by this user (uid %d)", c.Dir, os.Geteuid())
	case err != nil:
		return fmt.Errorf("check probe directory %q is writable: %w", c.Dir, err)
	}
	if c.WALDir != "" {
		if err := checkSameFS(c.Dir, c.WALDir); err != nil {
			return err
		}
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(c.Dir, &sfs); err != nil {
		return fmt.Errorf("statfs probe directory %q: %w", c.Dir, err)
	}
	free := int64(sfs.Bavail) * int64(sfs.Bsize)
	if need := int64(FileBytes) + c.MinFreeBytes; free < need {
		return refuse("probe directory %q has %s free; the probe needs %s for its file and leaves at least %s free",
			c.Dir, mb(free), mb(FileBytes), mb(c.MinFreeBytes))
	}
	return nil
}

// checkNotPostgres refuses a directory inside pg_wal or a data directory: PostgreSQL owns
// what is there (a stray file in pg_wal confuses archiving tools, and a full disk there stops
// the server), and an operator would not expect the advisor to write there.
func checkNotPostgres(dir, walDir string) error {
	abs, err := realPath(dir)
	if err != nil {
		return fmt.Errorf("resolve probe directory %q: %w", dir, err)
	}
	if walDir != "" {
		if wal, err := realPath(walDir); err == nil && within(abs, wal) {
			return refuse("probe directory %q is inside the WAL directory %q: use a directory beside it on the same file system", dir, walDir)
		}
	}
	for d := abs; ; d = filepath.Dir(d) {
		if b := filepath.Base(d); b == "pg_wal" || b == "pg_xlog" {
			return refuse("probe directory %q is inside PostgreSQL's WAL directory %q: use a directory beside it on the same file system", dir, d)
		}
		// Every data directory (and each database and tablespace directory in it) holds a
		// PG_VERSION file.
		if _, err := os.Stat(filepath.Join(d, "PG_VERSION")); err == nil {
			return refuse("probe directory %q is inside the PostgreSQL data directory %q (it holds PG_VERSION): use a directory outside it on the WAL's file system", dir, d)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// checkSameFS refuses a probe directory on another file system than the WAL directory. st_dev
// is what tells; on btrfs each subvolume has its own st_dev, which errs on the safe side.
func checkSameFS(dir, walDir string) error {
	var ds, ws unix.Stat_t
	if err := unix.Stat(dir, &ds); err != nil {
		return fmt.Errorf("stat probe directory %q: %w", dir, err)
	}
	switch err := unix.Stat(walDir, &ws); {
	case errors.Is(err, unix.ENOENT):
		return refuse("WAL directory %q does not exist", walDir)
	case err != nil:
		return fmt.Errorf("stat WAL directory %q: %w", walDir, err)
	}
	if ds.Dev != ws.Dev {
		return refuse("probe directory %q (device %d:%d) is not on the file system of the WAL directory %q (device %d:%d): "+
			"a probe there would measure another device; pick a directory on the WAL's file system, outside pg_wal and the data directory",
			dir, unix.Major(ds.Dev), unix.Minor(ds.Dev), walDir, unix.Major(ws.Dev), unix.Minor(ws.Dev))
	}
	return nil
}

func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func mb(b int64) string { return fmt.Sprintf("%.1fMB", float64(b)/(1<<20)) }

// ServerIO is what decides whether PostgreSQL opens its WAL with O_DIRECT, so that the probe
// measures what that server really does (xlog.c, get_sync_bit).
type ServerIO struct {
	// VersionNum is server_version_num, e.g. 150004; 0 means no server is known.
	VersionNum int
	// WALLevel is wal_level: minimal, replica or logical (matters up to PostgreSQL 15).
	WALLevel string
	// DebugIODirect is debug_io_direct, e.g. "wal" or "data,wal" (PostgreSQL 16 and later).
	DebugIODirect string
}

// pg16 is the first version whose WAL O_DIRECT follows debug_io_direct.
const pg16 = 160000

// Direct reports whether the server opens WAL files with O_DIRECT for a sync method.
//
//   - No server known: like pg_test_fsync, which opens open_datasync and open_sync with
//     O_DIRECT wherever the platform has it (its open_direct), and the others without.
//   - Up to 15: open_datasync and open_sync with O_DIRECT when wal_level is minimal (no
//     archiver or walsender reads the WAL back, so bypassing the page cache costs nothing).
//   - 16 and later: the wal_level rule is gone; debug_io_direct=wal adds O_DIRECT to every
//     method, fsync and fdatasync included.
func (s ServerIO) Direct(method string) bool {
	open := method == OpenDatasync || method == OpenSync
	switch {
	case method == Write:
		return false
	case s.VersionNum == 0:
		return open
	case s.VersionNum < pg16:
		return open && strings.EqualFold(strings.TrimSpace(s.WALLevel), "minimal")
	default:
		return s.directWAL()
	}
}

// directWAL parses debug_io_direct's list; "wal_init" (O_DIRECT only while a segment is
// zero-filled) does not count.
func (s ServerIO) directWAL() bool {
	for _, f := range strings.Split(strings.Trim(s.DebugIODirect, `'"`), ",") {
		if strings.EqualFold(strings.TrimSpace(f), "wal") {
			return true
		}
	}
	return false
}

// Describe says in words which O_DIRECT policy applies, for the report.
func (s ServerIO) Describe() string {
	switch {
	case s.VersionNum == 0:
		return "no server given: open_datasync and open_sync with O_DIRECT, as pg_test_fsync does"
	case s.VersionNum < pg16 && s.Direct(OpenSync):
		return fmt.Sprintf("server %d with wal_level=minimal: open_datasync and open_sync with O_DIRECT", s.VersionNum)
	case s.VersionNum < pg16:
		return fmt.Sprintf("server %d with wal_level=%s: no O_DIRECT (PostgreSQL up to 15 uses it only with wal_level=minimal)", s.VersionNum, orDefault(s.WALLevel, "replica"))
	case s.directWAL():
		return fmt.Sprintf("server %d with debug_io_direct=%s: every method with O_DIRECT", s.VersionNum, s.DebugIODirect)
	default:
		return fmt.Sprintf("server %d: no O_DIRECT (PostgreSQL 16 and later use it only with debug_io_direct=wal)", s.VersionNum)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
