package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// seed000 is seed 000: single-client pgbench TPC-B under each wal_sync_method, fsync on, and
// fsync=off for reference. The seed ran PostgreSQL's defaults except wal_sync_method=open_sync,
// which is the starting configuration.
func (r *runner) seed000(ctx context.Context) (res *ScenarioResult, err error) {
	secs := r.sz.s000Secs
	res = &ScenarioResult{
		ID:       Seed000,
		Title:    "Seed 000: one client, TPC-B, under each wal_sync_method",
		Workload: fmt.Sprintf("pgbench TPC-B (sort of), scale 1, -c 1, -T %d; WAL on the simulated disk (%v per sync); tps", secs, r.sz.latency),
		Base:     map[string]string{},
		Metric:   "tps", HigherIsBetter: true, Runs: r.sz.s000Runs,
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
	start := Config{Name: "start", Settings: map[string]string{"wal_sync_method": "open_sync"}, Durable: true}
	c, err := eq.Cluster(ctx, lab.ClusterOptions{WALDir: filepath.Join(disk.Mountpoint(), "wal"), Settings: start.Settings})
	if err != nil {
		return res, err
	}
	probe, err := equipment.ProbeDir(disk.Mountpoint())
	if err != nil {
		return res, err
	}
	r.say("%s: pgbench -i -s 1", Seed000)
	if _, err := pgbench.Run(ctx, c, "-i", "-q", "-s", "1"); err != nil {
		return res, err
	}

	load := func(ctx context.Context) error {
		_, err := pgbench.Run(ctx, c, "-c", "1", "-T", "86400")
		return err
	}
	// The applier's journal and sysctl.d file, kept across the rounds.
	journal, err := eq.Dir("", "apply-")
	if err != nil {
		return res, err
	}
	adv, advCfg, err := r.advise(ctx, Seed000, watchSpec{cluster: c, probeDir: probe, window: r.sz.window, load: load}, start, journal)
	res.Advisor = adv
	res.AdvisorChanges = advisorSettings(start, advCfg)
	if err != nil {
		return res, err
	}
	res.AdvisorMethod = advCfg.Settings["wal_sync_method"]

	set := &configSet{}
	for _, m := range r.sz.s000Methods {
		set.add(start.with(m, map[string]string{"wal_sync_method": m}), RoleGrid)
	}
	set.add(start, RoleStart)
	set.add(advCfg, RoleAdvisor)
	set.add(r.staticConfig(start), RoleStatic)
	off := start.with("fsync=off", map[string]string{"fsync": "off"})
	off.Durable = false
	set.add(off, RoleReference)

	res.Configs, err = r.measureInterleaved(ctx, Seed000, c, res.Base, set, r.sz.s000Runs, 0, nil, func(ctx context.Context, _ Config) (float64, error) {
		out, err := pgbench.Run(ctx, c, "-c", "1", "-T", strconv.Itoa(secs))
		if err != nil {
			return 0, err
		}
		return pgbench.ParseTPS(out.Stdout)
	})
	if err != nil {
		return res, err
	}
	res.GridBest = res.bestGrid()
	if n := spreadNote(res); n != "" {
		res.Notes = append(res.Notes, n)
	}
	res.Targets = append(res.Targets, r.seed000Target(res))
	return res, nil
}

// seed000Target: the advisor's method within 10% of the fastest durable one. The method's own
// grid run is compared (the advisor's configuration may differ in settings that are not the
// method, such as track_wal_io_timing, and is reported on its own line).
func (r *runner) seed000Target(res *ScenarioResult) Target {
	t := Target{Name: "advisor's wal_sync_method within 10% of the fastest durable one", Want: ">= 0.90 of the best durable method's tps"}
	best := res.config(res.GridBest)
	method := res.config(res.AdvisorMethod)
	if best == nil || method == nil || best.Value <= 0 {
		t.Got = "not measured"
		return t
	}
	ratio := method.Value / best.Value
	t.Scored, t.Met = true, ratio >= 0.9
	t.Got = fmt.Sprintf("%s %.0f tps vs %s %.0f tps: %.2f", res.AdvisorMethod, method.Value, best.Name, best.Value, ratio)
	return t
}
