package benchprobe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// pgFigure is one line of pg_test_fsync's output: a method in one of the two sections the probe
// reproduces.
type pgFigure struct {
	Name          string  `json:"name"`
	WritesPerSync int     `json:"writes_per_sync"`
	Available     bool    `json:"available"`
	OpsPerSec     float64 `json:"ops_per_sec,omitempty"`
	UsecsPerOp    float64 `json:"usecs_per_op,omitempty"`
}

// pgRun is one pg_test_fsync run.
type pgRun struct {
	Figures []pgFigure `json:"figures"`
	// WallSeconds is the whole run, as an operator pays it (all five sections and the file's
	// creation); SectionsSeconds only the two sections compared with the probe (one and two
	// 8kB writes per sync), from the output's timing.
	WallSeconds     float64 `json:"wall_seconds"`
	SectionsSeconds float64 `json:"sections_seconds"`
	// Output is what pg_test_fsync printed, for the record.
	Output []string `json:"output"`
}

// figure returns the figure for a method and pattern.
func (r pgRun) figure(name string, writesPerSync int) (pgFigure, bool) {
	for _, f := range r.Figures {
		if f.Name == name && f.WritesPerSync == writesPerSync {
			return f, true
		}
	}
	return pgFigure{}, false
}

// stampedLine is a line of output and when it arrived.
type stampedLine struct {
	at   time.Time
	text string
}

// runPGTestFsync runs pg_test_fsync on a file in dir for secs seconds per test. On cancellation
// it is interrupted, and removes its file itself (it does on SIGINT).
func runPGTestFsync(ctx context.Context, bin, dir string, secs int) (pgRun, error) {
	cmd := exec.CommandContext(ctx, bin, "-f", filepath.Join(dir, "pg_test_fsync.out"), "-s", strconv.Itoa(secs))
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return pgRun{}, fmt.Errorf("pg_test_fsync: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return pgRun{}, fmt.Errorf("start pg_test_fsync: %w", err)
	}
	// pg_test_fsync flushes its output as each test starts, so a line's arrival dates it.
	var lines []stampedLine
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		lines = append(lines, stampedLine{at: time.Now(), text: sc.Text()})
	}
	readErr := sc.Err()
	waitErr := cmd.Wait()
	wall := time.Since(start)
	if err := ctx.Err(); err != nil {
		return pgRun{}, err
	}
	if waitErr != nil {
		return pgRun{}, fmt.Errorf("pg_test_fsync in %s: %s: %w", dir, strings.TrimSpace(stderr.String()), waitErr)
	}
	if readErr != nil {
		return pgRun{}, fmt.Errorf("read pg_test_fsync output: %w", readErr)
	}
	run, err := parsePGTestFsync(lines)
	if err != nil {
		return pgRun{}, err
	}
	run.WallSeconds = wall.Seconds()
	for _, l := range lines {
		run.Output = append(run.Output, l.text)
	}
	return run, nil
}

var (
	// "        open_datasync                      6913.682 ops/sec     145 usecs/op"
	figureLine = regexp.MustCompile(`^\s+(\S+)\s+([0-9.]+) ops/sec\s+([0-9.]+) usecs/op\s*$`)
	// "        fsync_writethrough                              n/a" (n/a* where O_DIRECT failed)
	naLine = regexp.MustCompile(`^\s+(\S+)\s+n/a\*?\s*$`)
)

// parsePGTestFsync reads the "Compare file sync methods using one 8kB write" and "... two 8kB
// writes" sections of pg_test_fsync's output (PostgreSQL 9.1 to 18 print them alike) and the
// time they took.
func parsePGTestFsync(lines []stampedLine) (pgRun, error) {
	var (
		run    pgRun
		writes int       // the section being read: 1 or 2 writes per sync, 0 for another
		since  time.Time // when the section's previous line arrived
	)
	for _, l := range lines {
		t := l.text
		switch {
		case strings.HasPrefix(t, "Compare file sync methods using one 8kB write"):
			writes, since = 1, l.at
			continue
		case strings.HasPrefix(t, "Compare file sync methods using two 8kB writes"):
			writes, since = 2, l.at
			continue
		case t != "" && !strings.HasPrefix(t, " ") && !strings.HasPrefix(t, "\t") && !strings.HasPrefix(t, "("):
			writes = 0 // another section's header
			continue
		}
		if writes == 0 {
			continue
		}
		if m := figureLine.FindStringSubmatch(t); m != nil {
			ops, err1 := strconv.ParseFloat(m[2], 64)
			us, err2 := strconv.ParseFloat(m[3], 64)
			if err1 != nil || err2 != nil {
				return pgRun{}, fmt.Errorf("pg_test_fsync output line %q: not a figure", t)
			}
			run.Figures = append(run.Figures, pgFigure{Name: m[1], WritesPerSync: writes, Available: true, OpsPerSec: ops, UsecsPerOp: us})
		} else if m := naLine.FindStringSubmatch(t); m != nil {
			run.Figures = append(run.Figures, pgFigure{Name: m[1], WritesPerSync: writes})
		} else {
			continue
		}
		// A section's span runs from its header (printed as its first test starts) to its
		// last figure; figures arrive as their test ends.
		if !since.IsZero() {
			run.SectionsSeconds += l.at.Sub(since).Seconds()
		}
		since = l.at
	}
	if len(run.Figures) == 0 {
		return pgRun{}, fmt.Errorf("pg_test_fsync printed no figures for one or two 8kB writes per sync")
	}
	return run, nil
}
