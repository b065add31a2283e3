// Package pgbench runs pgbench against a lab cluster and reads what it prints (tps, -P 1's
// progress) and what it logs (-l, one line per transaction).
package pgbench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// Output is what one pgbench run printed.
type Output struct {
	Stdout, Stderr []byte
}

// Run runs pgbench against the cluster and returns its output; the error carries the last
// lines of it.
func Run(ctx context.Context, c *lab.Cluster, args ...string) (Output, error) {
	var stdout, stderr bytes.Buffer
	cmd := c.Command(ctx, "pgbench", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if err != nil {
		if ctx.Err() != nil {
			return out, fmt.Errorf("pgbench: %w", ctx.Err())
		}
		return out, fmt.Errorf("pgbench %s: %w: %s", strings.Join(args, " "), err, tail(append(stdout.Bytes(), stderr.Bytes()...), 4))
	}
	return out, nil
}

// ParseTPS reads the tps pgbench reports without connection time (PostgreSQL 14+ says
// "without initial connection time", older versions "excluding connections establishing").
func ParseTPS(out []byte) (float64, error) {
	m := regexp.MustCompile(`(?m)^tps = ([0-9.]+) \((?:without|excluding)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in pgbench's output: %s", tail(out, 4))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// ParseProgress reads pgbench -P 1's progress lines ("progress: 12.0 s, 590.0 tps, lat ...")
// into transactions per second, one entry per reported second. Output without one is an
// error that quotes its last lines.
func ParseProgress(out []byte) ([]float64, error) {
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
	if len(tps) == 0 {
		return nil, fmt.Errorf("no progress lines in pgbench's output: %s", tail(out, 4))
	}
	return tps, nil
}

// Txn is one transaction of pgbench's log: when it completed and its latency.
type Txn struct {
	Done      float64 // Unix seconds
	LatencyUS float64
}

// Latencies returns the transactions' latencies in microseconds.
func Latencies(txns []Txn) []float64 {
	out := make([]float64, len(txns))
	for i, t := range txns {
		out[i] = t.LatencyUS
	}
	return out
}

// ReadLog reads pgbench's per-transaction logs (-l, one file per thread: prefix.PID and
// prefix.PID.N). Each line is "client_id transaction_no time script_no time_epoch time_us
// [schedule_lag]"; under --rate, time is counted from the transaction's scheduled start, so a
// stall counts against every transaction queued behind it, as a user waiting for an answer sees
// it. Skipped and failed transactions are left out.
func ReadLog(prefix string) ([]Txn, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, fmt.Errorf("find pgbench logs: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no pgbench logs at %s.*", prefix)
	}
	var out []Txn
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, fmt.Errorf("read pgbench log: %w", err)
		}
		t, err := ParseLog(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("read pgbench log %s: %w", f, err)
		}
		out = append(out, t...)
	}
	return out, nil
}

// ParseLog reads one pgbench -l log file (ReadLog describes it).
func ParseLog(r io.Reader) ([]Txn, error) {
	var out []Txn
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[2] == "skipped" || f[2] == "failed" {
			continue
		}
		lat, err1 := strconv.ParseFloat(f[2], 64)
		sec, err2 := strconv.ParseInt(f[4], 10, 64)
		us, err3 := strconv.ParseInt(f[5], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out = append(out, Txn{Done: float64(sec) + float64(us)/1e6, LatencyUS: lat})
	}
	return out, sc.Err()
}

// RemoveLogs removes the logs of a run with -l --log-prefix prefix.
func RemoveLogs(prefix string) {
	files, _ := filepath.Glob(prefix + ".*")
	for _, f := range files {
		_ = os.Remove(f)
	}
}

func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
