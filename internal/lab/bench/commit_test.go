package bench

import (
	"math"
	"strings"
	"testing"
)

func TestCommitGainAndVerdict(t *testing.T) {
	d := CommitDevice{LatencyMS: 4, Clients: []int{16, 64, 100}, Configs: []CommitConfig{
		{Name: "commit_delay=0", TPS: [][]float64{{100, 110, 105}, {500, 520, 510}, {700, 720}}},
		// +20% with ranges apart; an overlap; too few runs to say.
		{Name: "delay 2000 us, siblings 5", CommitDelay: 2000, TPS: [][]float64{{120, 130, 126}, {505, 530, 480}, {900, 950}}},
		// A loss beyond the spread.
		{Name: "delay 500 us, siblings 20", CommitDelay: 500, TPS: [][]float64{{80, 85, 90}, {400, 410, 420}, {500, 510, 520}}},
	}}
	for _, tc := range []struct {
		cfg, clients int
		gain         float64
		beyond       bool
	}{
		{1, 0, 126.0/105 - 1, true},
		{1, 1, 505.0/510 - 1, false},
		{1, 2, 925.0/710 - 1, false}, // two baseline runs: not enough to call it
		{2, 0, 85.0/105 - 1, true},
	} {
		g := d.gain(tc.cfg, tc.clients)
		if math.Abs(g.gain-tc.gain) > 1e-9 || g.beyond != tc.beyond {
			t.Errorf("gain(%d, %d) = %+v, want gain %v beyond %v", tc.cfg, tc.clients, g, tc.gain, tc.beyond)
		}
	}
	v := commitVerdict(&CommitGrid{Devices: []CommitDevice{d}})
	for _, want := range []string{"Gains beyond the spread: 4 ms, 16 clients, delay 2000 us, siblings 5: +20%", "losses beyond the spread: 4 ms, 16 clients, delay 500 us, siblings 20: -19%"} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict %q lacks %q", v, want)
		}
	}
	if v := commitVerdict(&CommitGrid{}); !strings.Contains(v, "No grid point gained beyond the spread anywhere") {
		t.Errorf("empty grid verdict %q", v)
	}
}
