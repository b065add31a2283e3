package collector

import (
	"strings"
	"testing"
)

func TestUnitBytes(t *testing.T) {
	tests := []struct {
		in     string
		want   int64
		wantOK bool
	}{
		{"B", 1, true},
		{"kB", 1 << 10, true},
		{"8kB", 8 << 10, true},
		{"16MB", 16 << 20, true},
		{"GB", 1 << 30, true},
		{"TB", 1 << 40, true},
		{"", 0, false},
		{"8", 0, false},
		{"ms", 0, false},
		{"kb", 0, false},
		// Overflow is not a unit, and neither is a unit of zero bytes.
		{"0kB", 0, false},
		{"8388607TB", 8388607 << 40, true},
		{"8388608TB", 0, false},
		{"9223372036854775807MB", 0, false},
		{"99999999999999999999kB", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := UnitBytes(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("UnitBytes(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestUnitSeconds(t *testing.T) {
	tests := []struct {
		in     string
		want   float64
		wantOK bool
	}{
		{"us", 1e-6, true},
		{"ms", 1e-3, true},
		{"s", 1, true},
		{"min", 60, true},
		{"h", 3600, true},
		{"d", 86400, true},
		{"", 0, false},
		{"8kB", 0, false},
		{"10s", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := UnitSeconds(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("UnitSeconds(%q) = %g, %v; want %g, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseMemory(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"64kB", 64 << 10, false},
		{"4MB", 4 << 20, false},
		{"1GB", 1 << 30, false},
		{"2TB", 2 << 40, false},
		{"512B", 512, false},
		{"8192", 8192, false},
		{"-1", -1, false},
		{"4 MB", 4 << 20, false},
		{" 16MB ", 16 << 20, false},
		{"4XB", 0, true},
		{"4mb", 0, true},
		{"1.5MB", 0, true},
		{"", 0, true},
		{"MB", 0, true},
		// Every unit's overflow is an error, never a wrapped value: these feed apply's bounds.
		{"9223372036854775807TB", 0, true},
		{"16777217TB", 0, true},
		{"8388608TB", 0, true},
		{"8388607TB", 8388607 << 40, false},
		{"-8388608TB", -8388608 << 40, false},
		{"-8388609TB", 0, true},
		{"8796093022208GB", 0, true},
		{"9007199254740992kB", 0, true},
		{"9007199254740991kB", 9007199254740991 << 10, false},
		{"9223372036854775807B", 9223372036854775807, false},
		{"9223372036854775807", 9223372036854775807, false},
		{"9223372036854775808", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMemory(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseMemory(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseSeconds(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"200ms", 0.2, false},
		{"30s", 30, false},
		{"5min", 300, false},
		{"1h", 3600, false},
		{"1d", 86400, false},
		{"2us", 2e-6, false},
		{"1.5s", 1.5, false},
		{"30", 30, false},
		{"-1", -1, false},
		{"5 min", 300, false},
		{"5m", 0, true},
		{"", 0, true},
		{"s", 0, true},
		// A finite number of days whose seconds are not finite.
		{"1" + strings.Repeat("0", 305) + "d", 0, true},
		{"1" + strings.Repeat("0", 400) + "s", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSeconds(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseSeconds(%q) = %g, %v; want %g, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestFormatMemory(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{512, "512B"},
		{1536, "1536B"},
		{64 << 10, "64kB"},
		{16 << 20, "16MB"},
		{16384 << 10, "16MB"},
		{3 << 30, "3GB"},
		{1 << 40, "1TB"},
		{-(16 << 20), "-16MB"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatMemory(tt.in); got != tt.want {
				t.Errorf("FormatMemory(%d) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0B"}, {512, "512B"}, {1536, "1.5kB"}, {16 << 20, "16MB"}, {93.4 * (1 << 20), "93MB"},
		{6.44 * (1 << 30), "6.4GB"}, {3 << 40, "3TB"}, {2048 << 40, "2048TB"}, {-1536, "-1.5kB"},
	} {
		if got := FormatBytes(tc.in); got != tc.want {
			t.Errorf("FormatBytes(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
