package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/receive"
)

func (a *app) receiveCommand() *cobra.Command {
	var listen, logFormat, logLevel string
	var migrate, traced bool
	cmd := &cobra.Command{
		Use:   "receive",
		Short: "Receive M2M deliveries into the inbox queue of this app's database until SIGTERM or SIGINT",
		Long: `receive is the receiving side of the HTTP machine-to-machine contract
(docs/openapi.yaml) for apps in any language. Every accepted delivery is
stored as a pending row of the inbox queue, in the receiving app's own
database, deduplicated by (consumer, natural key) in the transaction that
stores it: a redelivery is answered "duplicate" and stores nothing, the same
key with another payload is refused 409 (conflict) and stores nothing. The
app applies the rows by SQL in its own business transactions
(docs/config.md, "The inbox queue SQL protocol").

Its config is not the relay's: database, schema, app, a receive: block
and the consumers with the types each takes (docs/config.md, "Receive").
At start it checks the schema (--migrate applies what is missing) and
records its consumers, with their dedup windows, as the app's in the
ownership catalog; a consumer another app owns stops it with exit 2.

It re-reads its tokens file on SIGHUP and whenever the file changes
(receive.tokens_check), and its TLS files on SIGHUP, with no restart; a
reload that fails keeps what was in force. On SIGTERM or SIGINT it stops
taking connections and lets the requests in flight finish within
receive.shutdown_timeout.

Besides deliveries, it serves:
  /healthz   the process is alive
  /readyz    the database answers (503 once a stop begins)
  /metrics   Prometheus: answers by status, messages by type and outcome,
             conflicts, the inbox queue by consumer, tokens and reloads

With --trace it exports OpenTelemetry traces over OTLP/HTTP, configured by
the standard OTEL_EXPORTER_OTLP_* variables: a span per message received,
continuing its sender's trace, whose context the inbox queue row keeps in
its traceparent header (docs/observability.md).`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			log, err := daemon.NewLogger(a.io.Err, logFormat, logLevel)
			if err != nil {
				return err
			}
			if _, err := os.Stat(a.configPath); errors.Is(err, os.ErrNotExist) {
				return daemon.Usage("config file %s not found (pass --config FILE or set MENSAGERIA_CONFIG)", a.configPath)
			}
			c, err := config.LoadReceiveConfig(a.configPath, a.io.Env)
			if err != nil {
				return err
			}
			return receive.Run(cmd.Context(), receive.Options{Config: c, ConfigPath: a.configPath, HealthListen: listen, Migrate: migrate, Trace: traced, Env: a.io.Env, Log: log})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "", "also serve /healthz, /readyz and /metrics on this plain-HTTP address (for probes without a client certificate)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.BoolVar(&migrate, "migrate", false, "apply missing schema migrations at start (default: only check)")
	f.BoolVar(&traced, "trace", false, daemon.TraceFlagHelp)
	return cmd
}
