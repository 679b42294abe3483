package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/transport/kafka"
	natssender "github.com/xadm/mensageria/transport/nats"
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
	reg, senders, closeSenders, err := registry(ctx, c, log)
	if err != nil {
		return err
	}
	defer closeSenders()
	b, err := daemon.OpenPinged(ctx, c.Database, c.Schema, true)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := a.relaySchema(ctx, b, c, o.migrate, log); err != nil {
		return err
	}
	cc := c.ClientConfig()
	cc.Registry = reg
	cc.Logger = log
	m, err := relayMetrics(b, c, log)
	if err != nil {
		return err
	}
	cc.Hooks = append(cc.Hooks, m)
	tr, err := daemon.StartTracing(ctx, o.traced, "mensageria-relay", c.App, a.io.Env, log)
	if err != nil {
		return err
	}
	defer tr.Stop(o.shutdown, log)
	if tr.Tracer != nil {
		cc.Hooks = append(cc.Hooks, tr.Tracer)
	}
	for _, s := range senders {
		if ts, ok := s.(*kafka.TransactionalSender); ok {
			m.watchTransactional(ts)
		}
	}
	cl, err := mensageria.New(b.Driver, &cc)
	if err != nil {
		return err
	}
	m.routes = cl.Routes
	// Ownership first, before anything is served or claimed: a
	// config that routes another app's type stops here.
	if _, err := cl.Register(ctx); err != nil {
		var oce *driver.OwnerConflictError
		if errors.As(err, &oce) {
			return conflictErr(oce, "start its relay", a.configPath)
		}
		return fmt.Errorf("ownership catalog: %w", err)
	}
	srv, srvDone, err := daemon.ServeHealth(o.listen, serveMux(m, relayReady(cl, b)), log)
	if err != nil {
		return err
	}
	if err := a.startRelay(ctx, cl); err != nil {
		return err
	}
	log.Info("relay started", "app", c.App, "schema", c.Schema, "types", strings.Join(c.Types(), ","), "election", electionName(c.Relay.Election))
	return waitAndStopRelay(ctx, cl, srv, srvDone, o.shutdown, c.App, log)
}

// waitAndStopRelay runs until ctx ends or the health server fails, then
// stops the relay within shutdown.
func waitAndStopRelay(ctx context.Context, cl *mensageria.Client, srv *http.Server, srvDone <-chan error, shutdown time.Duration, appName string, log *slog.Logger) error {
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: finishing deliveries in flight", "timeout", shutdown)
	case serveErr = <-srvDone:
		log.Error("health server failed; stopping", "err", serveErr)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdown)
	defer cancel()
	stopErr := cl.Stop(sctx)
	if stopErr != nil {
		log.Warn("stop timed out; unfinished deliveries were released for the next relay", "err", stopErr)
	}
	if srv != nil {
		_ = srv.Shutdown(sctx)
	}
	log.Info("relay stopped", "app", appName)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// relaySchema checks the schema, or with migrate brings it up, on behalf
// of the config's app.
func (a *app) relaySchema(ctx context.Context, b *daemon.DB, c *config.Config, migrate bool, log *slog.Logger) error {
	err := daemon.CheckSchema(ctx, b, c.Schema, c.App, migrate, "run 'mensageria migrate up' or start the relay with --migrate", log)
	var oce *driver.OwnerConflictError
	if errors.As(err, &oce) {
		return conflictErr(oce, "migrate the schema up (--migrate)", a.configPath)
	}
	return err
}

// relayMetrics builds the relay's metrics, watching the election when
// there is one; with none, every replica counts as the leader.
func relayMetrics(b *daemon.DB, c *config.Config, log *slog.Logger) (*metrics, error) {
	var el driver.Elector
	if c.Relay.Election != mensageria.ElectionNone {
		var err error
		if el, err = b.Driver.Elector(c.App, c.Effective().Lease); err != nil {
			return nil, err
		}
	}
	m := newMetrics(c.App, b.Driver, el, log)
	if c.Relay.Election == mensageria.ElectionNone {
		m.AlwaysLeader()
	}
	return m, nil
}

// relayReady is /readyz: the relay is ready and the database answers.
func relayReady(cl *mensageria.Client, b *daemon.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := cl.Ready(); err != nil {
			return err
		}
		if b.Pool != nil {
			return b.Pool.Ping(ctx)
		}
		_, err := b.Driver.Stats(ctx)
		return err
	}
}

// startRelay starts cl's relay; what only the config or the cluster can
// fix is a usage error.
func (a *app) startRelay(ctx context.Context, cl *mensageria.Client) error {
	err := cl.Start(ctx)
	if err == nil {
		return nil
	}
	var oce *driver.OwnerConflictError
	if errors.As(err, &oce) {
		return conflictErr(oce, "start its relay", a.configPath)
	}
	var se *natssender.StreamError
	if kafka.TopicRefused(err) || errors.As(err, &se) {
		// A topic or stream missing or refused is the config's or the
		// cluster's to fix: a retry would meet the same answer.
		return &exitError{code: ExitUsage, err: err}
	}
	return err
}
