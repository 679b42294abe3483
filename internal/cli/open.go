package cli

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/m2mhttp"
	natssender "github.com/xadm/mensageria/transport/nats"
)

// backend is an opened database.
type backend struct {
	drv   driver.Driver
	pool  *pgxpool.Pool // nil on SQLite
	sqlDB *sql.DB       // SQLite's handle, for reads that need no write lock
	close func()
}

func (b *backend) Close() {
	if b != nil && b.close != nil {
		b.close()
	}
}

// openBackend opens the database of a config. It does not connect eagerly
// on PostgreSQL (the pool dials on first use), so commands that only print
// SQL work with the server down.
func openBackend(ctx context.Context, database, schema string) (*backend, error) {
	if len(database) > len("sqlite:") && database[:len("sqlite:")] == "sqlite:" {
		return openSQLite(database[len("sqlite:"):], schema)
	}
	pcfg, err := pgxpool.ParseConfig(database)
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("database: %v", err)}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &backend{drv: drv, pool: pool, close: func() { _ = drv.Close(); pool.Close() }}, nil
}

// ping verifies the database answers, so a command fails with one clear
// message instead of a deep driver error.
func (b *backend) ping(ctx context.Context) error {
	if b.pool == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	return nil
}

// newSender builds the Sender of a route, and what closes it. The relay's
// timing reaches the Senders that need it (a transactional route's
// retention) from the Client, at Start.
func newSender(ctx context.Context, r Route, log *slog.Logger) (mensageria.Sender, func(), error) {
	switch r.Transport {
	case "http":
		s, err := m2mhttp.NewSender(m2mhttp.SenderConfig{
			URL:           r.HTTP.URL,
			Token:         r.HTTP.Token,
			Timeout:       r.HTTP.Timeout,
			MaxConcurrent: r.HTTP.MaxConcurrent,
		})
		if err != nil {
			return nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("route %s (line %d): %w", r.Type, r.Line, err)}
		}
		return s, func() {}, nil
	case "kafka":
		if r.Kafka.TransactionalID != "" {
			s, err := kafka.NewTransactionalSender(kafka.TransactionalConfig{Brokers: r.Kafka.Brokers, Topic: r.Kafka.Topic,
				TransactionalID: r.Kafka.TransactionalID, Logger: log})
			if err != nil {
				return nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("route %s (line %d): %w", r.Type, r.Line, err)}
			}
			return s, s.Close, nil
		}
		s, err := kafka.NewSender(kafka.SenderConfig{Brokers: r.Kafka.Brokers, Topic: r.Kafka.Topic})
		if err != nil {
			return nil, nil, &exitError{code: ExitUsage, err: fmt.Errorf("route %s (line %d): %w", r.Type, r.Line, err)}
		}
		return s, s.Close, nil
	case "nats":
		nc, err := natsgo.Connect(r.NATS.URL, natsgo.Name("mensageria relay"), natsgo.MaxReconnects(-1))
		if err != nil {
			return nil, nil, fmt.Errorf("route %s: nats %s: %w", r.Type, r.NATS.URL, err)
		}
		s, err := natssender.NewSender(ctx, natssender.SenderConfig{Conn: nc, Subject: r.NATS.Subject, Stream: r.NATS.Stream})
		if err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("route %s: %w", r.Type, err)
		}
		return s, func() { _ = nc.Drain() }, nil
	}
	return nil, nil, fmt.Errorf("route %q: transport %q is not in this build", r.Type, r.Transport)
}

// enqueueOnly stands in for a route's Sender in clients that never relay
// (enqueue, demo producers): the registry then still decides what may be
// enqueued, without dialing any destination.
var enqueueOnly = mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
	return mensageria.Permanent(fmt.Errorf("this client only enqueues"))
})

// registry builds the registry of a config's routes, with its Senders (the
// Client discovers the hooks and settings they need in the registry). With
// a nil log the Senders are stand-ins, for clients that only enqueue.
func registry(ctx context.Context, c *Config, log *slog.Logger) (*mensageria.Registry, []mensageria.Sender, func(), error) {
	live := log != nil
	reg := mensageria.NewRegistry()
	var senders []mensageria.Sender
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	for _, r := range c.Routes {
		var s mensageria.Sender = enqueueOnly
		if live {
			var closeFn func()
			var err error
			if s, closeFn, err = newSender(ctx, r, log); err != nil {
				closeAll()
				return nil, nil, nil, err
			}
			closers = append(closers, closeFn)
			senders = append(senders, s)
		}
		var opts []mensageria.RouteOption
		if r.Ordered {
			opts = append(opts, mensageria.Ordered())
		}
		if err := reg.Register(r.Type, s, opts...); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
	}
	return reg, senders, closeAll, nil
}

// connect opens the database and an enqueue-only client for a config.
func connect(ctx context.Context, c *Config, mutate func(*mensageria.Config)) (*backend, *mensageria.Client, error) {
	reg, _, _, err := registry(ctx, c, nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := openBackend(ctx, c.Database, c.Schema)
	if err != nil {
		return nil, nil, err
	}
	cc := c.ClientConfig()
	cc.Registry = reg
	if mutate != nil {
		mutate(&cc)
	}
	cl, err := mensageria.New(b.drv, &cc)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, cl, nil
}

// nopDriver lets config validation run the library's own checks; New never
// calls a driver method.
type nopDriver struct{ driver.Driver }

// connect loads the config and opens its database, checked reachable; the
// caller closes the backend.
func (a *app) connect(ctx context.Context) (*Config, *backend, error) {
	c, err := a.loadConfig()
	if err != nil {
		return nil, nil, err
	}
	b, err := openBackend(ctx, c.Database, c.Schema)
	if err != nil {
		return nil, nil, err
	}
	if err := b.ping(ctx); err != nil {
		b.Close()
		return nil, nil, err
	}
	return c, b, nil
}
