// Package driver is the storage seam of mensageria: the one interface every
// database backend implements, and the plain data types that cross it.
//
// The root package holds all policy (which types to claim, backoff, dead
// letters, election timing); a driver only runs statements. Every time a
// driver compares or stamps comes from the database clock, never from the
// caller's, so that replicas with skewed clocks agree on leases.
//
// Backends live in sub-packages (driver/postgres, driver/sqlite) and must pass
// the conformance suite in driver/drivertest.
package driver

import (
	"context"
	"errors"
	"time"
)

// ErrNotSupported is returned by an optional capability a backend lacks
// (for example Listen on SQLite). Callers fall back to polling.
var ErrNotSupported = errors.New("mensageria/driver: not supported by this driver")

// ErrSchemaBehind is wrapped by Migrate in check mode when the database is at
// an older schema version than this build needs.
var ErrSchemaBehind = errors.New("mensageria/driver: schema version is behind")

// ErrSchemaAhead is wrapped by Migrate when the database was migrated by a
// newer build than this one; running would risk misreading its rows.
var ErrSchemaAhead = errors.New("mensageria/driver: schema version is ahead of this build")

// Driver is a backend. It is safe for concurrent use.
type Driver interface {
	// Migrate brings the schema to the newest version (MigrateUp) or only
	// verifies it (MigrateCheck). Concurrent calls from several processes
	// serialize on a database lock, so two apps starting at once never
	// collide.
	Migrate(ctx context.Context, mode MigrateMode) (MigrateResult, error)
	// MigrationSQL returns the DDL of every migration after version from,
	// in order, for teams that apply schema changes with their own tool.
	MigrationSQL(from int) ([]Migration, error)

	// Insert writes p.Rows in one transaction of the driver's own.
	Insert(ctx context.Context, p InsertParams) error
	// InsertTx writes p.Rows inside the caller's transaction. tx must be one
	// of the transaction types the driver documents; anything else returns a
	// *TxTypeError and writes nothing. When the database refuses the rows,
	// nothing of the call is ever committed; whether the caller's
	// transaction stays usable is the backend's own rule (PostgreSQL aborts
	// it, as any failed statement does).
	InsertTx(ctx context.Context, tx any, p InsertParams) error

	// Claim leases up to p.Limit pending, due rows of p.Types to p.Token.
	Claim(ctx context.Context, p ClaimParams) ([]Job, error)
	// Settle records outcomes. Each row changes only while it is still
	// leased to p.Token and that lease has not expired; it returns how many
	// rows did change.
	Settle(ctx context.Context, p SettleParams) (int, error)

	// Elector returns the election handle of one app. See Elector.
	Elector(app string, lease time.Duration) (Elector, error)
	// Listen subscribes to enqueue notifications. It returns ErrNotSupported
	// where the backend cannot push them.
	Listen(ctx context.Context) (Listener, error)

	// InTx runs fn in one database transaction, committed when fn returns
	// nil and rolled back otherwise. It is how receivers apply an effect
	// together with its dedup record or consumed offset.
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error

	// Purge deletes, in bounded batches, delivered outbox rows older than
	// p.DeliveredBefore (zero: every delivered row) and inbox rows older
	// than p.InboxBefore (zero: none, the inbox is the dedup memory).
	Purge(ctx context.Context, p PurgeParams) (PurgeResult, error)

	// Stats reports the outbox per type, for status and metrics.
	Stats(ctx context.Context) ([]TypeStats, error)
	// ListMessages pages through outbox rows, for operators.
	ListMessages(ctx context.Context, f ListFilter) ([]Job, error)
	// Revive moves dead rows back to pending (retry) or deletes them
	// (discard) and returns how many it changed.
	Revive(ctx context.Context, p ReviveParams) (int, error)

	// Close releases the driver's own resources (never a pool the caller
	// passed in).
	Close() error
}

// Tx is a transaction opened by Driver.InTx.
type Tx interface {
	// Raw is the backend's transaction (pgx.Tx, *sql.Tx) so the effect can
	// run its own statements in it.
	Raw() any
	// InboxRecord stores the dedup record of one effect. When the record
	// exists already it reports Duplicate; a concurrent twin waits for the
	// first transaction and then reports Duplicate (or proceeds if the first
	// rolled back). A message created before now-window is reported Stale
	// and nothing is stored, because its record may have been purged.
	InboxRecord(ctx context.Context, r InboxRecord) (InboxResult, error)
	// Offset reads the stored position of a consumer on one partition of a
	// source stream; ok is false when none was stored.
	Offset(ctx context.Context, consumer, source string, partition int32) (offset int64, ok bool, err error)
	// SetOffset stores that position, in this transaction.
	SetOffset(ctx context.Context, consumer, source string, partition int32, offset int64) error
}

// Elector is one app's handle on the "one active relay" election.
type Elector interface {
	// Acquire makes or keeps this process the leader. It must be called at
	// least every lease/3: a leader that stops calling it (crashed, paused,
	// cut off) loses leadership once the lease passes. It returns the fence
	// epoch while this process leads; a new leader always gets a higher
	// epoch than every previous one.
	Acquire(ctx context.Context) (epoch int64, leader bool, err error)
	// Release gives leadership up at once, so a standby can take over
	// without waiting for the lease.
	Release(ctx context.Context) error
	// Holder reports the current leader as known to the database.
	Holder(ctx context.Context) (Leader, error)
}

// Leader describes an election holder.
type Leader struct {
	App    string
	Holder string // "host/pid/random" of the process; empty when none
	Epoch  int64
	Since  time.Time
}

// Listener delivers a wake-up after enqueues. Spurious wake-ups are allowed;
// missed ones are covered by polling.
type Listener interface {
	C() <-chan struct{}
	Close() error
}

// MigrateMode selects what Migrate does.
type MigrateMode int

const (
	// MigrateUp applies every missing migration.
	MigrateUp MigrateMode = iota
	// MigrateCheck verifies the version and changes nothing.
	MigrateCheck
)

// MigrateResult tells where the schema was and is.
type MigrateResult struct {
	From, To int
	Applied  []int
}

// Migration is one numbered schema step.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// State of an outbox row.
type State string

// The states of an outbox row. A row in flight is pending with a lease.
const (
	StatePending   State = "pending"
	StateDelivered State = "delivered"
	StateDead      State = "dead"
)

// InsertParams is one enqueue.
type InsertParams struct {
	Rows []InsertRow
	// Notify wakes listening relays when the rows commit. Backends without
	// notifications ignore it.
	Notify bool
}

// InsertRow is one message to enqueue.
type InsertRow struct {
	MessageID [16]byte
	Type      string
	Key       string
	Payload   []byte // a JSON document
	Headers   []byte // a JSON object of strings, or nil
}

// Fence ties a claim to an election epoch: the claim returns nothing unless
// the app's current epoch is still Epoch, so a deposed leader cannot claim.
type Fence struct {
	App   string
	Epoch int64
}

// ClaimParams selects what to claim.
type ClaimParams struct {
	Types []string
	// OrderedTypes is the subset of Types delivered in per-key order: only
	// the oldest unsettled row of each (type, key) may be claimed.
	OrderedTypes []string
	Limit        int
	Lease        time.Duration
	Token        int64
	Fence        *Fence // nil when election is off
}

// Job is a claimed (or listed) outbox row.
type Job struct {
	ID          int64
	MessageID   [16]byte
	Type        string
	Key         string
	Payload     []byte
	Headers     []byte
	State       State
	Attempt     int // 1 on the first delivery
	CreatedAt   time.Time
	AvailableAt time.Time
	DeliveredAt *time.Time
	LastError   string
}

// SettleParams are the outcomes of one claimed batch.
type SettleParams struct {
	Token int64
	// Delivered rows are deleted at once unless KeepDelivered, which marks
	// them delivered for Purge to delete after a retention period. Either
	// way the per-type delivered counts behind Stats are kept.
	Delivered     []int64
	KeepDelivered bool
	Retry         []Retry
	Dead          []Failure
	// Release gives rows back at once without counting the attempt, for a
	// relay that stops before delivering them.
	Release []int64
}

// Retry schedules another attempt after Delay.
type Retry struct {
	ID    int64
	Delay time.Duration
	Error string
}

// Failure parks a row as dead with its reason.
type Failure struct {
	ID    int64
	Error string
}

// InboxRecord is the dedup record of one applied effect.
type InboxRecord struct {
	Consumer  string
	Key       string
	MessageID [16]byte
	// CreatedAt is when the sender enqueued the message (its database
	// time); zero skips the staleness check.
	CreatedAt time.Time
	// Window is the dedup window; zero skips the staleness check.
	Window time.Duration
}

// InboxResult tells whether the effect should run.
type InboxResult struct {
	Duplicate bool
	Stale     bool
	// FirstMessageID is the message that applied the effect first, when
	// Duplicate.
	FirstMessageID [16]byte
}

// PurgeParams bounds one purge pass.
type PurgeParams struct {
	DeliveredBefore time.Duration // age, on the database clock
	InboxBefore     time.Duration
	Batch           int
}

// PurgeResult counts what one purge pass deleted.
type PurgeResult struct {
	Outbox, Inbox int
}

// TypeStats is the state of the outbox for one type.
type TypeStats struct {
	Type            string
	Pending         int64
	InFlight        int64
	Dead            int64
	DeliveredLastHr int64
	OldestPending   time.Duration // age of the oldest pending row
}

// ListFilter selects rows for ListMessages.
type ListFilter struct {
	State   State
	Types   []string
	IDs     []int64
	AfterID int64
	Limit   int
}

// ReviveParams selects dead rows to retry or discard: by IDs, or all dead
// rows of Types when IDs is empty.
type ReviveParams struct {
	IDs     []int64
	Types   []string
	Discard bool
}

// TxTypeError is returned by InsertTx for a transaction value the driver
// cannot use.
type TxTypeError struct {
	Driver string
	Got    string
	Want   []string
}

func (e *TxTypeError) Error() string {
	return "mensageria: " + e.Driver + " driver cannot enqueue in a transaction of type " + e.Got + " (use " + joinOr(e.Want) + ")"
}

func joinOr(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += " or "
		}
		out += v
	}
	return out
}
