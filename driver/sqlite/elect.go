package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/xadm/mensageria/driver"
)

// Elector returns app's handle on a lease row: the holder renews it by
// calling Acquire; anyone else takes it over once it expires or is released,
// bumping the epoch. Each handle is its own candidate, identified as
// "host/pid/random".
func (d *Driver) Elector(app string, lease time.Duration) (driver.Elector, error) {
	if app == "" {
		return nil, &ConfigError{Field: "app", Reason: "empty app name"}
	}
	if lease <= 0 {
		return nil, &ConfigError{Field: "lease", Reason: fmt.Sprintf("must be positive, got %s", lease)}
	}
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &elector{d: d, app: app, lease: lease, me: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))}, nil
}

type elector struct {
	d     *Driver
	app   string
	lease time.Duration
	me    string
}

func (e *elector) Acquire(ctx context.Context) (int64, bool, error) {
	var epoch int64
	var leader bool
	t := e.d.prefix + "leader"
	err := e.d.write(ctx, func(w writer, now int64) error {
		epoch, leader = 0, false
		until := now + e.lease.Microseconds()
		var holder string
		var cur, expires int64
		err := w.QueryRowContext(ctx, "SELECT holder, epoch, expires_at FROM "+t+" WHERE app = ?", e.app).Scan(&holder, &cur, &expires)
		switch {
		case err == sql.ErrNoRows:
			_, err = w.ExecContext(ctx, "INSERT INTO "+t+" (app, holder, epoch, since, expires_at) VALUES (?, ?, 1, ?, ?)", e.app, e.me, now, until)
			epoch, leader = 1, err == nil
		case err != nil:
		case holder == e.me:
			// Renewal keeps the epoch, even past expiry: nobody else led in
			// between, or holder would name them.
			_, err = w.ExecContext(ctx, "UPDATE "+t+" SET expires_at = ? WHERE app = ?", until, e.app)
			epoch, leader = cur, err == nil
		case holder == "" || expires <= now:
			_, err = w.ExecContext(ctx, "UPDATE "+t+" SET holder = ?, epoch = ?, since = ?, expires_at = ? WHERE app = ?", e.me, cur+1, now, until, e.app)
			epoch, leader = cur+1, err == nil
		}
		return wrap("election", err)
	})
	if err != nil {
		return 0, false, err
	}
	return epoch, leader, nil
}

func (e *elector) Release(ctx context.Context) error {
	return e.d.write(ctx, func(w writer, now int64) error {
		_, err := w.ExecContext(ctx, "UPDATE "+e.d.prefix+"leader SET holder = '', expires_at = ? WHERE app = ? AND holder = ?", now, e.app, e.me)
		return wrap("election release", err)
	})
}

// Holder reports the lease row; an expired lease has no holder, but its
// epoch is still the last one granted.
func (e *elector) Holder(ctx context.Context) (driver.Leader, error) {
	l := driver.Leader{App: e.app}
	var since, expires int64
	var live bool
	err := e.d.db.QueryRowContext(ctx, "SELECT holder, epoch, since, expires_at, expires_at > "+nowExpr+" FROM "+e.d.prefix+"leader WHERE app = ?", e.app).
		Scan(&l.Holder, &l.Epoch, &since, &expires, &live)
	if err == sql.ErrNoRows {
		return l, nil
	}
	if err != nil {
		return driver.Leader{}, wrap("election holder", err)
	}
	if !live {
		// Run out without a release (which empties holder): the relay
		// crashed, or runs and cannot renew.
		l.Lapsed, l.Holder = l.Holder, ""
	} else {
		l.Expires = fromMicros(expires)
	}
	l.Since = fromMicros(since)
	return l, nil
}
