// Command pgwal-advisor runs beside PostgreSQL, watches its WAL write path, the kernel's dirty
// pages and the WAL's storage, and recommends (or applies) settings that make it fast without
// making it unsafe. This package holds flags, wiring and exit codes only.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes. check uses 0/1/2 for nothing-or-info/warning/critical; anything that could not
// run at all exits with exitFailure.
const (
	exitOK       = 0
	exitFailure  = 3
	exitBadUsage = 64
)

// exitCodeError carries a specific exit code out of a subcommand.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCodeError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		if ec.err != nil {
			fmt.Fprintln(stderr, "pgwal-advisor:", ec.err)
		}
		return ec.code
	}
	fmt.Fprintln(stderr, "pgwal-advisor:", err)
	if errors.Is(err, errUsage) {
		return exitBadUsage
	}
	return exitFailure
}
