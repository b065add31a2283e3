package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
	"github.com/pgwal-advisor/pgwal-advisor/internal/lab"
)

// terminal is what a person sees: the demo's narrative and, through the logger pgwal-lab builds
// (cli.NewLogger, on stderr), its log lines, interleaved. Writes come from the demo and from the
// advisor's goroutines at once.
type terminal struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.Write(p)
}

func (t *terminal) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}

// zapLine matches a log line of cli.NewLogger's console encoding:
// "2026-12-05T00:43:19.374Z	INFO	simulated disk mounted	{...}".
var zapLine = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S*\t(DEBUG|INFO|WARN|ERROR)\t`)

// newTerminal returns a terminal and the logger pgwal-lab would give the demo, writing to it.
func newTerminal(t *testing.T) (*terminal, *zap.Logger) {
	t.Helper()
	term := &terminal{}
	l, err := cli.NewLogger(term, "info", "console")
	if err != nil {
		t.Fatal(err)
	}
	return term, l
}

// TestDemo runs the README's main job end to end on a small insert. It checks what the demo
// did (findings, the changes it applied, both timings taken), not how fast: the gain is a
// figure for people, measured by the demo itself. A newcomer reads the steps and the table: the
// log lines go to the file the demo names at the start, not to the terminal.
func TestDemo(t *testing.T) {
	lab.RequireServer(t)
	term, l := newTerminal(t)
	logFile := filepath.Join(t.TempDir(), "demo.log")
	sum, err := Run(context.Background(), term, Options{Rows: 20000, Timeout: 75 * time.Second, ProcFS: "/proc", SysFS: "/sys", LogFile: logFile}, l)
	out := term.String()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	t.Log(out)
	if sum.BeforeSeconds <= 0 || sum.AfterSeconds <= 0 {
		t.Errorf("timings not taken: before %v, after %v", sum.BeforeSeconds, sum.AfterSeconds)
	}
	applied := map[string]string{}
	for _, a := range sum.Applied {
		applied[a.Setting] = a.To
	}
	if applied["wal_sync_method"] != "fdatasync" {
		t.Errorf("applied %v, want wal_sync_method -> fdatasync", sum.Applied)
	}
	if applied["wal_buffers"] == "" {
		t.Errorf("applied %v, want a larger wal_buffers", sum.Applied)
	}
	if !sum.Simulated && !strings.Contains(out, "note:") {
		t.Errorf("no simulated disk and no note saying so")
	}

	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "daemon logs: "+logFile) {
		t.Errorf("the first line %q does not name the log file %s", first, logFile)
	}
	if sum.LogFile != logFile {
		t.Errorf("summary's log_file %q, want %s", sum.LogFile, logFile)
	}
	if lines := zapLine.FindAllString(out, 3); len(lines) > 0 {
		t.Errorf("log lines on the terminal without --verbose, e.g. %q", lines)
	}
	logs, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	// The advisor's collector connects and the apply step changes settings: both are logged.
	for _, want := range []string{`"msg":"connected to postgresql"`, `"msg":"setting changed"`} {
		if !strings.Contains(string(logs), want) {
			t.Errorf("the log file lacks %s:\n%s", want, logs)
		}
	}
}

// advisorConnected is the advisor's first log line, when its collector has connected (step 4).
var advisorConnected = regexp.MustCompile(`(?m)^\S+\tINFO\tconnected to postgresql\t\{"collector"`)

// TestDemoVerbose: with --verbose the log lines appear on the terminal among the steps, and still
// go to the file. The demo is cancelled once the advisor's first one shows (as Ctrl-C would), so
// this takes seconds.
func TestDemoVerbose(t *testing.T) {
	lab.RequireServer(t)
	term, l := newTerminal(t)
	logFile := filepath.Join(t.TempDir(), "demo.log")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil && !advisorConnected.MatchString(term.String()) {
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
	}()
	_, err := Run(ctx, term, Options{Rows: 20000, ProcFS: "/proc", SysFS: "/sys", LogFile: logFile, Verbose: true}, l)
	out := term.String()
	t.Logf("demo: %v\n%s", err, out)
	if !strings.HasPrefix(out, "daemon logs: "+logFile) {
		t.Errorf("the output does not start by naming the log file %s", logFile)
	}
	if !advisorConnected.MatchString(out) {
		t.Fatalf("the advisor's log line is not on the terminal with --verbose")
	}
	logs, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logs), `"msg":"connected to postgresql"`) {
		t.Errorf("with --verbose, the log file lacks the advisor's log line:\n%s", logs)
	}
}
