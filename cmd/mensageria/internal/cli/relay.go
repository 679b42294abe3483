package cli

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/relay"
)

// relayOptions are the relay command's flags.
type relayOptions struct {
	listen, logFormat, logLevel string
	shutdown                    time.Duration
	migrate, traced             bool
}

const relayLong = `relay delivers the outbox messages of the config's routes, and only those:
rows of other types in the same schema are left to their own apps. At start
it records in the ownership catalog that the config's app owns its types
(and its Kafka transactional ids); a type another app owns stops it with
exit 2 before it serves or claims anything ('mensageria owners' moves
ownership between apps). Before that, it reads each route's TLS files and
reaches each HTTPS, Kafka and NATS destination with the route's TLS and
credentials: a destination that refuses them (an unknown CA, a missing
client certificate, a refused SASL password or NATS user) stops it with
exit 2, naming the route and what failed; one that cannot be reached is
logged, and its messages wait for it. It runs
until SIGTERM or SIGINT, then stops claiming, lets the deliveries in flight
finish within --shutdown-timeout and releases the rest for the next relay.

With election leader, replicas of one app elect one active relay; the
others stand by and take over when it dies.

It serves, on --listen:
  /healthz   the process is alive
  /readyz    the relay runs, its settles succeed and the database
             answers (503 with the reason otherwise); the body names
             each route that is paused or probing, and why
  /metrics   Prometheus: pending and oldest age by type, deliveries by
             outcome, delivery latency, dead letters, election holder;
             each route's flow control state (flowing, paused, probing),
             its failures in a row and its max_rate; for
             a Kafka route with a transactional_id, its transactions
             committed and aborted and the deliveries reconciled (found
             already in Kafka after a crash or a lost settle)

With --trace it exports OpenTelemetry traces over OTLP/HTTP, configured by
the standard OTEL_EXPORTER_OTLP_* variables: a span per delivery attempt,
continuing the trace each message was enqueued in (docs/observability.md).

The schema must be current ('mensageria migrate up', or --migrate).`

func (a *app) relayCommand() *cobra.Command {
	var o relayOptions
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Run the relay of this app's routes until SIGTERM or SIGINT",
		Long:  relayLong,
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return a.runRelay(cmd.Context(), o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:9464", "address of /healthz, /readyz and /metrics (empty: do not serve)")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&o.shutdown, "shutdown-timeout", 30*time.Second, "how long a stop waits for deliveries in flight")
	f.BoolVar(&o.migrate, "migrate", false, "apply missing schema migrations at start (default: only check)")
	f.BoolVar(&o.traced, "trace", false, daemon.TraceFlagHelp)
	return cmd
}

func (a *app) runRelay(ctx context.Context, o relayOptions) error {
	log, err := daemon.NewLogger(a.io.Err, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	c, err := a.loadConfig()
	if err != nil {
		return err
	}
	return relay.Run(ctx, relay.Options{Config: c, Listen: o.listen, Shutdown: o.shutdown, Migrate: o.migrate, Trace: o.traced, Env: a.io.Env, Log: log})
}
