package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/fullpage"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// Defaults is the default-host matrix (issue 21): PostgreSQL's own defaults on three devices
// under three loads, where most of the WAL is full-page images.
const Defaults = "defaults"

// The matrix's loads.
const (
	loadOLTP  = "oltp"
	loadBulk  = "bulk load"
	loadMixed = "oltp + bulk writer"
	// sysbench's own OLTP scripts (issue 34: a client no one here wrote) on its 8 tables of
	// 200k rows of random digits, 8 threads.
	loadSysWrite  = "sysbench write-only"
	loadSysInsert = "sysbench insert"
)

// DefaultsDevices are the matrix's devices (fullpage.Devices), in running order.
func DefaultsDevices() []string {
	var names []string
	for _, d := range fullpage.Devices() {
		names = append(names, d.Name)
	}
	return names
}

// DefaultsLoads are the matrix's loads, in running order. The full suite runs the first three;
// the sysbench loads run when --defaults-loads names them.
func DefaultsLoads() []string {
	return []string{loadOLTP, loadBulk, loadMixed, loadSysWrite, loadSysInsert}
}

// isSysbench says whether load is one of sysbench's scripts.
func isSysbench(load string) bool { return load == loadSysWrite || load == loadSysInsert }

// sysbenchScript is load's sysbench script.
func sysbenchScript(load string) string {
	if load == loadSysInsert {
		return fullpage.SysbenchInsert
	}
	return fullpage.SysbenchWriteOnly
}

// defaultsHostMemory is the host the static tuners size for: shared_buffers = RAM/4 = 256MB, a
// small cloud instance, so that pgbench's tables at dfScale are several times shared_buffers in
// a size the lab can initialise in a minute.
const defaultsHostMemory = 1 << 30

// defaultsBase is PostgreSQL's defaults with shared_buffers as the static tuners would size it
// for defaultsHostMemory; everything else is the server's own default.
func defaultsBase() map[string]string {
	return map[string]string{"shared_buffers": "256MB"}
}

// defaultsGrid is the grid around the start: each wal_compression the server accepts (lz4 and
// zstd where the build has them, pglz where it is the only method: the npm builds and many
// others), checkpoints spaced (timeout 15min, max_wal_size 4GB), and both with the first method.
func defaultsGrid(start Config, full bool, methods []string) []Config {
	spaced := map[string]string{"checkpoint_timeout": "15min", "max_wal_size": "4GB"}
	grid := []Config{}
	for _, m := range methods {
		grid = append(grid, start.with("wal_compression="+m, map[string]string{"wal_compression": m}))
		if !full {
			break
		}
	}
	if full {
		first := methods[0]
		grid = append(grid, start.with("checkpoints spaced", spaced),
			start.with(first+", checkpoints spaced", merged(spaced, map[string]string{"wal_compression": first})))
	}
	return grid
}

// gridMethods is the methods the grid tries on a server that accepts accepted
// (fullpage.CompressionMethods): lz4 and zstd where the build has them, as the matrix ran on
// Debian's build; pglz (on, for 14) where nothing else is built in.
func gridMethods(accepted []string) []string {
	var out []string
	for _, m := range []string{"lz4", "zstd"} {
		if slices.Contains(accepted, m) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return accepted[:1]
	}
	return out
}

// defaults measures the matrix: per device a loop-device stack initialised once, and per load
// a cell: the advisor's rounds from the start, then the start, the grid, the static tuners and
// the advisor's configuration, interleaved.
func (r *runner) defaults(ctx context.Context) (*ScenarioResult, error) {
	sz := r.sz
	res := &ScenarioResult{
		ID:    Defaults,
		Title: "Default hosts: PostgreSQL's defaults on a fast drive, a cloud volume and a rotating disk",
		Workload: fmt.Sprintf("per device, ext4 on a loop device over the simulated disk, pgbench -i scale %d (about %d MB, several times "+
			"shared_buffers); loads: %s (pgbench TPC-B -c %d -j 2 -T %d -l from a CHECKPOINT), %s (INSERT ... SELECT of %d rows into a table "+
			"with two indexes, one on a random key), %s (the OLTP load while a writer puts %d MB through the page cache on the same "+
			"file system, with an fdatasync every 64 MB, as a copy tool does)", sz.dfScale, sz.dfScale*15, loadOLTP, dfClients, sz.dfSecs,
			loadBulk, sz.dfRows, loadMixed, sz.dfWriterMB),
		Base: defaultsBase(), Metric: "per cell", Runs: sz.dfRuns,
	}
	if slices.ContainsFunc(sz.dfLoads, isSysbench) {
		res.Workload += fmt.Sprintf("; %s and %s (Debian's sysbench, its own %s and %s scripts, %d threads for %d s from a CHECKPOINT, "+
			"on its 8 tables of 200k rows of random digits made beside pgbench's)", loadSysWrite, loadSysInsert,
			fullpage.SysbenchWriteOnly, fullpage.SysbenchInsert, sysbenchThreads, sz.dfSecs)
	}
	static := staticTunerFor(defaultsHostMemory)
	devices := sz.dfDevices
	if len(r.opts.DefaultsDevices) > 0 && !r.opts.Quick {
		devices = r.opts.DefaultsDevices
	}
	for _, dev := range fullpage.Devices() {
		if !slices.Contains(devices, dev.Name) {
			continue
		}
		if err := r.defaultsDevice(ctx, res, dev, static); err != nil {
			return res, fmt.Errorf("%s: %w", dev.Name, err)
		}
	}
	res.Targets = defaultsTargets(res)
	res.Notes = append(res.Notes, fmt.Sprintf("The static tuners' configuration is PGTune's for a %s host (shared_buffers %s): %s.",
		"1 GiB", defaultsBase()["shared_buffers"], settingsText(static.Settings, nil)),
		fmt.Sprintf("Each configuration ran %d time(s) per cell, interleaved (the order reversed every round); every run starts "+
			"from a CHECKPOINT and sync(2), so it measures the first %d s of a checkpoint cycle, when images are most frequent.", sz.dfRuns, sz.dfSecs))
	return res, nil
}

// defaultsDevice sets up one device's stack and measures its cells.
func (r *runner) defaultsDevice(ctx context.Context, res *ScenarioResult, dev fullpage.Device, static StaticTuner) (err error) {
	eq := equipment.New(r.logger, r.say)
	defer func() {
		if cerr := eq.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	st, err := eq.LoopStack(ctx, Defaults+"/"+dev.Name, dev.Options, r.sz.dfVolume,
		lab.ClusterOptions{BinDir: r.binDir, Settings: defaultsBase()}, r.sz.dfScale)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(r.sz.dfLoads, isSysbench) {
		// sysbench's tables at full speed, as pgbench's were: the set-up is not what is measured.
		st.Throttle(simdisk.Options{})
		r.say("%s: sysbench prepare", Defaults+"/"+dev.Name)
		err := fullpage.InitData(ctx, st.Cluster, fullpage.Sysbench)
		if err == nil {
			err = equipment.Checkpoint(ctx, st.Cluster)
		}
		if err != nil {
			return fmt.Errorf("sysbench's tables: %w", err)
		}
		unix.Sync()
		st.Throttle(dev.Options)
	}
	methods, err := fullpage.CompressionMethods(ctx, st.Cluster)
	if err != nil {
		return err
	}
	note := fmt.Sprintf("The server accepts wal_compression=%s; the grid tries %s.", strings.Join(methods, ", "), strings.Join(gridMethods(methods), ", "))
	if !slices.Contains(res.Notes, note) {
		res.Notes = append(res.Notes, note)
	}
	if st.Note != "" {
		res.Notes = append(res.Notes, dev.Name+": "+st.Note)
	}
	if err := st.Cluster.Exec(ctx, bulkTable); err != nil {
		return fmt.Errorf("create the bulk load's table: %w", err)
	}
	rig := &dfRig{r: r, st: st, dev: dev, methods: gridMethods(methods)}
	for _, load := range r.sz.dfLoads {
		cell, err := r.defaultsCell(ctx, rig, load, static)
		if cell != nil {
			res.Cells = append(res.Cells, cell)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", load, err)
		}
	}
	return nil
}

// defaultsCell is one device x load: the advisor's rounds, then every configuration measured
// interleaved.
func (r *runner) defaultsCell(ctx context.Context, rig *dfRig, load string, static StaticTuner) (*ScenarioResult, error) {
	id := Defaults + "/" + rig.dev.Name + "/" + load
	cell := &ScenarioResult{ID: id, Title: rig.dev.Name + ", " + load, Base: defaultsBase(), Runs: r.sz.dfRuns}
	cell.Metric, cell.HigherIsBetter = "tps", true
	if load == loadBulk {
		cell.Metric, cell.HigherIsBetter = "seconds", false
	}
	c := rig.st.Cluster
	start := Config{Name: "start", Durable: true, Settings: map[string]string{}}
	if err := r.apply(ctx, c, cell.Base, start); err != nil {
		return cell, err
	}
	journal, err := rig.dir()
	if err != nil {
		return cell, err
	}
	// The bulk load starts a checkpoint about once a load (20-25 s here); checkpoint-stalls needs
	// two in its window to call them WAL-driven, as the daemon's hours of history would show.
	window := r.sz.window
	if load == loadBulk && !r.opts.Quick {
		window = max(window, 70*time.Second)
	}
	adv, advCfg, err := r.advise(ctx, id, watchSpec{cluster: c, probeDir: rig.st.Probe, window: window,
		load: func(ctx context.Context) error { return rig.loop(ctx, load) }, rounds: r.sz.dfRounds, checkpoint: true}, start, journal)
	cell.Advisor, cell.AdvisorChanges = adv, advisorSettings(start, advCfg)
	if err != nil {
		return cell, err
	}
	set := &configSet{}
	set.add(start, RoleStart)
	set.add(start, RoleGrid)
	for _, g := range defaultsGrid(start, r.sz.dfGrid, rig.methods) {
		set.add(g, RoleGrid)
	}
	if r.sz.dfGrid {
		set.add(start.with("static tuners", static.Settings), RoleStatic)
	}
	set.add(advCfg, RoleAdvisor)
	// One run first, not counted: the first run after the advisor's rounds measured slower by up
	// to a fifth (the start's first run on the fast drive, 2513 tps against 3163 in its second),
	// and the start runs first.
	if err := r.apply(ctx, c, cell.Base, start); err != nil {
		return cell, err
	}
	if _, err := rig.measure(ctx, load); err != nil {
		return cell, fmt.Errorf("warm-up run: %w", err)
	}
	details := map[string][]*DefaultsRun{}
	configs, err := r.measureInterleaved(ctx, id, c, cell.Base, set, r.sz.dfRuns, 0, nil, func(ctx context.Context, cfg Config) (float64, error) {
		run, err := rig.measure(ctx, load)
		if err != nil {
			return 0, err
		}
		details[cfg.Name] = append(details[cfg.Name], run)
		r.say("%s:   %s", id, run)
		return run.Value, nil
	})
	for i := range configs {
		configs[i].Defaults = details[configs[i].Name]
	}
	cell.Configs = configs
	if err != nil {
		return cell, err
	}
	cell.GridBest = cell.bestGrid()
	return cell, nil
}

// dfClients is the OLTP load's clients: enough to keep a 1 ms device's queue busy on two CPUs.
const dfClients = 8

// bulkTable is the bulk load's table: a random key's index makes each checkpoint's first change
// to most index pages an image, as a real bulk load into an indexed table does.
const bulkTable = `CREATE TABLE bulk (id bigint, k int, s text);
CREATE INDEX bulk_id ON bulk (id);
CREATE INDEX bulk_k ON bulk (k)`

// DefaultsRun is one run of a cell's load.
type DefaultsRun struct {
	// Value is the cell's metric: tps (OLTP loads) or seconds (bulk load).
	Value float64 `json:"value"`
	// Txns are the transactions (1 for the bulk load), Seconds the run's length.
	Txns    float64 `json:"transactions"`
	Seconds float64 `json:"seconds"`
	// P99LatencyMS is pgbench's transactions' p99 (OLTP loads only).
	P99LatencyMS float64 `json:"p99_latency_ms,omitempty"`
	// pg_stat_wal over the run.
	WALBytes   float64 `json:"wal_bytes"`
	WALRecords float64 `json:"wal_records"`
	WALFPI     float64 `json:"wal_fpi"`
	// ImageShare is the images' share of the WAL's bytes, estimated as full-page-images does
	// (docs/rules.md, full-page-images).
	ImageShare  float64 `json:"image_share"`
	Checkpoints int64   `json:"checkpoints"`
	// WriterSeconds is how long the bulk writer took (mixed load; 0 when it did not finish).
	WriterSeconds float64 `json:"writer_seconds,omitempty"`
}

// BytesPerTxn is the WAL bytes per transaction.
func (d *DefaultsRun) BytesPerTxn() float64 {
	if d.Txns <= 0 {
		return 0
	}
	return d.WALBytes / d.Txns
}

func (d *DefaultsRun) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s WAL a transaction, images ~%.0f%%, %d checkpoint(s)", formatValue(d.Value), collector.FormatBytes(d.BytesPerTxn()),
		100*d.ImageShare, d.Checkpoints)
	if d.P99LatencyMS > 0 {
		fmt.Fprintf(&b, ", p99 %.1f ms", d.P99LatencyMS)
	}
	if d.WriterSeconds > 0 {
		fmt.Fprintf(&b, ", writer %s", time.Duration(d.WriterSeconds*float64(time.Second)).Round(100*time.Millisecond))
	}
	return b.String()
}
