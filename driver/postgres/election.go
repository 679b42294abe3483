package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// elector holds the app's lease row in the leader table (ADR 0025).
//
// Each round, every lease/3, is one statement on the pool
// (queries/election_acquire.sql): it renews the lease when this elector
// holds it, takes it over, bumping the epoch, when no one does or its
// holder's lease ran out, and returns nothing otherwise. The lease is
// counted on the database clock. A leader that stops renewing (crashed,
// paused, cut off) loses the election once its lease runs out; the epoch
// the next leader gets, checked inside every claim, keeps it from claiming
// when it comes back. A leader whose round fails keeps its lease until it
// runs out, and a later round renews it with the same epoch: a dropped
// connection is not a lost election.
//
// Up to migration 12 the election was a session advisory lock whose key
// anyone could compute and take; a table row can only be written by a role
// granted it.
type elector struct {
	d      *Driver
	app    string
	lease  time.Duration
	holder string

	mu     sync.Mutex
	held   bool
	epoch  int64
	health string
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
		holder: host + "/" + strconv.Itoa(os.Getpid()) + "/" + uuid.NewString()[:8],
	}, nil
}

// ReportHealth implements driver.HealthReporter.
func (e *elector) ReportHealth(health string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	// Text the column can keep whatever the error said: no NUL, valid
	// UTF-8, bounded.
	health = strings.ReplaceAll(strings.ToValidUTF8(health, "\uFFFD"), "\x00", " ")
	if len(health) > 1000 {
		health = strings.ToValidUTF8(health[:1000], "") + "…"
	}
	e.health = health
}

func (e *elector) Acquire(ctx context.Context) (int64, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var epoch int64
	err := pgx.BeginFunc(ctx, e.d.pool, func(tx pgx.Tx) error {
		// Whatever the pool says: an epoch lost in a server crash would
		// be won again by the next leader, and the leader from before the
		// crash, until it notices, would pass the claim's fence beside it.
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, e.d.q.electionAcquire, e.app, e.holder, e.lease.Microseconds(), e.health).Scan(&epoch)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Another relay's lease runs.
		e.held = false
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("mensageria/postgres: election: %w", err)
	}
	e.held, e.epoch = true, epoch
	return epoch, true, nil
}

func (e *elector) Release(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.held {
		return nil
	}
	e.held = false
	_, err := e.d.pool.Exec(ctx, e.d.q.electionRelease, e.app, e.holder)
	return err
}

// Holder reads the leader row, and whether a session that is no relay
// holds the advisory lock earlier versions elected with.
func (e *elector) Holder(ctx context.Context) (driver.Leader, error) {
	l := driver.Leader{App: e.app}
	var holder string
	var live bool
	err := e.d.pool.QueryRow(ctx, e.d.q.electionHolder, e.app).Scan(&holder, &l.Epoch, &l.Since, &l.Expires, &live, &l.Health)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return l, err
	}
	switch {
	case live:
		l.Holder = holder
	case holder != "":
		l.Lapsed, l.Health = holder, ""
	}
	// A bigint advisory key shows in pg_locks as classid (high half) and
	// objid (low half) with objsubid 1; pid and application_name of any
	// session are readable by every role.
	var pid int
	var role, appName string
	err = e.d.pool.QueryRow(ctx, `SELECT l.pid, coalesce(a.usename, ''), coalesce(a.application_name, '')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted
		AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND l.classid = ($1::bigint >> 32)::bit(32)::int::oid AND l.objid = $1::bigint::bit(32)::int::oid AND l.objsubid = 1
		LIMIT 1`, e.d.lockKey("relay\x00"+e.app)).Scan(&pid, &role, &appName)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return l, err
	default:
		l.Outsider = fmt.Sprintf("pid %d (role %q, application %q) holds the advisory lock earlier versions elected this app's relay with", pid, role, appName)
	}
	return l, nil
}
