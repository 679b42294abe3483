package cli

import (
	"context"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/relay"
)

// connect opens the database and an enqueue-only client for a config.
func connect(ctx context.Context, c *config.Config) (*daemon.DB, *mensageria.Client, error) {
	reg, err := relay.EnqueueRegistry(c)
	if err != nil {
		return nil, nil, err
	}
	b, err := daemon.Open(ctx, c.Database, c.Schema, true)
	if err != nil {
		return nil, nil, err
	}
	cc := c.ClientConfig()
	cc.Registry = reg
	cl, err := mensageria.New(b.Driver, &cc)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, cl, nil
}

// connect loads the config and opens its database, checked reachable; the
// caller closes the backend. A SQLite file must exist: only 'migrate up'
// (connectCreating) and the daemons create one.
func (a *app) connect(ctx context.Context) (*config.Config, *daemon.DB, error) {
	return a.connectOpening(ctx, false)
}

// connectCreating is connect for 'migrate up', which creates a SQLite
// database that does not exist yet.
func (a *app) connectCreating(ctx context.Context) (*config.Config, *daemon.DB, error) {
	return a.connectOpening(ctx, true)
}

func (a *app) connectOpening(ctx context.Context, create bool) (*config.Config, *daemon.DB, error) {
	c, err := a.loadOperatorConfig()
	if err != nil {
		return nil, nil, err
	}
	b, err := daemon.OpenPinged(ctx, c.Database, c.Schema, create)
	if err != nil {
		return nil, nil, err
	}
	return c, b, nil
}
