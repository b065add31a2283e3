package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/pgwal-advisor/pgwal-advisor/probes"
)

// Kind is what a limited value measures, and so how its bounds print.
type Kind int

const (
	// Duration values and bounds are time.Duration nanoseconds.
	Duration Kind = iota
	// Ratio is a share in [0, 1].
	Ratio
	// Number is a count, a size in bytes, a factor or a score.
	Number
)

// Limit bounds one setting, wherever it is given: the configuration file (Key), run's command
// line (Flag), or both. Every duration and ratio the daemon takes has a row, and so has every
// rule threshold; a test fails when one lacks it.
type Limit struct {
	// Key is the configuration file's key ("interval", "thresholds.raise_after"); "" for a
	// flag the file does not have.
	Key string
	// Flag is the command-line flag without its dashes; "" for a key only the file has.
	Flag string
	// Commands are the subcommands whose Flag this row bounds, "*" for every command that has
	// it (--query-timeout). A row with both Key and Flag bounds run's flag too: run's flags
	// and its file are one configuration.
	Commands []string
	Kind     Kind
	Min, Max float64
}

// every is Commands for a flag that means the same in every command that has it.
var every = []string{"*"}

// appliesTo reports whether the row bounds command's flag.
func (l Limit) appliesTo(command string) bool {
	if l.Flag == "" {
		return false
	}
	if command == "run" && l.Key != "" {
		return true
	}
	return slices.Contains(l.Commands, "*") || slices.Contains(l.Commands, command)
}

// LimitFor returns the row that bounds command's flag, if any.
func LimitFor(command, flag string) (Limit, bool) {
	for _, l := range Limits() {
		if l.Flag == flag && l.appliesTo(command) {
			return l, true
		}
	}
	return Limit{}, false
}

func dur(d time.Duration) float64 { return float64(d) }

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// Limits returns the table. The bounds keep a typo from harming the server or the host (an
// interval of 1ns queries pg_stat_activity back to back; 0 would silently mean the default)
// and keep the rules meaningful; they are documented in docs/http.md.
func Limits() []Limit {
	return []Limit{
		// Each snapshot is a handful of catalog queries and a few /proc and /sys reads: below
		// 100 ms their cost is no longer small beside the server's work.
		// check and apply take snapshots the same way within their window.
		{Key: "interval", Flag: "interval", Commands: []string{"check", "apply"}, Kind: Duration, Min: dur(100 * time.Millisecond), Max: dur(day)},
		// collect's --interval 0 means one snapshot.
		{Flag: "interval", Commands: []string{"collect"}, Kind: Duration, Min: 0, Max: dur(day)},
		// One pg_stat_activity query per sample: at most ten a second.
		{Key: "wait_events.interval", Flag: "wait-events.interval", Commands: every, Kind: Duration, Min: dur(100 * time.Millisecond), Max: dur(time.Hour)},
		// At least two snapshots are needed for a rate (the advisor checks that too); at most a
		// week of snapshots is held in memory.
		{Key: "history.window", Flag: "history.window", Kind: Duration, Min: dur(time.Second), Max: dur(week)},
		// A burst shorter than probes.MinDuration gives too few samples of each method.
		{Key: "probe.burst", Flag: "probe.burst", Kind: Duration, Min: dur(probes.MinDuration), Max: dur(10 * time.Minute)},
		{Key: "probe.interval", Flag: "probe.interval", Kind: Duration, Min: dur(time.Second), Max: dur(day)},
		// A query that cannot finish in 100 ms on a loaded server is not a failure; one that
		// takes ten minutes holds its snapshot back for ten minutes.
		{Flag: "query-timeout", Commands: every, Kind: Duration, Min: dur(100 * time.Millisecond), Max: dur(10 * time.Minute)},
		// 0 turns the reading of the WAL's images off; a day between readings is as rare as it
		// is useful (the rule ignores a reading older than thresholds.fpi_reading_max_age).
		{Flag: "full-pages.interval", Commands: every, Kind: Duration, Min: 0, Max: dur(day)},
		// The figures before and after a change need a few snapshots each.
		{Flag: "apply.verify-window", Commands: []string{"run"}, Kind: Duration, Min: dur(time.Second), Max: dur(day)},
		// 0: changes may follow each other as soon as one is verified.
		{Flag: "apply.cooldown", Commands: []string{"run"}, Kind: Duration, Min: 0, Max: dur(week)},
		// check's and apply's watch: at least a second, at most a day in the foreground.
		{Flag: "window", Commands: []string{"check", "apply"}, Kind: Duration, Min: dur(time.Second), Max: dur(day)},
		// 0 would silently mean the probes' default budget.
		{Flag: "probe.budget", Commands: []string{"check", "apply"}, Kind: Duration, Min: dur(probes.MinDuration), Max: dur(time.Hour)},
		// How long a reloaded setting may take to show: a reload is quick; longer means it did
		// not take.
		{Flag: "confirm-timeout", Commands: []string{"apply", "rollback"}, Kind: Duration, Min: dur(100 * time.Millisecond), Max: dur(10 * time.Minute)},
		{Flag: "duration", Commands: []string{"probe"}, Kind: Duration, Min: dur(probes.MinDuration), Max: dur(time.Hour)},
		// The relative half-width of the interval that ends a probe run: 0 would silently mean
		// the default, and an interval as wide as half the mean measures nothing.
		{Flag: "precision", Commands: []string{"probe"}, Kind: Ratio, Min: 0.001, Max: 0.5},

		// Rule thresholds (docs/rules.md). 0 is allowed where it means "at once".
		{Key: "thresholds.raise_after", Kind: Duration, Min: 0, Max: dur(day)},
		{Key: "thresholds.clear_after", Kind: Duration, Min: 0, Max: dur(day)},
		{Key: "thresholds.stale_after", Kind: Duration, Min: 0, Max: dur(week)},
		{Key: "thresholds.window", Kind: Duration, Min: dur(time.Second), Max: dur(day)},
		{Key: "thresholds.min_span", Kind: Duration, Min: dur(time.Second), Max: dur(day)},
		{Key: "thresholds.checkpoint_window", Kind: Duration, Min: dur(time.Minute), Max: dur(week)},
		{Key: "thresholds.probe_max_age", Kind: Duration, Min: dur(time.Second), Max: dur(week)},
		// A mean and a standard error need two samples at the least.
		{Key: "thresholds.probe_min_samples", Kind: Number, Min: 2, Max: 1e6},
		{Key: "thresholds.probe_z", Kind: Number, Min: 0, Max: 10},
		{Key: "thresholds.min_improvement", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.min_gain", Kind: Duration, Min: 0, Max: dur(time.Second)},
		{Key: "thresholds.bulk_buffers_full_share", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.buffers_full_min_rate", Kind: Number, Min: 0, Max: 1e9},
		{Key: "thresholds.buffers_full_min_share", Kind: Ratio, Min: 0, Max: 1},
		// Seconds per second summed over backends: above 1 when several wait at once.
		{Key: "thresholds.buffers_full_cost", Kind: Number, Min: 0, Max: 1e4},
		{Key: "thresholds.buffers_full_wait_share", Kind: Ratio, Min: 0, Max: 1},
		// wal_buffers' own range: 32kB (4 pages) to 2GB (262143 pages of 8kB), PostgreSQL docs.
		{Key: "thresholds.wal_buffers_floor", Kind: Number, Min: 32 << 10, Max: 262143 * 8 << 10},
		{Key: "thresholds.wal_buffers_max", Kind: Number, Min: 32 << 10, Max: 262143 * 8 << 10},
		{Key: "thresholds.min_checkpoints", Kind: Number, Min: 1, Max: 1e6},
		{Key: "thresholds.checkpoint_sync_slow", Kind: Duration, Min: 0, Max: dur(time.Hour)},
		// checkpoint_completion_target's own range (PostgreSQL docs: 0 to 1).
		{Key: "thresholds.completion_target", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.writeback_pile_min", Kind: Number, Min: 0, Max: 1 << 40},
		{Key: "thresholds.writeback_pile_seconds", Kind: Number, Min: 0, Max: 3600},
		{Key: "thresholds.writeback_flush_slow", Kind: Duration, Min: 0, Max: dur(time.Hour)},
		{Key: "thresholds.writeback_flush_rise", Kind: Number, Min: 1, Max: 1e3},
		{Key: "thresholds.writeback_wait_share", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.writeback_wait_rise", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.writeback_wal_share", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.writeback_stall_min", Kind: Duration, Min: 0, Max: dur(24 * time.Hour)},
		{Key: "thresholds.min_wait_samples", Kind: Number, Min: 1, Max: 1e9},
		{Key: "thresholds.contention_min_active", Kind: Number, Min: 0, Max: 1e5},
		{Key: "thresholds.contention_info_share", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.fpi_share_min", Kind: Ratio, Min: 0, Max: 1},
		// Bytes of WAL per second; a record without its image is at least its 24-byte header
		// and at most a page.
		{Key: "thresholds.fpi_min_wal_rate", Kind: Number, Min: 0, Max: 1 << 40},
		{Key: "thresholds.fpi_record_bytes", Kind: Number, Min: 24, Max: 8192},
		{Key: "thresholds.fpi_saving_min", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.fpi_idle_cpu_share", Kind: Ratio, Min: 0, Max: 1},
		{Key: "thresholds.fpi_reading_max_age", Kind: Duration, Min: dur(time.Minute), Max: dur(day)},
		{Key: "thresholds.fpi_write_cost_min", Kind: Number, Min: 0, Max: 1e4},
		{Key: "thresholds.fpi_device_share_min", Kind: Ratio, Min: 0, Max: 1},
		// checkpoint_timeout's own range (PostgreSQL docs: 30s to 1d).
		{Key: "thresholds.fpi_spacing_timeout", Kind: Duration, Min: dur(30 * time.Second), Max: dur(day)},
	}
}

// format prints v as the row's kind.
func (l Limit) format(v float64) string {
	switch l.Kind {
	case Duration:
		return time.Duration(v).String()
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

// check refuses v outside the row's bounds, naming the setting (name), the value and the
// bound it crossed.
func (l Limit) check(name string, v float64) error {
	bounds := fmt.Sprintf("allowed: %s to %s", l.format(l.Min), l.format(l.Max))
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%s %s: not a number (%s)", name, l.format(v), bounds)
	case v < l.Min:
		return fmt.Errorf("%s %s: below the minimum %s (%s)", name, l.format(v), l.format(l.Min), bounds)
	case v > l.Max:
		return fmt.Errorf("%s %s: above the maximum %s (%s)", name, l.format(v), l.format(l.Max), bounds)
	}
	return nil
}

// CheckFlags checks command's flags (fs) against the rows that bound them; the root command
// calls it before any subcommand runs.
func CheckFlags(command string, fs *pflag.FlagSet) error {
	for _, l := range Limits() {
		if !l.appliesTo(command) {
			continue
		}
		f := fs.Lookup(l.Flag)
		if f == nil {
			continue
		}
		v, err := flagValue(f)
		if err != nil {
			return err
		}
		if err := l.check("--"+l.Flag, v); err != nil {
			return err
		}
	}
	return nil
}

func flagValue(f *pflag.Flag) (float64, error) {
	switch f.Value.Type() {
	case "duration":
		d, err := time.ParseDuration(f.Value.String())
		return float64(d), err
	default:
		return strconv.ParseFloat(f.Value.String(), 64)
	}
}

// values are the resolved configuration's limited settings by key or flag, as the table
// names them.
func (c Config) values() map[string]float64 {
	m := map[string]float64{
		"interval":             float64(c.Interval),
		"wait_events.interval": float64(c.WaitInterval),
		"history.window":       float64(c.HistoryWindow),
		"probe.burst":          float64(c.ProbeBurst),
		"probe.interval":       float64(c.ProbeInterval),
		"query-timeout":        float64(c.QueryTimeout),
	}
	v := reflect.ValueOf(c.Thresholds)
	for i := range v.NumField() {
		m["thresholds."+snakeCase(v.Type().Field(i).Name)] = toFloat(v.Field(i))
	}
	return m
}

func toFloat(v reflect.Value) float64 {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(v.Uint())
	case reflect.Float32, reflect.Float64:
		return v.Float()
	}
	return math.NaN() // a threshold of another type: refused until it has a row that fits
}

// check enforces the table on a resolved configuration, flags and file alike; name says what
// to call a row's setting (the flag when given on the command line, else the file's key).
func (c Config) check(name func(Limit) string) error {
	vals := c.values()
	for _, l := range Limits() {
		id := l.Key
		if id == "" {
			if !l.appliesTo("run") {
				continue // another command's flag: CheckFlags checks it
			}
			id = l.Flag
		}
		v, ok := vals[id]
		if !ok {
			continue // apply's flags: CheckFlags checks them
		}
		if err := l.check(name(l), v); err != nil {
			return err
		}
	}
	th := c.Thresholds
	switch {
	case th.WALBuffersFloor > th.WALBuffersMax:
		return fmt.Errorf("thresholds.wal_buffers_floor %d is above thresholds.wal_buffers_max %d", th.WALBuffersFloor, th.WALBuffersMax)
	case c.ProbeInterval < c.ProbeBurst:
		// The probe scheduler refuses this pair too, but only once the daemon runs, where the
		// refusal turned probing off with a finding instead of stopping the start or the reload.
		return fmt.Errorf("%s %v is shorter than %s %v: a probe burst must end before the next one starts; make the interval at least as long as the burst (defaults: %v bursts every %v)",
			name(limitOf("probe.interval")), c.ProbeInterval, name(limitOf("probe.burst")), c.ProbeBurst, probes.DefaultBurst, probes.DefaultInterval)
	}
	return nil
}

// limitOf returns the row of a configuration file key.
func limitOf(key string) Limit {
	for _, l := range Limits() {
		if l.Key == key {
			return l
		}
	}
	return Limit{Key: key}
}
