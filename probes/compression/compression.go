// Package compression measures what wal_compression would do on this host. It takes the
// server's own recent full-page images out of its WAL (collector/walimages), compresses a sample
// of them with each method the server accepts, as PostgreSQL would (pglz with its default
// strategy, lz4's default, zstd's level 3; an image that does not shrink is written as it is), and
// times that on this CPU. The full-page-images rule weighs the bytes it saves against the CPU it
// costs (docs/rules.md, full-page-images).
package compression

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/walimages"
)

// compressor is one method: it returns the compressed length of src, or -1 where PostgreSQL
// would write the image as it is.
type compressor func(src, dst []byte) int

func compressors() (map[string]compressor, error) {
	var pg pglzState
	var lz lz4.Compressor
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return map[string]compressor{
		walimages.MethodPGLZ: pg.compress,
		walimages.MethodLZ4: func(src, dst []byte) int {
			n, err := lz.CompressBlock(src, dst)
			if err != nil || n == 0 {
				return -1
			}
			return n
		},
		walimages.MethodZstd: func(src, dst []byte) int {
			return len(enc.EncodeAll(src, dst[:0]))
		},
	}, nil
}

// passes is how often each method compresses the sample; the least CPU time counts, so that a
// pass the scheduler or the garbage collector interrupted does not.
const passes = 3

// Measure compresses pages (images less their holes) with each method and returns what each
// keeps and costs. An image is written compressed only when that saves bytes beyond its header
// (2 bytes where the page has a hole, as PostgreSQL's XLogCompressBackupBlock asks).
func Measure(pages [][]byte, holes []bool, methods []string) ([]collector.CompressionCost, error) {
	if len(pages) == 0 {
		return nil, errors.New("no images to compress")
	}
	all, err := compressors()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread() // the thread's CPU clock times this goroutine only while it keeps the thread
	defer runtime.UnlockOSThread()
	var raw int64
	for _, p := range pages {
		raw += int64(len(p))
	}
	dst := make([]byte, lz4.CompressBlockBound(65536)+64)
	var out []collector.CompressionCost
	for _, m := range methods {
		fn, ok := all[m]
		if !ok {
			continue
		}
		c := collector.CompressionCost{Method: m}
		best := time.Duration(-1)
		for pass := 0; pass < passes; pass++ {
			var kept int64
			failed := 0
			start := threadCPU()
			for i, p := range pages {
				extra := 0
				if holes[i] {
					extra = 2
				}
				n := fn(p, dst)
				if n < 0 || n+extra >= len(p) {
					n, failed = len(p), failed+1
				}
				kept += int64(n)
			}
			took := threadCPU() - start
			if best < 0 || took < best {
				best = took
			}
			c.Kept, c.Failed = float64(kept)/float64(raw), failed
		}
		c.CPUSecondsPerMB = best.Seconds() / (float64(raw) / (1 << 20))
		out = append(out, c)
	}
	return out, nil
}

// threadCPU is this thread's CPU time: CLOCK_THREAD_CPUTIME_ID counts nanoseconds, where
// getrusage's thread times move in scheduler ticks (lz4 compresses the sample in one).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// rawImage returns an image's bytes before compression: as they are when it was written so,
// else expanded with its method.
func rawImage(im walimages.Image, dec *zstd.Decoder) ([]byte, error) {
	switch im.Method {
	case "":
		return im.Data, nil
	case walimages.MethodPGLZ:
		return pglzDecompress(im.Data, im.Raw)
	case walimages.MethodLZ4:
		b := make([]byte, im.Raw)
		n, err := lz4.UncompressBlock(im.Data, b)
		if err != nil || n != im.Raw {
			return nil, fmt.Errorf("lz4 image: %d of %d bytes: %v", n, im.Raw, err)
		}
		return b, nil
	case walimages.MethodZstd:
		b, err := dec.DecodeAll(im.Data, make([]byte, 0, im.Raw))
		if err != nil || len(b) != im.Raw {
			return nil, fmt.Errorf("zstd image: %d of %d bytes: %v", len(b), im.Raw, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("image compressed with %q", im.Method)
}
