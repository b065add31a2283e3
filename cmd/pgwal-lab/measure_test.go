package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// TestMeasureFlags: the measurements that were programs of their own (go run
// ./internal/lab/benchprobe, footprint, scrapebench) kept their flags' names as pgwal-lab
// subcommands, so that a command line from the docs only needs --.
func TestMeasureFlags(t *testing.T) {
	want := map[string][]string{
		"bench-probe": {"dir", "sim-src", "runs", "sim-runs", "latencies", "duration", "secs", "pg-test-fsync", "json", "save", "probe-child"},
		"bench-footprint": {"bin", "warmup", "steady", "wrk.duration", "wrk.connections", "wrk.threads", "pgbench.pairs", "pgbench.time",
			"pgbench.clients", "pgbench.scale"},
		"bench-scrape": {"bin", "compare", "exporter", "rounds", "duration", "connections", "threads", "warmup", "gzip"},
	}
	root := newRootCmd()
	for name, flags := range want {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd.Name() != name {
			t.Errorf("pgwal-lab %s: %v", name, err)
			continue
		}
		for _, f := range flags {
			if cmd.Flags().Lookup(f) == nil {
				t.Errorf("pgwal-lab %s has no --%s", name, f)
			}
		}
	}
}

func TestBenchProbeUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench-probe", "--latencies", "0ms"},
		{"bench-probe", "--latencies", "1ms,fast"},
		{"bench-probe", "--runs", "-1"},
		{"bench-probe", "--secs", "0"},
		{"bench-footprint", "--steady", "soon"},
		{"bench-scrape", "--rounds", "many"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != cli.ExitBadUsage {
			t.Errorf("%v: exit %d, stderr %q; want %d", args, code, stderr.String(), cli.ExitBadUsage)
		}
	}
}

// TestBenchProbeChild runs the probe the way bench-probe's child process does (the parent
// re-executes pgwal-lab with --probe-child): a probe report as JSON on stdout, no probe file
// left in the directory.
func TestBenchProbeChild(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"bench-probe", "--probe-child", dir, "--duration", probes.MinDuration.String()}, &stdout, &stderr)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep probes.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not a probe report: %v\n%s", err, stdout.String())
	}
	if rep.Stop == "" {
		t.Errorf("report %+v: no stop reason", rep)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range left {
		if strings.Contains(filepath.Base(f), "pgwal-advisor-probe") {
			t.Errorf("probe file left behind: %s", f)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}
