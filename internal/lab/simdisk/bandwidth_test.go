package simdisk

import "testing"

func TestParseBandwidth(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "80MB", want: 80e6},
		{in: "80MB/s", want: 80e6},
		{in: "80mb", want: 80e6},
		{in: "80 MB", want: 80e6},
		{in: "80MiB", want: 80 << 20},
		{in: "1.5GB", want: 15e8},
		{in: "512kB", want: 512e3},
		{in: "4KiB", want: 4096},
		{in: "1000", want: 1000},
		{in: "1000B", want: 1000},
		{in: "", wantErr: true},
		{in: "MB", wantErr: true},
		{in: "80XB", wantErr: true},
		{in: "-5MB", wantErr: true},
		{in: "1e30GB", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseBandwidth(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseBandwidth(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("ParseBandwidth(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}
