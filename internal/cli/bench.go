package cli

import "github.com/spf13/cobra"

func (a *app) benchCommand() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Run the benchmark scenarios against the configured database", Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error { return failErr("bench: not wired yet") })}
}
