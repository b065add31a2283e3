package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// pgbenchOut is what one pgbench run printed.
type pgbenchOut struct {
	stdout, stderr []byte
}

// runPgbench runs pgbench against the cluster and returns its output; the error carries the
// last lines of it.
func runPgbench(ctx context.Context, c *lab.Cluster, args ...string) (pgbenchOut, error) {
	var stdout, stderr bytes.Buffer
	cmd := c.Command(ctx, "pgbench", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := pgbenchOut{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	if err != nil {
		if ctx.Err() != nil {
			return out, fmt.Errorf("pgbench: %w", ctx.Err())
		}
		return out, fmt.Errorf("pgbench %s: %w: %s", strings.Join(args, " "), err, tail(append(stdout.Bytes(), stderr.Bytes()...), 4))
	}
	return out, nil
}

// parseTPS reads the tps pgbench reports without connection time (PostgreSQL 14+ says
// "without initial connection time", older versions "excluding connections establishing").
func parseTPS(out []byte) (float64, error) {
	m := regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((?:without|excluding)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench's output: %s", tail(out, 4))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// parseProgress reads pgbench -P 1's progress lines ("progress: 12.0 s, 590.0 tps, lat ...")
// into transactions per second, one entry per reported second.
func parseProgress(out []byte) []float64 {
	re := regexp.MustCompile(`^progress: ([0-9.]+) s, ([0-9.]+) tps`)
	var tps []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		tps = append(tps, v)
	}
	return tps
}

// readLatencies reads pgbench's per-transaction logs (-l, one file per thread: prefix.PID and
// prefix.PID.N) and returns the latencies in microseconds. Each line is "client_id
// transaction_no time script_no time_epoch time_us [schedule_lag]"; under --rate, time is
// counted from the transaction's scheduled start, so a stall counts against every transaction
// queued behind it, as a user waiting for an answer sees it.
func readLatencies(prefix string) ([]float64, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, fmt.Errorf("find pgbench logs: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no pgbench logs at %s.*", prefix)
	}
	var lat []float64
	for _, f := range files {
		if err := func() error {
			fh, err := os.Open(f)
			if err != nil {
				return fmt.Errorf("read pgbench log: %w", err)
			}
			defer fh.Close()
			l, err := parseLatencies(fh)
			if err != nil {
				return fmt.Errorf("read pgbench log %s: %w", f, err)
			}
			lat = append(lat, l...)
			return nil
		}(); err != nil {
			return nil, err
		}
	}
	return lat, nil
}

func parseLatencies(r io.Reader) ([]float64, error) {
	var lat []float64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			continue
		}
		if f[2] == "skipped" || f[2] == "failed" {
			continue
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		lat = append(lat, v)
	}
	return lat, sc.Err()
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of xs (0 for none).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(float64(len(s))*p/100+0.999999999) - 1
	rank = min(max(rank, 0), len(s)-1)
	return s[rank]
}

func minOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	var m float64
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
