package probes

import (
	"fmt"
	"slices"
	"strings"
	"time"
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
