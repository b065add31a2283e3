package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// enumvals15 is wal_compression's pg_settings.enumvals on a PostgreSQL 15+ built with lz4 and
// zstd; the builds without them lack those two.
var (
	enumvals15     = []string{"pglz", "lz4", "zstd", "on", "off"}
	enumvalsNoLZ4  = []string{"pglz", "on", "off"}
	noCPU          = -1.0
	flushWaits30   = &collector.WaitEvents{Samples: 15, ActiveBackends: 15 * 8, Counts: map[string]int64{collector.EventIOWALSync: 30, collector.EventLWLockWALWrite: 6}}
	flushWaitsRare = &collector.WaitEvents{Samples: 15, ActiveBackends: 15 * 8, Counts: map[string]int64{collector.EventIOWALSync: 2}}
)

// imagesScenario is pgbench over data larger than shared_buffers as the lab measured it with
// wal_compression off (docs/benchmarks.md, full page images table): per 15 s, 277k WAL records
// and 26.9k full-page images in 233.58 million bytes of WAL, about 91% of it images. compression is
// wal_compression as SHOW prints it, vals its enumvals; idle the CPUs' idle share (noCPU: the
// snapshot has no CPU times); fpiPerStep replaces the images per 15 s when not 0.
func imagesScenario(compression string, vals []string, idle float64, waits *collector.WaitEvents, fpiPerStep float64) scenario {
	s := defaultSettings()
	s[collector.WALCompression] = collector.Setting{Value: compression, Raw: compression, Source: "default", Context: "superuser", EnumVals: vals}
	s[collector.BlockSize] = collector.Setting{Value: "8192", Raw: "8192", Source: "default", Context: "internal"}
	fpi := 26900.0
	if fpiPerStep != 0 {
		fpi = fpiPerStep
	}
	walBytes := 233.58e6
	if fpiPerStep != 0 {
		walBytes = 277000*72 + fpi*7944
	}
	return scenario{
		steps: 21, settings: s,
		walBytes: walBytes, records: 277000, writes: 15 * 2500, syncs: 15 * 2400,
		ckptEvery: 20, ckptWrite: 270, ckptSync: 0.05, ckptBuffers: 16000,
		waits: waits,
		mutate: func(i int, snap *collector.Snapshot) {
			snap.FullPages = pgbenchReading(snap)
			snap.Postgres.WAL.FPI = int64(1000 + float64(i)*fpi)
			if idle >= 0 && snap.Kernel != nil {
				total := 1000 + float64(i)*30 // two CPUs, 15 s
				snap.Kernel.CPU = &collector.CPU{CPUs: 2, TotalSeconds: total, IdleSeconds: 500 + float64(i)*30*idle, BootTime: t0().Add(-48 * 3600e9)}
			}
		},
	}
}

// pgbenchReading is the advisor's reading of pgbench's images as the compression grid took it
// (docs/benchmarks.md, compression grid, cloud): 95% of the WAL's bytes images, 7954 bytes each
// (pg_waldump's in the full page images table); pglz keeps 0.20 of them for 0.0121 CPU s/MB,
// lz4 0.23 for 0.0005, zstd 0.11 for 0.0026.
func pgbenchReading(snap *collector.Snapshot) *collector.FullPages {
	return &collector.FullPages{Time: snap.Time, Segment: "000000010000000A000000F1", Records: 12042, RecordBytes: 16 << 20,
		ImageBytes: 16 << 20 * 95 / 100, Images: 16 << 20 * 95 / 100 / 7954, Sampled: 512, SampledBytes: 512 * 8000,
		Methods: []collector.CompressionCost{{Method: "pglz", Kept: 0.20, CPUSecondsPerMB: 0.0121}, {Method: "lz4", Kept: 0.23, CPUSecondsPerMB: 0.0005},
			{Method: "zstd", Kept: 0.11, CPUSecondsPerMB: 0.0026}}}
}

// withReading replaces the scenario's reading of the images (nil: none, the part failed).
func withReading(sc scenario, read func(snap *collector.Snapshot) *collector.FullPages) scenario {
	inner := sc.mutate
	sc.mutate = func(i int, snap *collector.Snapshot) {
		inner(i, snap)
		snap.FullPages = read(snap)
		if snap.FullPages == nil {
			snap.Parts = append(snap.Parts, collector.Part{Name: collector.PartFullPages, Error: "list the WAL directory: permission denied"})
		}
	}
	return sc
}

// sysbenchReading is sysbench's rows of random digits (compression grid): images 83% of the
// WAL; pglz keeps 0.93 for 0.0345 CPU s/MB, lz4 0.87 for 0.0019, zstd 0.46 for 0.0083.
func sysbenchReading(snap *collector.Snapshot) *collector.FullPages {
	fp := pgbenchReading(snap)
	fp.ImageBytes = fp.RecordBytes * 83 / 100
	fp.Methods = []collector.CompressionCost{{Method: "pglz", Kept: 0.93, CPUSecondsPerMB: 0.0345}, {Method: "lz4", Kept: 0.87, CPUSecondsPerMB: 0.0019},
		{Method: "zstd", Kept: 0.46, CPUSecondsPerMB: 0.0083}}
	return fp
}

// pg18SysbenchReading is the reading of issue 34's PostgreSQL 18 sysbench shape
// (docs/benchmarks.md, issue 34's shapes): pglz kept 0.98 of the images for 0.0339 CPU s/MB.
func pg18SysbenchReading(snap *collector.Snapshot) *collector.FullPages {
	fp := pgbenchReading(snap)
	fp.Methods = []collector.CompressionCost{{Method: "pglz", Kept: 0.98, CPUSecondsPerMB: 0.0339}}
	return fp
}

func TestFullPageImages(t *testing.T) {
	dominant := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	pg14 := imagesScenario("off", nil, 0.5, flushWaits30, 0)
	pg14Mutate := pg14.mutate
	pg14.mutate = func(i int, s *collector.Snapshot) {
		pg14Mutate(i, s)
		s.Postgres.VersionNum = 140010
	}
	// lz4 as the lab measured it: 57% of the WAL is still images, compressed.
	compressed := imagesScenario("lz4", enumvals15, 0.5, flushWaits30, 47008.0/30*15)
	compressed.walBytes = 94578463.0 / 30 * 15
	compressed.records = 609525.0 / 30 * 15
	fpwOff := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	fpwOff.settings[collector.FullPageWrites] = plain("off")
	slow := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	slow.walBytes, slow.records = 10*float64(mB), 12000
	slowMutate := slow.mutate
	slow.mutate = func(i int, s *collector.Snapshot) { slowMutate(i, s); s.Postgres.WAL.FPI = int64(1000 + i*1100) }
	pg13 := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	pg13.noWAL, pg13.mutate = true, nil
	cold := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	cold.steps = 2
	// OLTP beside a bulk writer: the device wrote 67MB/s, the WAL 15.6MB/s of it.
	crowded := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	crowded.diskBytes = 67e6 * 15
	// OLTP alone: the device wrote the WAL and as much again of data.
	oltp := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	oltp.diskBytes = 2 * 233.58e6
	noSetting := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0)
	delete(noSetting.settings, collector.WALCompression)

	tests := []struct {
		name      string
		sc        scenario
		notEnough bool
		want      []wantFinding
	}{
		{name: "images dominant, lz4 and zstd accepted: lz4, the cheapest that saves enough", sc: dominant, want: []wantFinding{{collector.WALCompression, Warning, "lz4"}}},
		{name: "images rare", sc: imagesScenario("off", enumvals15, 0.5, flushWaits30, 300)},
		{name: "compression already on: checkpoints spaced", sc: compressed, want: []wantFinding{{collector.CheckpointTimeout, Info, "10min"}}},
		{name: "server without lz4 or zstd: pglz", sc: imagesScenario("off", enumvalsNoLZ4, 0.5, flushWaits30, 0),
			want: []wantFinding{{collector.WALCompression, Warning, "pglz"}}},
		{name: "server with zstd and pglz: pglz, cheaper at the server's cost of zstd", sc: imagesScenario("off", []string{"pglz", "zstd", "on", "off"}, 0.5, flushWaits30, 0),
			want: []wantFinding{{collector.WALCompression, Warning, "pglz"}}},
		{name: "CPUs 2% idle: lz4 still fits in them", sc: imagesScenario("off", enumvals15, 0.02, flushWaits30, 0),
			want: []wantFinding{{collector.WALCompression, Warning, "lz4"}}},
		{name: "pglz only, CPUs 5% idle: advice, and checkpoints spaced", sc: imagesScenario("off", enumvalsNoLZ4, 0.05, flushWaits30, 0),
			want: []wantFinding{{"", Info, ""}, {collector.CheckpointTimeout, Info, "10min"}}},
		{name: "pglz only, CPUs 26% idle: pglz fits (issue 34's pgbench shape)", sc: imagesScenario("off", enumvalsNoLZ4, 0.26, flushWaits30, 0),
			want: []wantFinding{{collector.WALCompression, Warning, "pglz"}}},
		{name: "sysbench's random rows, pglz only: advice", sc: withReading(imagesScenario("off", enumvalsNoLZ4, 0.19, flushWaits30, 0), sysbenchReading),
			want: []wantFinding{{"", Info, ""}}},
		{name: "sysbench's random rows, zstd accepted, CPUs 55% idle: zstd alone saves enough", sc: withReading(imagesScenario("off", enumvals15, 0.55, flushWaits30, 0), sysbenchReading),
			want: []wantFinding{{collector.WALCompression, Warning, "zstd"}}},
		{name: "sysbench's random rows, zstd accepted, CPUs 19% idle: zstd too costly here", sc: withReading(imagesScenario("off", enumvals15, 0.19, flushWaits30, 0), sysbenchReading),
			want: []wantFinding{{"", Info, ""}, {collector.CheckpointTimeout, Info, "10min"}}},
		{name: "images not read: advice to measure", sc: withReading(dominant, func(*collector.Snapshot) *collector.FullPages { return nil }),
			want: []wantFinding{{"", Info, ""}}},
		{name: "a reading older than FPIReadingMaxAge: advice to measure", sc: withReading(dominant, func(s *collector.Snapshot) *collector.FullPages {
			fp := pgbenchReading(s)
			fp.Time = s.Time.Add(-31 * time.Minute)
			return fp
		}), want: []wantFinding{{"", Info, ""}}},
		{name: "a reading without images: advice to measure", sc: withReading(dominant, func(s *collector.Snapshot) *collector.FullPages {
			return &collector.FullPages{Time: s.Time, Segment: "000000010000000A000000F1", Records: 100, RecordBytes: 1 << 20}
		}), want: []wantFinding{{"", Info, ""}}},
		{name: "PostgreSQL 14: a boolean, on is pglz", sc: pg14, want: []wantFinding{{collector.WALCompression, Warning, "on"}}},
		{name: "fast device, WAL writes cheap: advice", sc: imagesScenario("off", enumvals15, 0.5, flushWaitsRare, 0),
			want: []wantFinding{{"", Info, ""}}},
		{name: "write cost unknown: info recommendation", sc: imagesScenario("off", enumvals15, 0.5, nil, 0),
			want: []wantFinding{{collector.WALCompression, Info, "lz4"}}},
		{name: "CPU unknown: judged on the write cost", sc: imagesScenario("off", enumvals15, noCPU, flushWaits30, 0),
			want: []wantFinding{{collector.WALCompression, Warning, "lz4"}}},
		{name: "another writer's bytes most of the device's: advice", sc: crowded, want: []wantFinding{{"", Info, ""}}},
		{name: "the WAL half its device's writes: recommended", sc: oltp, want: []wantFinding{{collector.WALCompression, Warning, "lz4"}}},
		{name: "full_page_writes off: the durability rules' business", sc: fpwOff},
		{name: "little WAL", sc: slow},
		{name: "PostgreSQL 13: no pg_stat_wal", sc: pg13, notEnough: true},
		{name: "cold start", sc: cold, notEnough: true},
		{name: "wal_compression missing from pg_settings", sc: noSetting, notEnough: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := evalFullPageImages(tt.sc.input(nil))
			checkResult(t, got, tt.notEnough, tt.want...)
			for _, f := range got.Findings {
				if f.Setting == collector.FullPageWrites || strings.Contains(f.Recommended, "full_page_writes") {
					t.Errorf("recommends full_page_writes: %+v", f)
				}
				if f.Setting != "" {
					checkPredicted(t, f)
				}
			}
		})
	}
}

// TestFullPageImagesEstimate checks the images' share and the prediction on the lab's figures:
// the estimate lands near pg_waldump's count of the images' bytes (91.6% in the lab's run), under
// the fpi x 8kB bound, and lz4's prediction keeps 0.15 of the images.
func TestFullPageImagesEstimate(t *testing.T) {
	in := imagesScenario("off", enumvals15, 0.5, flushWaits30, 0).input(nil)
	f, lacking := fullPageFactsOf(in)
	if lacking != "" {
		t.Fatal(lacking)
	}
	if f.share < 0.88 || f.share > 0.93 || f.upper < f.share || f.upper > 1 {
		t.Errorf("share = %.3f (bound %.3f), want about 0.91 under the bound", f.share, f.upper)
	}
	m := f.methods[0]
	p := compressionPrediction(f, m)
	wantAfter := (f.walBytes - f.imageBytes*(1-m.kept)) / f.records
	if p.Name != PredictWALBytesPerRecord || p.Current != f.walBytes/f.records || p.Value != wantAfter || p.Value >= p.Current {
		t.Errorf("prediction = %+v, want %s from %.0f to %.0f", *p, PredictWALBytesPerRecord, f.walBytes/f.records, wantAfter)
	}
	// The figure the check after apply measures is the one predicted, read the same way.
	if got, ok := MeasurePredicted(PredictWALBytesPerRecord, in.History); !ok || got != p.Current {
		t.Errorf("MeasurePredicted = %v, %v; want %v", got, ok, p.Current)
	}
}

// TestCompressionMethods: what each server accepts is what is measured.
func TestCompressionMethods(t *testing.T) {
	tests := []struct {
		name    string
		version int
		vals    []string
		want    string
	}{
		{"15 with lz4 and zstd", 150004, enumvals15, "lz4,zstd,pglz"},
		{"16 built without lz4 or zstd", 160002, enumvalsNoLZ4, "pglz"},
		{"17 with zstd only", 170000, []string{"pglz", "zstd", "on", "off"}, "zstd,pglz"},
		{"14: a boolean", 140010, nil, "on"},
		{"18, enumvals not collected", 180000, nil, "pglz"},
		{"enumvals without any method", 150004, []string{"on", "off"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := settings{collector.WALCompression: {Value: "off", EnumVals: tt.vals}}
			if got := strings.Join(compressionMethods(&collector.Postgres{VersionNum: tt.version}, s), ","); got != tt.want {
				t.Errorf("compressionMethods = %q, want %q", got, tt.want)
			}
		})
	}
	for v, want := range map[string]bool{"off": false, "on": true, "pglz": true, "lz4": true, "false": false, "0": false, "": false} {
		if got := isCompressed(v); got != want {
			t.Errorf("isCompressed(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestCompressionAdviceStatesMeasurement: withheld or recommended, the finding names the
// measured ratio and cost it relied on (issue 34).
func TestCompressionAdviceStatesMeasurement(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   scenario
		want []string
	}{
		{"sysbench on pglz only: withheld", withReading(imagesScenario("off", enumvalsNoLZ4, 0.19, flushWaits30, 0), sysbenchReading),
			[]string{"compress poorly", "pglz keeps 0.93", "less than the 25%"}},
		{"PostgreSQL 18's sysbench shape: images 37% of the WAL, pglz withheld", withReading(imagesScenario("off", enumvalsNoLZ4, 0.3, flushWaits30, 1470), pg18SysbenchReading),
			[]string{"Full-page images are 37% of the WAL", "compress poorly", "pglz keeps 0.98", "0.034 CPU s per MB", "less than the 25%"}},
		{"pgbench on pglz only: recommended", imagesScenario("off", enumvalsNoLZ4, 0.26, flushWaits30, 0),
			[]string{"pglz keeps 0.20", "0.012 CPU s per MB", "CPUs at this rate"}},
		{"pglz only, CPUs 5% idle: withheld for CPU", imagesScenario("off", enumvalsNoLZ4, 0.05, flushWaits30, 0),
			[]string{"more CPU than the host has to spare", "pglz keeps 0.20", "of the 0.10 CPUs idle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := evalFullPageImages(tc.sc.input(nil))
			if len(res.Findings) == 0 {
				t.Fatal("no finding")
			}
			f := res.Findings[0]
			for _, w := range tc.want {
				if !strings.Contains(f.Summary, w) {
					t.Errorf("summary lacks %q: %s", w, f.Summary)
				}
			}
			names := map[string]bool{}
			for _, e := range f.Evidence {
				names[e.Name] = true
			}
			if !names["compression_kept_ratio"] || !names["compression_cpu_seconds_per_mb"] {
				t.Errorf("evidence lacks the measured method: %+v", f.Evidence)
			}
		})
	}
}
