// Package postgres is the PostgreSQL driver of mensageria, through pgx v5.
//
// Callers enqueue inside their own transaction with either a pgx.Tx or a
// *sql.Tx (database/sql, sqlx, GORM, ent and bun all expose one), so the
// outbox row commits or rolls back with their business write.
//
// The schema holds an ownership catalog (the owners table, migration 2):
// the outbox refuses, from any client, a row whose type no app owns, a key
// or type of the wrong length and headers that are not an object of
// strings, each with its own SQLSTATE (MS001 to MS004, listed in
// migrations/002_catalog.sql). Insert and InsertTx turn them into the
// driver's errors; EnqueueError does it for a batch sent with QueueInsert.
//
// The relay's claim runs with a fresh plan every time (pgx's exec mode, an
// unnamed statement): a plan cached while the outbox was empty keeps a
// sequential scan once it is full, which drains a few hundred rows a second
// (docs/adr/0004-claim-query.md).
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
)

//go:embed migrations/*.sql queries/*.sql security/*.sql
var files embed.FS

// Config configures the driver.
type Config struct {
	// Schema holds the mensageria tables. Default "mensageria". Several
	// apps may share one schema; each relays only its own types.
	Schema string
}

// Driver implements driver.Driver on a pgx pool.
type Driver struct {
	pool    *pgxpool.Pool
	schema  string
	channel string
	q       queries

	insertMu  sync.Mutex
	insertSQL map[insertShape]string

	floors *floors // where each type's claim scan starts (floor.go)
}

type queries struct {
	claim, settleDelivered, settleRetry, settleDead, settleRelease       string
	inboxRecord, inboxFirst, stats, purgeOutbox, purgeInbox, purgeCounts string
	settleSort                                                           string
	registerInsert, registerLock, registerAdopt, registerRead, owners    string
	transferLock, transferSet                                            string
	routeStateSet, routeStatePrune, routeStateList                       string
	routePauseSet, routePauseDelete, routePauseList                      string
	inboxQueueInsert, inboxClaim, inboxApplied, inboxFailed, inboxDead   string
	inboxQueueStats, purgeInboxQueue                                     string
	mark, claimInDoubt, settleInDoubt, resolve, resolutions              string
	electionAcquire, electionRelease, electionHolder                     string
	nextDue                                                              string
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// New returns a driver on pool. The pool stays the caller's: Close does not
// close it.
func New(pool *pgxpool.Pool, cfg *Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("mensageria/postgres: nil pool")
	}
	schema := "mensageria"
	if cfg != nil && cfg.Schema != "" {
		schema = cfg.Schema
	}
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("mensageria/postgres: schema %q must be a lower-case SQL identifier (a-z, 0-9, _)", schema)
	}
	d := &Driver{pool: pool, schema: schema, channel: schema + "_outbox", insertSQL: map[insertShape]string{}, floors: newFloors()}
	load := func(name string) string {
		b, err := files.ReadFile("queries/" + name + ".sql")
		if err != nil {
			panic(err) // embedded at build time; missing means a broken build
		}
		return d.expand(string(b))
	}
	d.q = queries{
		claim:            load("claim"),
		settleDelivered:  load("settle_delivered"),
		settleRetry:      load("settle_retry"),
		settleDead:       load("settle_dead"),
		settleRelease:    load("settle_release"),
		inboxRecord:      load("inbox_record"),
		stats:            load("stats"),
		purgeOutbox:      load("purge_outbox"),
		purgeInbox:       load("purge_inbox"),
		purgeCounts:      load("purge_counts"),
		inboxFirst:       load("inbox_first"),
		settleSort:       load("settle_sort"),
		registerInsert:   load("register_insert"),
		registerLock:     load("register_lock"),
		registerAdopt:    load("register_adopt"),
		registerRead:     load("register_read"),
		owners:           load("owners"),
		transferLock:     load("transfer_lock"),
		transferSet:      load("transfer_set"),
		routeStateSet:    load("route_state_set"),
		routeStatePrune:  load("route_state_prune"),
		routeStateList:   load("route_state_list"),
		routePauseSet:    load("route_pause_set"),
		routePauseDelete: load("route_pause_delete"),
		routePauseList:   load("route_pause_list"),

		inboxQueueInsert: load("inbox_queue_insert"),
		inboxClaim:       load("inbox_claim"),
		inboxApplied:     load("inbox_applied"),
		inboxFailed:      load("inbox_failed"),
		inboxDead:        load("inbox_dead"),
		inboxQueueStats:  load("inbox_queue_stats"),
		purgeInboxQueue:  load("purge_inbox_queue"),

		mark:          load("mark"),
		claimInDoubt:  load("claim_in_doubt"),
		settleInDoubt: load("settle_in_doubt"),
		resolve:       load("resolve"),
		resolutions:   load("resolutions"),

		electionAcquire: load("election_acquire"),
		electionRelease: load("election_release"),
		electionHolder:  load("election_holder"),

		nextDue: load("next_due"),
	}
	return d, nil
}

// Schema returns the schema the driver works in.
func (d *Driver) Schema() string { return d.schema }

// Pool returns the pool the driver runs on.
func (d *Driver) Pool() *pgxpool.Pool { return d.pool }

// Close releases nothing of the caller's; it exists for the interface.
func (d *Driver) Close() error { return nil }

func (d *Driver) expand(sql string) string { return strings.ReplaceAll(sql, "{{schema}}", d.schema) }

func (d *Driver) table(name string) string { return d.schema + "." + name }

// Insert writes rows, and the notification when asked, in one implicit
// transaction and one round trip.
func (d *Driver) Insert(ctx context.Context, p driver.InsertParams) error {
	if len(p.Rows) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	scheduled := p.Scheduled()
	for start := 0; start < len(p.Rows); start += insertChunk {
		rows := p.Rows[start:min(start+insertChunk, len(p.Rows))]
		b.Queue(d.insertStatement(len(rows), scheduled), insertArgs(rows, false, scheduled)...)
	}
	if p.Notify {
		b.Queue("SELECT pg_notify($1, '')", d.channel)
	}
	if len(p.Rows) > insertChunk || p.Notify {
		// A batch runs as one implicit transaction only without explicit
		// BEGIN; several chunks must still be all-or-nothing.
		return EnqueueError(pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }))
	}
	return EnqueueError(d.pool.SendBatch(ctx, b).Close())
}

// InsertTx writes rows in the caller's transaction: a pgx.Tx or a *sql.Tx
// on a PostgreSQL connection (pgx's stdlib or lib/pq).
func (d *Driver) InsertTx(ctx context.Context, tx any, p driver.InsertParams) error {
	if len(p.Rows) == 0 {
		return nil
	}
	switch tx := tx.(type) {
	case pgx.Tx:
		b := &pgx.Batch{}
		d.QueueInsert(b, p)
		return EnqueueError(tx.SendBatch(ctx, b).Close())
	case *sql.Tx:
		scheduled := p.Scheduled()
		for start := 0; start < len(p.Rows); start += insertChunk {
			rows := p.Rows[start:min(start+insertChunk, len(p.Rows))]
			if _, err := tx.ExecContext(ctx, d.insertStatement(len(rows), scheduled), insertArgs(rows, true, scheduled)...); err != nil {
				return EnqueueError(err)
			}
		}
		if p.Notify {
			if _, err := tx.ExecContext(ctx, "SELECT pg_notify($1, '')", d.channel); err != nil {
				return err
			}
		}
		return nil
	default:
		return &driver.TxTypeError{Driver: "postgres", Got: fmt.Sprintf("%T", tx), Want: []string{"pgx.Tx", "*sql.Tx"}}
	}
}

// QueueInsert queues p's rows (and the notification, when asked) into b,
// to run in the caller's transaction when the caller sends the batch: the
// enqueue then rides on a round trip the business write makes anyway.
// Prepare p with Client.PrepareEnqueue, and pass the error of sending the
// batch through EnqueueError to get the typed refusals InsertTx returns.
func (d *Driver) QueueInsert(b *pgx.Batch, p driver.InsertParams) {
	scheduled := p.Scheduled()
	for start := 0; start < len(p.Rows); start += insertChunk {
		rows := p.Rows[start:min(start+insertChunk, len(p.Rows))]
		b.Queue(d.insertStatement(len(rows), scheduled), insertArgs(rows, false, scheduled)...)
	}
	if p.Notify && len(p.Rows) > 0 {
		b.Queue("SELECT pg_notify($1, '')", d.channel)
	}
}

// insertChunk keeps one statement well under PostgreSQL's 65535 parameters.
const insertChunk = 1000

// insertStatement is a multi-row VALUES insert with scalar parameters only,
// so that it runs unchanged through pgx and through any database/sql
// PostgreSQL driver. A scheduled one also sets available_at, the later of
// each row's NotBefore (NULL for none) and the insert's clock_timestamp()
// (the column's default, migration 6): a NotBefore in the past never puts
// a row below the claim's floor (ADR 0019), where it would wait for a
// sweep. Rows without one keep the plain statement, which the enqueue
// benchmarks measure.
func (d *Driver) insertStatement(n int, scheduled bool) string {
	d.insertMu.Lock()
	defer d.insertMu.Unlock()
	key := insertShape{rows: n, scheduled: scheduled}
	if s, ok := d.insertSQL[key]; ok {
		return s
	}
	var b strings.Builder
	b.WriteString("INSERT INTO " + d.table("outbox") + " (message_id, type, key, payload, headers")
	cols := 5
	if scheduled {
		b.WriteString(", available_at")
		cols = 6
	}
	b.WriteString(") VALUES ")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		k := i * cols
		fmt.Fprintf(&b, "($%d::uuid,$%d,$%d,$%d::json,$%d::json", k+1, k+2, k+3, k+4, k+5)
		if scheduled {
			fmt.Fprintf(&b, ",greatest($%d::timestamptz,clock_timestamp())", k+6)
		}
		b.WriteByte(')')
	}
	s := b.String()
	if n <= 100 { // the common sizes; odd ones are not worth keeping
		d.insertSQL[key] = s
	}
	return s
}

// insertShape names one cached insert statement.
type insertShape struct {
	rows      int
	scheduled bool
}

func insertArgs(rows []driver.InsertRow, portable, scheduled bool) []any {
	cols := 5
	if scheduled {
		cols = 6
	}
	args := make([]any, 0, len(rows)*cols)
	for _, r := range rows {
		headers := r.Headers
		if len(headers) == 0 {
			headers = []byte("{}")
		}
		if portable {
			args = append(args, uuidString(r.MessageID), r.Type, r.Key, string(r.Payload), string(headers))
		} else {
			args = append(args, r.MessageID, r.Type, r.Key, string(r.Payload), string(headers))
		}
		if scheduled {
			var notBefore any // NULL: greatest() takes the insert's time
			if !r.NotBefore.IsZero() {
				notBefore = r.NotBefore
			}
			args = append(args, notBefore)
		}
	}
	return args
}

func uuidString(u [16]byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[b>>4], hex[b&0xf])
	}
	return string(out)
}

// The SQLSTATEs the outbox's insert trigger raises (migrations/002_catalog.sql).
const (
	stateUnownedType = "MS001"
	stateBadKey      = "MS002"
	stateBadType     = "MS003"
	stateBadHeaders  = "MS004"
)

// EnqueueError turns the database's refusal of an outbox row into the
// driver's errors: a type without an owner becomes a
// *driver.UnownedTypeError naming the type; a key, type or headers the
// table refuses is wrapped with the database's message, which says what is
// wrong and how to fix it. Any other error (nil included) is returned as
// it is. It reads errors of pgx and of any database/sql driver whose errors
// report a SQLSTATE (pgx's stdlib, lib/pq).
func EnqueueError(err error) error {
	var se interface{ SQLState() string }
	if err == nil || !errors.As(err, &se) {
		return err
	}
	switch se.SQLState() {
	case stateUnownedType:
		return &driver.UnownedTypeError{Type: refusedType(err)}
	case stateBadKey, stateBadType, stateBadHeaders:
		return fmt.Errorf("mensageria/postgres: the outbox refused the message: %w", err)
	}
	return err
}

// refusedType reads the type back from the trigger's message, where it
// stands as a JSON string after "message type ".
func refusedType(err error) string {
	msg := err.Error()
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg = pe.Message
	}
	const marker = "message type "
	i := strings.Index(msg, marker)
	if i < 0 {
		return ""
	}
	var typ string
	if json.NewDecoder(strings.NewReader(msg[i+len(marker):])).Decode(&typ) != nil {
		return ""
	}
	return typ
}
