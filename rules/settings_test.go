package rules

import "testing"

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
