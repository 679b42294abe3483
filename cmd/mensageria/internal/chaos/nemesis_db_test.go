package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The database's faults, injected on the run's private server
// (docs/reliability.md, "Database faults").
const (
	// Immediate stop (a crash) with the WAL writer held for a second
	// before it, down for a second, then started: crash recovery. Under
	// the producers' synchronous commits.
	FaultPGCrash = "pg-crash"
	// The same with the producers waiting: only asynchronous commits (the
	// relays' claims and settles, the receivers' effects) are made in
	// that second, and the crash loses them.
	FaultPGCrashAsync = "pg-crash-async"
	// Fast shutdown and start: every session ended, nothing lost.
	FaultPGRestart = "pg-restart-fast"
	// Other sessions take every connection slot but the superusers', and
	// the workers' sessions are ended: they cannot reconnect until freed.
	FaultPGConns = "pg-max-connections"
	// A privilege taken from one app's relay role, then granted back.
	FaultPGRevoke = "pg-revoke"
	// A transaction holds a snapshot, pinning the xmin horizon: nothing
	// dead since can be vacuumed while it lasts.
	FaultPGXmin = "pg-xmin-pin"
)

// Figures of the database faults, shown with the faults (not kinds).
const (
	figLostLeases    = "pg-crash-lost-lease-events"  // claims and settles lost, at least
	figLostEffects   = "pg-crash-lost-effects"       // receivers' effects lost with their settles, at least
	figCommitUnknown = "producer-commit-unknown"     // business commits whose answer a fault took
	figHogConns      = "pg-max-connections-held"     // slots held by other sessions, summed
	figHogRefused    = "pg-max-connections-refusals" // the server's refusals the filling sessions saw
	figHogEnded      = "pg-max-connections-ended"    // workers' sessions ended while the slots were full
	figXminAge       = "pg-xmin-pinned-xids"         // transactions the pinned horizon fell behind, summed
	figUnready       = "relay-unready"               // relays reporting themselves unready
)

var dbNemesisKinds = []string{FaultPGCrash, FaultPGRestart, FaultPGCrashAsync, FaultPGConns, FaultPGRevoke, FaultPGXmin}

// Every round of the nemesis ends with the database's faults.
func init() { nemesisKinds = append(nemesisKinds, dbNemesisKinds...) }

// revocations are taken in turn: what a relay needs to settle a delivered
// row (claims go on, settles fail: the relay must neither redeliver its
// backlog every lease nor call itself ready), to claim, and to reach its
// schema at all (its election too).
var revocations = []struct{ name, what string }{
	{"delete", "DELETE ON TABLE %s.outbox"},
	{"update", "UPDATE ON TABLE %s.outbox"},
	{"usage", "USAGE ON SCHEMA %s"},
}

// dbHolds are how long the slots are held and the horizon pinned: a few
// seconds in the short profile, three times that in the long one.
func (p profile) dbHolds() (conns, xmin time.Duration) {
	return 3 * p.gap, 5 * p.gap
}

// dbState is what the database faults keep between rounds.
type dbState struct {
	revokes   int
	producers sync.RWMutex // held by the nemesis: no business transaction runs
}

// dbFault injects one database fault and returns once it is healed.
func (h *harness) dbFault(ctx context.Context, kind, a string) {
	switch kind {
	case FaultPGCrash:
		h.crash(ctx, false)
	case FaultPGCrashAsync:
		h.crash(ctx, true)
	case FaultPGRestart:
		h.logf("nemesis: PostgreSQL fast restart")
		if err := h.db.srv.Restart(h.ctx); err != nil {
			h.t.Errorf("fast restart: %v", err)
		}
		h.pool.Reset()
	case FaultPGConns:
		h.exhaust(ctx)
	case FaultPGRevoke:
		r := revocations[h.dbs.revokes%len(revocations)]
		h.dbs.revokes++
		what := fmt.Sprintf(r.what, h.schema)
		hold := h.p.lease + h.p.lease/2
		h.logf("nemesis: REVOKE %s FROM %s for %s", what, relayRole(a), hold)
		if _, err := h.pool.Exec(h.ctx, "REVOKE "+what+" FROM "+relayRole(a)); err != nil {
			h.t.Errorf("revoke: %v", err)
		}
		sleepCtx(ctx, hold)
		if _, err := h.pool.Exec(h.ctx, "GRANT "+what+" TO "+relayRole(a)); err != nil {
			h.t.Errorf("grant back: %v", err)
		}
		h.fault(FaultPGRevoke+"-"+r.name, 1)
	case FaultPGXmin:
		h.pinXmin(ctx)
	}
}

// crash stops the server at once with the WAL writer held for a second
// before: the claims, settles and effects committed asynchronously in that
// second that no synchronous commit wrote out are lost, and the relays
// must redeliver what they thought settled. A quiet crash is the widest
// loss: the relays pause for a second while the producers enqueue, then
// the producers wait, so that the relays work through that backlog with
// no synchronous commit to write their work out. A busy one lands on open
// business transactions, whose commits must come back or be known not to
// have happened.
func (h *harness) crash(ctx context.Context, quiet bool) {
	if quiet {
		var paused []*proc
		for _, a := range apps {
			for _, r := range h.relays[a] {
				r.signal(syscall.SIGSTOP)
				paused = append(paused, r)
			}
		}
		sleepCtx(ctx, time.Second)
		h.dbs.producers.Lock()
		defer h.dbs.producers.Unlock()
		defer func() {
			for _, r := range paused {
				r.signal(syscall.SIGCONT)
			}
		}()
	}
	var floorL, floorE int64
	_ = h.pool.QueryRow(h.ctx, "SELECT coalesce(max(seq), 0) FROM "+h.schema+".chaos_leases").Scan(&floorL)
	_ = h.pool.QueryRow(h.ctx, "SELECT coalesce(max(seq), 0) FROM "+h.schema+".chaos_effects").Scan(&floorE)
	release, err := h.db.srv.HoldWAL(h.ctx)
	if err != nil {
		h.t.Errorf("hold the WAL: %v", err)
		return
	}
	defer release()
	if quiet {
		for _, a := range apps {
			for _, r := range h.relays[a] {
				r.signal(syscall.SIGCONT)
			}
		}
	}
	sleepCtx(ctx, time.Second)
	// What was visible just before the crash; less of it after is what
	// the crash took (a lower bound: commits after these reads are not
	// counted).
	seen := func(table string, floor int64) (top, n int64) {
		_ = h.pool.QueryRow(h.ctx, "SELECT coalesce(max(seq), $1), count(*) FROM "+h.schema+"."+table+" WHERE seq > $1", floor).Scan(&top, &n)
		return top, n
	}
	topL, preL := seen("chaos_leases", floorL)
	topE, preE := seen("chaos_effects", floorE)
	h.logf("nemesis: PostgreSQL immediate stop (quiet %v), WAL writer held for 1s", quiet)
	if err := h.db.srv.Crash(); err != nil {
		h.t.Errorf("crash: %v", err)
	}
	release()
	sleepCtx(ctx, time.Second)
	start := time.Now()
	if err := h.db.srv.Start(h.ctx); err != nil {
		h.t.Errorf("start after the crash: %v", err)
		return
	}
	h.pool.Reset()
	kept := func(table string, floor, top int64) int64 {
		var n int64
		_ = h.pool.QueryRow(h.ctx, "SELECT count(*) FROM "+h.schema+"."+table+" WHERE seq > $1 AND seq <= $2", floor, top).Scan(&n)
		return n
	}
	lostL := max(preL-kept("chaos_leases", floorL, topL), 0)
	lostE := max(preE-kept("chaos_effects", floorE, topE), 0)
	h.fault(figLostLeases, int(lostL))
	h.fault(figLostEffects, int(lostE))
	h.logf("nemesis: PostgreSQL back after crash recovery in %s; lost at least %d lease events and %d effects",
		time.Since(start).Round(time.Millisecond), lostL, lostE)
}

// exhaust opens sessions of another role until the server refuses them,
// ends the workers' sessions, and keeps every slot it can get (the workers
// compete for the ones they free) for the hold.
func (h *harness) exhaust(ctx context.Context) {
	hold, _ := h.p.dbHolds()
	var mu sync.Mutex
	var conns []*pgx.Conn
	refused := 0
	defer func() {
		for _, c := range conns {
			_ = c.Close(h.ctx)
		}
	}()
	// connect opens one more session; false once the server refused it.
	connect := func() (bool, error) {
		c, err := pgx.Connect(h.ctx, h.db.url(roleHog))
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "53300": // too_many_connections
			mu.Lock()
			refused++
			mu.Unlock()
			return false, nil
		case err != nil:
			return false, err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return true, nil
	}
	for ctx.Err() == nil {
		ok, err := connect()
		if err != nil {
			h.t.Errorf("fill the connection slots: %v", err)
			return
		}
		if !ok {
			break
		}
	}
	var ended int
	err := h.pool.QueryRow(h.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND (application_name LIKE $1 OR application_name LIKE $2)`,
		"chaos "+h.run+" %", "mensageria relay chaos-"+h.run+"-%").Scan(&ended)
	if err != nil {
		h.t.Errorf("end the workers' sessions: %v", err)
	}
	until := time.Now().Add(hold)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				ok, err := connect()
				if err != nil {
					h.t.Errorf("fill the connection slots: %v", err)
					return
				}
				if !ok {
					sleepCtx(ctx, 10*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	h.fault(figHogConns, len(conns))
	h.fault(figHogRefused, refused)
	h.fault(figHogEnded, ended)
	h.logf("nemesis: %d other sessions held every free connection slot for %s; %d worker sessions ended", len(conns), hold, ended)
}

// pinXmin holds a snapshot open for the hold: vacuum keeps every row
// version dead since, so the relays' claims and settles walk ever more
// dead tuples.
func (h *harness) pinXmin(ctx context.Context) {
	_, hold := h.p.dbHolds()
	tx, err := h.pool.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		h.t.Errorf("pin the xmin horizon: %v", err)
		return
	}
	defer func() { _ = tx.Rollback(h.ctx) }()
	var x0 int64
	if err := tx.QueryRow(h.ctx, "SELECT txid_current()").Scan(&x0); err != nil {
		h.t.Errorf("pin the xmin horizon: %v", err)
		return
	}
	h.logf("nemesis: a transaction pins the xmin horizon for %s", hold)
	sleepCtx(ctx, hold)
	var age int64
	var dead int64
	// Read from outside the pinning transaction: its own snapshot is old.
	_ = h.pool.QueryRow(h.ctx, "SELECT txid_current() - $1", x0).Scan(&age)
	_ = h.pool.QueryRow(h.ctx, "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox'", h.schema).Scan(&dead)
	if err := tx.Commit(h.ctx); err != nil {
		h.t.Errorf("end the pinning transaction: %v", err)
	}
	h.fault(figXminAge, int(age))
	h.logf("nemesis: xmin horizon released, %d transactions behind; outbox dead tuples %d", age, dead)
}
