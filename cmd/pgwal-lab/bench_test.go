package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/bench"
)

// benchCmd runs the bench command on its own, with the globals the root would have set.
func benchCmd(t *testing.T, format string, args ...string) (string, string, error) {
	t.Helper()
	g := &cli.Globals{Format: format, ProcFS: "/proc", SysFS: "/sys", Logger: zaptest.NewLogger(t)}
	cmd := newBenchCmd(g)
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "seed009"},
		{"--scenario", "seed001,nope"},
		{"--scenario", "neighbour", "--neighbour-rounds", "-1"},
		{"--scenario", "neighbour", "--neighbour-mb", "-300"},
		{"--scenario", "timing", "--timing-head-start", "-5s"},
		{"--scenario", "defaults", "--defaults-loads", "oltp,nope"},
		{"--scenario", "defaults", "--defaults-devices", "ssd"},
		{"--scenario", "defaults", "--defaults-server", "13"},
		{"--scenario", "defaults,seed001", "--defaults-server", "17"},
		{"--defaults-server", "17"},
	} {
		_, _, err := benchCmd(t, "table", args...)
		if !errors.Is(err, cli.ErrUsage) {
			t.Errorf("%v: error %v, want a usage error", args, err)
		}
	}
	// Through the whole command line.
	var stdout, stderrBuf bytes.Buffer
	code := run(context.Background(), []string{"bench", "--scenario", "seed009"}, &stdout, &stderrBuf)
	stderr := stderrBuf.String()
	if code != cli.ExitBadUsage || !strings.Contains(stderr, "seed009") {
		t.Errorf("bench --scenario seed009: exit %d, stderr %q; want %d naming the scenario", code, stderr, cli.ExitBadUsage)
	}
}

// TestBenchHelpNamesEveryScenario guards the lab-scenario recipe's first step
// (CONTRIBUTING.md): `bench --help` describes every scenario of the suite's table.
func TestBenchHelpNamesEveryScenario(t *testing.T) {
	long := newBenchCmd(&cli.Globals{}).Long
	scenarios, _, _ := strings.Cut(long[strings.Index(long, "Scenarios:"):], "\n\n")
	scenarios = strings.Join(strings.Fields(scenarios), " ")
	for _, id := range bench.ScenarioIDs() {
		if !strings.Contains(scenarios, id+" (") {
			t.Errorf("bench --help's Scenarios paragraph does not describe %s: add \"%s (what it measures)\" (CONTRIBUTING.md, Add a lab scenario, step 1)", id, id)
		}
	}
}

// TestBenchQuickJSON runs the quick seed 001 scenario through the command: JSON on stdout,
// the markdown report in --out, progress on stderr.
func TestBenchQuickJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a quick scenario (about a minute and a half)")
	}
	lab.RequireServer(t)
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("the suite mounts FUSE: it needs root")
	}
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	stdout, stderr, err := benchCmd(t, "json", "--quick", "--scenario", "seed001", "--out", out)
	if err != nil {
		if strings.Contains(err.Error(), "FUSE") && os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatalf("bench: %v\n%s", err, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if doc["mode"] != "quick" {
		t.Errorf(".mode = %v, want quick", doc["mode"])
	}
	scen := doc["scenarios"].([]any)
	if len(scen) != 1 {
		t.Fatalf(".scenarios has %d entries, want 1", len(scen))
	}
	s := scen[0].(map[string]any)
	if s["id"] != "seed001" || len(s["configs"].([]any)) == 0 || s["advisor"] == nil {
		t.Errorf(".scenarios[0] = id %v, %d configs, advisor %v", s["id"], len(s["configs"].([]any)), s["advisor"] != nil)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Seed 001", "--quick --scenario seed001"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("--out report lacks %q", want)
		}
	}
	if !strings.Contains(stderr, "seed001: done") {
		t.Errorf("no progress on stderr:\n%s", stderr)
	}
}
