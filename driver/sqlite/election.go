package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
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

// Acquire is one election round, one statement in one immediate
// transaction (queries/election_acquire.sql): it renews the lease when e
// holds it, takes it over, bumping the epoch, when no one does or its
// holder's lease ran out, and returns no row otherwise.
func (e *elector) Acquire(ctx context.Context) (int64, bool, error) {
	var epoch int64
	var leader bool
	err := e.d.write(ctx, func(w writer, now int64) error {
		epoch, leader = 0, false
		err := w.QueryRowContext(ctx, e.d.q.electionAcquire, e.app, e.me, now, now+e.lease.Microseconds()).Scan(&epoch)
		switch {
		case errors.Is(err, sql.ErrNoRows): // another candidate's lease runs
			return nil
		case err != nil:
			return wrap("election", err)
		}
		leader = true
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return epoch, leader, nil
}

func (e *elector) Release(ctx context.Context) error {
	return e.d.write(ctx, func(w writer, now int64) error {
		_, err := w.ExecContext(ctx, e.d.q.electionRelease, now, e.app, e.me)
		return wrap("election release", err)
	})
}

// Holder reports the lease row; an expired lease has no holder, but its
// epoch is still the last one granted.
func (e *elector) Holder(ctx context.Context) (driver.Leader, error) {
	l := driver.Leader{App: e.app}
	var since, expires int64
	var live bool
	err := e.d.db.QueryRowContext(ctx, e.d.q.electionHolder, e.app).Scan(&l.Holder, &l.Epoch, &since, &expires, &live)
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
