package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// TestDefaultsQuick runs the quick default-host matrix end to end: one cell (OLTP on the cloud
// volume), the advisor's round, the start and lz4 measured. Every configuration produced a run
// with WAL and images counted, the cell's targets are scored, the report renders the cell, and
// nothing is left behind.
func TestDefaultsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick default-host matrix (about a minute and a half)")
	}
	requireEquipment(t)
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the defaults scenario needs %s: %v", tool, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	vmBefore := readKnobsT(t)
	rep, err := Run(ctx, Options{Quick: true, Scenarios: []string{Defaults}, Progress: logWriter{t}}, zaptest.NewLogger(t))
	if errors.Is(err, simdisk.ErrNoFUSE) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("quick defaults scenario: %v", err)
	}
	if len(rep.Scenarios) != 1 || len(rep.Scenarios[0].Cells) != 1 {
		t.Fatalf("scenarios = %+v, want defaults with one cell", rep.Scenarios)
	}
	cell := rep.Scenarios[0].Cells[0]
	if cell.Title != "cloud, "+loadOLTP || cell.Advisor == nil || len(cell.Advisor.Rounds) == 0 {
		t.Fatalf("cell %q, advisor %+v: want the cloud volume's OLTP load with the advisor's rounds", cell.Title, cell.Advisor)
	}
	if cell.withRole(RoleStart) == nil || cell.config("wal_compression=lz4") == nil || cell.withRole(RoleAdvisor) == nil {
		t.Fatalf("configurations %+v: want the start, lz4 and the advisor's", cell.Configs)
	}
	for _, c := range cell.Configs {
		if len(c.Defaults) != 1 {
			t.Errorf("%s: %d runs, want 1", c.Name, len(c.Defaults))
			continue
		}
		r := c.Defaults[0]
		if r.Txns == 0 || r.WALBytes == 0 || r.WALFPI == 0 || r.P99LatencyMS <= 0 {
			t.Errorf("%s: %+v: want transactions, WAL, images and a p99", c.Name, r)
		}
	}
	if start, lz4 := cell.withRole(RoleStart).Defaults[0], cell.config("wal_compression=lz4").Defaults[0]; lz4.BytesPerTxn() >= start.BytesPerTxn() {
		t.Errorf("lz4 wrote %.0f WAL bytes a transaction, the start %.0f: compression made no difference", lz4.BytesPerTxn(), start.BytesPerTxn())
	}
	if len(cell.Targets) < 2 || len(rep.Scenarios[0].Targets) < 2 {
		t.Errorf("targets %+v / %+v: want the cell's scored and summed up", cell.Targets, rep.Scenarios[0].Targets)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Default hosts", "### cloud, " + loadOLTP, "images' share of the WAL", "no worse than the start"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if got := readKnobsT(t); got != vmBefore {
		t.Errorf("vm.dirty_* after the scenario = %s, before %s", got, vmBefore)
	}
	checkNothingLeft(t)
}

// TestDefaultsLoadsMeasure measures the bulk load and OLTP beside the bulk writer once each on a
// plain cluster (the quick matrix runs OLTP alone): the bulk load's INSERT ... SELECT timed with
// its WAL counted, and the writer's megabytes written and removed beside pgbench.
func TestDefaultsLoadsMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := lab.NewTestCluster(t, lab.ClusterOptions{Settings: defaultsBase()})
	ctx := context.Background()
	if err := c.Exec(ctx, bulkTable); err != nil {
		t.Fatal(err)
	}
	if _, err := pgbench.Run(ctx, c, "-i", "-q", "-s", "1"); err != nil {
		t.Fatal(err)
	}
	r := &runner{sz: sizes{dfRows: 50_000, dfSecs: 3, dfWriterMB: 64}, opts: Options{ProcFS: "/proc"}, logger: zaptest.NewLogger(t)}
	mnt := t.TempDir()
	rig := &dfRig{r: r, st: &equipment.LoopStack{LoopVolume: &equipment.LoopVolume{Mnt: mnt}, Cluster: c}}
	for range 2 { // the second run starts from a table with rows: TRUNCATE first
		run, err := rig.measure(ctx, loadBulk)
		if err != nil {
			t.Fatal(err)
		}
		if run.Value <= 0 || run.Txns != 1 || run.WALRecords < 50_000 || run.WALBytes <= 0 || run.Checkpoints < 0 {
			t.Errorf("bulk run %+v: want seconds, one transaction and a record per row at least", run)
		}
	}
	run, err := rig.measure(ctx, loadMixed)
	if err != nil {
		t.Fatal(err)
	}
	if run.Txns == 0 || run.Value <= 0 || run.WriterSeconds <= 0 || run.P99LatencyMS <= 0 {
		t.Errorf("mixed run %+v: want transactions, tps, a p99 and the writer's time", run)
	}
	if left, _ := os.ReadDir(mnt); len(left) != 0 {
		t.Errorf("the writer left %v behind", left)
	}
}

// TestCellTargets scores synthetic cells: the spread decides "beyond", the static tuners are
// judged on the bandwidth-bound cells only, and a warning where the grid gained nothing misses.
func TestCellTargets(t *testing.T) {
	cfg := func(name string, runs []float64, roles ...string) ConfigResult {
		return ConfigResult{Config: Config{Name: name, Durable: true, Roles: roles}, Runs: runs, Value: (runs[0] + runs[len(runs)-1]) / 2}
	}
	warned := &AdvisorRun{Rounds: []AdvisorRound{{Findings: []FindingBrief{{Rule: "full-page-images", Severity: "warning"}}}}}
	cases := []struct {
		name    string
		cell    ScenarioResult
		met     map[string]bool
		missing []string
	}{
		{name: "advisor gains beyond the spread and beats static", cell: ScenarioResult{Title: "cloud, " + loadOLTP, HigherIsBetter: true, GridBest: "lz4", Advisor: warned,
			Configs: []ConfigResult{cfg("start", []float64{100, 110}, RoleStart, RoleGrid), cfg("lz4", []float64{150, 160}, RoleGrid, RoleAdvisor),
				cfg("static", []float64{120, 125}, RoleStatic)}},
			met:     map[string]bool{"no worse than the start beyond the spread": true, "within 1.1x of the grid's best": true, "beats the static tuners beyond the spread": true},
			missing: []string{"no warning where nothing gained"}},
		{name: "overlapping runs: no gain, so a warning is false", cell: ScenarioResult{Title: "fast, " + loadOLTP, HigherIsBetter: true, GridBest: "lz4", Advisor: warned,
			Configs: []ConfigResult{cfg("start", []float64{100, 130}, RoleStart, RoleGrid), cfg("lz4", []float64{120, 135}, RoleGrid, RoleAdvisor),
				cfg("static", []float64{100, 101}, RoleStatic)}},
			met:     map[string]bool{"no worse than the start beyond the spread": true, "within 1.1x of the grid's best": true, "no warning where nothing gained": false},
			missing: []string{"beats the static tuners beyond the spread"}},
		{name: "the advisor's own configuration gained: its warning stands", cell: ScenarioResult{Title: "cloud, " + loadBulk, GridBest: "spaced", Advisor: warned,
			Configs: []ConfigResult{cfg("start", []float64{20, 21}, RoleStart, RoleGrid), cfg("spaced", []float64{20, 20.5}, RoleGrid),
				cfg("advisor", []float64{15.7, 15.9}, RoleAdvisor)}},
			met:     map[string]bool{"no worse than the start beyond the spread": true, "within 1.1x of the grid's best": true},
			missing: []string{"no warning where nothing gained"}},
		{name: "seconds: the advisor slower beyond the spread", cell: ScenarioResult{Title: "hdd, " + loadBulk, GridBest: "start",
			Configs: []ConfigResult{cfg("start", []float64{10, 11}, RoleStart, RoleGrid), cfg("advisor", []float64{13, 14}, RoleAdvisor)}},
			met: map[string]bool{"no worse than the start beyond the spread": false, "within 1.1x of the grid's best": false, "no warning where nothing gained": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]bool{}
			for _, tg := range cellTargets(&tc.cell) {
				if !tg.Scored {
					t.Errorf("%s: not scored (%s)", tg.Name, tg.Got)
				}
				got[tg.Name] = tg.Met
			}
			for name, want := range tc.met {
				if m, ok := got[name]; !ok || m != want {
					t.Errorf("%s: met=%v (scored %v), want %v; all %v", name, m, ok, want, got)
				}
			}
			for _, name := range tc.missing {
				if _, ok := got[name]; ok {
					t.Errorf("%s: scored, want it left out", name)
				}
			}
		})
	}
}

// TestDefaultsGridMethods: the grid tries what the server accepts: lz4 and zstd where the build
// has them (Debian's), pglz where it is the only method (the npm builds), on for 14.
func TestDefaultsGridMethods(t *testing.T) {
	start := Config{Name: "start", Settings: map[string]string{}}
	for _, tc := range []struct {
		accepted []string
		full     bool
		want     []string
	}{
		{[]string{"pglz", "lz4", "zstd"}, true, []string{"wal_compression=lz4", "wal_compression=zstd", "checkpoints spaced", "lz4, checkpoints spaced"}},
		{[]string{"pglz", "lz4", "zstd"}, false, []string{"wal_compression=lz4"}},
		{[]string{"pglz"}, true, []string{"wal_compression=pglz", "checkpoints spaced", "pglz, checkpoints spaced"}},
		{[]string{"on"}, true, []string{"wal_compression=on", "checkpoints spaced", "on, checkpoints spaced"}},
	} {
		var got []string
		for _, c := range defaultsGrid(start, tc.full, gridMethods(tc.accepted)) {
			got = append(got, c.Name)
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("accepted %v, full %v: grid %q, want %q", tc.accepted, tc.full, got, tc.want)
		}
	}
	for _, load := range []string{loadSysWrite, loadSysInsert} {
		if !isSysbench(load) {
			t.Errorf("%s is not a sysbench load", load)
		}
	}
	if isSysbench(loadOLTP) || sysbenchScript(loadSysInsert) != "oltp_insert" || sysbenchScript(loadSysWrite) != "oltp_write_only" {
		t.Error("the sysbench loads map to the wrong scripts")
	}
}
