package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/neighbour"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab/stats"
)

// ScenarioResult is one scenario's figures.
type ScenarioResult struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Workload string `json:"workload"`
	// Base are the settings every configuration of the scenario starts from.
	Base map[string]string `json:"base_settings,omitempty"`
	// Metric names the figure each configuration is judged by ("tps", "seconds").
	Metric         string `json:"metric"`
	HigherIsBetter bool   `json:"higher_is_better"`
	// Runs is how many times each configuration ran (interleaved); Value is their median.
	Runs    int            `json:"runs"`
	Configs []ConfigResult `json:"configs"`
	Advisor *AdvisorRun    `json:"advisor,omitempty"`
	// AdvisorChanges are the settings the advisor changed from the start.
	AdvisorChanges map[string]string `json:"advisor_changes"`
	// GridBest names the best durable configuration of the grid.
	GridBest string `json:"grid_best,omitempty"`
	// AdvisorMethod is the wal_sync_method of the advisor's configuration (seed 000).
	AdvisorMethod string `json:"advisor_method,omitempty"`
	// VolatileCheck is the advisor's check of the cluster with its WAL on tmpfs (seed 002).
	VolatileCheck *VolatileCheck `json:"volatile_check,omitempty"`
	// Commit is the commit scenario's grid.
	Commit *CommitGrid `json:"commit,omitempty"`
	// Cells are the default-host matrix's cells, each a scenario of its own: a device and a load.
	Cells []*ScenarioResult `json:"cells,omitempty"`
	// Timing is seed 001's timing lab.
	Timing *Timing `json:"timing,omitempty"`
	// Restore is the neighbour scenario's restore phase (neighbour_restore.go).
	Restore         *NeighbourRestore `json:"restore,omitempty"`
	Targets         []Target          `json:"targets,omitempty"`
	Notes           []string          `json:"notes,omitempty"`
	Error           string            `json:"error,omitempty"`
	DurationSeconds float64           `json:"duration_seconds"`
}

// ConfigResult is a configuration and what it measured.
type ConfigResult struct {
	Config
	// Runs are the single runs' figures in the order they ran; Value is their median.
	Runs  []float64 `json:"runs,omitempty"`
	Value float64   `json:"value"`
	// Clients holds seed 002's figure per number of clients.
	Clients []ClientsResult `json:"clients,omitempty"`
	// Smooth holds seed 003's per-second throughput and latency figures.
	Smooth *Smoothness `json:"smoothness,omitempty"`
	// Neighbour holds the neighbour scenario's runs, in the order they ran.
	Neighbour []*neighbour.Run `json:"neighbour_runs,omitempty"`
	// Defaults holds a default-host cell's runs, in the order they ran.
	Defaults []*DefaultsRun `json:"defaults_runs,omitempty"`
}

// ClientsResult is seed 002's throughput at one number of clients.
type ClientsResult struct {
	Clients int     `json:"clients"`
	TPS     float64 `json:"tps"`
}

// Smoothness is seed 003's figure: how steady the throughput was across checkpoints.
type Smoothness struct {
	Seconds          int       `json:"seconds"`
	PerSecond        []float64 `json:"per_second_tps"`
	MedianTPS        float64   `json:"median_tps"`
	WorstSecond      float64   `json:"worst_second_tps"`
	P5TPS            float64   `json:"p5_tps"`
	SecondsBelowHalf int       `json:"seconds_below_half_median"`
	// Latencies are per transaction from the scheduled start (pgbench -R), in milliseconds.
	Transactions int     `json:"transactions"`
	P99LatencyMS float64 `json:"p99_latency_ms"`
	MaxLatencyMS float64 `json:"max_latency_ms"`
	// Checkpoints completed during the run and their total sync phase.
	Checkpoints           int64   `json:"checkpoints"`
	CheckpointSyncSeconds float64 `json:"checkpoint_sync_seconds"`
	// DirtyPeakBytes is the peak of Dirty+Writeback in /proc/meminfo during the run.
	DirtyPeakBytes int64 `json:"dirty_writeback_peak_bytes"`
}

// Target is one of the targets, met or missed.
type Target struct {
	Name   string `json:"name"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	Met    bool   `json:"met"`
	Scored bool   `json:"scored"` // false when the figures needed are missing
}

// VolatileCheck is what the advisor said of a cluster with its WAL on tmpfs.
type VolatileCheck struct {
	Findings []FindingBrief `json:"findings"`
	// Critical lists the critical findings' rules; seed 002 expects wal-on-volatile-storage.
	Critical []string `json:"critical"`
}

func (s *ScenarioResult) config(name string) *ConfigResult {
	for i := range s.Configs {
		if s.Configs[i].Name == name {
			return &s.Configs[i]
		}
	}
	return nil
}

func (s *ScenarioResult) withRole(role string) *ConfigResult {
	for i := range s.Configs {
		if s.Configs[i].has(role) {
			return &s.Configs[i]
		}
	}
	return nil
}

// better reports whether a beats b on the scenario's metric.
func (s *ScenarioResult) better(a, b float64) bool {
	if s.HigherIsBetter {
		return a > b
	}
	return a < b
}

// bestGrid names the best durable grid configuration.
func (s *ScenarioResult) bestGrid() string {
	var best *ConfigResult
	for i := range s.Configs {
		c := &s.Configs[i]
		if !c.has(RoleGrid) || !c.Durable || len(c.Runs) == 0 {
			continue
		}
		if best == nil || s.better(c.Value, best.Value) {
			best = c
		}
	}
	if best == nil {
		return ""
	}
	return best.Name
}

// measureInterleaved runs every configuration once per round, alternating the order from one
// round to the next (docs/benchmarks.md: identical runs differed by up to a third, so configurations are
// compared over interleaved runs, never over one run each), and takes the median per
// configuration. After runs rounds, extra more rounds run the configurations whose median so
// far keep accepts (nil: none).
func (r *runner) measureInterleaved(ctx context.Context, id string, c *lab.Cluster, base map[string]string, set *configSet, runs, extra int,
	keep func(median float64) bool, once func(ctx context.Context, cfg Config) (float64, error)) ([]ConfigResult, error) {
	res := make([]ConfigResult, len(set.list))
	order := make([]int, len(set.list))
	for i, cfg := range set.list {
		res[i] = ConfigResult{Config: cfg}
		order[i] = i
	}
	total := runs
	for round := 1; round <= runs+extra; round++ {
		if round == runs+1 {
			if keep == nil {
				break
			}
			var fast []int
			for _, i := range order {
				if keep(stats.Median(res[i].Runs)) {
					fast = append(fast, i)
				}
			}
			order, total = fast, runs+extra
		}
		for _, i := range order {
			cfg := set.list[i]
			if err := r.apply(ctx, c, base, cfg); err != nil {
				return res, err
			}
			v, err := once(ctx, cfg)
			if err != nil {
				return res, fmt.Errorf("%s: %w", cfg.Name, err)
			}
			res[i].Runs = append(res[i].Runs, v)
			r.say("%s: run %d/%d %-28s %s", id, round, total, cfg.Name, formatValue(v))
		}
		slices.Reverse(order)
	}
	for i := range res {
		res[i].Value = stats.Median(res[i].Runs)
	}
	return res, nil
}

// spreadNote says how far apart one configuration's runs were, at most, among the durable
// configurations that ran more than once: the scale against which their differences are read.
func spreadNote(res *ScenarioResult) string {
	worst, name := 0.0, ""
	for _, c := range res.Configs {
		if !c.Durable || len(c.Runs) < 2 || c.Value <= 0 {
			continue
		}
		if s := (stats.Max(c.Runs) - stats.Min(c.Runs)) / c.Value; s > worst {
			worst, name = s, c.Name
		}
	}
	if name == "" {
		return ""
	}
	return fmt.Sprintf("Run-to-run spread: the runs of one configuration differed by up to %.0f%% of its median (%s); differences "+
		"between configurations smaller than that are not resolved by these runs.", 100*worst, name)
}

func formatValue(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
