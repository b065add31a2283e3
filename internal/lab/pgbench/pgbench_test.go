package pgbench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseTPS(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64
		wantErr   bool
	}{
		{"15", "latency average = 5.3 ms\ninitial connection time = 2.1 ms\ntps = 187.420151 (without initial connection time)\n", 187.420151, false},
		{"13", "tps = 75.418729 (including connections establishing)\ntps = 75.9 (excluding connections establishing)\n", 75.9, false},
		{"none", "pgbench: error: connection refused\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTPS([]byte(tc.out))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ParseTPS = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseProgress(t *testing.T) {
	out := "pgbench (15.18)\nprogress: 1.0 s, 590.0 tps, lat 3.245 ms stddev 1.234, lag 0.512 ms, 0 failed\n" +
		"progress: 2.0 s, 26.0 tps, lat 512.0 ms stddev 80.1, lag 480.2 ms, 0 failed\n" +
		"progress: 3.0 s, 0.0 tps, lat 0.000 ms stddev 0.000, lag 0.000 ms, 0 failed\n"
	got, err := ParseProgress([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{590, 26, 0}; !slices.Equal(got, want) {
		t.Errorf("ParseProgress = %v, want %v", got, want)
	}
	if _, err := ParseProgress([]byte("pgbench: error: connection refused\n")); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("no progress lines: error %v, want one quoting the output", err)
	}
}

func TestReadLog(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "seed003-0")
	files := map[string]string{
		prefix + ".123":   "0 0 3100 0 1700000000 100 450\n1 0 16000000 0 1700000001 200 15000000\n",
		prefix + ".123.1": "8 0 2500 0 1700000000 300 12\n9 1 skipped 0 1700000000 400 5\n",
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	txns, err := ReadLog(prefix)
	if err != nil {
		t.Fatal(err)
	}
	lat := Latencies(txns)
	if len(lat) != 3 || slices.Max(lat) != 16e6 {
		t.Errorf("latencies = %v, want three with a 16 s maximum", lat)
	}
	if _, err := ReadLog(filepath.Join(dir, "absent")); err == nil {
		t.Errorf("no logs: want an error")
	}
	RemoveLogs(prefix)
	if left, _ := filepath.Glob(prefix + ".*"); len(left) != 0 {
		t.Errorf("RemoveLogs left %v", left)
	}
}

func TestParseLog(t *testing.T) {
	got, err := ParseLog(strings.NewReader("0 0 3100 0 1700000000 100 450\n1 1 skipped 0 1700000000 400 5\n2 5 16000000 0 1700000016 250000 15000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Txn{Done: 1700000000.0001, LatencyUS: 3100}) || got[1] != (Txn{Done: 1700000016.25, LatencyUS: 16e6}) {
		t.Errorf("ParseLog = %+v", got)
	}
	if _, err := ParseLog(strings.NewReader("0 0 x 0 1700000000 100\n")); err == nil {
		t.Error("a malformed line parsed")
	}
}
