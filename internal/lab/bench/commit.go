package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/equipment"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/pgbench"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/simdisk"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// CommitGrid is the commit scenario's figure: seed 002's single-row INSERT commits under a grid
// of commit_delay x commit_siblings x clients, per simulated device.
type CommitGrid struct {
	Devices []CommitDevice `json:"devices"`
}

// CommitDevice is the grid on one simulated device.
type CommitDevice struct {
	LatencyMS float64 `json:"latency_ms"`
	Clients   []int   `json:"clients"`
	// Configs names the grid's points; Configs[0] is commit_delay=0, the baseline.
	Configs []CommitConfig `json:"configs"`
}

// CommitConfig is one grid point and its runs per number of clients.
type CommitConfig struct {
	Name          string `json:"name"`
	CommitDelay   int    `json:"commit_delay_us"`
	CommitSibling int    `json:"commit_siblings"`
	// TPS[i] are the interleaved runs at Clients[i].
	TPS [][]float64 `json:"tps"`
}

// commitGain is one cell against the baseline: the change of the medians, and whether the
// runs' ranges are apart (every run of one above every run of the other, three runs each at
// least).
type commitGain struct {
	median, baseMedian float64
	gain               float64 // median / baseline median - 1
	beyond             bool    // the ranges do not overlap
}

func (d CommitDevice) gain(cfg, clients int) commitGain {
	base, x := d.Configs[0].TPS[clients], d.Configs[cfg].TPS[clients]
	g := commitGain{median: stats.Median(x), baseMedian: stats.Median(base)}
	if g.baseMedian > 0 {
		g.gain = g.median/g.baseMedian - 1
	}
	// Three runs each at least: with fewer, ranges that do not overlap say little.
	if len(x) >= 3 && len(base) >= 3 {
		g.beyond = stats.Min(x) > stats.Max(base) || stats.Max(x) < stats.Min(base)
	}
	return g
}

// commit is the commit grid: does commit_delay pay anywhere on the lab's devices?
// Every cell runs rounds times, interleaved: each round visits every grid point (the order
// reversed from one round to the next) and, per point, every number of clients.
func (r *runner) commit(ctx context.Context) (res *ScenarioResult, err error) {
	secs, rounds := r.sz.cgSecs, r.sz.cgRounds
	res = &ScenarioResult{
		ID:    Commit,
		Title: "Commit grouping: commit_delay x commit_siblings x clients on 1 ms and 4 ms devices",
		Workload: fmt.Sprintf("seed 002's transaction, pgbench -n -f insert.sql (%q) -c N -j 2 -T %d for N in %v; WAL on the simulated disk "+
			"at each latency in %v; tps, %d interleaved rounds", insertScript[:len(insertScript)-1], secs, r.sz.cgClients, r.sz.cgLatencies, rounds),
		// Room for 200 clients, the lab's connections and autovacuum.
		Base:   map[string]string{"max_connections": "250"},
		Metric: "tps", HigherIsBetter: true, Runs: rounds,
	}
	grid := &CommitGrid{}
	res.Commit = grid
	for _, lat := range r.sz.cgLatencies {
		dev, err := r.commitDevice(ctx, lat, secs, rounds)
		if dev != nil {
			grid.Devices = append(grid.Devices, *dev)
		}
		if err != nil {
			return res, err
		}
	}
	res.Notes = append(res.Notes, commitVerdict(grid))
	return res, nil
}

func (r *runner) commitDevice(ctx context.Context, lat time.Duration, secs, rounds int) (dev *CommitDevice, err error) {
	eq := equipment.New(r.logger, r.say)
	defer func() {
		if cerr := eq.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	scripts, err := eq.Dir("", "script-")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(scripts, "insert.sql")
	if err := os.WriteFile(script, []byte(insertScript), 0o644); err != nil {
		return nil, fmt.Errorf("write pgbench script: %w", err)
	}
	disk, err := eq.Disk(ctx, simdisk.Options{Latency: lat})
	if err != nil {
		return nil, err
	}
	base := map[string]string{"max_connections": "250"}
	c, err := eq.Cluster(ctx, lab.ClusterOptions{WALDir: filepath.Join(disk.Mountpoint(), "wal"), Settings: base})
	if err != nil {
		return nil, err
	}
	if err := c.Exec(ctx, "CREATE TABLE seed002 (id bigserial PRIMARY KEY, v integer)"); err != nil {
		return nil, err
	}
	dev = &CommitDevice{LatencyMS: float64(lat) / float64(time.Millisecond), Clients: r.sz.cgClients}
	dev.Configs = append(dev.Configs, CommitConfig{Name: "commit_delay=0", CommitSibling: 5})
	for _, d := range r.sz.cgDelays {
		for _, s := range r.sz.cgSiblings {
			dev.Configs = append(dev.Configs, CommitConfig{Name: fmt.Sprintf("delay %d us, siblings %d", d, s), CommitDelay: d, CommitSibling: s})
		}
	}
	for i := range dev.Configs {
		dev.Configs[i].TPS = make([][]float64, len(dev.Clients))
	}
	order := make([]int, len(dev.Configs))
	for i := range order {
		order[i] = i
	}
	clientOrder := slices.Clone(dev.Clients)
	idx := func(n int) int { return slices.Index(dev.Clients, n) }
	for round := 1; round <= rounds; round++ {
		for _, i := range order {
			cc := &dev.Configs[i]
			cfg := Config{Name: cc.Name, Durable: true, Settings: map[string]string{
				"commit_delay": strconv.Itoa(cc.CommitDelay), "commit_siblings": strconv.Itoa(cc.CommitSibling)}}
			if err := r.apply(ctx, c, base, cfg); err != nil {
				return dev, err
			}
			for _, n := range clientOrder {
				if err := c.Exec(ctx, "TRUNCATE seed002"); err != nil {
					return dev, err
				}
				out, err := pgbench.Run(ctx, c, "-n", "-f", script, "-c", strconv.Itoa(n), "-j", strconv.Itoa(min(n, 2)), "-T", strconv.Itoa(secs))
				if err != nil {
					return dev, fmt.Errorf("%v, %s, %d clients: %w", lat, cc.Name, n, err)
				}
				tps, err := pgbench.ParseTPS(out.Stdout)
				if err != nil {
					return dev, err
				}
				cc.TPS[idx(n)] = append(cc.TPS[idx(n)], tps)
				r.say("%s: %v round %d/%d %-26s %3d clients %6.0f tps", Commit, lat, round, rounds, cc.Name, n, tps)
			}
			slices.Reverse(clientOrder)
		}
		slices.Reverse(order)
	}
	return dev, nil
}

// commitVerdict says where commit_delay gained beyond the spread, which is what the
// wal-lock-contention rule may cite (rules/contention.go).
func commitVerdict(g *CommitGrid) string {
	var gains, losses []string
	for _, d := range g.Devices {
		for ci := range d.Clients {
			for k := 1; k < len(d.Configs); k++ {
				x := d.gain(k, ci)
				if !x.beyond {
					continue
				}
				cell := fmt.Sprintf("%.0f ms, %d clients, %s: %+.0f%%", d.LatencyMS, d.Clients[ci], d.Configs[k].Name, 100*x.gain)
				if x.gain > 0 {
					gains = append(gains, cell)
				} else {
					losses = append(losses, cell)
				}
			}
		}
	}
	s := "Beyond the spread means every run of the grid point was above (or below) every run of commit_delay=0 at that " +
		"number of clients on that device, with three runs each at least. "
	if len(gains) == 0 {
		s += "No grid point gained beyond the spread anywhere"
	} else {
		s += "Gains beyond the spread: " + strings.Join(gains, "; ")
	}
	if len(losses) > 0 {
		s += "; losses beyond the spread: " + strings.Join(losses, "; ")
	}
	return s + "."
}
