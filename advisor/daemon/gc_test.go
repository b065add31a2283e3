package daemon

import (
	"runtime/debug"
	"testing"
)

// The daemon's collector target is IdleGCPercent, unless the operator set GOGC.
func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	for _, tc := range []struct {
		name    string
		gogc    string
		wantSet bool
		want    int
	}{
		{"no GOGC", "", true, IdleGCPercent},
		{"GOGC given", "200", false, 100},
		{"GOGC off", "off", false, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			env := map[string]string{"GOGC": tc.gogc}
			set := TuneGC(func(k string) string { return env[k] })
			if got := debug.SetGCPercent(100); set != tc.wantSet || got != tc.want {
				t.Errorf("TuneGC with GOGC=%q: set %v, percent %d; want %v, %d", tc.gogc, set, got, tc.wantSet, tc.want)
			}
		})
	}
}
