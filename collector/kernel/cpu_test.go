package kernel

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgwal-advisor/pgwal-advisor/collector"
)

func TestParseStat(t *testing.T) {
	boot := time.Unix(1796426823, 0).UTC()
	tests := []struct {
		name    string
		text    string
		want    collector.CPU
		wantErr string
	}{
		{
			name: "two CPUs, every column",
			text: "cpu  246368 16 97699 379276 10819 0 3609 141 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1 2 3 4 5 6 7 8 0 0\nintr 1 2\nbtime 1796426823\n",
			want: collector.CPU{CPUs: 2, TotalSeconds: (246368 + 16 + 97699 + 379276 + 10819 + 3609 + 141) / 100.0,
				IdleSeconds: (379276 + 10819) / 100.0, BootTime: boot},
		},
		{
			// Guest time is already in user: counting it again would make the host look busier.
			name: "guest columns are not added",
			text: "cpu 100 0 0 100 0 0 0 0 5000 5000\ncpu0 100 0 0 100 0 0 0 0 5000 5000\nbtime 1796426823\n",
			want: collector.CPU{CPUs: 1, TotalSeconds: 2, IdleSeconds: 1, BootTime: boot},
		},
		{
			name: "a 2.6.9 kernel's four columns",
			text: "cpu 100 0 100 200\ncpu0 100 0 100 200\nbtime 1796426823\n",
			want: collector.CPU{CPUs: 1, TotalSeconds: 4, IdleSeconds: 2, BootTime: boot},
		},
		{name: "negative ticks", text: "cpu 1 2 3 -4\ncpu0 1 2 3 4\nbtime 1796426823\n", wantErr: `column 4 "-4"`},
		{name: "too few columns", text: "cpu 1 2 3\ncpu0 1 2 3\nbtime 1796426823\n", wantErr: "3 columns"},
		{name: "no aggregate line", text: "cpu0 1 2 3 4\nbtime 1796426823\n", wantErr: `no aggregate "cpu" line`},
		{name: "two aggregate lines", text: "cpu 1 2 3 4\ncpu 1 2 3 4\ncpu0 1 2 3 4\nbtime 1796426823\n", wantErr: "two aggregate"},
		{name: "no per-CPU line", text: "cpu 1 2 3 4\nbtime 1796426823\n", wantErr: "no per-CPU"},
		{name: "no btime", text: "cpu 1 2 3 4\ncpu0 1 2 3 4\n", wantErr: "no btime"},
		{name: "btime out of range", text: "cpu 1 2 3 4\ncpu0 1 2 3 4\nbtime 99999999999999999\n", wantErr: "btime"},
		{name: "not a stat file", text: "MemTotal: 1 kB\n", wantErr: `no aggregate "cpu" line`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseStat() = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseStat() error = %v", err)
			}
			if got.CPUs != tt.want.CPUs || math.Abs(got.TotalSeconds-tt.want.TotalSeconds) > 1e-6 ||
				math.Abs(got.IdleSeconds-tt.want.IdleSeconds) > 1e-6 || !got.BootTime.Equal(tt.want.BootTime) {
				t.Errorf("parseStat()\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestCollectCPU: a root with a stat file fills Kernel.CPU; one without leaves it nil; a broken
// one fails the collection with the file's path and what is wrong in it.
func TestCollectCPU(t *testing.T) {
	got, err := New(filepath.Join("testdata", "cpu")).Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU == nil || got.CPU.CPUs != 2 || math.Abs(got.CPU.IdleSeconds-(379276+10819)/100.0) > 1e-6 {
		t.Errorf("CPU = %+v, want the two CPUs of testdata/cpu/stat", got.CPU)
	}
	got, err = New(filepath.Join("testdata", "ratios")).Collect(context.Background())
	if err != nil || got.CPU != nil {
		t.Errorf("without a stat file: CPU = %+v, %v; want nil, no error", got.CPU, err)
	}
	_, err = New(filepath.Join("testdata", "bad-stat")).Collect(context.Background())
	if err == nil || !strings.Contains(err.Error(), "testdata/bad-stat/stat") || !strings.Contains(err.Error(), `"-3"`) {
		t.Errorf("bad stat: error = %v, want the path and the bad column", err)
	}
}

// FuzzParseStat: whatever the file, an accepted reading has at least one CPU, finite
// non-negative times and no more idle than total time.
func FuzzParseStat(f *testing.F) {
	for _, s := range []string{
		"cpu  246368 16 97699 379276 10819 0 3609 141 0 0\ncpu0 1 2 3 4\nbtime 1796426823\n",
		"cpu 1 2 3 4\ncpu0 1 2 3 4\nbtime 1\n",
		"cpu 18446744073709551615 18446744073709551615 1 18446744073709551615 18446744073709551615\ncpu0 1 2 3 4\nbtime 5\n",
		"cpu 1 2 3\n", "", "btime x\n", "cpu0\ncpu\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		cpu, err := parseStat(text)
		if err != nil {
			return
		}
		if cpu.CPUs < 1 || cpu.TotalSeconds < 0 || cpu.IdleSeconds < 0 || cpu.IdleSeconds > cpu.TotalSeconds ||
			math.IsInf(cpu.TotalSeconds, 0) || math.IsNaN(cpu.TotalSeconds) || cpu.BootTime.Unix() <= 0 {
			t.Fatalf("parseStat(%q) = %+v", text, cpu)
		}
	})
}
