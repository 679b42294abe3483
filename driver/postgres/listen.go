package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// listener holds a LISTEN session on a connection of its own. LISTEN needs
// a real session: behind a PgBouncer in transaction mode use the relay's
// poll-only mode instead.
type listener struct {
	conn   *pgx.Conn
	c      chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// Listen subscribes to the schema's enqueue notifications until ctx ends.
// The channel is closed when ctx ends or the session dies; the caller
// listens again.
func (d *Driver) Listen(ctx context.Context) (driver.Listener, error) {
	cfg := d.pool.Config().ConnConfig.Copy()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: listen connection: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("mensageria/postgres: listen: %w", err)
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &listener{conn: conn, c: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go l.loop(lctx)
	return l, nil
}

func (l *listener) loop(ctx context.Context) {
	defer close(l.done)
	defer close(l.c)
	for {
		if _, err := l.conn.WaitForNotification(ctx); err != nil {
			return
		}
		select {
		case l.c <- struct{}{}:
		default: // a wake-up is already pending; one is enough
		}
	}
}

func (l *listener) C() <-chan struct{} { return l.c }

func (l *listener) Close() error {
	l.cancel()
	<-l.done
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return l.conn.Close(ctx)
}
