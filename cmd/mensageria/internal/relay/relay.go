// Package relay is what 'mensageria relay' runs, and what builds a relay
// from a config: each route's Sender (HTTP, Kafka, NATS) with its client
// TLS and credentials, the start-up checks of the destinations, the
// registry of the routes, the relay's metrics and health endpoints, and
// the daemon's loop until SIGTERM or SIGINT. Run is its entry point;
// cli/relay.go keeps the flags, and the commands that only enqueue take
// EnqueueRegistry.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/transport/kafka"
	natssender "github.com/xadm/mensageria/transport/nats"
)

// Options is what one run of the relay takes.
type Options struct {
	// Config is the relay's config, as config.LoadConfig returns it.
	Config *config.Config
	// Listen is the address of /healthz, /readyz and /metrics; empty
	// serves nothing.
	Listen string
	// Shutdown bounds how long a stop waits for deliveries in flight.
	Shutdown time.Duration
	// Migrate applies the missing schema migrations at start; without it
	// a schema behind stops the start.
	Migrate bool
	// Trace exports OpenTelemetry traces, configured by the OTEL_*
	// variables Env looks up.
	Trace bool
	Env   func(string) (string, bool)
	Log   *slog.Logger
}

// Run builds the config's Senders, checking each destination, records the
// app's ownership, serves the health endpoints and runs the relay until
// ctx ends (SIGTERM or SIGINT); then it stops claiming, lets the
// deliveries in flight finish within o.Shutdown and releases the rest.
// Its errors carry their exit code as a *daemon.Error, or are a
// *daemon.ConflictError.
func Run(ctx context.Context, o Options) error {
	c, log := o.Config, o.Log
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
	if err := daemon.CheckSchema(ctx, b, c.Schema, c.App, o.Migrate, "run 'mensageria migrate up' or start the relay with --migrate", log); err != nil {
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
	tr, err := daemon.StartTracing(ctx, o.Trace, "mensageria-relay", c.App, o.Env, log)
	if err != nil {
		return err
	}
	defer tr.Stop(o.Shutdown, log)
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
		return daemon.Conflict("start its relay", fmt.Errorf("ownership catalog: %w", err))
	}
	srv, srvDone, err := daemon.ServeHealth(o.Listen, serveMux(m, ready(cl, b)), log)
	if err != nil {
		return err
	}
	if err := start(ctx, cl); err != nil {
		return err
	}
	log.Info("relay started", "app", c.App, "schema", c.Schema, "types", strings.Join(c.Types(), ","), "election", ElectionName(c.Relay.Election))
	return waitAndStop(ctx, cl, srv, srvDone, o.Shutdown, c.App, log)
}

// waitAndStop runs until ctx ends or the health server fails, then stops
// the relay within shutdown.
func waitAndStop(ctx context.Context, cl *mensageria.Client, srv *http.Server, srvDone <-chan error, shutdown time.Duration, appName string, log *slog.Logger) error {
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

// ready is /readyz: the relay is ready and the database answers. A ping
// is enough on every database: what stops delivery beyond an unreachable
// database (claims, settles or election rounds that fail) Client.Ready
// reports already.
func ready(cl *mensageria.Client, b *daemon.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := cl.Ready(); err != nil {
			return err
		}
		return b.Ping(ctx)
	}
}

// start starts cl's relay; what only the config or the cluster can fix is
// a usage error.
func start(ctx context.Context, cl *mensageria.Client) error {
	err := cl.Start(ctx)
	var se *natssender.StreamError
	switch {
	case errors.Is(err, mensageria.ErrOwnerConflict):
		return daemon.Conflict("start its relay", err)
	case kafka.TopicRefused(err) || errors.As(err, &se):
		// A topic or stream missing or refused is the config's or the
		// cluster's to fix: a retry would meet the same answer.
		return &daemon.Error{Code: daemon.ExitUsage, Err: err}
	}
	return err
}

// ElectionName is the election's word in the start's log line and in
// explain.
func ElectionName(e mensageria.Election) string {
	if e == mensageria.ElectionNone {
		return "none"
	}
	return "leader"
}
