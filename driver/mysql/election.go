package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/xadm/mensageria/driver"
)

// Elector returns the lease-row election of one app (ADR 0028): the row
// <prefix>leader names the holder, its epoch and when its lease runs out,
// all on the database clock. Leadership is a row, not a session's lock, so
// it survives the loss of any one connection and is lost only when the
// holder stops renewing; every new holder takes epoch+1, which fences the
// claims of the one before (Claim reads the row under a shared lock).
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

	mu     sync.Mutex
	health string
}

var _ driver.HealthReporter = (*elector)(nil)

// ReportHealth sets what the next won rounds record.
func (e *elector) ReportHealth(health string) {
	e.mu.Lock()
	e.health = health
	e.mu.Unlock()
}

// Acquire runs one election round in a transaction that locks the app's
// lease row (queries/election_acquire.sql, election_lock.sql): renew it
// while this process holds it (election_renew.sql), take it (epoch+1,
// election_take.sql) when it is free or lapsed.
func (e *elector) Acquire(ctx context.Context) (int64, bool, error) {
	var epoch int64
	var leader bool
	e.mu.Lock()
	health := e.health
	e.mu.Unlock()
	var h any
	if health != "" {
		h = health
	}
	err := e.d.write(ctx, func(w writer, now int64) error {
		epoch, leader = 0, false
		if _, err := w.ExecContext(ctx, e.d.q.electionAcquire, e.app); err != nil {
			return wrap("election", err)
		}
		until := now + e.lease.Microseconds()
		var holder string
		var cur, expires int64
		err := w.QueryRowContext(ctx, e.d.q.electionLock, e.app).Scan(&holder, &cur, &expires)
		switch {
		case err != nil:
		case holder == e.me:
			_, err = w.ExecContext(ctx, e.d.q.electionRenew, until, h, e.app)
			epoch, leader = cur, err == nil
		case holder == "" || expires <= now:
			_, err = w.ExecContext(ctx, e.d.q.electionTake, e.me, cur+1, now, until, h, e.app)
			epoch, leader = cur+1, err == nil
		}
		return wrap("election", err)
	})
	if err != nil {
		return 0, false, err
	}
	return epoch, leader, nil
}

// Release gives the row up at once, so a standby takes over without
// waiting for the lease; the epoch stays, the next holder raises it.
func (e *elector) Release(ctx context.Context) error {
	return e.d.write(ctx, func(w writer, now int64) error {
		_, err := w.ExecContext(ctx, e.d.q.electionRelease, now, e.app, e.me)
		return wrap("election release", err)
	})
}

// Holder reads the row; a lease run out names its last holder as Lapsed.
func (e *elector) Holder(ctx context.Context) (driver.Leader, error) {
	l := driver.Leader{App: e.app}
	var since, expires int64
	var live bool
	var health sql.NullString
	err := e.d.db.QueryRowContext(ctx, e.d.q.electionHolder, e.app).
		Scan(&l.Holder, &l.Epoch, &since, &expires, &live, &health)
	if err == sql.ErrNoRows {
		return l, nil
	}
	if err != nil {
		return driver.Leader{}, wrap("election holder", err)
	}
	if !live {
		l.Lapsed, l.Holder = l.Holder, ""
	} else {
		l.Expires = fromMicros(expires)
		l.Health = health.String
	}
	l.Since = fromMicros(since)
	return l, nil
}
