package compression

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// DefaultMaxFiles is how many WAL files a reading spans. The images of one file are those
	// of a few seconds, and what they keep moves through a checkpoint cycle: on pgbench (scale
	// 50) the server's own pglz kept 0.290 of the first file's images after a CHECKPOINT and
	// 0.105 of the eighth's (docs/probes.md, "Full-page images").
	DefaultMaxFiles = 8
)

// Source reads the server's recent images and measures compressing them. A reading spans up to
// MaxFiles WAL files: each snapshot that finds a file completed since the last one read adds
// it (MaxImages/MaxFiles of its images sampled), until the reading holds MaxFiles; then it is
// kept for the Interval, and the next reading starts from the files after it. One Source
// belongs to one sampler.
type Source struct {
	Interval  time.Duration
	MaxImages int
	MaxFiles  int
	// Gather is the time a reading's files are spread over, at least Gather/MaxFiles apart
	// (0: Interval): a one-shot check sets its window, so that the files span the window it
	// judges rather than its first seconds.
	Gather time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	last    *collector.FullPages
	lastErr error
	lastAt  time.Time
	// next is the reading being gathered, begun at nextAt: it is returned as it grows where no
	// full reading exists yet (the first minutes of a daemon, a one-shot check), and replaces a
	// full one once it is full itself.
	next   *collector.FullPages
	nextAt time.Time
	fileAt time.Time // when the last file was added
	// since is the insert position when the Source first saw the server, then just past the
	// last file read: only WAL files begun after it are read, so that a reading is of what the
	// server wrote while the advisor watched, never of what came before (a restore, pgbench -i's
	// index builds, a bulk load), and no file is read twice.
	since uint64
	seen  bool
}

// Collect returns the images' reading for the server pg, whose WAL is in walDir. A standby
// inserts no WAL of its own: it has none to read (nil, nil).
func (s *Source) Collect(ctx context.Context, walDir string, pg *collector.Postgres) (*collector.FullPages, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	interval, files := s.Interval, s.MaxFiles
	if interval <= 0 {
		interval = DefaultInterval
	}
	if files <= 0 {
		files = DefaultMaxFiles
	}
	// A failed reading is not retried before the interval either: a WAL file that does not
	// decode is not read again every snapshot. A full reading is kept for the interval.
	if now().Sub(s.lastAt) < interval && (s.lastErr != nil || s.next == nil && s.last != nil) {
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
	gather := s.Gather
	if gather <= 0 {
		gather = interval
	}
	if s.next != nil && now().Sub(s.fileAt) < gather/time.Duration(files) {
		return s.last, nil
	}
	// A position behind the first seen is another history (a restored or replaced cluster):
	// start again from it.
	if lsn := *pg.WALInsertLSN; !s.seen || lsn < s.since {
		s.since, s.seen, s.next = lsn, true, nil
	}
	blockSize := 8192
	if b := pg.Settings[collector.BlockSize].Bytes; b != nil {
		blockSize = int(*b)
	} else if v := pg.Settings[collector.BlockSize].Raw; v != "" {
		_, _ = fmt.Sscan(v, &blockSize)
	}
	seg, name, err := walimages.Recent(walDir, *pg.WALInsertLSN, s.since, blockSize, pg.VersionNum)
	if errors.Is(err, walimages.ErrNotYet) {
		// No WAL file begun since the last one read is complete: the next snapshot looks again
		// (at 1MB/s, the least WAL rate full-page-images judges, a 16MB file takes 16 s).
		return s.last, nil
	}
	if err == nil {
		max := s.MaxImages
		if max <= 0 {
			max = DefaultMaxImages
		}
		var fp *collector.FullPages
		if fp, err = measure(seg, name, blockSize, Methods(pg), max1(max/files)); err == nil {
			s.since = seg.Start + 1
			if s.next == nil {
				s.nextAt = now()
			}
			s.next = merge(s.next, fp)
			s.next.Time, s.fileAt = now(), now()
			// A reading being gathered stands in for none, or for one that failed; a full one
			// stays until the next is full too.
			if full := s.next.Files >= files; full || s.last == nil || s.last.Files < files {
				s.last, s.lastErr, s.lastAt = s.next, nil, s.nextAt
				if full {
					s.next = nil
				}
			}
			return s.last, nil
		}
	}
	s.last, s.lastErr, s.lastAt, s.next = nil, err, now(), nil
	return nil, err
}

// merge adds one file's reading to acc (nil: none yet): counts add up, and each method's kept
// share and CPU seconds per MB are weighted by the bytes sampled from each file.
func merge(acc, fp *collector.FullPages) *collector.FullPages {
	if acc == nil {
		fp.Files, fp.FirstSegment = 1, fp.Segment
		return fp
	}
	out := *acc
	out.Segment, out.Files = fp.Segment, acc.Files+1
	out.Records += fp.Records
	out.RecordBytes += fp.RecordBytes
	out.ImageBytes += fp.ImageBytes
	out.Images += fp.Images
	out.Written = append([]collector.WrittenImages(nil), acc.Written...)
	for _, w := range fp.Written {
		i := slices.IndexFunc(out.Written, func(x collector.WrittenImages) bool { return x.Method == w.Method })
		if i < 0 {
			out.Written = append(out.Written, w)
			continue
		}
		out.Written[i].Images += w.Images
		out.Written[i].Bytes += w.Bytes
		out.Written[i].RawBytes += w.RawBytes
	}
	sort.Slice(out.Written, func(i, j int) bool { return out.Written[i].Method < out.Written[j].Method })
	a, b := float64(acc.SampledBytes), float64(fp.SampledBytes)
	out.Sampled += fp.Sampled
	out.SampledBytes += fp.SampledBytes
	out.Methods = nil
	for _, m := range acc.Methods {
		o, ok := fp.Cost(m.Method)
		if !ok {
			continue
		}
		out.Methods = append(out.Methods, collector.CompressionCost{Method: m.Method, Failed: m.Failed + o.Failed,
			Kept: (m.Kept*a + o.Kept*b) / (a + b), CPUSecondsPerMB: (m.CPUSecondsPerMB*a + o.CPUSecondsPerMB*b) / (a + b)})
	}
	return &out
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

// measure reads one file's images and compresses up to max of them with each method.
func measure(seg walimages.Segment, name string, blockSize int, methods []string, max int) (*collector.FullPages, error) {
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
