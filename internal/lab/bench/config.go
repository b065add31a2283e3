package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
	"github.com/pgwal-advisor/pgwal-advisor/collector/kernel"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// Roles a configuration plays in a scenario. One measured configuration can play several
// (the advisor's configuration is often one of the grid's).
const (
	RoleStart   = "start"
	RoleAdvisor = "advisor"
	RoleGrid    = "grid"
	RoleStatic  = "static"
	// RoleReference is measured for comparison and never a candidate: it gives up durability
	// (fsync=off, WAL on tmpfs).
	RoleReference = "reference"
	// RoleAdvice is what the advisor's advice asks a person to do, measured (neighbour: the
	// bulk writer under a rate limit); never a candidate for "best" of the grid.
	RoleAdvice = "advice"
)

// Config is one configuration under test: PostgreSQL settings on top of the scenario's base,
// kernel knobs, and for seed 002 where the WAL lives.
type Config struct {
	Name string `json:"name"`
	// Settings are written to the lab cluster's settings file, over the scenario's base.
	Settings map[string]string `json:"settings"`
	// Kernel holds /proc/sys/vm knobs (e.g. "dirty_background_bytes"); empty means the
	// kernel's settings as the suite found them.
	Kernel map[string]string `json:"kernel,omitempty"`
	// WAL is where the WAL lives when the scenario varies it ("tmpfs"); empty is the
	// scenario's simulated disk.
	WAL string `json:"wal,omitempty"`
	// Queue is the simulated disk's queue model when the scenario varies it (neighbour):
	// "serial" or "priority" (simdisk.QueueModel); empty is the disk's default, serial.
	Queue string `json:"queue,omitempty"`
	// WriterMBps limits the neighbour scenario's bulk writer to this many MB/s with an
	// fdatasync every neighbour.ThrottleSync, as its own rate limit (or cgroup io.max) would;
	// 0: none.
	WriterMBps int `json:"writer_mb_per_s,omitempty"`
	// Durable is false for configurations that give up durability: they are measured as
	// references, never candidates for "best".
	Durable bool     `json:"durable"`
	Roles   []string `json:"roles"`
}

// key identifies what is measured: two configurations with the same settings, knobs and WAL
// location are the same measurement, whatever they are called.
func (c Config) key() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
		fmt.Fprintf(&b, "%s=%s;", k, c.Settings[k])
	}
	b.WriteString("|")
	for _, k := range slices.Sorted(maps.Keys(c.Kernel)) {
		fmt.Fprintf(&b, "%s=%s;", k, c.Kernel[k])
	}
	return b.String() + "|" + c.WAL + "|" + c.Queue + "|" + strconv.Itoa(c.WriterMBps)
}

// with returns a copy of c named name with settings overridden by set.
func (c Config) with(name string, set map[string]string) Config {
	out := Config{Name: name, Settings: maps.Clone(c.Settings), Kernel: maps.Clone(c.Kernel), WAL: c.WAL, Queue: c.Queue, Durable: c.Durable}
	if out.Settings == nil {
		out.Settings = map[string]string{}
	}
	maps.Copy(out.Settings, set)
	return out
}

func (c Config) has(role string) bool { return slices.Contains(c.Roles, role) }

// configSet collects a scenario's configurations, merging those that are the same
// measurement: each is run once and reported under every role it plays.
type configSet struct{ list []Config }

// add adds c with role, or adds role to the configuration already measuring the same thing.
// It returns the name the configuration is measured under.
func (s *configSet) add(c Config, role string) string {
	for i := range s.list {
		if s.list[i].key() == c.key() {
			if !s.list[i].has(role) {
				s.list[i].Roles = append(s.list[i].Roles, role)
			}
			return s.list[i].Name
		}
	}
	c.Roles = []string{role}
	s.list = append(s.list, c)
	return c.Name
}

// StaticTuner is the configuration the static tuners' formulas give for this machine. Both
// PGTune and timescaledb-tune size wal_buffers from memory and set checkpoint_completion_target
// to 0.9; they leave wal_sync_method and the kernel's vm.dirty_* alone.
type StaticTuner struct {
	Settings map[string]string `json:"settings"`
	Formula  string            `json:"formula"`
}

// staticTunerFor applies PGTune's formulas (le0pard/pgtune,
// src/features/configuration/configurationSlice.js, its default "web application" type):
// shared_buffers = RAM/4 and wal_buffers = 3% of that, at most 16MB (values within 2MB of 16MB
// round up to it, at least 32kB); checkpoint_completion_target = 0.9; min_wal_size = 1GB and
// max_wal_size = 4GB (PGTune sizes these by database type, not by memory). timescaledb-tune
// (pkg/pgtune/wal.go, misc.go) agrees on wal_buffers (16MB with 2GB of memory or more) and 0.9,
// and without --wal-disk-size gives max_wal_size 1GB, min_wal_size 512MB. shared_buffers stays
// the scenario's: the suite compares WAL settings.
func staticTunerFor(memBytes int64) StaticTuner {
	const kB, MB = 1 << 10, 1 << 20
	wb := memBytes / 4 * 3 / 100
	switch {
	case wb > 16*MB:
		wb = 16 * MB
	case wb > 14*MB:
		wb = 16 * MB
	case wb < 32*kB:
		wb = 32 * kB
	}
	return StaticTuner{
		Settings: map[string]string{
			"wal_buffers":                  pgMemory(wb),
			"checkpoint_completion_target": "0.9",
			"min_wal_size":                 "1GB",
			"max_wal_size":                 "4GB",
		},
		Formula: fmt.Sprintf("PGTune (web, its default): wal_buffers = min(3%% of shared_buffers = RAM/4, 16MB) = %s for %s of RAM; "+
			"checkpoint_completion_target = 0.9; min_wal_size = 1GB, max_wal_size = 4GB (by database type). "+
			"timescaledb-tune gives the same wal_buffers and 0.9 (max_wal_size 1GB without --wal-disk-size). "+
			"Neither touches wal_sync_method or vm.dirty_*.", pgMemory(wb), collector.FormatBytes(float64(memBytes))),
	}
}

// staticConfig is the static tuners' configuration for a scenario: its start with their
// settings.
func (r *runner) staticConfig(start Config) Config {
	return start.with("static tuners", r.static.Settings)
}

// pgMemory writes bytes in PostgreSQL's memory units, exactly where possible.
func pgMemory(b int64) string {
	const kB, MB, GB = 1 << 10, 1 << 20, 1 << 30
	switch {
	case b%GB == 0:
		return strconv.FormatInt(b/GB, 10) + "GB"
	case b%MB == 0:
		return strconv.FormatInt(b/MB, 10) + "MB"
	}
	return strconv.FormatInt(b/kB, 10) + "kB"
}

// memTotal reads MemTotal from meminfo.
func memTotal(ctx context.Context, procfs string) (int64, error) {
	m, err := kernel.ReadMeminfo(ctx, procfs)
	if err != nil {
		return 0, fmt.Errorf("read memory size: %w", err)
	}
	return m.MemTotalBytes, nil
}

// configure makes the cluster run with exactly the given settings: what ALTER SYSTEM (the
// advisor's applier) set is reset, the lab's settings file rewritten and reloaded, and the
// server restarted when a changed setting needs it. It fails when PostgreSQL did not take a
// setting, so that no figure is reported for a configuration that was not in effect.
func configure(ctx context.Context, c *lab.Cluster, settings map[string]string) error {
	conn, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "ALTER SYSTEM RESET ALL"); err != nil {
		return fmt.Errorf("reset ALTER SYSTEM settings: %w", err)
	}
	if err := c.WriteSettings(settings); err != nil {
		return err
	}
	var loaded time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&loaded); err != nil {
		return fmt.Errorf("read configuration load time: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reload configuration: %w", err)
	}
	if err := waitReloaded(ctx, c, loaded); err != nil {
		return err
	}
	var pending []string
	rows, err := conn.Query(ctx, "SELECT name FROM pg_settings WHERE pending_restart ORDER BY name")
	if err != nil {
		return fmt.Errorf("read settings pending a restart: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return fmt.Errorf("read settings pending a restart: %w", err)
		}
		pending = append(pending, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read settings pending a restart: %w", err)
	}
	conn.Close(context.Background())
	if len(pending) > 0 {
		if err := c.Restart(ctx); err != nil {
			return fmt.Errorf("restart for %s: %w", strings.Join(pending, ", "), err)
		}
	}
	return checkApplied(ctx, c, "lab.conf")
}

// waitReloaded waits until a new backend sees a configuration loaded after before: the
// postmaster rereads its files when it gets to the signal, not when pg_reload_conf returns.
func waitReloaded(ctx context.Context, c *lab.Cluster, before time.Time) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := c.Connect(ctx)
		if err != nil {
			return err
		}
		var loaded time.Time
		err = conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&loaded)
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("read configuration load time: %w", err)
		}
		if loaded.After(before) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not reload its configuration within 10s")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for reload: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkApplied fails when a line of the configuration files has an error, or a line of file
// ("lab.conf" after configure, "postgresql.auto.conf" after ALTER SYSTEM) was not applied:
// pg_file_settings rereads the files, and a setting that waits for a restart or is overridden
// further on is not applied.
func checkApplied(ctx context.Context, c *lab.Cluster, file string) error {
	conn, err := c.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT name, setting, coalesce(error, 'not applied')
		FROM pg_file_settings WHERE error IS NOT NULL OR (sourcefile LIKE '%/' || $1 AND NOT applied)`, file)
	if err != nil {
		return fmt.Errorf("read pg_file_settings: %w", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var name, setting, why string
		if err := rows.Scan(&name, &setting, &why); err != nil {
			return fmt.Errorf("read pg_file_settings: %w", err)
		}
		bad = append(bad, fmt.Sprintf("%s=%s (%s)", name, setting, why))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read pg_file_settings: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("the server did not take %s", strings.Join(bad, ", "))
	}
	return nil
}

// apply puts a configuration in force: the PostgreSQL settings (base under cfg's) and the
// kernel knobs (the suite's originals unless cfg sets them).
func (r *runner) apply(ctx context.Context, c *lab.Cluster, base map[string]string, cfg Config) error {
	settings := maps.Clone(base)
	if settings == nil {
		settings = map[string]string{}
	}
	maps.Copy(settings, cfg.Settings)
	if err := r.kernel.set(cfg.Kernel); err != nil {
		return err
	}
	if err := configure(ctx, c, settings); err != nil {
		return fmt.Errorf("configure %q: %w", cfg.Name, err)
	}
	return nil
}
