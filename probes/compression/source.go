package compression

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/walimages"
)

// Defaults of Source.
const (
	// DefaultInterval is how often the WAL is read again: the images of a load change slowly,
	// and reading a segment and compressing its sample three times per method takes a few
	// hundred milliseconds of one CPU (docs/probes.md, "Full-page images").
	DefaultInterval = 5 * time.Minute
	// DefaultMaxImages bounds the sample: 512 images are 4MB of pages.
	DefaultMaxImages = 512
)

// Source reads the server's recent images and measures compressing them, at most once per
// Interval; in between it returns its last reading. One Source belongs to one sampler.
type Source struct {
	Interval  time.Duration
	MaxImages int
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	last    *collector.FullPages
	lastErr error
	lastAt  time.Time
}

// Collect returns the images' reading for the server pg, whose WAL is in walDir. A standby
// inserts no WAL of its own: it has none to read (nil, nil).
func (s *Source) Collect(ctx context.Context, walDir string, pg *collector.Postgres) (*collector.FullPages, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	interval := s.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	// A failed reading is not retried before the interval either: a WAL file that does not
	// decode is not read again every snapshot.
	if (s.last != nil || s.lastErr != nil) && now().Sub(s.lastAt) < interval {
		return s.last, s.lastErr
	}
	switch {
	case pg == nil:
		return nil, errors.New("PostgreSQL could not be read, so its WAL position is unknown (see the postgres part)")
	case pg.InRecovery || pg.WALInsertLSN == nil:
		return nil, nil
	case walDir == "":
		return nil, errors.New("WAL directory unknown (see the wal_storage part)")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	blockSize := 8192
	if b := pg.Settings[collector.BlockSize].Bytes; b != nil {
		blockSize = int(*b)
	} else if v := pg.Settings[collector.BlockSize].Raw; v != "" {
		_, _ = fmt.Sscan(v, &blockSize)
	}
	fp, err := s.read(walDir, pg, blockSize)
	s.last, s.lastErr, s.lastAt = fp, err, now()
	if fp != nil {
		fp.Time = s.lastAt
	}
	return fp, err
}

func (s *Source) read(walDir string, pg *collector.Postgres, blockSize int) (*collector.FullPages, error) {
	seg, name, err := walimages.Recent(walDir, *pg.WALInsertLSN, blockSize, pg.VersionNum)
	if err != nil {
		return nil, err
	}
	return s.measure(seg, name, blockSize, Methods(pg))
}

// Methods are the compression methods the server accepts: pglz always (14's on), lz4 and zstd
// where pg_settings.enumvals lists them (builds with those libraries).
func Methods(pg *collector.Postgres) []string {
	out := []string{walimages.MethodPGLZ}
	for _, v := range pg.Settings[collector.WALCompression].EnumVals {
		if v == walimages.MethodLZ4 || v == walimages.MethodZstd {
			out = append(out, v)
		}
	}
	return out
}

func (s *Source) measure(seg walimages.Segment, name string, blockSize int, methods []string) (*collector.FullPages, error) {
	fp := &collector.FullPages{Segment: name, Records: seg.Records, RecordBytes: seg.RecordBytes,
		ImageBytes: seg.ImageBytes(), Images: len(seg.Images)}
	written := map[string]*collector.WrittenImages{}
	for _, im := range seg.Images {
		w := written[im.Method]
		if w == nil {
			w = &collector.WrittenImages{Method: im.Method}
			written[im.Method] = w
		}
		w.Images++
		w.Bytes += int64(im.Stored)
		w.RawBytes += int64(im.Raw)
	}
	for _, w := range written {
		fp.Written = append(fp.Written, *w)
	}
	sort.Slice(fp.Written, func(i, j int) bool { return fp.Written[i].Method < fp.Written[j].Method })
	if len(seg.Images) == 0 {
		return fp, nil
	}
	max := s.MaxImages
	if max <= 0 {
		max = DefaultMaxImages
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	defer dec.Close()
	// Every step-th image, so that the sample spans the segment rather than its first seconds.
	step := max1(len(seg.Images) / max)
	var pages [][]byte
	var holes []bool
	var bad []string
	for i := 0; i < len(seg.Images) && len(pages) < max; i += step {
		im := seg.Images[i]
		b, err := rawImage(im, dec)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		pages = append(pages, append([]byte(nil), b...))
		holes = append(holes, im.Raw < blockSize)
		fp.SampledBytes += int64(len(b))
	}
	fp.Sampled = len(pages)
	if len(pages) == 0 {
		return nil, fmt.Errorf("WAL file %s: no image could be expanded: %s", name, strings.Join(bad[:min(3, len(bad))], "; "))
	}
	if fp.Methods, err = Measure(pages, holes, methods); err != nil {
		return nil, err
	}
	return fp, nil
}

func max1(n int) int { return max(n, 1) }
