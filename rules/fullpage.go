package rules

import (
	"fmt"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// full-page-images: after each checkpoint the first change to a page writes the whole page into
// the WAL (full_page_writes, which the advisor never turns off). On an OLTP load over data
// larger than a checkpoint interval touches, those images are most of the WAL's bytes, and
// wal_compression shrinks them for CPU time and nothing else. How much it shrinks them and what
// the CPU time is differ by data and host, so both are measured on the server's own images
// (probes/compression; docs/rules.md, full-page-images; docs/benchmarks.md, compression grid).
func fullPageImages() Rule {
	return Rule{
		ID:       "full-page-images",
		Title:    "Full-page images are a large share of the WAL",
		Severity: Warning,
		Settings: []string{collector.WALCompression, collector.CheckpointTimeout},
		Rationale: "After every checkpoint the first change to each page writes the whole page into the WAL. " +
			"On an OLTP load over data larger than a checkpoint interval touches, these images are most of the " +
			"WAL's bytes: wal_compression shrinks them at a cost in CPU only (how much, and at what cost, is measured on the " +
			"server's own recent images on this host), and checkpoints further apart make " +
			"fewer of them at a cost in crash-recovery time. full_page_writes stays on: without it a torn page " +
			"cannot be repaired.",
		Sources: []string{
			pgDocs + "runtime-config-wal.html#GUC-WAL-COMPRESSION",
			pgDocs + "runtime-config-wal.html#GUC-FULL-PAGE-WRITES",
			pgDocs + "wal-configuration.html",
			pgDocs + "monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW",
			"pgsql-hackers, 2022-02, \"wal_compression=zstd\"",
			"docs/rules.md, full-page-images", "docs/benchmarks.md, compression grid", "docs/benchmarks.md, full page images table",
		},
		Eval: withDefaults(evalFullPageImages),
	}
}

// Values of wal_compression. PostgreSQL 14's is a boolean, on meaning pglz; 15 made it an enum
// whose lz4 and zstd exist only in builds with those libraries (pg_settings.enumvals tells).
const (
	compressionLZ4  = "lz4"
	compressionZstd = "zstd"
	compressionPGLZ = "pglz"
	compressionOn   = "on"
)

// compressVerdict is what the decide step concludes about wal_compression.
type compressVerdict int

const (
	compressNone       compressVerdict = iota // nothing to say about compression
	compressFire                              // warning: recommend the method
	compressUnmeasured                        // info: recommend it; what the WAL's writes cost is unknown
	compressCPUBusy                           // info advice: compressing would take more of the idle CPUs than FPIIdleCPUShare
	compressCheap                             // info advice: the WAL's writes cost nothing measurable
	compressCrowded                           // info advice: another writer's bytes are most of the WAL device's writes
	compressLittle                            // info advice: no method removes FPISavingMin of the WAL's bytes here
	compressUnread                            // info advice: the images could not be read, so no method is measured
)

// fullPageDecision is what decideFullPage concludes: the compression verdict with the method
// it is about, and the checkpoint_timeout to space checkpoints to (0: none).
type fullPageDecision struct {
	compress compressVerdict
	method   methodFigures
	timeout  float64
}

func evalFullPageImages(in Input) Result {
	f, lacking := fullPageFactsOf(in)
	if lacking != "" {
		return notEnough("%s", lacking)
	}
	d := decideFullPage(f, in.Config)
	var fs []Finding
	switch d.compress {
	case compressFire, compressUnmeasured:
		fs = append(fs, compressionFinding(f, d))
	case compressCPUBusy, compressCheap, compressCrowded, compressLittle, compressUnread:
		fs = append(fs, compressionAdvice(f, d, in.Config))
	}
	if d.timeout > 0 {
		fs = append(fs, spacingFinding(f, d.timeout))
	}
	return found(fs...)
}

// decideFullPage: images matter when they are a large share of a WAL that flows fast enough to
// cost something. Compression comes first (it costs CPU, not recovery time) and is judged by
// what each method measured on the server's own images wherever they are at least FPISavingMin
// of the WAL (below that no method could remove FPISavingMin); without a reading only a share of
// FPIShareMin speaks. Checkpoints are spaced only where images are FPIShareMin of the WAL,
// compression is on already or the CPU has no room for it, and checkpoints are timed
// (WAL-driven ones are checkpoint-stalls' business).
func decideFullPage(f fullPageFacts, t Thresholds) fullPageDecision {
	var d fullPageDecision
	if !f.fullPageWrites || f.walRate < float64(t.FPIMinWALRate) || f.share < min(t.FPISavingMin, t.FPIShareMin) {
		return d
	}
	d.compress, d.method = decideCompression(f, t)
	if f.share < t.FPIShareMin {
		// PostgreSQL 18's sysbench shape: images 37% of the WAL, pglz keeping 0.98 of them; the
		// measurement says why nothing is recommended, an estimate alone says nothing.
		if d.compress == compressUnread {
			d.compress = compressNone
		}
		return d
	}
	blocked := f.compressed || d.compress == compressCPUBusy
	costly := !f.hasWriteCost || f.writeCost >= t.FPIWriteCostMin
	spacing := t.FPISpacingTimeout.Seconds()
	if blocked && costly && f.checkpoints > 0 && f.timed >= f.requested && f.hasTimeout && f.timeout < spacing {
		d.timeout = min(2*f.timeout, spacing)
	}
	return d
}

// decideCompression judges the methods by what they measured on the server's own images: the
// WAL they would save and the CPUs they would take (chooseMethod), then by what the WAL's
// writes cost.
func decideCompression(f fullPageFacts, t Thresholds) (compressVerdict, methodFigures) {
	if f.compressed || len(f.accepted) == 0 {
		return compressNone, methodFigures{}
	}
	if f.reading == nil || len(f.methods) == 0 {
		return compressUnread, methodFigures{}
	}
	chosen, best, ok, enough := chooseMethod(f, t)
	switch {
	case !enough:
		return compressLittle, best
	case !ok:
		return compressCPUBusy, best
	case f.hasDisk && f.diskRate > 0 && f.walRate/f.diskRate < t.FPIDeviceShareMin:
		// The default-host matrix's OLTP beside a bulk writer: lz4 took the WAL's bytes down by
		// four fifths and the commits gained nothing beyond the spread on any device.
		return compressCrowded, chosen
	case !f.hasWriteCost:
		return compressUnmeasured, chosen
	case f.writeCost < t.FPIWriteCostMin:
		return compressCheap, chosen
	}
	return compressFire, chosen
}

// compressionFinding recommends d's method: a warning where the WAL's writes are measured to
// cost, info where their cost is unknown. It states the ratio and the cost it relied on.
func compressionFinding(f fullPageFacts, d fullPageDecision) Finding {
	sev, cost := Warning, f.writeCostText()
	if d.compress == compressUnmeasured {
		sev = Info
	}
	m := d.method
	return Finding{
		Severity:    sev,
		Setting:     collector.WALCompression,
		Current:     f.compression,
		Recommended: m.method,
		Action:      ActionReload,
		Summary: fmt.Sprintf("Full-page images are %s of the WAL (%s/s over %s: %.0f images; %s)%s; %s. "+
			"Compressing a sample of the server's own recent images here, %s: wal_compression=%s compresses them before they are written.",
			pct(f.share), collector.FormatBytes(f.walRate), f.window.Span().Round(time.Second), f.fpi, f.estimate,
			f.cpuText(), cost, m.text(), m.method),
		Evidence: f.evidenceWith(m),
		ExpectedEffect: fmt.Sprintf("About %s fewer WAL bytes for the same changes: less to write, archive and replicate, and fewer "+
			"checkpoints forced by max_wal_size; compressing takes about %.2f CPUs at this rate. Measured on %d of the server's "+
			"images from %s (docs/rules.md, full-page-images).", pct(m.saving), m.cores, f.reading.Sampled, f.reading.Where()),
		Predicted: compressionPrediction(f, m),
	}
}

// compressionAdvice says why compression is not recommended although images dominate, with the
// measured figures it relied on.
func compressionAdvice(f fullPageFacts, d fullPageDecision, t Thresholds) Finding {
	m := d.method
	var why, rec string
	switch d.compress {
	case compressUnread:
		why = f.readingWhy + ": what compressing the images would save and cost here is not measured"
		rec = "measure first: let the advisor read the WAL (docs/rules.md, full-page-images)"
	case compressLittle:
		what, rest := "the server's own recent images compress poorly here", "while the images compress this little"
		if 1-m.kept >= t.FPISavingMin {
			what, rest = "the images are too small a share of the WAL for what compressing them removes", "while the images are this small a share"
		}
		why = fmt.Sprintf("%s: the best method, %s, less than the %s that is worth compressing for (docs/benchmarks.md, compression grid)",
			what, m.text(), pct(t.FPISavingMin))
		rec = "off " + rest
	case compressCPUBusy:
		why = fmt.Sprintf("compressing would take more CPU than the host has to spare: %s, more than %s of the %.2f CPUs idle",
			m.text(), pct(t.FPIIdleCPUShare), f.idleCores)
		rec = m.method + " once the CPUs have room"
	case compressCheap:
		why = fmt.Sprintf("%s, less than the %s that makes fewer WAL bytes worth CPU time (%s)", f.writeCostText(), pct(t.FPIWriteCostMin), m.text())
		rec = m.method + " once the WAL's writes cost more"
	case compressCrowded:
		why = fmt.Sprintf("the WAL was %s of what its device wrote (%s/s of %s/s), less than %s: another writer's bytes are what its "+
			"flushes wait behind, and fewer WAL bytes would not be felt (writeback-stalls-wal judges that writer)",
			pct(f.walRate/f.diskRate), collector.FormatBytes(f.walRate), collector.FormatBytes(f.diskRate), pct(t.FPIDeviceShareMin))
		rec = m.method + " once the WAL is most of its device's writes"
	}
	return Finding{
		Severity:    Info,
		Current:     "wal_compression=" + f.compression,
		Recommended: "wal_compression=" + rec,
		Action:      ActionAdvice,
		Summary: fmt.Sprintf("Full-page images are %s of the WAL (%s/s over %s), but %s: nothing is recommended for wal_compression.",
			pct(f.share), collector.FormatBytes(f.walRate), f.window.Span().Round(time.Second), why),
		Evidence:       f.evidenceWith(m),
		ExpectedEffect: "None by itself: it says why the images' share of the WAL is not acted on.",
	}
}

// spacingFinding recommends a longer checkpoint_timeout: fewer checkpoints, so fewer first
// changes to a page after one.
func spacingFinding(f fullPageFacts, timeout float64) Finding {
	rec := formatTimeout(timeout)
	return Finding{
		Severity:    Info,
		Setting:     collector.CheckpointTimeout,
		Current:     f.timeoutText,
		Recommended: rec,
		Action:      ActionReload,
		Summary: fmt.Sprintf("Full-page images are about %s of the WAL (%s/s) with wal_compression=%s%s, and checkpoints are timed every %s: "+
			"each one makes the next change to every page write the page whole again.",
			pct(f.share), collector.FormatBytes(f.walRate), f.compression, f.cpuText(), f.timeoutText),
		Evidence: f.evidence(),
		ExpectedEffect: "Fewer checkpoints, so fewer images: at most half as many per doubling, when the pages changed between two " +
			"checkpoints are changed again before the next. Crash recovery replays up to " + rec + " of WAL instead of " +
			f.timeoutText + ", and max_wal_size must hold that much WAL for the timeout to come first.",
		Predicted: spacingPrediction(f, timeout),
	}
}

// compressionPrediction: the records stay what the load makes; each image keeps what the
// method kept of the server's own images (docs/rules.md, full-page-images, "Predicted effect").
func compressionPrediction(f fullPageFacts, m methodFigures) *Predicted {
	after := f.walBytes - f.imageBytes*(1-m.kept)
	return &Predicted{
		Name: PredictWALBytesPerRecord, Current: f.walBytes / f.records, Value: after / f.records, Unit: UnitBytesPerRecord,
		Basis: fmt.Sprintf("%.0f records wrote %s, of which images about %s (%s); wal_compression=%s kept %.2f of the bytes of %d "+
			"of the server's images", f.records, collector.FormatBytes(f.walBytes), collector.FormatBytes(f.imageBytes), f.estimate,
			m.method, m.kept, f.reading.Sampled),
	}
}

// spacingPrediction is the best case: images fall with the checkpoints' rate, which holds when
// every page changed between two checkpoints is changed again before the next.
func spacingPrediction(f fullPageFacts, timeout float64) *Predicted {
	keep := f.timeout / timeout
	after := f.walBytes - f.imageBytes*(1-keep)
	return &Predicted{
		Name: PredictWALBytesPerRecord, Current: f.walBytes / f.records, Value: after / f.records, Unit: UnitBytesPerRecord,
		Basis: fmt.Sprintf("at best: images about %s of %s (%s) fall with the checkpoints' rate, %s -> %s (x%.2f); "+
			"fewer where the pages changed are not changed again before the next checkpoint",
			collector.FormatBytes(f.imageBytes), collector.FormatBytes(f.walBytes), f.estimate, f.timeoutText, formatTimeout(timeout), keep),
	}
}

// formatTimeout writes seconds as PostgreSQL writes checkpoint_timeout: whole minutes as "10min".
func formatTimeout(sec float64) string {
	if s := int64(sec); float64(s) == sec && s%60 == 0 {
		return fmt.Sprintf("%dmin", s/60)
	}
	return fmt.Sprintf("%.0fs", sec)
}
