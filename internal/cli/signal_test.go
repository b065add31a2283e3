package cli

import (
	"bytes"
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// A wrapped command's context ends on SIGHUP, and the command returns through its own error
// path instead of the process dying on the signal.
func TestStopOnHangup(t *testing.T) {
	if signal.Ignored(syscall.SIGHUP) {
		// Started under nohup (a CI runner may be): StopOnHangup rightly leaves an ignored
		// SIGHUP ignored (the operator asked for that), and the kill below would be lost.
		t.Skip("SIGHUP is ignored in this process (nohup)")
	}
	g := &Globals{}
	root := NewRoot("tool", "", "", g)
	root.AddCommand(StopOnHangup(&cobra.Command{
		Use: "oneshot",
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Sent from inside the command: the handler is installed by now.
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
				return err
			}
			select {
			case <-cmd.Context().Done():
				return fmt.Errorf("interrupted: %w", cmd.Context().Err())
			case <-time.After(time.Minute):
				return nil
			}
		},
	}))
	var stdout, stderr bytes.Buffer
	code := Execute(context.Background(), root, []string{"oneshot"}, &stdout, &stderr)
	if code != ExitFailure || stderr.String() != "tool: interrupted: context canceled\n" {
		t.Errorf("exit %d, stderr %q; want %d and the interruption", code, stderr.String(), ExitFailure)
	}
}
