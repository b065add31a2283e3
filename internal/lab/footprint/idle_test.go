package footprint

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// status is the memory part of a /proc/<pid>/status (Linux 6.x).
const status = `Name:	pgwal-advisor
VmPeak:	 1267432 kB
VmHWM:	   22900 kB
VmRSS:	   21400 kB
RssAnon:	    5120 kB
RssFile:	   16280 kB
RssShmem:	       0 kB
Threads:	8
`

func TestParseStatus(t *testing.T) {
	got, err := parseStatus(strings.NewReader(status))
	want := memSample{rss: 21400 * 1024, anon: 5120 * 1024, file: 16280 * 1024, hwm: 22900 * 1024}
	if err != nil || got != want {
		t.Errorf("parseStatus = %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct{ name, text string }{
		{"no RssFile (a kernel before 4.5)", strings.Replace(status, "RssFile:", "Rss_File:", 1)},
		{"a bad number", strings.Replace(status, "21400 kB", "21,400 kB", 1)},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := parseStatus(strings.NewReader(tc.text)); err == nil {
				t.Errorf("parseStatus = %+v, nil; want an error", m)
			}
		})
	}
}

// The table gives every side the median and range of its rounds, in MB.
func TestPrintIdleTable(t *testing.T) {
	sides := []*idleSide{
		{name: "pgwal-advisor", runs: []memSample{
			{rss: 21.4e6, anon: 5.1e6, file: 16.3e6, hwm: 22.7e6, cpu: 0.25},
			{rss: 22.0e6, anon: 5.6e6, file: 16.4e6, hwm: 22.6e6, cpu: 0.27},
			{rss: 21.3e6, anon: 4.9e6, file: 16.4e6, hwm: 22.7e6, cpu: 0.25},
		}},
		{name: "postgres_exporter 0.11.1", runs: []memSample{{rss: 17.5e6, anon: 7e6, file: 10.5e6, hwm: 19e6, cpu: 0.8}}},
	}
	var b bytes.Buffer
	printIdleTable(&b, sides)
	want := `| side | VmRSS MB | RssAnon MB | RssFile MB | VmHWM MB | CPU % of one core |
|---|---|---|---|---|---|
| pgwal-advisor | 21.4 (21.3-22.0) | 5.1 (4.9-5.6) | 16.4 (16.3-16.4) | 22.7 (22.6-22.7) | 0.25 (0.25-0.27) |
| postgres_exporter 0.11.1 | 17.5 (17.5-17.5) | 7.0 (7.0-7.0) | 10.5 (10.5-10.5) | 19.0 (19.0-19.0) | 0.80 (0.80-0.80) |
`
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// fakeServerEnv, when set to an address, makes this test binary a stand-in for a side: it
// serves /metrics there until it is killed; with fakeFailEnv set, it answers 500 after the
// first request (the readiness check).
const (
	fakeServerEnv = "PGWAL_FOOTPRINT_FAKE_SERVER"
	fakeFailEnv   = "PGWAL_FOOTPRINT_FAKE_FAIL"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(fakeServerEnv); addr != "" {
		var served atomic.Int64
		http.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			if served.Add(1) > 1 && os.Getenv(fakeFailEnv) != "" {
				http.Error(w, "broken", http.StatusInternalServerError)
				return
			}
			fmt.Fprintln(w, "up 1")
		})
		fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, nil))
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func fakeSide(name string, fail bool) *idleSide {
	return &idleSide{name: name, command: func(ctx context.Context, addr string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fakeServerEnv+"="+addr)
		if fail {
			cmd.Env = append(cmd.Env, fakeFailEnv+"=1")
		}
		return cmd
	}}
}

// A round starts every side, scrapes it through the window and reads its memory; a side whose
// scrapes fail ends the round with an error that names it.
func TestIdleRound(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip(err)
	}
	o := IdleOptions{Window: time.Second, Scrape: 100 * time.Millisecond}
	samples, err := idleRound(t.Context(), o, []*idleSide{fakeSide("a", false), fakeSide("b", false)})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range samples {
		if m.rss <= 0 || m.anon <= 0 || m.file <= 0 || m.hwm < m.rss {
			t.Errorf("side %d: %+v; want every figure read", i, m)
		}
	}
	_, err = idleRound(t.Context(), o, []*idleSide{fakeSide("a", false), fakeSide("broken", true)})
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("a side answering 500: %v; want an error naming it", err)
	}
}
