package cli

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/m2mhttp"
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

// newSender builds the Sender of a route.
func newSender(r Route) (mensageria.Sender, error) {
	switch r.Transport {
	case "http":
		s, err := m2mhttp.NewSender(m2mhttp.SenderConfig{
			URL:           r.HTTP.URL,
			Token:         r.HTTP.Token,
			Timeout:       r.HTTP.Timeout,
			MaxConcurrent: r.HTTP.MaxConcurrent,
		})
		if err != nil {
			return nil, &ConfigError{Line: r.Line, Field: "routes." + r.Type + ".http", Msg: err.Error()}
		}
		return s, nil
	}
	return nil, fmt.Errorf("route %q: transport %q is not in this build", r.Type, r.Transport)
}

// registry builds the registry of a config's routes.
func registry(c *Config) (*mensageria.Registry, error) {
	reg := mensageria.NewRegistry()
	for _, r := range c.Routes {
		s, err := newSender(r)
		if err != nil {
			return nil, err
		}
		var opts []mensageria.RouteOption
		if r.Ordered {
			opts = append(opts, mensageria.Ordered())
		}
		if err := reg.Register(r.Type, s, opts...); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// connect opens the database and a client for a config.
func connect(ctx context.Context, c *Config, mutate func(*mensageria.Config)) (*backend, *mensageria.Client, error) {
	reg, err := registry(c)
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
