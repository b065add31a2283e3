package fullpage

import (
	"context"
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/advisor"
	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/collector/postgres"
	"github.com/pgwal-advisor/pgwal-advisor/collector/storage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/probes/compression"
	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

var shapes = flag.String("shapes", "", "run issue 34's shapes (pgbench,sysbench): the advisor's check under each, then the configurations measured")

// shape is one of issue 34's two shapes: a server build, a device, settings and a load, with
// what the advisor must say about wal_compression there.
type shape struct {
	name     string
	major    int
	device   string
	settings map[string]string
	data     Data
	configs  []map[string]string
	// want is the recommended wal_compression ("" for none, with advice naming the ratio).
	want string
}

func issueShapes() []shape {
	return []shape{
		{name: "pgbench", major: 17, device: "slow", settings: map[string]string{"shared_buffers": "256MB", "checkpoint_timeout": "60s"},
			data: PGBench, want: "pglz",
			configs: []map[string]string{{"wal_compression": "off"}, {"wal_compression": "pglz"}}},
		{name: "sysbench", major: 18, device: "cloud", settings: map[string]string{}, data: Sysbench, want: "",
			configs: []map[string]string{{"wal_compression": "off"}, {"wal_compression": "pglz"}}},
	}
}

// TestCompressionShapes runs issue 34's two shapes: the advisor's check during the load (70 s),
// then each configuration measured twice, interleaved, 40 s from a CHECKPOINT.
//
//	go test ./internal/lab/fullpage -run TestCompressionShapes -v -timeout 1h -args -shapes pgbench,sysbench
func TestCompressionShapes(t *testing.T) {
	if *shapes == "" {
		t.Skip("a lab run: pass -args -shapes pgbench,sysbench")
	}
	for _, sh := range issueShapes() {
		if !slices.Contains(strings.Split(*shapes, ","), sh.name) {
			continue
		}
		t.Run(sh.name, func(t *testing.T) { runShape(t, sh) })
	}
}

func runShape(t *testing.T, sh shape) {
	ctx := context.Background()
	bin := lab.RequireVersion(t, sh.major)
	dev, _ := gridDevice(sh.device)
	v, c := loopCluster(ctx, t, "shape/"+sh.name, bin, dev, sh.settings)
	if err := InitData(ctx, c, sh.data); err != nil {
		t.Fatal(err)
	}
	if err := equipment.Checkpoint(ctx, c); err != nil {
		t.Fatal(err)
	}
	v.Throttle(dev.Options)

	// The check, as a new user runs it: during the load, 70 s.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() {
		_, err := GridMeasure(loadCtx, c, sh.data, map[string]string{}, 100*time.Second)
		loadDone <- err
	}()
	time.Sleep(15 * time.Second)
	pg := postgres.New(c.DSN(), postgres.Options{Logger: zaptest.NewLogger(t)})
	defer pg.Close(ctx)
	s := &advisor.Sampler{Postgres: pg, Kernel: kernel.New("/proc"), Storage: storage.New("/proc", "/sys"), FullPages: &compression.Source{Gather: 70 * time.Second}}
	res, err := advisor.Check(ctx, s, advisor.CheckConfig{Window: 70 * time.Second, Interval: time.Second, WaitInterval: 250 * time.Millisecond}, zaptest.NewLogger(t))
	stopLoad()
	<-loadDone
	if err != nil {
		t.Fatal(err)
	}
	var compress, spacing *rules.Finding
	for i, f := range res.Findings {
		t.Logf("FINDING | %s | %s | %s | %s -> %s | %s", sh.name, f.Rule, f.Severity, f.Current, f.Recommended, f.Summary)
		if f.Rule != "full-page-images" {
			continue
		}
		switch {
		case f.Setting == collector.CheckpointTimeout:
			spacing = &res.Findings[i]
		case f.Setting == collector.WALCompression || strings.HasPrefix(f.Current, "wal_compression="):
			compress = &res.Findings[i]
		}
	}
	logWindow(t, res.History)
	for rule, why := range res.NotEnoughData {
		t.Logf("not enough data: %s: %s", rule, why)
	}
	switch {
	case compress == nil:
		t.Errorf("%s: full-page-images said nothing about wal_compression", sh.name)
	case sh.want != "" && (compress.Setting != collector.WALCompression || compress.Recommended != sh.want):
		t.Errorf("%s: wal_compression %q (%s), want %s recommended", sh.name, compress.Recommended, compress.Action, sh.want)
	case sh.want == "" && (compress.Setting != "" || !strings.Contains(compress.Summary, "keeps")):
		t.Errorf("%s: %s -> %s; want pglz withheld, with the measured ratio and cost", sh.name, compress.Current, compress.Recommended)
	}
	if spacing != nil {
		t.Errorf("%s: checkpoints spaced to %s: no measurement of this shape says spacing gains", sh.name, spacing.Recommended)
	}

	// The configurations, interleaved.
	for round := 0; round < 2; round++ {
		order := slices.Clone(sh.configs)
		if round == 1 {
			slices.Reverse(order)
		}
		for _, cfg := range order {
			r, err := GridMeasure(ctx, c, sh.data, cfg, 40*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("SHAPE | %s | %s | %d | %.0f tps | p99 %.1f ms | %.0f B/txn | WAL %s MB | idle %.0f%% | %d checkpoints |", sh.name, cfgKey(cfg), round+1,
				r.TPS, r.P99MS, r.WALPerTxn, strconv.FormatFloat(r.WALBytes/1e6, 'f', 0, 64), 100*r.IdleShare, r.Checkpoints)
		}
	}
}

// logWindow logs what full-page-images judged: the window's WAL rate, images and records, and
// the latest reading of the WAL's images with each method's figures.
func logWindow(t *testing.T, h *rules.History) {
	bytes, records, fpi := h.Change(rules.WALBytes), h.Change(rules.WALRecords), h.Change(rules.WALFPI)
	t.Logf("WINDOW | %s | WAL %.2f MB/s | %.0f records | %.0f images | %.0f bytes a record |", h.Span().Round(time.Second),
		bytes.Rate()/1e6, records.Delta, fpi.Delta, bytes.Delta/max(records.Delta, 1))
	s, _ := h.Latest()
	fp := s.FullPages
	if fp == nil {
		t.Logf("READING | none")
		return
	}
	t.Logf("READING | %s | %d records, %d bytes | %d images, %d bytes (%.0f a image, %.0f%% of the records' bytes) | window share %.0f%% |",
		fp.Segment, fp.Records, fp.RecordBytes, fp.Images, fp.ImageBytes, float64(fp.ImageBytes)/max(float64(fp.Images), 1),
		100*float64(fp.ImageBytes)/max(float64(fp.RecordBytes), 1), 100*fpi.Delta*float64(fp.ImageBytes)/max(float64(fp.Images), 1)/max(bytes.Delta, 1))
	for _, m := range fp.Methods {
		t.Logf("READING | %s | kept %.2f | %.4f CPU s/MB |", m.Method, m.Kept, m.CPUSecondsPerMB)
	}
}
