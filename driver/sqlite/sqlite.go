// Package sqlite is the embedded mensageria driver: SQLite through the pure
// Go modernc.org/sqlite, in WAL mode.
//
// Tables carry a name prefix instead of a schema (Config.Schema "mensageria"
// gives mensageria_outbox, mensageria_inbox, ...). Times are integer unix
// microseconds from SQLite's clock, which for an embedded database is the
// host's clock.
//
// Every write transaction of the driver starts with BEGIN IMMEDIATE on a
// pinned connection, so concurrent writers queue on busy_timeout instead of
// failing with SQLITE_BUSY when a read lock would have to be upgraded. InTx
// uses database/sql's BeginTx, so a *sql.DB handed to New should carry
// _txlock=immediate in its DSN (Open sets it); New refuses a database whose
// busy_timeout is zero.
//
// EnqueueTx takes a *sql.Tx of the same database. Listen wakes listeners of
// the same *Driver only; relays in other processes find new rows by polling.
//
// Any program may enqueue with a plain
//
//	INSERT INTO mensageria_outbox (type, key, payload) VALUES ('order.created', 'order-1', '{"id":1}')
//
// (headers, a JSON object of strings, optional): every other column has a
// default that SQLite 3.31 and later evaluate. A trigger on the outbox
// holds such an INSERT to the Go API's rules and refuses it with a message
// starting "mensageria: ": the type must have an owner in <prefix>owners
// (the ownership catalog, filled by Register) and be 1-200 bytes, the key
// 1-1000 bytes (of UTF-8, not characters), neither with NUL; headers NULL
// or an object whose values are all strings. Insert and InsertTx report a
// refused row as a *driver.UnownedTypeError or a *RefusedError.
//
// The inbox queue (<prefix>inbox_queue, driver.InboxQueueTx) is applied
// by other programs with the plain statements of queries/inbox_*.sql, in a
// transaction begun with BEGIN IMMEDIATE; docs/config.md gives them.
package sqlite

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"embed"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

//go:embed migrations/*.sql queries/*.sql
var files embed.FS

// Config configures the driver.
type Config struct {
	// Schema prefixes every table name: "<Schema>_outbox" and so on.
	// Default "mensageria". Letters, digits and underscores only.
	Schema string
	// MustExist opens an existing database file only: a missing one is
	// an error wrapping fs.ErrNotExist, never created empty (SQLite's
	// mode=rw). For the commands that only read or act on a database
	// someone else created: a mistyped path fails instead of leaving an
	// empty file behind.
	MustExist bool
}

// ConfigError names the setting that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("mensageria/sqlite: config %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, mensageria.ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == driver.ErrConfig }

// Driver is the SQLite backend. It is safe for concurrent use.
type Driver struct {
	db     *sql.DB
	ownsDB bool
	prefix string
	q      queries
	gate   chan struct{} // shared by every Driver of one database file
	// inserts are the prepared enqueue statements.
	inserts insertStmts

	mu        sync.Mutex
	listeners map[*listener]struct{}
	closed    bool
}

var _ driver.Driver = (*Driver)(nil)

// busyTimeoutMS is how long a writer of Open's database waits for the write
// lock. Claims, settles and inbox records are short, so a long wait means
// something is stuck; ten seconds keeps bursts of writers from failing.
const busyTimeoutMS = 10000

// Open opens (creating if needed) the database file at path in WAL mode with
// a busy timeout and immediate write transactions. Close closes it.
func Open(path string, cfg *Config) (*Driver, error) {
	if path == "" {
		return nil, &ConfigError{Field: "path", Reason: "empty database path"}
	}
	if strings.ContainsAny(path, "?#") {
		return nil, &ConfigError{Field: "path", Reason: fmt.Sprintf("%q: the path may not contain '?' or '#'", path)}
	}
	// SQLite's own message for a missing directory is "unable to open
	// database file"; name the directory instead.
	if dir := filepath.Dir(path); dir != "" {
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("mensageria/sqlite: open %s: directory %s: %w", path, dir, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("mensageria/sqlite: open %s: %s is not a directory", path, dir)
		}
	}
	q := url.Values{}
	if cfg != nil && cfg.MustExist {
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("mensageria/sqlite: open %s: the database file does not exist: %w", path, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("mensageria/sqlite: open %s: not a database file", path)
		}
		q.Set("mode", "rw")
	}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS))
	q.Add("_pragma", "journal_mode(WAL)")
	// NORMAL is durable across application crashes in WAL mode; only a
	// power loss can lose the last commits.
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("mensageria/sqlite: open %s: %w", path, err)
	}
	if err := db.PingContext(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mensageria/sqlite: open %s: %w", path, err)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mensageria/sqlite: open %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		_ = db.Close()
		return nil, fmt.Errorf("mensageria/sqlite: open %s: journal mode is %q, WAL is required (is it an in-memory or read-only database?)", path, mode)
	}
	d, err := newDriver(db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	d.ownsDB = true
	return d, nil
}

// New wraps the caller's *sql.DB (opened with the "sqlite" driver of
// modernc.org/sqlite). Its DSN should set _txlock=immediate, a busy_timeout
// and journal_mode WAL, as Open does. Close does not close db.
func New(db *sql.DB, cfg *Config) (*Driver, error) {
	if db == nil {
		return nil, &ConfigError{Field: "db", Reason: "nil *sql.DB"}
	}
	var busy int
	if err := db.QueryRow("PRAGMA busy_timeout").Scan(&busy); err != nil {
		return nil, fmt.Errorf("mensageria/sqlite: reading busy_timeout: %w", err)
	}
	if busy <= 0 {
		return nil, &ConfigError{Field: "db", Reason: "busy_timeout is 0, so concurrent writers would fail with SQLITE_BUSY; add _pragma=busy_timeout(10000) to the DSN"}
	}
	return newDriver(db, cfg)
}

var schemaRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

func newDriver(db *sql.DB, cfg *Config) (*Driver, error) {
	schema := "mensageria"
	if cfg != nil && cfg.Schema != "" {
		schema = cfg.Schema
	}
	if !schemaRE.MatchString(schema) {
		return nil, &ConfigError{Field: "Schema", Reason: fmt.Sprintf("%q: use letters, digits and underscores, starting with a letter or underscore", schema)}
	}
	p := schema + "_"
	gate, err := gateFor(db)
	if err != nil {
		return nil, err
	}
	return &Driver{db: db, prefix: p, q: queriesFor(p), gate: gate, listeners: map[*listener]struct{}{}}, nil
}

// queriesFor returns the statements of a table prefix, loaded once in this
// process.
var queriesFor = sqlkit.PerPrefix(loadQueries)

// queries are the driver's statements, read from queries/*.sql with the
// table prefix and the fragments below filled in.
type queries struct {
	claim, claimFence, claimInDoubt, mark                                      string
	settleDelivered, settleDeliveredKept, settleRetry, settleDead              string
	settleInDoubt, settleRelease, settleSort, deliveredCount                   string
	unownedType, stats, statsOwners, deliveredMinutes, nextDue                 string
	purgeOutbox, purgeCounts, purgeConsumers, purgeInbox, purgeInboxQueue      string
	doubtRows, resolveDelivered, resolveKept, resolveRetry, resolveDead        string
	resolveRecord, resolutions, resolutionsOf                                  string
	registerRead, registerInsert, registerAdopt, registerWindow, owners        string
	identity, transferSet, transferDelete, migrationsOwner, migrationsOwnerSet string
	routeStateSet, routeStatePrune, routeStateList                             string
	routePauseSet, routePauseDelete, routePauseList                            string
	inboxStale, inboxRecord, inboxFirst, offsetRead, offsetSet                 string
	inboxQueueInsert, inboxClaim, inboxApplied, inboxFailed, inboxDead         string
	inboxAttempts, inboxRowState, inboxQueueStats                              string
	electionAcquire, electionRelease, electionHolder                           string
	clock, schemaMigrated, schemaVersion                                       string
}

// The fragments the statements share, each written once:
//   - {{p}}, the table prefix;
//   - {{now}}, the database clock (nowExpr), in the statements that read
//     the clock themselves: those other programs run too (docs/config.md)
//     and those run outside a write transaction of the driver's;
//   - {{doubt}}, the test of a row in doubt (doubtCond);
//   - {{sched}}, the test of a scheduled row (schedCond);
//   - {{jobcols}}, the columns an outbox row is read as (jobCols).
func fragments(prefix string) *strings.Replacer {
	return strings.NewReplacer("{{p}}", prefix, "{{now}}", nowExpr, "{{doubt}}", doubtCond, "{{sched}}", schedCond, "{{jobcols}}", jobCols)
}

// loadQueries reads every statement, for tables prefixed with prefix.
func loadQueries(prefix string) queries {
	fill := fragments(prefix)
	load := sqlkit.Loader(files, "queries", fill)
	return queries{
		claim:               load("claim"),
		claimFence:          load("claim_fence"),
		claimInDoubt:        load("claim_in_doubt"),
		mark:                load("mark"),
		settleDelivered:     load("settle_delivered"),
		settleDeliveredKept: load("settle_delivered_kept"),
		settleRetry:         load("settle_retry"),
		settleDead:          load("settle_dead"),
		settleInDoubt:       load("settle_in_doubt"),
		settleRelease:       load("settle_release"),
		settleSort:          load("settle_sort"),
		deliveredCount:      load("delivered_count"),
		unownedType:         load("unowned_type"),
		stats:               load("stats"),
		statsOwners:         load("stats_owners"),
		nextDue:             load("next_due"),
		deliveredMinutes:    load("delivered_minutes"),

		purgeOutbox:     load("purge_outbox"),
		purgeCounts:     load("purge_counts"),
		purgeConsumers:  load("purge_consumers"),
		purgeInbox:      load("purge_inbox"),
		purgeInboxQueue: load("purge_inbox_queue"),

		doubtRows:        load("doubt_rows"),
		resolveDelivered: load("resolve_delivered"),
		resolveKept:      load("resolve_delivered_kept"),
		resolveRetry:     load("resolve_retry"),
		resolveDead:      load("resolve_dead"),
		resolveRecord:    load("resolve_record"),
		resolutions:      load("resolutions"),
		resolutionsOf:    load("resolutions_of"),

		registerRead:       load("register_read"),
		registerInsert:     load("register_insert"),
		registerAdopt:      load("register_adopt"),
		registerWindow:     load("register_window"),
		owners:             load("owners"),
		identity:           load("identity"),
		transferSet:        load("transfer_set"),
		transferDelete:     load("transfer_delete"),
		migrationsOwner:    load("migrations_owner"),
		migrationsOwnerSet: load("migrations_owner_set"),

		routeStateSet:    load("route_state_set"),
		routeStatePrune:  load("route_state_prune"),
		routeStateList:   load("route_state_list"),
		routePauseSet:    load("route_pause_set"),
		routePauseDelete: load("route_pause_delete"),
		routePauseList:   load("route_pause_list"),

		inboxStale:  load("inbox_stale"),
		inboxRecord: load("inbox_record"),
		inboxFirst:  load("inbox_first"),
		offsetRead:  load("offset_read"),
		offsetSet:   load("offset_set"),

		inboxQueueInsert: load("inbox_queue_insert"),
		inboxClaim:       load("inbox_claim"),
		inboxApplied:     load("inbox_applied"),
		inboxFailed:      load("inbox_failed"),
		inboxDead:        load("inbox_dead"),
		inboxAttempts:    load("inbox_attempts"),
		inboxRowState:    load("inbox_row_state"),
		inboxQueueStats:  load("inbox_queue_stats"),

		electionAcquire: load("election_acquire"),
		electionRelease: load("election_release"),
		electionHolder:  load("election_holder"),

		clock:          load("clock"),
		schemaMigrated: load("schema_migrated"),
		schemaVersion:  load("schema_version"),
	}
}

// jobCols are the columns an outbox row is read as (scanJobs). A row in
// doubt is stored pending and read as in doubt (driver.StateInDoubt); ?1
// of a statement that reads them is the database's now.
var jobCols = "id, message_id, type, key, payload, headers, CASE WHEN " + doubtCond + " THEN 'in_doubt' ELSE state END, attempts, created_at, available_at, delivered_at, last_error, last_route, attempted_at"

// doubtCond is true of a row in doubt: pending, marked by an at-most-once
// attempt (queries/mark.sql), not under a live lease (?1 is now).
var doubtCond = sqlkit.DoubtAt("?1")

// schedCond is true of a scheduled row: pending, not due yet (?1 is now),
// never attempted and no error recorded (a retry's backoff records one).
// A claim counts an attempt, so a leased row, whose available_at a claim
// sets to its lease's end, is never one. Never NULL, so that NOT of it is
// true of every other row, whatever a plain INSERT stored.
const schedCond = "coalesce(state = 'pending' AND attempted_at IS NULL AND typeof(available_at) = 'integer' AND available_at > ?1 AND attempts = 0 AND last_error IS NULL, 0)"

// gates holds one write gate per database file in this process.
var gates sync.Map // absolute file name -> chan struct{}

// gateFor returns the write gate of db's file. SQLite's busy handler polls
// with growing sleeps and no queue, so under steady contention a waiter can
// starve past busy_timeout while others keep taking the lock; queueing the
// driver's own writers in Go first keeps them in order and leaves SQLite's
// lock to arbitrate only against other processes and callers' transactions.
func gateFor(db *sql.DB) (chan struct{}, error) {
	var seq int
	var name, file string
	if err := db.QueryRow("PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
		return nil, fmt.Errorf("mensageria/sqlite: reading the database file name: %w", err)
	}
	if file == "" { // in-memory or temporary: private to this handle
		return make(chan struct{}, 1), nil
	}
	g, _ := gates.LoadOrStore(file, make(chan struct{}, 1))
	return g.(chan struct{}), nil
}

// DB returns the database handle.
func (d *Driver) DB() *sql.DB { return d.db }

// Table returns the full name of one of the driver's tables ("outbox",
// "inbox", "inbox_queue", "offsets", "leader", "migrations", "owners",
// "identity").
func (d *Driver) Table(name string) string { return d.prefix + name }

// Close ends every listener and, when Open created the database handle,
// closes it.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	for l := range d.listeners {
		l.closeLocked()
	}
	d.mu.Unlock()
	d.inserts.close()
	if d.ownsDB {
		return d.db.Close()
	}
	return nil
}

// nowExpr is the database clock in microseconds, written as the migrations'
// column defaults are: julianday('now') exists on every SQLite a client
// program may use (unixepoch('subsec') only from 3.42), so the migration SQL
// that embeds it runs under an operator's own tool too. The clock has
// millisecond resolution; rounding first keeps float error out of the
// microsecond digits.
const nowExpr = "(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"

// writer runs statements inside one write transaction.
type writer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// write runs fn inside BEGIN IMMEDIATE on a pinned connection, with now read
// from the database clock once at the start, so every comparison in the
// transaction agrees. It issues BEGIN itself rather than relying on the
// DSN's _txlock, so it is immediate on a caller's *sql.DB too.
func (d *Driver) write(ctx context.Context, fn func(w writer, now int64) error) error {
	select {
	case d.gate <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mensageria/sqlite: waiting for the write lock: %w", ctx.Err())
	}
	defer func() { <-d.gate }()
	c, err := d.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mensageria/sqlite: %w", err)
	}
	defer c.Close()
	return d.writeOn(ctx, c, fn)
}

// errBadConn discards a connection left in a state no later user may inherit.
var errBadConn = sqldriver.ErrBadConn

// writeOn is write's transaction on a connection the caller holds, under
// the gate.
func (d *Driver) writeOn(ctx context.Context, c *sql.Conn, fn func(w writer, now int64) error) error {
	var err error
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("mensageria/sqlite: begin: %w", err)
	}
	var now int64
	err = c.QueryRowContext(ctx, d.q.clock).Scan(&now)
	if err == nil {
		err = fn(c, now)
	}
	if err == nil {
		// Not cancellable: an interrupted COMMIT leaves the outcome unknown.
		if _, err = c.ExecContext(context.WithoutCancel(ctx), "COMMIT"); err != nil {
			err = fmt.Errorf("mensageria/sqlite: commit: %w", err)
		}
	}
	if err != nil {
		rollback(c)
		return err
	}
	return nil
}

// rollback ends a failed transaction. If even that fails, the connection is
// discarded so no later user inherits an open transaction.
func rollback(c *sql.Conn) {
	_, err := c.ExecContext(context.Background(), "ROLLBACK")
	if err != nil && !strings.Contains(err.Error(), "no transaction is active") {
		_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
}

// now reads the database clock outside a transaction.
func (d *Driver) now(ctx context.Context) (int64, error) {
	var now int64
	if err := d.db.QueryRowContext(ctx, d.q.clock).Scan(&now); err != nil {
		return 0, fmt.Errorf("mensageria/sqlite: reading the clock: %w", err)
	}
	return now, nil
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mensageria/sqlite: %s: %w", op, err)
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// The statements take lists as one JSON array, read with json_each: one
// host parameter whatever the length, and a statement text that does not
// change with it.

func int64sJSON(ids []int64) string {
	b, _ := json.Marshal(ids) // integers always marshal
	return string(b)
}

func stringsJSON(s []string) string {
	b, _ := json.Marshal(s) // strings always marshal
	return string(b)
}
