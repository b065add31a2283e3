package bench

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// seed001 is seed 001: a bulk insert from wal_buffers=64kB and wal_sync_method=open_datasync,
// the seed's "all defaults" of its time, with shared_buffers=256MB as the seed had it.
func (r *runner) seed001(ctx context.Context) (res *ScenarioResult, err error) {
	rows := r.sz.s001Rows
	res = &ScenarioResult{
		ID:    Seed001,
		Title: "Seed 001: bulk insert from wal_buffers=64kB, open_datasync",
		Workload: fmt.Sprintf("INSERT INTO foo (id) SELECT generate_series(1, %d), one statement into a fresh table with a primary key "+
			"(lab BulkInsert, seed 001's statement), after a CHECKPOINT; WAL on the simulated disk (%v per sync); seconds. The advisor "+
			"watches the same statement shape (one INSERT of %d rows, the next when one ends), never batches", rows, r.sz.latency, r.sz.s001WatchRows),
		Base:   map[string]string{"shared_buffers": "256MB"},
		Metric: "seconds", Runs: r.sz.s001Runs,
	}
	eq := equipment.New(r.logger, r.say)
	defer func() {
		if cerr := eq.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	disk, err := eq.Disk(ctx, simdisk.Options{Latency: r.sz.latency})
	if err != nil {
		return res, err
	}
	start := Config{Name: "start", Settings: map[string]string{"wal_buffers": "64kB", "wal_sync_method": "open_datasync"}, Durable: true}
	c, err := eq.Cluster(ctx, lab.ClusterOptions{WALDir: filepath.Join(disk.Mountpoint(), "wal"), Settings: merged(res.Base, start.Settings)})
	if err != nil {
		return res, err
	}
	probe, err := equipment.ProbeDir(disk.Mountpoint())
	if err != nil {
		return res, err
	}

	// The advisor watches the seed's own shape: one INSERT ... SELECT generate_series, never
	// committed in batches, so pg_stat_wal sees nothing of it until it ends and the rules
	// judge it from the in-flight evidence (the WAL position and the backends' wait events).
	// A statement that ends before the window does is followed by the next one.
	load := func(ctx context.Context) error {
		for ctx.Err() == nil {
			if _, err := c.BulkInsert(ctx, "advisor_load", r.sz.s001WatchRows); err != nil {
				return err
			}
		}
		return nil
	}
	// The applier's journal and sysctl.d file, kept across the rounds.
	journal, err := eq.Dir("", "apply-")
	if err != nil {
		return res, err
	}
	adv, advCfg, err := r.advise(ctx, Seed001, watchSpec{cluster: c, probeDir: probe, window: r.sz.window, load: load}, start, journal)
	res.Advisor = adv
	res.AdvisorChanges = advisorSettings(start, advCfg)
	if err != nil {
		return res, err
	}
	if err := c.Exec(ctx, "DROP TABLE IF EXISTS advisor_load"); err != nil {
		return res, err
	}

	set := &configSet{}
	for _, wb := range r.sz.s001Buffers {
		for _, m := range r.sz.s001Methods {
			// The slow corner: with small buffers every open_* method pays a device sync
			// per small write; open_datasync (the start) stands for open_sync there, which
			// measured the same (27.2 vs 26.8 s at 64kB, 10.3 vs 10.3 s at 1MB, 400k rows).
			if m == "open_sync" && r.sz.s001SkipSlowOpenSync && (wb == "64kB" || wb == "1MB") {
				continue
			}
			set.add(start.with(wb+" "+m, map[string]string{"wal_buffers": wb, "wal_sync_method": m}), RoleGrid)
		}
	}
	set.add(start, RoleStart)
	set.add(advCfg, RoleAdvisor)
	set.add(r.staticConfig(start), RoleStatic)

	fast := func(median float64) bool { return median < r.sz.s001Fast.Seconds() }
	res.Configs, err = r.measureInterleaved(ctx, Seed001, c, res.Base, set, r.sz.s001Runs, r.sz.s001Extra, fast, func(ctx context.Context, _ Config) (float64, error) {
		if err := c.Exec(ctx, "DROP TABLE IF EXISTS foo"); err != nil {
			return 0, err
		}
		if err := equipment.Checkpoint(ctx, c); err != nil {
			return 0, err
		}
		d, err := c.BulkInsert(ctx, "foo", rows)
		if err != nil {
			return 0, err
		}
		return d.Seconds(), nil
	})
	if err != nil {
		return res, err
	}
	res.GridBest = res.bestGrid()
	if n := spreadNote(res); n != "" {
		res.Notes = append(res.Notes, n)
	}
	res.Targets = append(res.Targets, seed001Targets(res)...)
	res.Targets = append(res.Targets, predictionTarget(res))
	if r.sz.s001Extra > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("Configurations that took less than %v ran %d more times (%d in all): the targets compare "+
			"them, and their run-to-run spread is largest relative to their time. The slower ones ran %d time(s): they are tens of "+
			"times slower than the fast ones, far beyond any spread.", r.sz.s001Fast, r.sz.s001Extra, r.sz.s001Runs+r.sz.s001Extra, r.sz.s001Runs))
	}
	if r.sz.s001SkipSlowOpenSync {
		res.Notes = append(res.Notes, "open_sync is measured at 16MB and 64MB only: with 64kB and 1MB buffers it measured the same as "+
			"open_datasync (27.2 vs 26.8 s and 10.3 vs 10.3 s at 400k rows, docs/benchmarks.md of 2026-12-02), and each run of that "+
			"corner takes minutes at this size.")
	}
	return res, nil
}

// seed001Targets: the advisor's configuration within 1.2x of the grid's best, and at least 3x
// faster than the static tuners'.
func seed001Targets(res *ScenarioResult) []Target {
	near := Target{Name: "advisor's configuration within 1.2x of the grid's best", Want: "advisor seconds <= 1.2 x best grid seconds"}
	fast := Target{Name: "advisor's configuration at least 3x faster than the static tuners'", Want: "static seconds >= 3 x advisor seconds"}
	adv, best, static := res.withRole(RoleAdvisor), res.config(res.GridBest), res.withRole(RoleStatic)
	if adv == nil || best == nil || static == nil || adv.Value <= 0 || best.Value <= 0 {
		near.Got, fast.Got = "not measured", "not measured"
		return []Target{near, fast}
	}
	near.Scored, fast.Scored = true, true
	near.Met = adv.Value <= 1.2*best.Value
	near.Got = fmt.Sprintf("advisor %.2f s vs best (%s) %.2f s: %.2fx", adv.Value, best.Name, best.Value, adv.Value/best.Value)
	if alo, ahi, ok := stats.Interval95(adv.Runs); ok {
		if blo, bhi, ok := stats.Interval95(best.Runs); ok {
			verdict := "overlap"
			if ahi < blo || bhi < alo {
				verdict = "separate"
			}
			near.Got += fmt.Sprintf("; 95%% intervals of the mean %.2f-%.2f and %.2f-%.2f s (%d and %d runs) %s", alo, ahi, blo, bhi, len(adv.Runs), len(best.Runs), verdict)
		}
	}
	fast.Met = static.Value >= 3*adv.Value
	fast.Got = fmt.Sprintf("static %.2f s vs advisor %.2f s: %.2fx", static.Value, adv.Value, static.Value/adv.Value)
	return []Target{near, fast}
}

// merged returns base with over's settings on top.
func merged(base, over map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}
