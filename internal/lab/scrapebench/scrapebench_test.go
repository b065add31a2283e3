package scrapebench

import (
	"testing"
	"time"
)

func TestWrkDuration(t *testing.T) {
	report := "  Latency Distribution\n     50%  812.00us\n     75%    1.20ms\n     90%    2.50s\n     99%    1.50m\n"
	for _, tc := range []struct {
		pct  string
		want time.Duration
	}{
		{"50%", 812 * time.Microsecond},
		{"90%", 2500 * time.Millisecond},
		{"99%", 90 * time.Second},
	} {
		got, err := wrkDuration(report, tc.pct)
		if err != nil || got != tc.want {
			t.Errorf("wrkDuration(%s) = %v, %v; want %v", tc.pct, got, err, tc.want)
		}
	}
	if _, err := wrkDuration("no distribution", "99%"); err == nil {
		t.Error("a report without the percentile parsed")
	}
}

func TestSpread(t *testing.T) {
	if got := spread([]float64{0.003, 0.001, 0.002, 1.5}, ms); got != "2.5 ms (1.0 ms-1.50 s)" {
		t.Errorf("spread = %q", got)
	}
}
