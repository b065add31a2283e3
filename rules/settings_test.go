package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

// The rules read a setting's raw value when the collector left it unnormalized, which it does for
// values no server writes: those must not come back as a wrapped size or a NaN that evidence
// cannot encode.
func TestSettingsUntrustedRaw(t *testing.T) {
	s := settings{
		"huge":      {Raw: "9223372036854775807", Unit: "MB"},
		"fits":      {Raw: "8388607", Unit: "TB"},
		"inf_time":  {Raw: "1e306", Unit: "d"},
		"time":      {Raw: "300", Unit: "s"},
		"nan":       {Raw: "NaN"},
		"inf":       {Raw: "+Inf"},
		"target":    {Raw: "0.9"},
		"by_show":   {Value: "5"},
		"negative":  {Raw: "-1", Unit: "kB"},
		"zero_unit": {Raw: "1", Unit: "0kB"},
	}
	for _, tt := range []struct {
		name   string
		want   int64
		wantOK bool
	}{{"huge", 0, false}, {"fits", 8388607 << 40, true}, {"negative", 0, false}, {"zero_unit", 0, false}} {
		if got, ok := s.bytes(tt.name); got != tt.want || ok != tt.wantOK {
			t.Errorf("bytes(%s) = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
	for _, tt := range []struct {
		name   string
		want   float64
		wantOK bool
	}{{"inf_time", 0, false}, {"time", 300, true}} {
		if got, ok := s.seconds(tt.name); ok != tt.wantOK || ok && got != tt.want {
			t.Errorf("seconds(%s) = %g, %v; want %g, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
	for _, tt := range []struct {
		name   string
		want   float64
		wantOK bool
	}{{"nan", 0, false}, {"inf", 0, false}, {"target", 0.9, true}, {"by_show", 5, true}} {
		if got, ok := s.number(tt.name); ok != tt.wantOK || ok && got != tt.want {
			t.Errorf("number(%s) = %g, %v; want %g, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestMissingPartSaidOnce checks that the rules point at a failed part instead of repeating its
// error: against an unreachable server every rule that needs PostgreSQL lacks it, and the
// connection error (long, the same for all) belongs in the snapshot's part, shown once.
func TestMissingPartSaidOnce(t *testing.T) {
	h := NewHistory(2)
	h.Add(collector.Snapshot{Time: time.Unix(1000, 0), Parts: []collector.Part{
		{Name: collector.PartPostgres, Error: "connect to PostgreSQL at host=h port=1: connection refused", Status: collector.TargetUnreachable},
		{Name: collector.PartWALStorage, Error: "WAL directory unknown: set --wal-dir"},
	}})
	ev := Evaluate(All(), Input{History: h, Now: time.Unix(1000, 0), Config: DefaultThresholds()}, nil)
	if len(ev.NotEnoughData) == 0 {
		t.Fatal("no rule lacked data against an unreachable server")
	}
	pointed := 0
	for rule, why := range ev.NotEnoughData {
		if strings.Contains(why, "connection refused") || strings.Contains(why, "set --wal-dir") {
			t.Errorf("%s repeats the part's error: %q", rule, why)
		}
		if strings.Contains(why, `"postgres" part`) && strings.Contains(why, "unreachable") {
			pointed++
		}
	}
	if pointed < 5 {
		t.Errorf("%d rules point at the failed postgres part, want most of them: %v", pointed, ev.NotEnoughData)
	}
}
