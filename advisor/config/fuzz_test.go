package config

import (
	"testing"

	"github.com/spf13/pflag"
)

func newFlagSet() *pflag.FlagSet { return pflag.NewFlagSet("run", pflag.ContinueOnError) }

// FuzzConfigFile feeds the configuration file parser and Resolve arbitrary bytes: neither may
// panic, and whatever Resolve accepts is within the bounds of Limits. The seeds are the
// documented examples (docs/http.md) and the shapes that once slipped through: aliases, merge
// keys, NaN and infinities, zero and huge durations. Run it with
//
//	go test -run '^$' -fuzz '^FuzzConfigFile$' -fuzztime 60s ./advisor/config/
//
// Findings are kept in testdata/fuzz/FuzzConfigFile and run with the other tests (a mapping
// reached through an alias once skipped the unknown-key check).
func FuzzConfigFile(f *testing.F) {
	for _, seed := range []string{
		"",
		"interval: 15s\n",
		"interval: 0s\n",
		"interval: 1ns\nwait_events: {interval: 1ns}\n",
		"history: {window: 9223372036854775807ns}\n",
		"probe: {dir: /srv/probe, interval: 10m, burst: 1s}\n",
		"web:\n  listen_address: [\":9817\", \"[::1]:9817\"]\n  config_file: /etc/pgwal-advisor/web.yml\n",
		"web: {listen_address: \":9817\"}\n",
		"log: {level: debug}\n",
		"thresholds:\n  raise_after: 5m\n  probe_z: 2.5\n  wal_buffers_floor: 33554432\n  min_wait_samples: 40\n",
		"thresholds: {min_improvement: .nan, probe_z: .inf}\n",
		"thresholds: {completion_target: 1.5}\n",
		"thresholds: {wal_buffers_floor: 99999999999999999999}\n",
		"thresholds: {raise_after: null}\n",
		"thresholds: [1, 2]\n",
		"thresholds: 3\n",
		"wait_events: &a {interval: 1s}\nweb: *a\n",
		"probe: &p {dir: /x}\n<<: *p\n",
		"a: &a [*a]\n",
		"- 1\n- 2\n",
		"interval: [\n",
		"--- \n--- \ninterval: 1s\n",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		fc, err := Parse(b)
		if err != nil {
			return
		}
		var fl Flags
		fl.Register(newFlagSet())
		fl.LogLevel, fl.QueryTimeout = "info", 5e9
		cfg, err := Resolve(fl, fc, dir)
		if err != nil {
			return
		}
		if err := cfg.check(func(l Limit) string { return l.Key }); err != nil {
			t.Errorf("Resolve accepted a configuration out of bounds: %v\n%q", err, b)
		}
		if len(cfg.ListenAddresses) == 0 {
			t.Errorf("Resolve accepted no listen address\n%q", b)
		}
	})
}
