package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"go.yaml.in/yaml/v3"

	"github.com/pgwal-advisor/pgwal-advisor/rules"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// parseFlags parses run's configuration flags as the command line would give them.
func parseFlags(t *testing.T, args ...string) Flags {
	t.Helper()
	var fl Flags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fl.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	fl.LogLevel, fl.QueryTimeout = "info", 5*time.Second
	fl.Changed = func(name string) bool { f := fs.Lookup(name); return f != nil && f.Changed }
	return fl
}

func settingsString(c Config) string {
	var b strings.Builder
	for _, s := range c.Settings() {
		b.WriteString(s.Key + "=" + s.Value + " ")
	}
	return b.String()
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.yml")
	writeFile(t, full, `
interval: 30s
wait_events: {interval: 2s}
history: {window: 2h}
probe: {dir: /srv/probe, interval: 10m, burst: 1s}
web:
  listen_address: [":9817", "[::1]:9817"]
  config_file: /etc/pgwal-advisor/web.yml
log: {level: debug}
thresholds:
  raise_after: 5m
  probe_z: 2.5
  wal_buffers_floor: 33554432
  min_wait_samples: 40
`)
	// Flags given on the command line win over the file.
	fl := parseFlags(t, "--interval", "5s", "--probe.burst", "3s")
	fc, err := Load(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Resolve(fl, fc, dir)
	if err != nil {
		t.Fatal(err)
	}
	th := rules.DefaultThresholds()
	th.RaiseAfter, th.ProbeZ, th.WALBuffersFloor, th.MinWaitSamples = 5*time.Minute, 2.5, 32<<20, 40
	want := Config{
		Interval: 5 * time.Second, WaitInterval: 2 * time.Second, HistoryWindow: 2 * time.Hour,
		ProbeDir: "/srv/probe", ProbeInterval: 10 * time.Minute, ProbeBurst: 3 * time.Second,
		ListenAddresses: []string{":9817", "[::1]:9817"}, WebConfigFile: "/etc/pgwal-advisor/web.yml",
		LogLevel: "debug", Thresholds: th,
	}
	if gs, ws := settingsString(got), settingsString(want); gs != ws {
		t.Errorf("resolved configuration:\n got %s\nwant %s", gs, ws)
	}

	errs := []struct {
		name, content, want string
	}{
		{"unknown top-level key", "intervall: 1s\n", `line 1: unknown key "intervall" (known keys: history, interval, log, probe, thresholds, wait_events, web)`},
		{"unknown nested key", "web:\n  listen_addres: x\n", `line 2: unknown key "web.listen_addres"`},
		{"unknown threshold", "thresholds:\n  raise: 1m\n", `unknown key "thresholds.raise"`},
		{"unknown key behind an alias", "x: &a {intervall: 1s}\n", `unknown key "x"`},
		{"unknown key in an aliased mapping", "wait_events: &a {interval: 1s}\nweb: *a\n", `unknown key "web.interval"`},
		{"number for a duration", "interval: 15\n", "cannot unmarshal"},
		{"not YAML", "interval: [\n", "config file"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.yml")
			writeFile(t, path, tc.content)
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load(%q): err = %v, want it to contain %q", tc.content, err, tc.want)
			}
		})
	}
}

// Every bound is enforced for the file and the flags alike, and the refusal names the
// setting as the operator gave it, the value and the bound.
func TestResolveBounds(t *testing.T) {
	cases := []struct {
		name string
		args []string
		file string
		want string // "" for accepted
	}{
		{"defaults", nil, "", ""},
		{"zero interval in the file", nil, "interval: 0s\n", "interval 0s: below the minimum 100ms (allowed: 100ms to 24h0m0s)"},
		{"zero interval on the command line", []string{"--interval", "0s"}, "", "--interval 0s: below the minimum 100ms"},
		{"command line wins and is named", []string{"--interval", "1ns"}, "interval: 1s\n", "--interval 1ns: below the minimum"},
		{"wait events every nanosecond", nil, "wait_events: {interval: 1ns}\n", "wait_events.interval 1ns: below the minimum 100ms"},
		{"wait events too rarely", []string{"--wait-events.interval", "2h"}, "", "--wait-events.interval 2h0m0s: above the maximum 1h0m0s"},
		{"short probe burst", nil, "probe: {burst: 10ms}\n", "probe.burst 10ms: below the minimum 100ms"},
		{"long history", nil, "history: {window: 800h}\n", "history.window 800h0m0s: above the maximum 168h0m0s"},
		{"probe interval of zero", []string{"--probe.interval", "0s"}, "", "--probe.interval 0s: below the minimum 1s"},
		{"ratio above one", nil, "thresholds: {min_improvement: 1.5}\n", "thresholds.min_improvement 1.5: above the maximum 1 (allowed: 0 to 1)"},
		{"negative ratio", nil, "thresholds: {contention_info_share: -0.1}\n", "thresholds.contention_info_share -0.1: below the minimum 0"},
		{"negative duration threshold", nil, "thresholds: {clear_after: -1m}\n", "thresholds.clear_after -1m0s: below the minimum 0s"},
		{"not a number", nil, "thresholds: {probe_z: .nan}\n", "thresholds.probe_z NaN: not a number"},
		{"infinite", nil, "thresholds: {writeback_flush_rise: .inf}\n", "thresholds.writeback_flush_rise +Inf: not a number"},
		{"floor above max", nil, "thresholds: {wal_buffers_floor: 33554432, wal_buffers_max: 16777216}\n", "thresholds.wal_buffers_floor 33554432 is above thresholds.wal_buffers_max"},
		{"zero threshold that means at once", nil, "thresholds: {raise_after: 0s}\n", ""},
		// The scheduler refuses bursts that would run into each other; before, probing was then
		// quietly off.
		{"probe burst longer than the interval", []string{"--probe.burst", "10m", "--probe.interval", "1m"}, "",
			"--probe.interval 1m0s is shorter than --probe.burst 10m0s"},
		{"probe burst longer than the interval in the file", nil, "probe: {burst: 10m, interval: 1m}\n",
			"probe.interval 1m0s is shorter than probe.burst 10m0s"},
		{"probe burst from the file, interval from the command line", []string{"--probe.interval", "1s"}, "probe: {burst: 2s}\n",
			"--probe.interval 1s is shorter than probe.burst 2s"},
		{"probe burst as long as the interval", []string{"--probe.burst", "1m", "--probe.interval", "1m"}, "", ""},
		{"the edges", []string{"--interval", "100ms"}, "history: {window: 1s}\nthresholds: {min_improvement: 1, completion_target: 0}\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc, err := Parse([]byte(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Resolve(parseFlags(t, tc.args...), fc, t.TempDir())
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err = %v, want it to contain %q (resolved interval %v)", err, tc.want, got.Interval)
			}
		})
	}
}

// Every command's flags are checked against the same table, each against its own row.
func TestCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		command string
		args    []string
		want    string
	}{
		{"collect", nil, ""},
		{"collect", []string{"--query-timeout", "0s"}, "--query-timeout 0s: below the minimum 100ms"},
		{"check", []string{"--query-timeout", "1h"}, "--query-timeout 1h0m0s: above the maximum 10m0s"},
		{"collect", []string{"--wait-events.interval", "1ns"}, "--wait-events.interval 1ns: below the minimum"},
		{"run", []string{"--apply.verify-window", "0s"}, "--apply.verify-window 0s: below the minimum 1s"},
		// collect's --interval 0 is one snapshot; check's and run's interval has a minimum.
		{"collect", []string{"--interval", "0s"}, ""},
		{"check", []string{"--interval", "0s"}, "--interval 0s: below the minimum 100ms"},
		{"run", []string{"--interval", "1ns"}, "--interval 1ns: below the minimum 100ms"},
		{"apply", []string{"--window", "0s"}, "--window 0s: below the minimum 1s"},
		{"check", []string{"--probe.budget", "0s"}, "--probe.budget 0s: below the minimum 100ms"},
		{"probe", []string{"--precision", "0"}, "--precision 0: below the minimum 0.001"},
		{"probe", []string{"--precision", "1.5"}, "--precision 1.5: above the maximum 0.5"},
		// A flag another command bounds is not this one's business.
		{"version", []string{"--window", "0s"}, ""},
	} {
		fs := pflag.NewFlagSet(tc.command, pflag.ContinueOnError)
		fs.Duration("query-timeout", 5*time.Second, "")
		fs.Duration("wait-events.interval", time.Second, "")
		fs.Duration("apply.verify-window", 5*time.Minute, "")
		fs.Duration("interval", 5*time.Second, "")
		fs.Duration("window", time.Minute, "")
		fs.Duration("probe.budget", 10*time.Second, "")
		fs.Float64("precision", 0.05, "")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		err := CheckFlags(tc.command, fs)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s %v: err = %v, want %q", tc.command, tc.args, err, tc.want)
		}
	}
}

// Every rule threshold and every duration of the configuration has a row in the table, every
// row names a setting that exists, and the defaults are within their bounds.
func TestLimitsCoverEverySetting(t *testing.T) {
	rows := map[string]Limit{}
	for _, l := range Limits() {
		id := l.Key
		if id == "" {
			id = "--" + l.Flag + " of " + strings.Join(l.Commands, ",")
		}
		if _, dup := rows[id]; dup {
			t.Errorf("two rows for %s", id)
		}
		rows[id] = l
		if l.Min > l.Max {
			t.Errorf("%s: minimum %v above maximum %v", id, l.Min, l.Max)
		}
		if l.Kind == Ratio && (l.Min < 0 || l.Max > 1) {
			t.Errorf("%s: a ratio's bounds must lie in [0, 1]", id)
		}
	}
	def := parseFlags(t)
	cfg, err := Resolve(def, File{}, t.TempDir())
	if err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	vals := cfg.values()
	for key := range thresholdFields() {
		if _, ok := rows["thresholds."+key]; !ok {
			t.Errorf("threshold %s has no row in Limits", key)
		}
	}
	for _, s := range cfg.Settings() {
		if _, isLimited := vals[s.Key]; isLimited {
			if _, ok := rows[s.Key]; !ok {
				t.Errorf("setting %s has no row in Limits", s.Key)
			}
		}
		if _, err := time.ParseDuration(s.Value); err == nil && !strings.HasPrefix(s.Key, "thresholds.") {
			if _, ok := rows[s.Key]; !ok {
				t.Errorf("duration %s has no row in Limits", s.Key)
			}
		}
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	(&Flags{}).Register(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Value.Type() != "duration" && f.Value.Type() != "float64" {
			return
		}
		if _, ok := LimitFor("run", f.Name); !ok {
			t.Errorf("flag --%s has no row in Limits", f.Name)
		}
	})
	for id, l := range rows {
		if _, ok := vals[id]; !ok && l.Key != "" {
			t.Errorf("row %s names no setting of the configuration", id)
		}
		if l.Key == "" && len(l.Commands) == 0 {
			t.Errorf("row %s bounds a flag of no command", id)
		}
	}
}

// Every threshold has a distinct key, and the keys read like docs/rules.md's names.
func TestThresholdKeys(t *testing.T) {
	keys := thresholdFields()
	for name, want := range map[string]string{
		"RaiseAfter": "raise_after", "WALBuffersFloor": "wal_buffers_floor", "ProbeZ": "probe_z",
		"WritebackWALShare": "writeback_wal_share",
	} {
		if got := snakeCase(name); got != want {
			t.Errorf("snakeCase(%s) = %s, want %s", name, got, want)
		}
		if _, ok := keys[want]; !ok {
			t.Errorf("no threshold key %s", want)
		}
	}
	seen := map[int]bool{}
	for _, i := range keys {
		seen[i] = true
	}
	if n := len(thresholdFields()); len(seen) != n {
		t.Errorf("%d keys for %d fields", n, len(seen))
	}
}

func TestDefaultProbeDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	if got := DefaultProbeDir(missing); got != "" {
		t.Errorf("without a state directory: %q, want no probing", got)
	}
	state := t.TempDir()
	want := filepath.Join(state, DefaultProbeSubdir)
	if got := DefaultProbeDir(state); got != want {
		t.Errorf("with a state directory: %q, want %q (created)", got, want)
	}
	if st, err := os.Stat(want); err != nil || !st.IsDir() {
		t.Errorf("probe directory not created: %v", err)
	}
	if got := DefaultProbeDir(state); got != want {
		t.Errorf("with the probe directory: %q, want %q", got, want)
	}
}

func TestDiff(t *testing.T) {
	old, err := Resolve(parseFlags(t), File{}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	next := old
	next.Interval, next.LogLevel, next.WebConfigFile = time.Minute, "debug", "/etc/web.yml"
	next.Thresholds.RaiseAfter = 10 * time.Second
	var got []string
	for _, c := range Diff(old, next) {
		got = append(got, c.Key+":"+c.Old+"->"+c.Value+"@"+c.When.String())
	}
	want := []string{
		"interval:15s->1m0s@" + Next.String(),
		`web.config_file:""->"/etc/web.yml"@` + Restart.String(),
		"log.level:info->debug@now",
		"thresholds.raise_after:2m0s->10s@" + Next.String(),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Diff:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := Diff(old, old); len(d) != 0 {
		t.Errorf("Diff of a configuration with itself: %v", d)
	}
}

// TestRemovedThreshold: a file that still sets a removed threshold is told what replaced it.
func TestRemovedThreshold(t *testing.T) {
	th := rules.DefaultThresholds()
	var node yaml.Node
	if err := yaml.Unmarshal([]byte("0.2"), &node); err != nil {
		t.Fatal(err)
	}
	err := applyThresholds(&th, map[string]yaml.Node{"fpi_idle_min": *node.Content[0]})
	if err == nil || !strings.Contains(err.Error(), "was removed") || !strings.Contains(err.Error(), "fpi_idle_cpu_share") {
		t.Errorf("fpi_idle_min: %v, want it named removed with its replacement", err)
	}
}
