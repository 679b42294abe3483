package cli

import "github.com/spf13/cobra"

func (a *app) demoCommand() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Two apps exchange messages under injected faults, on embedded SQLite", Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error { return failErr("demo: not wired yet") })}
}
