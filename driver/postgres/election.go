package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// elector holds a session advisory lock on a connection of its own.
//
// A lock alone would outlive a leader that is paused (SIGSTOP, a long GC, a
// frozen VM): its socket stays open. So the session also sets
// idle_session_timeout to the lease: a leader that stops calling Acquire is
// disconnected by the server itself, its lock released, and a standby takes
// over with a higher epoch. The epoch, checked inside every claim, keeps
// the paused leader from claiming when it wakes.
type elector struct {
	d      *Driver
	app    string
	lease  time.Duration
	key    int64
	holder string

	mu          sync.Mutex
	conn        *pgx.Conn
	held        bool
	epoch       int64
	sitOutUntil time.Time
}

// Elector returns the election of app.
func (d *Driver) Elector(app string, lease time.Duration) (driver.Elector, error) {
	if app == "" {
		return nil, errors.New("mensageria/postgres: election needs an app name")
	}
	if lease < 10*time.Millisecond {
		return nil, errors.New("mensageria/postgres: election lease must be at least 10ms")
	}
	host, _ := os.Hostname()
	return &elector{
		d:      d,
		app:    app,
		lease:  lease,
		key:    d.lockKey("relay\x00" + app),
		holder: host + "/" + strconv.Itoa(os.Getpid()) + "/" + uuid.NewString()[:8],
	}, nil
}

func (e *elector) Acquire(ctx context.Context) (int64, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if time.Now().Before(e.sitOutUntil) {
		return 0, false, nil
	}
	wasLeader := e.held
	epoch, ok, err := e.acquire(ctx)
	if err != nil {
		e.dropLocked()
		if wasLeader && ctx.Err() == nil {
			// The session is gone (killed, timed out while this process
			// was paused, cut off): its lock is released. Sit out one
			// lease so that a healthy standby takes over instead of this
			// process flapping back.
			e.sitOutUntil = time.Now().Add(e.lease)
			return 0, false, nil
		}
	}
	return epoch, ok, err
}

func (e *elector) acquire(ctx context.Context) (int64, bool, error) {
	if e.conn == nil || e.conn.IsClosed() {
		e.held = false
		cfg := e.d.pool.Config().ConnConfig.Copy()
		if cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
		cfg.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(e.lease.Milliseconds(), 10)
		cfg.RuntimeParams["application_name"] = "mensageria relay " + e.app
		// Whatever the pool says: an epoch lost in a server crash would be
		// won again by the next leader, and the leader from before the
		// crash, until it notices, would pass the claim's fence beside it.
		cfg.RuntimeParams["synchronous_commit"] = "on"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return 0, false, fmt.Errorf("mensageria/postgres: election connection: %w", err)
		}
		e.conn = conn
	}
	if e.held {
		// Renew: any statement resets the idle timer; reading the epoch
		// also catches a takeover we could not otherwise see.
		var epoch int64
		err := e.conn.QueryRow(ctx, "SELECT epoch FROM "+e.d.table("leader")+" WHERE app = $1", e.app).Scan(&epoch)
		if err != nil {
			return 0, false, err
		}
		if epoch != e.epoch {
			e.dropLocked()
			return 0, false, nil
		}
		return e.epoch, true, nil
	}
	var got bool
	if err := e.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", e.key).Scan(&got); err != nil {
		return 0, false, err
	}
	if !got {
		return 0, false, nil
	}
	var epoch int64
	err := e.conn.QueryRow(ctx, `INSERT INTO `+e.d.table("leader")+` AS l (app, epoch, holder, since) VALUES ($1, 1, $2, now())
		ON CONFLICT (app) DO UPDATE SET epoch = l.epoch + 1, holder = $2, since = now()
		RETURNING epoch`, e.app, e.holder).Scan(&epoch)
	if err != nil {
		return 0, false, err
	}
	e.held, e.epoch = true, epoch
	return epoch, true, nil
}

// dropLocked closes the election connection, which releases the lock.
func (e *elector) dropLocked() {
	if e.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = e.conn.Close(ctx)
		cancel()
	}
	e.conn, e.held = nil, false
}

func (e *elector) Release(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var err error
	if e.held && e.conn != nil && !e.conn.IsClosed() {
		_, err = e.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", e.key)
	}
	e.dropLocked()
	return err
}

// Holder reads the leader row and whether anyone holds the lock right now.
func (e *elector) Holder(ctx context.Context) (driver.Leader, error) {
	l := driver.Leader{App: e.app}
	var holder string
	err := e.d.pool.QueryRow(ctx, "SELECT holder, epoch, since FROM "+e.d.table("leader")+" WHERE app = $1", e.app).
		Scan(&holder, &l.Epoch, &l.Since)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, nil
	}
	if err != nil {
		return l, err
	}
	var held bool
	// A bigint advisory key shows in pg_locks as classid (high half) and
	// objid (low half) with objsubid 1.
	err = e.d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = ($1::bigint >> 32)::bit(32)::int::oid AND objid = $1::bigint::bit(32)::int::oid AND objsubid = 1)`,
		e.key).Scan(&held)
	if err != nil {
		return l, err
	}
	if held {
		l.Holder = holder
	}
	return l, nil
}
