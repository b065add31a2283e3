package footprint

import (
	"os"
	"testing"
)

// wrkReport is wrk --latency's report of a run against /metrics.
const wrkReport = `Running 10s test @ http://127.0.0.1:9817/metrics
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.31ms    4.02ms  61.20ms   80.12%
    Req/Sec     2.05k   210.33     2.50k    70.00%
  Latency Distribution
     50%   11.80ms
     75%   13.90ms
     90%   16.70ms
     99%   27.45ms
  40812 requests in 10.01s, 1.02GB read
  Non-2xx or 3xx responses: 3
Requests/sec:   4077.12
Transfer/sec:    104.32MB
`

func TestParseWrk(t *testing.T) {
	p99, rps, non2xx := parseWrk(wrkReport)
	if p99 != "27.45ms" || rps != 4077.12 || non2xx != "3" {
		t.Errorf("parseWrk = %q, %v, %q; want 27.45ms, 4077.12, 3", p99, rps, non2xx)
	}
	if p99, rps, non2xx := parseWrk("wrk: connection refused"); p99 != "?" || rps != 0 || non2xx != "0" {
		t.Errorf("parseWrk of no report = %q, %v, %q; want ?, 0, 0", p99, rps, non2xx)
	}
}

// TestCPUSecondsSelf reads this test process's own /proc/<pid>/stat, whose command name may
// hold spaces and parentheses.
func TestCPUSecondsSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip(err)
	}
	s, err := cpuSeconds(os.Getpid())
	if err != nil || s < 0 {
		t.Errorf("cpuSeconds(self) = %v, %v", s, err)
	}
	if m, err := readStatus(os.Getpid()); err != nil || m.rss <= 0 || m.rss < m.anon {
		t.Errorf("readStatus(self) = %+v, %v", m, err)
	}
}
