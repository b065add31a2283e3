package neighbour

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// Writers are the database's two neighbours, writing their files in Dir: the bulk writer (MB
// megabytes) and the log-like writer. A writer that fails logs why and stops; the run's
// figures show what it managed.
type Writers struct {
	Dir    string
	MB     int
	Logger *zap.Logger
}

// Remove removes the writers' files.
func (w Writers) Remove() error {
	for _, f := range []string{"bulk", "log"} {
		if err := os.Remove(filepath.Join(w.Dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the %s writer's file: %w", f, err)
		}
	}
	return nil
}

// Bulk is the neighbour: from WriterStart, MB megabytes of zeros in 1 MiB writes through the
// page cache, no fsync, as `dd if=/dev/zero of=... bs=1M` does; with mbps > 0 no faster than
// that, with a sync every ThrottleSync. It returns how long the writes took, 0 when ctx ended
// first.
func (w Writers) Bulk(ctx context.Context, mbps int) time.Duration {
	select {
	case <-ctx.Done():
		return 0
	case <-time.After(WriterStart):
	}
	f, err := os.Create(filepath.Join(w.Dir, "bulk"))
	if err != nil {
		w.Logger.Warn("bulk writer", zap.Error(err))
		return 0
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	total := int64(w.MB) * 1_000_000
	begin := time.Now()
	for written := int64(0); written < total; {
		if ctx.Err() != nil {
			return 0
		}
		n, err := f.Write(buf[:min(int64(len(buf)), total-written)])
		if err != nil {
			w.Logger.Warn("bulk writer", zap.Error(err))
			return 0
		}
		written += int64(n)
		if mbps <= 0 {
			continue
		}
		if err := throttle(ctx, f, begin, written, mbps); err != nil {
			if ctx.Err() == nil {
				w.Logger.Warn("bulk writer", zap.Error(err))
			}
			return 0
		}
	}
	return time.Since(begin)
}

// throttle is the bulk writer's rate limit: what it has written is on the device every
// ThrottleSync, and it writes no faster than mbps, so its write-back never takes the whole
// device.
func throttle(ctx context.Context, f *os.File, begin time.Time, written int64, mbps int) error {
	if written%ThrottleSync == 0 {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	due := begin.Add(time.Duration(float64(written) / (float64(mbps) * 1e6) * float64(time.Second)))
	if d := time.Until(due); d > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
	}
	return nil
}

// Log is the log-like writer: small appends and an fsync every LogFsync, until ctx ends. It
// returns its slowest fsync.
func (w Writers) Log(ctx context.Context) time.Duration {
	f, err := os.OpenFile(filepath.Join(w.Dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		w.Logger.Warn("log writer", zap.Error(err))
		return 0
	}
	defer f.Close()
	buf := make([]byte, LogChunk)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	tick := time.NewTicker(LogInterval)
	defer tick.Stop()
	var slowest time.Duration
	lastSync := time.Now()
	for {
		select {
		case <-ctx.Done():
			return slowest
		case <-tick.C:
		}
		if _, err := f.Write(buf); err != nil {
			w.Logger.Warn("log writer", zap.Error(err))
			return slowest
		}
		if time.Since(lastSync) >= LogFsync {
			t := time.Now()
			if err := f.Sync(); err != nil {
				w.Logger.Warn("log writer", zap.Error(err))
				return slowest
			}
			slowest = max(slowest, time.Since(t))
			lastSync = time.Now()
		}
	}
}
