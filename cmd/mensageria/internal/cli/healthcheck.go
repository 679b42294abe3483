package cli

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
)

func (a *app) healthcheckCommand() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck URL...",
		Short: "GET each URL (a daemon's /healthz, /readyz); exit 0 when every one answers 2xx",
		Long: `healthcheck is the container's health check: the image has no shell and no
curl, so a compose file or an orchestrator runs the binary itself, e.g.

  mensageria healthcheck http://127.0.0.1:9464/healthz http://127.0.0.1:9464/readyz

It exits 0 when every URL answers 2xx within --timeout, else 1, naming the
first that did not (with the start of its body: /readyz says why).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return daemon.Usage("healthcheck takes one URL or more (see '%s --help')", cmd.CommandPath())
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			client := &http.Client{Timeout: timeout}
			for _, u := range args {
				if err := daemon.Probe(cmd.Context(), client, u); err != nil {
					return err
				}
				fmt.Fprintf(a.io.Out, "%s ok\n", u)
			}
			return nil
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "time for each URL to answer")
	return cmd
}
