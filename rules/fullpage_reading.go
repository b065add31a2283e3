package rules

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// methodFigures is one compression method as measured on the server's own recent images
// (collector.FullPages, probes/compression).
type methodFigures struct {
	method string
	// kept is the share of the images' bytes the method leaves, cpuPerMB its CPU seconds per
	// megabyte of images on this host.
	kept, cpuPerMB float64
	// saving is the share of the WAL's bytes it would remove (the images' share x (1 - kept));
	// cores the CPUs it would keep busy at the window's image rate.
	saving, cores float64
}

// text is the method's measured figures, for a summary.
func (m methodFigures) text() string {
	return fmt.Sprintf("%s keeps %.2f of the images' bytes (%s less WAL) for %.3f CPU s per MB, %.2f CPUs at this rate",
		m.method, m.kept, pct(m.saving), m.cpuPerMB, m.cores)
}

// zstdServerFactor scales zstd's measured CPU time to what the server pays: PostgreSQL calls
// ZSTD_compress for each image, which sets up a compression context every time, where the
// advisor's encoder keeps one. On the compression grid the host's idle CPU fell by several times
// the measured cost when zstd was on (cloud, pgbench: 26% -> 11-16% idle for 0.02 CPUs
// measured), and 5 is the least factor that withholds zstd on every cell where it lost (sysbench
// beside one CPU-bound neighbour: -4%) and keeps it where it gained (sysbench alone, cloud +5%
// and hdd +2%). A fit to the grid, not a measurement of libzstd (docs/benchmarks.md, compression
// grid).
const zstdServerFactor = 5

// readImages takes the latest reading of the WAL's images: the images' share of the WAL
// becomes the one measured in the file read, and each accepted method gets its figures.
func (f *fullPageFacts) readImages(h *History, t Thresholds) {
	s, _ := h.Latest()
	fp := s.FullPages
	switch {
	case fp == nil:
		f.readingWhy = "the advisor has no reading of the WAL's images" + partFailed(s, collector.PartFullPages)
		return
	case s.Time.Sub(fp.Time) > t.FPIReadingMaxAge:
		f.readingWhy = fmt.Sprintf("the last reading of the WAL's images is %s old", s.Time.Sub(fp.Time).Round(1e9))
		return
	case fp.RecordBytes <= 0 || fp.Images == 0:
		f.readingWhy = fmt.Sprintf("%s held no image", fp.Where())
		return
	}
	f.reading = fp
	// The window's images at the size the reading measured them: the counters say how many
	// images the window wrote, the WAL file how large they are (the reading may be minutes old).
	size := float64(fp.ImageBytes) / float64(fp.Images)
	f.imageBytes = min(f.fpi*size, f.walBytes)
	if f.walBytes > 0 {
		f.share = f.imageBytes / f.walBytes
	}
	f.estimate = fmt.Sprintf("%.0f bytes an image as measured in %s, where %d images were %s of the records' %s", size,
		fp.Where(), fp.Images, pct(float64(fp.ImageBytes)/float64(fp.RecordBytes)), collector.FormatBytes(float64(fp.RecordBytes)))
	f.imageRate = f.walRate * f.share
	if f.compressed {
		return // the images are compressed already: their raw rate is not what a method would see
	}
	for _, m := range f.accepted {
		name := m
		if m == compressionOn {
			name = compressionPGLZ
		}
		c, ok := fp.Cost(name)
		if !ok {
			continue
		}
		perMB := c.CPUSecondsPerMB
		if m == compressionZstd {
			perMB *= zstdServerFactor
		}
		f.methods = append(f.methods, methodFigures{method: m, kept: c.Kept, cpuPerMB: perMB,
			saving: f.share * (1 - c.Kept), cores: f.imageRate / (1 << 20) * perMB})
	}
	if len(f.methods) == 0 {
		f.readingWhy = fmt.Sprintf("the reading of %s measured none of the methods the server accepts", fp.Where())
	}
}

// chooseMethod picks what to recommend among the measured methods that save at least
// FPISavingMin of the WAL's bytes and fit in FPIIdleCPUShare of the idle CPUs: the cheapest in
// CPU, unless a costlier one removes at least FPISavingMin more of the WAL's bytes. On the
// compression grid lz4 and pglz kept pgbench's throughput or gained where zstd, saving 5 points
// more, lost 7-12%; on sysbench's random rows zstd alone saved enough, and gained 5%
// (docs/benchmarks.md, compression grid). It also returns the best saver (for the advice when
// nothing qualifies) and whether any method saved enough.
func chooseMethod(f fullPageFacts, t Thresholds) (chosen, best methodFigures, ok, enough bool) {
	byCost := slices.Clone(f.methods)
	slices.SortStableFunc(byCost, func(a, b methodFigures) int { return cmp.Compare(a.cpuPerMB, b.cpuPerMB) })
	for _, m := range byCost {
		if m.saving > best.saving || best.method == "" {
			best = m
		}
		if m.saving < t.FPISavingMin {
			continue
		}
		enough = true
		if f.hasCPU && m.cores > t.FPIIdleCPUShare*f.idleCores {
			continue
		}
		if !ok || m.saving >= chosen.saving+t.FPISavingMin {
			chosen, ok = m, true
		}
	}
	return chosen, best, ok, enough
}
