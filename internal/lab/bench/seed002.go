package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
)

// insertScript is seed 002's transaction: one single-row INSERT, committed.
const insertScript = "INSERT INTO seed002 (v) VALUES (1);\n"

// seed002 is seed 002: many concurrent clients each committing single-row INSERTs, with the
// WAL on the simulated disk (durable) versus on tmpfs (fast, and lost on power loss).
func (r *runner) seed002(ctx context.Context) (res *ScenarioResult, err error) {
	secs := r.sz.s002Secs
	clients := r.sz.s002Clients
	top := slices.Max(clients)
	res = &ScenarioResult{
		ID:    Seed002,
		Title: "Seed 002: concurrent single-row INSERT commits, WAL on the disk vs on tmpfs",
		Workload: fmt.Sprintf("pgbench -n -f insert.sql (%q) -c N -j 2 -T %d for N in %v; WAL on the simulated disk (%v per sync) or on tmpfs (/dev/shm); tps",
			insertScript[:len(insertScript)-1], secs, clients, r.sz.latency),
		// Room for 100 clients, the advisor's connection and autovacuum.
		Base:   map[string]string{"max_connections": "150"},
		Metric: fmt.Sprintf("tps at %d clients", top), HigherIsBetter: true, Runs: 1,
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
	shm, err := eq.Dir(equipment.SourceParent(), "tmpfs-")
	if err != nil {
		return res, err
	}
	scripts, err := eq.Dir("", "script-")
	if err != nil {
		return res, err
	}
	script := filepath.Join(scripts, "insert.sql")
	if err := os.WriteFile(script, []byte(insertScript), 0o644); err != nil {
		return res, fmt.Errorf("write pgbench script: %w", err)
	}

	start := Config{Name: "start", Settings: map[string]string{}, Durable: true}
	c, err := eq.Cluster(ctx, lab.ClusterOptions{WALDir: filepath.Join(disk.Mountpoint(), "wal"), Settings: res.Base})
	if err != nil {
		return res, err
	}
	tc, err := eq.Cluster(ctx, lab.ClusterOptions{WALDir: filepath.Join(shm, "wal"), Settings: res.Base})
	if err != nil {
		return res, err
	}
	for _, cl := range []*lab.Cluster{c, tc} {
		if err := cl.Exec(ctx, "CREATE TABLE seed002 (id bigserial PRIMARY KEY, v integer)"); err != nil {
			return res, err
		}
	}
	insert := func(ctx context.Context, cl *lab.Cluster, n int, secs int) (float64, error) {
		out, err := pgbench.Run(ctx, cl, "-n", "-f", script, "-c", strconv.Itoa(n), "-j", strconv.Itoa(min(n, 2)), "-T", strconv.Itoa(secs))
		if err != nil {
			return 0, err
		}
		return pgbench.ParseTPS(out.Stdout)
	}
	loadWith := func(cl *lab.Cluster, n int) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := insert(ctx, cl, n, 86400)
			return err
		}
	}

	// The advisor watches the durable cluster under the most clients, and the tmpfs cluster
	// just long enough for its storage facts: wal-on-volatile-storage judges a configuration
	// fact from one snapshot, so a short window is sufficient there.
	diskProbe, err := equipment.ProbeDir(disk.Mountpoint())
	if err != nil {
		return res, err
	}
	// The applier's journal and sysctl.d file, kept across the rounds.
	journal, err := eq.Dir("", "apply-")
	if err != nil {
		return res, err
	}
	adv, advCfg, err := r.advise(ctx, Seed002, watchSpec{cluster: c, probeDir: diskProbe, window: r.sz.window, load: loadWith(c, top)}, start, journal)
	res.Advisor = adv
	res.AdvisorChanges = advisorSettings(start, advCfg)
	if err != nil {
		return res, err
	}
	shmProbe, err := equipment.ProbeDir(shm)
	if err != nil {
		return res, err
	}
	r.say("%s: advisor check of the cluster with its WAL on tmpfs", Seed002)
	vres, _, err := r.check(ctx, watchSpec{cluster: tc, probeDir: shmProbe, window: 5 * time.Second, load: loadWith(tc, min(top, 16))})
	if err != nil {
		return res, fmt.Errorf("tmpfs cluster: %w", err)
	}
	res.VolatileCheck = &VolatileCheck{Critical: criticalFindings(vres)}
	for _, f := range vres.Findings {
		res.VolatileCheck.Findings = append(res.VolatileCheck.Findings, FindingBrief{Rule: f.Rule, Severity: f.Severity.String(),
			Setting: f.Setting, Current: f.Current, Recommended: f.Recommended, Action: f.Action})
	}
	res.Targets = append(res.Targets, Target{
		Name: "advisor raises the critical wal-on-volatile-storage finding on the tmpfs cluster", Want: "critical wal-on-volatile-storage",
		Got: fmt.Sprintf("critical findings: %v", res.VolatileCheck.Critical), Scored: true,
		Met: slices.Contains(res.VolatileCheck.Critical, "wal-on-volatile-storage"),
	})

	set := &configSet{}
	set.add(start, RoleStart)
	set.add(start, RoleGrid)
	if !r.opts.Quick {
		// commit_delay=2000, commit_siblings=5 is the folklore setting; docs/benchmarks.md measured it
		// at no gain (64 clients) or a loss (100). A grid point, so every run checks that again.
		set.add(start.with("commit_delay=2000", map[string]string{"commit_delay": "2000", "commit_siblings": "5"}), RoleGrid)
	}
	set.add(advCfg, RoleAdvisor)
	set.add(r.staticConfig(start), RoleStatic)
	tmpfs := start.with("WAL on tmpfs", nil)
	tmpfs.WAL, tmpfs.Durable = "tmpfs", false
	set.add(tmpfs, RoleReference)

	for _, cfg := range set.list {
		cr := ConfigResult{Config: cfg}
		cl := c
		if cfg.WAL == "tmpfs" {
			cl = tc
		}
		if err := r.apply(ctx, cl, res.Base, cfg); err != nil {
			return res, err
		}
		for _, n := range clients {
			if err := cl.Exec(ctx, "TRUNCATE seed002"); err != nil {
				return res, err
			}
			tps, err := insert(ctx, cl, n, secs)
			if err != nil {
				return res, fmt.Errorf("%s, %d clients: %w", cfg.Name, n, err)
			}
			r.say("%s: %-22s %3d clients %8.0f tps", Seed002, cfg.Name, n, tps)
			cr.Clients = append(cr.Clients, ClientsResult{Clients: n, TPS: tps})
			if n == top {
				cr.Runs, cr.Value = []float64{tps}, tps
			}
		}
		res.Configs = append(res.Configs, cr)
	}
	res.GridBest = res.bestGrid()
	res.Notes = append(res.Notes, "Each configuration ran once per client count (not interleaved): seed 002 has no target on these figures.")
	return res, nil
}
