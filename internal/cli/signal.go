package cli

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// StopOnHangup makes SIGHUP end cmd as SIGINT and SIGTERM do (main cancels the command's
// context on those), and returns cmd. A one-shot command whose terminal closes then stops the
// way it does on Ctrl-C - its probe file removed, its exit status saying it was interrupted -
// instead of dying on the signal's default action with a 16MB file left behind. The daemon is
// not wrapped: SIGHUP reloads it. A process started with SIGHUP ignored (nohup) keeps ignoring
// it: asking for the signal would undo that.
func StopOnHangup(cmd *cobra.Command) *cobra.Command {
	runE := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if signal.Ignored(syscall.SIGHUP) {
			return runE(c, args)
		}
		ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGHUP)
		defer stop()
		c.SetContext(ctx)
		return runE(c, args)
	}
	return cmd
}
