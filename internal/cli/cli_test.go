package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Execute maps a command's error to the exit code the README documents, and prints it once,
// prefixed with the command's name.
func TestExecuteExitCodes(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		args   []string
		code   int
		stderr string
	}{
		{"success", nil, nil, ExitOK, ""},
		{"failure", errors.New("connect: refused"), nil, ExitFailure, "tool: connect: refused\n"},
		{"usage", fmt.Errorf("--rows 3: want at least 1000: %w", ErrUsage), nil, ExitBadUsage, "tool: --rows 3: want at least 1000: usage\n"},
		{"explicit code, silent", &ExitCodeError{Code: 2}, nil, 2, ""},
		{"explicit code with a message", &ExitCodeError{Code: ExitBadUsage, Err: errors.New("bad dir")}, nil, ExitBadUsage, "tool: bad dir\n"},
		{"unknown flag", nil, []string{"--nope"}, ExitBadUsage, "unknown flag: --nope (see --help)"},
		{"bad format", nil, []string{"--format", "yaml"}, ExitBadUsage, `--format "yaml": want table or json`},
		{"bad log level", nil, []string{"--log.level", "loud"}, ExitBadUsage, `--log.level "loud"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &Globals{}
			root := NewRoot("tool", "a tool", "", g)
			ConnectionFlags(root, g)
			ran := false
			root.AddCommand(&cobra.Command{Use: "sub", RunE: func(*cobra.Command, []string) error {
				ran = true
				if g.Logger == nil {
					t.Error("no logger built before the subcommand ran")
				}
				return tc.err
			}})
			var stdout, stderr bytes.Buffer
			code := Execute(context.Background(), root, append([]string{"sub"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr.String())
			}
			if tc.stderr == "" && stderr.Len() != 0 || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.stderr)
			}
			if tc.args == nil && !ran {
				t.Error("the subcommand did not run")
			}
			if g.QueryTimeout != DefaultQueryTimeout {
				t.Errorf("--query-timeout default %v, want %v", g.QueryTimeout, DefaultQueryTimeout)
			}
		})
	}
}
