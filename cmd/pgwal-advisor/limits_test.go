package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pgwal-advisor/pgwal-advisor/advisor/config"
)

// Every duration and ratio flag of every command has a row in config.Limits, so the root
// command bounds it; adding a flag without a row fails here.
func TestEveryDurationFlagIsBounded(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
		fs.AddFlagSet(c.LocalFlags())
		fs.AddFlagSet(c.InheritedFlags())
		fs.VisitAll(func(f *pflag.Flag) {
			if f.Value.Type() != "duration" && f.Value.Type() != "float64" {
				return
			}
			if _, ok := config.LimitFor(c.Name(), f.Name); !ok {
				t.Errorf("%s --%s has no row in config.Limits", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCmd()
	for _, sub := range root.Commands() {
		walk(sub)
	}
}
