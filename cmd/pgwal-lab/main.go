// Command pgwal-lab is pgwal-advisor's test and demo equipment: the README's demo, the seed
// benchmark suite, the simulated slow disk and the measurements of what the probe and the daemon
// cost. It is a command of its own so that the daemon installed on a database host links none
// of it (no FUSE library, no testing package).
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/pgwal-advisor/pgwal-advisor/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module's
// build information is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, newRootCmd(), args, stdout, stderr)
}

func newRootCmd() *cobra.Command {
	g := &cli.Globals{}
	root := cli.NewRoot("pgwal-lab",
		"pgwal-advisor's test and demo equipment: the demo, the seed benchmarks, a simulated slow disk, the probe's and the daemon's costs",
		`pgwal-lab holds what the project uses to show and measure pgwal-advisor: throwaway PostgreSQL
clusters on a simulated slow or lying disk (FUSE), the README's demo and the seed benchmark
suite, and the measurements of what the probe and the daemon cost (bench-probe, bench-footprint,
bench-scrape) and what a fleet of them costs Prometheus (bench-fleet). Nothing here is meant for
a production server; the daemon is pgwal-advisor.`, g)
	root.AddCommand(
		cli.NewVersionCmd("pgwal-lab", version),
		newDemoCmd(g),
		newBenchCmd(g),
		newLabSimdiskCmd(g),
		newBenchProbeCmd(g),
		newBenchFootprintCmd(g),
		newBenchScrapeCmd(g),
		newBenchFleetCmd(g),
	)
	return root
}
