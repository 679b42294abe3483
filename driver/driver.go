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
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrNotSupported is returned by an optional capability a backend lacks
// (for example Listen on SQLite). Callers fall back to polling.
var ErrNotSupported = errors.New("mensageria/driver: not supported by this driver")

// ErrConfig is wrapped by every backend's configuration error; the root
// package exports it as mensageria.ErrConfig, so one errors.Is test covers
// a refused Config and a refused driver setting alike.
var ErrConfig = errors.New("mensageria: invalid config")

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
	//
	// The catalog names the one app that owns the schema's migrations: the
	// first app to migrate up records itself, and MigrateUp from any other
	// app (p.App empty included) fails with an *OwnerConflictError naming
	// the owner. MigrateCheck is open to every app.
	Migrate(ctx context.Context, p MigrateParams) (MigrateResult, error)
	// MigrationSQL returns the DDL of every migration after version from,
	// in order, for teams that apply schema changes with their own tool.
	MigrationSQL(from int) ([]Migration, error)

	// Insert writes p.Rows in one transaction of the driver's own. A row
	// whose type has no owner in the catalog fails the call with an
	// *UnownedTypeError (the database itself refuses such rows, from any
	// client).
	Insert(ctx context.Context, p InsertParams) error
	// InsertTx writes p.Rows inside the caller's transaction. tx must be one
	// of the transaction types the driver documents; anything else returns a
	// *TxTypeError and writes nothing. When the database refuses the rows,
	// nothing of the call is ever committed; whether the caller's
	// transaction stays usable is the backend's own rule (PostgreSQL aborts
	// it, as any failed statement does).
	InsertTx(ctx context.Context, tx any, p InsertParams) error

	// Claim leases up to p.Limit pending, due rows of p.Types to p.Token.
	// Each row is read apart: one the driver cannot read (a plain INSERT
	// stored it) is leased and returned with Job.Unreadable set, never
	// an error that fails the others; ListMessages reads rows the same
	// way.
	Claim(ctx context.Context, p ClaimParams) ([]Job, error)
	// Settle records outcomes. Each row changes only while it is still
	// leased to p.Token and that lease has not expired. The result sorts
	// every row of p into Settled, Fenced or Expired, so a caller tells "another
	// relay owns it now" from "my lease ran out"; an error means the
	// database refused the settle and nothing of it was recorded.
	Settle(ctx context.Context, p SettleParams) (SettleResult, error)

	// Elector returns the election handle of one app. See Elector.
	Elector(app string, lease time.Duration) (Elector, error)
	// Listen subscribes to enqueue notifications. It returns ErrNotSupported
	// where the backend cannot push them.
	Listen(ctx context.Context) (Listener, error)

	// InTx runs fn in one database transaction, committed when fn returns
	// nil and rolled back otherwise. It is how receivers apply an effect
	// together with its dedup record or consumed offset. The receiver
	// acknowledges what InTx committed, so the commit is never weaker than
	// the backend's own commits: PostgreSQL raises a session's
	// synchronous_commit off to on; SQLite commits with the database's
	// synchronous setting (NORMAL: durable against a crash of the process,
	// not of the machine; docs/guarantees.md).
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error

	// Purge deletes, in bounded batches, one app's expired rows: delivered
	// outbox rows of p.Types older than p.DeliveredBefore (zero: every
	// delivered row), and the inbox records of the consumers the catalog
	// says p.App owns, each older than that consumer's own window (a
	// consumer registered without a window keeps its records), with the
	// applied inbox queue rows of those consumers received as long ago.
	// Pending and dead queue rows are never purged. Rows of other apps are
	// never touched.
	Purge(ctx context.Context, p PurgeParams) (PurgeResult, error)

	// Register records, in one transaction, that p.App owns p.Resources:
	// each one absent from the catalog, or left unclaimed by the upgrade
	// that created the catalog, becomes p.App's; a consumer already p.App's
	// takes the window given. If any resource belongs to another app,
	// nothing is recorded and the error is an *OwnerConflictError naming
	// every conflict.
	Register(ctx context.Context, p RegisterParams) (RegisterResult, error)
	// Owners lists the catalog, of one app or (app "") of all, sorted by
	// kind and name.
	Owners(ctx context.Context, app string) ([]Ownership, error)
	// Transfer moves one resource from app from to app to: the explicit
	// operator step for handing a type (or anything else) over. It fails
	// with an *OwnerConflictError when the resource is not from's (from ""
	// is an unclaimed resource), and with ErrNotOwned when the catalog
	// does not have it; to "" releases it (deletes the entry).
	Transfer(ctx context.Context, p TransferParams) error

	// Stats reports the outbox per type, for status and metrics, each with
	// its owning app from the catalog ("" when none).
	Stats(ctx context.Context) ([]TypeStats, error)
	// ListMessages pages through outbox rows, for operators.
	ListMessages(ctx context.Context, f ListFilter) ([]Job, error)
	// Revive moves dead rows back to pending (retry) or deletes them
	// (discard) and returns how many it changed. A retry leaves a row
	// an at-most-once attempt marked (AttemptedAt set) dead unless
	// p.ClearMark: back to pending with its mark it would only read as in
	// doubt, never be sent (ADR 0015).
	Revive(ctx context.Context, p ReviveParams) (int, error)

	// SetRouteStates records the state of routes, one row per type,
	// replacing what was recorded for those types; with p.Replace it also
	// deletes p.App's rows of every type not listed. The active relay
	// writes it on transitions only, so another process ('mensageria
	// status') can read how each route fares.
	SetRouteStates(ctx context.Context, p RouteStatesParams) error
	// RouteStates lists the recorded route states, of one app or (app "")
	// of all, sorted by type.
	RouteStates(ctx context.Context, app string) ([]RouteState, error)

	// Close releases the driver's own resources (never a pool the caller
	// passed in).
	Close() error
}

// TxRegisterer is implemented by backends on which the caller's open
// transaction holds the database's one write lock (SQLite): there a first
// EnqueueTx records its app's ownership inside that transaction, where a
// registration on a connection of its own would wait for the lock. What it
// records commits or rolls back with the caller's transaction; a refusal
// leaves that transaction as it was.
type TxRegisterer interface {
	RegisterTx(ctx context.Context, tx any, p RegisterParams) (RegisterResult, error)
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
	// Expires is when the holder's lease runs out, on the database clock
	// (zero when the driver does not say).
	Expires time.Time
	// Lapsed names the last holder when its lease ran out without being
	// given up (Holder is then empty): a relay that crashed, or that runs
	// but cannot renew.
	Lapsed string
	// Health is what the holder said of its own health at its last
	// renewal (Client.Ready's reason): empty while it was ready.
	Health string
	// Outsider describes a session that is not a relay but holds what an
	// earlier version of the driver elected with (PostgreSQL: the app's
	// advisory lock); empty when none. It no longer stops any relay.
	Outsider string
}

// HealthReporter is an Elector that records, with each round it wins,
// what its relay says of its own health, so that an operator's status
// shows why a leader is not ready.
type HealthReporter interface {
	// ReportHealth sets what the next rounds record ("" for ready).
	ReportHealth(health string)
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

// MigrateParams says what Migrate does and on whose behalf.
type MigrateParams struct {
	Mode MigrateMode
	// App is the app migrating; it must be the catalog's migrations owner
	// (or the schema must have none yet) for MigrateUp. Empty is an
	// anonymous caller, allowed to migrate up only a schema that has no
	// owner recorded, and then records none.
	App string
}

// MigrateResult tells where the schema was and is.
type MigrateResult struct {
	// From is the schema's version before the call, To after it.
	From, To int
	// Latest is the newest version this build knows: a check that finds
	// the schema behind reports From = To < Latest.
	Latest  int
	Applied []int
	// Owner is the migrations owner after the call ("" when none).
	Owner string
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
	// StateInDoubt is reported (Job.State, ListFilter.State) for a pending
	// row of an at-most-once route whose attempt was marked (see
	// AtMostOnce.Mark) and whose lease is no longer live: the request may
	// have reached the receiver, and no claim takes it again. It is stored
	// as a pending row with AttemptedAt set, so it keeps its key's place
	// in per-key order.
	StateInDoubt State = "in_doubt"
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
	// NotBefore schedules the row: no claim takes it before this instant,
	// compared with the database clock. The row's available_at is the
	// later of NotBefore and the database's time of the insert, so a zero
	// or past NotBefore is due at once, as a row without one is. The
	// caller rounds it up to the microsecond and keeps it before year
	// 10000 (what every backend's timestamps hold).
	NotBefore time.Time
}

// Scheduled reports whether any row carries a NotBefore, so that a backend
// can keep its plain insert, which sets no available_at, for the rest.
func (p *InsertParams) Scheduled() bool {
	for i := range p.Rows {
		if !p.Rows[i].NotBefore.IsZero() {
			return true
		}
	}
	return false
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
	// LastRoute names the app and the destination that gave the last
	// failed attempt's answer (see Retry.Route); empty before any.
	LastRoute string
	// Owner is the type's owning app in the catalog, when listed ("" for a
	// type no app owns).
	Owner string
	// AttemptedAt is when an at-most-once attempt was marked (AtMostOnce.Mark)
	// and not yet settled by a definite outcome; nil otherwise.
	AttemptedAt *time.Time
	// Unreadable says why the driver could not read a column of the row
	// (a message_id that is not a UUID, an infinite timestamp: what a plain
	// INSERT stored and the backend's types cannot carry), naming the
	// column, as in "created_at is infinity"; empty for a readable row.
	// Such a row is still returned, with its ID, Type and what else could
	// be read, so that one row never fails a whole claim or listing: the
	// relay parks it dead with this reason, under the claim's lease.
	Unreadable string
}

// UnreadableColumn is the Unreadable text of one column: "column what".
// A second column is appended after a semicolon, so the reason names
// every column the row has wrong.
func UnreadableColumn(prev, column, what string) string {
	r := column + " " + what
	if prev == "" {
		return r
	}
	return prev + "; " + r
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
	// InDoubt leaves rows in doubt: the lease is given up, the mark is
	// kept (set now when there was none), and no claim takes them again;
	// only a reconcile probe (AtMostOnce.ClaimInDoubt) or an operator
	// (AtMostOnce.Resolve) moves them on.
	InDoubt []Doubt
	// Release gives rows back at once without counting the attempt, for a
	// relay that stops before delivering them. It clears a row's mark:
	// the caller releases only rows it did not send.
	Release []int64
}

// Doubt leaves a row in doubt with the reason (Error) and who gave it
// (Route, as Retry.Route); a reconcile probe may take it again after
// ProbeAfter.
type Doubt struct {
	ID         int64
	Error      string
	Route      string
	ProbeAfter time.Duration
}

// Retry schedules another attempt after Delay.
type Retry struct {
	ID    int64
	Delay time.Duration
	Error string
	// Route says who answered: the relaying app and the destination,
	// "pedidos → http https://billing/m2m" (stored as the row's LastRoute).
	Route string
	// Uncounted takes back the attempt the claim counted, as Release
	// does, while still scheduling the row after Delay with its error: the
	// destination failed, not the message.
	Uncounted bool
}

// Failure parks a row as dead with its reason.
type Failure struct {
	ID    int64
	Error string
	Route string // as Retry.Route
}

// IDs returns every row of p once, in the order Delivered, Retry, Dead,
// InDoubt, Release: the order a backend applies the outcomes in, so a row listed
// twice takes (and is reported with) its first.
func (p *SettleParams) IDs() []int64 {
	out := make([]int64, 0, len(p.Delivered)+len(p.Retry)+len(p.Dead)+len(p.Release))
	seen := make(map[int64]bool, cap(out))
	add := func(id int64) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, id := range p.Delivered {
		add(id)
	}
	for _, r := range p.Retry {
		add(r.ID)
	}
	for _, f := range p.Dead {
		add(f.ID)
	}
	for _, f := range p.InDoubt {
		add(f.ID)
	}
	for _, id := range p.Release {
		add(id)
	}
	return out
}

// SettleResult sorts the rows of one settle by what happened to them.
type SettleResult struct {
	// Settled rows took their outcome.
	Settled []int64
	// Fenced rows were not changed because another relay owns them now:
	// they carry another lease token, or were settled and deleted by it.
	Fenced []int64
	// Expired rows still carry this token but its lease ran out before the
	// settle; they were not changed and will be claimed again.
	Expired []int64
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
	// PayloadHash is a digest of the payload, kept with the record; nil
	// stores none.
	PayloadHash []byte
}

// InboxResult tells whether the effect should run.
type InboxResult struct {
	Duplicate bool
	Stale     bool
	// FirstMessageID is the message that applied the effect first, when
	// Duplicate.
	FirstMessageID [16]byte
	// FirstPayloadHash is the PayloadHash stored with the first record
	// when Duplicate (nil for a record stored without one), so the caller
	// can tell a redelivery from a different message under the same key.
	FirstPayloadHash []byte
}

// PurgeParams bounds one purge pass of one app.
type PurgeParams struct {
	// App whose consumers' inbox records are purged, each after its own
	// window in the catalog.
	App string
	// Types whose delivered rows are purged (the app's own).
	Types           []string
	DeliveredBefore time.Duration // age, on the database clock
	Batch           int
}

// PurgeResult counts what one purge pass deleted.
type PurgeResult struct {
	Outbox, Inbox int
	// InboxQueue counts the applied rows of the inbox queue deleted (see
	// InboxQueueTx), on a backend that has it.
	InboxQueue int
}

// TypeStats is the state of the outbox for one type.
type TypeStats struct {
	Type            string
	Owner           string // the owning app in the catalog; "" for none
	Pending         int64
	InFlight        int64
	Dead            int64
	DeliveredLastHr int64
	OldestPending   time.Duration // age of the oldest pending row, since its enqueue; scheduled rows not yet due left out
	// InDoubt counts rows in doubt (StateInDoubt), which Pending and
	// InFlight leave out; OldestInDoubt is the age of the oldest one's
	// mark.
	InDoubt       int64
	OldestInDoubt time.Duration
	// Scheduled counts pending rows that are not due yet and were never
	// attempted: enqueued with a NotBefore (or a plain INSERT's
	// available_at) in the future, no attempt counted and no error
	// recorded. Pending and OldestPending leave them out. A row waiting
	// for a retry's backoff has an error recorded (a retry always stores
	// one, "" included), so it stays in Pending, as do rows released
	// back due at once.
	Scheduled int64
}

// DueReporter is implemented by a Driver that can say when the next row of
// some types comes due, so that a relay with nothing to claim sleeps until
// then instead of a whole poll interval: a scheduled message, or one
// waiting for a retry's backoff, is claimed as it becomes due.
type DueReporter interface {
	// NextDue returns how long, on the database clock, until the earliest
	// pending row of types that is not due yet becomes due: not under a
	// live lease, not marked by an at-most-once attempt, its available_at
	// after the database's now. ok is false when there is none. A row
	// that will not be claimable when due (behind its key's head on an
	// ordered route) may be reported all the same: a claim then finds
	// nothing, and the next NextDue reports a later row.
	NextDue(ctx context.Context, types []string) (wait time.Duration, ok bool, err error)
}

// ListFilter selects rows for ListMessages.
type ListFilter struct {
	State   State
	Types   []string
	IDs     []int64
	AfterID int64
	// Limit is the most rows one call returns: DefaultListLimit when 0 or
	// less, never more than MaxListLimit (EffectiveLimit). More rows are
	// paged with AfterID.
	Limit int
}

// The page of ListMessages: every driver returns DefaultListLimit rows
// when no Limit is given and at most MaxListLimit whatever it asks, so
// that one call's rows stay bounded in memory and a caller pages the same
// way on every backend.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// EffectiveLimit is the page size ListMessages uses for f: f.Limit
// bounded to 1..MaxListLimit, DefaultListLimit when not given.
func (f ListFilter) EffectiveLimit() int {
	if f.Limit <= 0 {
		return DefaultListLimit
	}
	return min(f.Limit, MaxListLimit)
}

// ReviveParams selects dead rows to retry or discard: by IDs, or all dead
// rows of Types when IDs is empty.
type ReviveParams struct {
	IDs     []int64
	Types   []string
	Discard bool
	// ClearMark retries the selected rows an at-most-once attempt marked
	// too, clearing the mark so that the relay sends them again: the
	// receiver may already have applied such a row's effect, so only an
	// operator who checked asks for it. Without it a retry leaves them
	// dead. Discard ignores it.
	ClearMark bool
}

// MarkedDead returns the ids of the dead rows p selects (by IDs, or else
// by Types) that an at-most-once attempt marked: the ones a Revive
// retries only with ClearMark. It pages through ListMessages.
func MarkedDead(ctx context.Context, d Driver, p ReviveParams) ([]int64, error) {
	f := ListFilter{State: StateDead, IDs: p.IDs, Limit: MaxListLimit}
	if len(p.IDs) == 0 {
		if len(p.Types) == 0 {
			return nil, nil
		}
		f.Types = p.Types
	}
	var marked []int64
	for {
		jobs, err := d.ListMessages(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.AttemptedAt != nil {
				marked = append(marked, j.ID)
			}
		}
		if len(jobs) < f.Limit || len(p.IDs) > 0 {
			return marked, nil
		}
		f.AfterID = jobs[len(jobs)-1].ID
	}
}

// RouteState is what the active relay last recorded of one type's route
// (the types of one Sender share it): the state of its flow control.
type RouteState struct {
	Type  string
	App   string
	Route string // "<app> → <destination>"
	// State is "flowing", "paused" or "probing".
	State string
	// Since is when the route entered State and Until, while paused, when
	// its probe is due (zero otherwise), both as the relay's clock saw
	// them.
	Since, Until time.Time
	// Failures counts destination-level failures in a row.
	Failures  int
	LastError string
	// UpdatedAt is when the row was written, on the database clock.
	UpdatedAt time.Time
}

// RouteStatesParams is one write of route states.
type RouteStatesParams struct {
	App    string
	States []RouteState
	// Replace deletes App's rows of every type States does not list.
	Replace bool
}

// RoutePauser is implemented by a Driver that records operators' pauses
// of routes: an operator who knows a destination will be down pauses its
// types on purpose, and every relay of the owning app, whichever is
// leader and however often it restarts, claims nothing of a paused type
// until an operator resumes it. It is apart from a route's flow control
// (RouteState "paused"), which the relay decides and lifts by itself.
type RoutePauser interface {
	// PauseRoute records that p.App's relays stop claiming p.Type, by
	// p.PausedBy for p.Reason at the database time. Pausing a paused type
	// replaces who and why and keeps its first time. The caller checks
	// that the catalog gives p.App the type.
	PauseRoute(ctx context.Context, p PauseRouteParams) (RoutePause, error)
	// ResumeRoute deletes the pause of typ and returns it; found is false
	// when typ was not paused.
	ResumeRoute(ctx context.Context, typ string) (resumed RoutePause, found bool, err error)
	// RoutePauses lists the pauses of one app or (app "") of all, sorted
	// by type.
	RoutePauses(ctx context.Context, app string) ([]RoutePause, error)
}

// PauseRouteParams is an operator's pause of one type.
type PauseRouteParams struct {
	App, Type string
	// PausedBy names the operator (a login, "cli:<user>"); Reason says
	// why. Both are required, and shown wherever the pause is.
	PausedBy, Reason string
}

// RoutePause is a recorded operator's pause of one type.
type RoutePause struct {
	Type, App, PausedBy, Reason string
	// PausedAt is when the type was first paused, on the database clock.
	PausedAt time.Time
}

// MaxPauseReasonLen bounds a pause's reason and MaxPausedByLen its
// operator, in bytes, on every backend.
const (
	MaxPauseReasonLen = 1000
	MaxPausedByLen    = 200
)

// PauseRouteError is a pause every driver refuses before writing: a
// field missing, too long or not text.
type PauseRouteError struct {
	Field, Reason string
}

func (e *PauseRouteError) Error() string {
	return fmt.Sprintf("mensageria: route pause: %s %s", e.Field, e.Reason)
}

// CheckPauseRoute returns a *PauseRouteError for a pause no backend may
// record; drivers call it before writing, so every backend refuses the
// same ones.
func CheckPauseRoute(p PauseRouteParams) error {
	for _, f := range []struct {
		name, v string
		max     int
	}{{"app", p.App, 200}, {"type", p.Type, 200}, {"paused by", p.PausedBy, MaxPausedByLen}, {"reason", p.Reason, MaxPauseReasonLen}} {
		switch {
		case strings.TrimSpace(f.v) == "":
			return &PauseRouteError{Field: f.name, Reason: "is required"}
		case len(f.v) > f.max:
			return &PauseRouteError{Field: f.name, Reason: fmt.Sprintf("is %d bytes, over %d", len(f.v), f.max)}
		case !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0):
			return &PauseRouteError{Field: f.name, Reason: "is not valid UTF-8 text"}
		}
	}
	return nil
}

// ResourceKind is a kind of thing the catalog gives an owner.
type ResourceKind string

// The kinds of resources in the catalog.
const (
	// ResourceType is a message type: only its owner may enqueue it (a
	// plain SQL INSERT of a type no app owns is refused) and only its
	// owner's relay claims it.
	ResourceType ResourceKind = "type"
	// ResourceConsumer is an inbox consumer, with its dedup window: only
	// its owner's relay purges its records, after that window.
	ResourceConsumer ResourceKind = "consumer"
	// ResourceKafkaTransactionalID is a Kafka transactional id: two apps
	// producing under one id would fence each other.
	ResourceKafkaTransactionalID ResourceKind = "kafka_transactional_id"
	// ResourceMigrations is the schema's migrations (Name MigrationsName).
	ResourceMigrations ResourceKind = "migrations"
)

// MigrationsName is the Name of the ResourceMigrations entry.
const MigrationsName = "schema"

// Resource is one entry of the catalog.
type Resource struct {
	Kind ResourceKind
	Name string
	// Window is a consumer's dedup window: its records are kept this long.
	// Zero keeps them forever (an inbox without a staleness check). Other
	// kinds ignore it.
	Window time.Duration
}

// Ownership is a catalog entry with its owner.
type Ownership struct {
	Resource
	// App owns it; "" for a resource the upgrade to the catalog found in
	// use and left unclaimed, taken by the first app that registers it.
	App   string
	Since time.Time
}

// RegisterParams is what one app claims at start.
type RegisterParams struct {
	App       string
	Resources []Resource
}

// RegisterResult is the state of the app's claims after Register.
type RegisterResult struct {
	// OutboxID identifies this outbox (schema, database) for good: made by
	// the migration, it lets records kept outside the database (a Kafka
	// transactional position) say which outbox they belong to.
	OutboxID [16]byte
	// Unlisted are resources the catalog gives the app that p did not
	// list: left as they are (moving them is an operator step), and worth
	// a warning, since rows of such a type stay pending.
	Unlisted []Ownership
}

// TransferParams moves one resource between apps.
type TransferParams struct {
	Kind ResourceKind
	Name string
	From string // the current owner; "" for an unclaimed resource
	To   string // the new owner; "" releases the resource
}

// ErrOwnerConflict is wrapped by *OwnerConflictError.
var ErrOwnerConflict = errors.New("mensageria: owned by another app")

// ErrNotOwned is returned by Transfer for a resource the catalog lacks.
var ErrNotOwned = errors.New("mensageria: not in the ownership catalog")

// ErrUnownedType is wrapped by *UnownedTypeError.
var ErrUnownedType = errors.New("mensageria: message type has no owner app")

// UnownedTypeError is returned by Insert and InsertTx when a row's type has
// no owner in the catalog: the database refuses it (for a plain SQL INSERT
// too), because no relay would ever claim it. Nothing of the call is
// written.
type UnownedTypeError struct {
	Type string // "" when the backend could not say which
}

func (e *UnownedTypeError) Error() string {
	t := "a message type"
	if e.Type != "" {
		t = "message type " + strconv.Quote(e.Type)
	}
	return "mensageria: " + t + " has no owner app in the catalog, so no relay would ever deliver it; nothing was enqueued (the app that sends it records it at start, or 'mensageria owners register')"
}

// Is makes errors.Is(err, ErrUnownedType) true.
func (e *UnownedTypeError) Is(target error) bool { return target == ErrUnownedType }

// OwnerConflictError says that App asked for resources other apps own.
type OwnerConflictError struct {
	App       string
	Conflicts []Ownership // each with its actual owner
}

func (e *OwnerConflictError) Error() string {
	if len(e.Conflicts) == 0 {
		return "mensageria: app " + strconv.Quote(e.App) + ": ownership conflict"
	}
	c := e.Conflicts[0]
	owner := strconv.Quote(c.App)
	if c.App == "" {
		owner = "no app (unclaimed)"
	}
	who := "app " + strconv.Quote(e.App)
	if e.App == "" {
		who = "a caller that names no app"
	}
	msg := "mensageria: " + describe(c.Kind, c.Name) + " is owned by app " + owner + "; " + who + " cannot claim it"
	if c.Kind == ResourceMigrations {
		msg = "mensageria: the schema's migrations are owned by app " + owner + "; " + who + " cannot migrate it up (migrate check is open to every app)"
	}
	if n := len(e.Conflicts) - 1; n > 0 {
		msg += " (and " + strconv.Itoa(n) + " more)"
	}
	return msg + "; an operator moves ownership with 'mensageria owners transfer'"
}

// Is makes errors.Is(err, ErrOwnerConflict) true.
func (e *OwnerConflictError) Is(target error) bool { return target == ErrOwnerConflict }

func describe(k ResourceKind, name string) string {
	switch k {
	case ResourceType:
		return "message type " + strconv.Quote(name)
	case ResourceConsumer:
		return "inbox consumer " + strconv.Quote(name)
	case ResourceKafkaTransactionalID:
		return "Kafka transactional id " + strconv.Quote(name)
	}
	return string(k) + " " + strconv.Quote(name)
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

// InboxQueueTx is implemented by the Tx of a backend whose schema holds the
// inbox queue: deliveries stored by a receiver (mensageria receive) for an
// app that applies them by SQL in its own transactions (docs/config.md, the
// inbox queue SQL protocol). QueueInbox is the receiver's side; the other
// methods are the app's, the same protocol the SQL functions (PostgreSQL)
// and the documented statements (SQLite) carry out, for apps in Go and for
// the conformance suite.
type InboxQueueTx interface {
	// QueueInbox stores d as a pending row of its consumer's queue, due at
	// once, in this transaction (with the delivery's dedup record, stored
	// by InboxRecord before it), and returns the row's id.
	QueueInbox(ctx context.Context, d QueuedDelivery) (id int64, err error)
	// ClaimInbox returns up to limit pending rows of consumer that are due,
	// oldest first, locked to this transaction: another transaction's claim
	// skips them (PostgreSQL) or waits for this one to end (SQLite, whose
	// write transactions take turns). limit must be at least 1.
	ClaimInbox(ctx context.Context, consumer string, limit int) ([]InboxRow, error)
	// InboxApplied marks a pending row applied, in this transaction: it
	// commits with the app's effect or not at all.
	InboxApplied(ctx context.Context, id int64) error
	// InboxFailed records a failed application of a pending row: one more
	// attempt, the reason, and the row due again after retryAfter. It
	// returns the attempts recorded so far.
	InboxFailed(ctx context.Context, id int64, reason string, retryAfter time.Duration) (attempts int, err error)
	// InboxDead parks a pending row as dead with its reason: never claimed
	// again until someone sets it back to pending.
	InboxDead(ctx context.Context, id int64, reason string) error
}

// InboxQueueReader is implemented by a Driver whose schema holds the inbox
// queue.
type InboxQueueReader interface {
	// InboxQueueStats reports the queue per consumer, sorted by consumer.
	InboxQueueStats(ctx context.Context) ([]InboxQueueStats, error)
}

// QueuedDelivery is one accepted delivery for the inbox queue.
type QueuedDelivery struct {
	Consumer  string
	Type      string
	Key       string
	MessageID [16]byte
	Payload   []byte // a JSON document
	Headers   []byte // a JSON object of strings, or nil for none
	// CreatedAt is when the sender enqueued it (its database time); zero
	// when unknown, stored as the time it is queued.
	CreatedAt time.Time
}

// State of an inbox queue row.
const (
	InboxPending = "pending"
	InboxApplied = "applied"
	InboxDead    = "dead"
)

// InboxRow is a row of the inbox queue, as a claim returns it.
type InboxRow struct {
	ID         int64
	Consumer   string
	Type       string
	Key        string
	MessageID  [16]byte
	Payload    []byte
	Headers    []byte
	CreatedAt  time.Time
	ReceivedAt time.Time
	State      string
	// Attempts counts the failed applications recorded (InboxFailed,
	// InboxDead).
	Attempts    int
	AvailableAt time.Time
	LastError   string
}

// InboxQueueStats is the state of one consumer's inbox queue.
type InboxQueueStats struct {
	Consumer string
	// Pending counts rows waiting to be applied, due or waiting for a
	// retry.
	Pending int64
	Dead    int64
	// OldestPending is the age of the oldest pending row (since it was
	// received); zero when none.
	OldestPending time.Duration
}

// ErrInboxRowNotPending is wrapped by *InboxRowError.
var ErrInboxRowNotPending = errors.New("mensageria: inbox queue row is not pending")

// InboxRowError is returned by InboxApplied, InboxFailed and InboxDead for
// a row that is not pending: applied or parked already (by another
// transaction, since a claim's lock keeps everyone else off it), or a row
// that does not exist. The caller rolls its transaction back: its effect
// must not commit. PostgreSQL raises it as SQLSTATE MS010.
type InboxRowError struct {
	ID int64
	// State is the row's state, "" when there is no such row.
	State string
}

func (e *InboxRowError) Error() string {
	if e.State == "" {
		return "mensageria: inbox queue row " + strconv.FormatInt(e.ID, 10) + " does not exist; roll back"
	}
	return "mensageria: inbox queue row " + strconv.FormatInt(e.ID, 10) + " is " + e.State + ", not pending (another transaction applied or parked it); roll back"
}

// Is makes errors.Is(err, ErrInboxRowNotPending) true.
func (e *InboxRowError) Is(target error) bool { return target == ErrInboxRowNotPending }

// DeliveryHistory is implemented by a Driver that keeps the per-minute
// delivered counts behind Stats' DeliveredLastHr: the console's
// delivered-per-minute chart reads them.
type DeliveryHistory interface {
	// DeliveredPerMinute returns the counts of the minutes that began less
	// than since ago (on the database clock) of each of types, sorted by
	// type and minute; a minute with no delivery has no entry.
	DeliveredPerMinute(ctx context.Context, types []string, since time.Duration) ([]DeliveredMinute, error)
}

// DeliveredMinute is the number of rows of one type settled delivered in
// one minute.
type DeliveredMinute struct {
	Type   string
	Minute time.Time // the minute's start
	N      int64
}

// AtMostOnce is implemented by a Driver that can carry at-most-once routes:
// routes to a receiver that is not idempotent, where at most one attempt
// that may have reached the receiver is made, and a message whose outcome
// is unknown is left in doubt instead of sent again (docs/adr/0015).
//
// The row's life on such a route: Claim leases it as usual; Mark records,
// committed synchronously before anything is sent, that the attempt
// begins; Settle records a definite outcome as usual (Retry and Release
// clear the mark: the caller knows the request never reached the
// receiver) or leaves it InDoubt. A marked row whose lease runs out
// without a settle (its relay died, or lost its lease) is in doubt too.
// No Claim ever takes a row in doubt; ClaimInDoubt leases it for a
// reconcile probe, whose answer is settled like any other, and Resolve
// is the operator's decision, recorded with who, when and why.
type AtMostOnce interface {
	// Mark records that the rows of p, each still leased to p.Token under
	// a live lease and not marked yet, are about to be sent, and returns
	// those it marked. The mark commits synchronously (it survives a
	// server crash) before Mark returns: only the rows returned may be
	// sent. An error means no row may be sent; some may be marked all the
	// same (a commit whose answer was lost), which a Release takes back.
	Mark(ctx context.Context, p MarkParams) ([]int64, error)
	// ClaimInDoubt leases up to p.Limit rows in doubt of p.Types to
	// p.Token for p.Lease, whose probe time has come and whose last lease
	// ended at least p.Quiet ago, without counting an attempt, fenced as
	// Claim is. The rows stay marked: a Release of them would be a lie, so
	// a prober settles each as Delivered, Retry, Dead or InDoubt.
	ClaimInDoubt(ctx context.Context, p InDoubtClaimParams) ([]Job, error)
	// Resolve is an operator's decision on rows in doubt (not under a live
	// lease): each becomes delivered, pending again (retry, due now, its
	// attempts kept) or dead, and the decision is recorded with p.By,
	// p.Reason and the database time. Rows not in doubt are left alone and
	// listed in NotInDoubt.
	Resolve(ctx context.Context, p ResolveParams) (ResolveResult, error)
	// Resolutions lists the recorded decisions, newest first, of the
	// message ids given (all when none), at most limit (100 when <= 0).
	Resolutions(ctx context.Context, messageIDs [][16]byte, limit int) ([]ResolutionRecord, error)
}

// InDoubtClaimParams selects rows in doubt for a reconcile probe.
type InDoubtClaimParams struct {
	Types []string
	Limit int
	Lease time.Duration
	Token int64
	Fence *Fence
	// Quiet is how long after a row's lease ended it may be probed: a
	// relay that died (or was cut off) after sending left its request on
	// the way, and a probe that looks before that request could have
	// arrived would find "not applied" and send it again.
	Quiet time.Duration
}

// MarkParams are the rows of one claim about to be sent on an at-most-once
// route.
type MarkParams struct {
	Token int64
	IDs   []int64
}

// Resolution is what an operator decides about a row in doubt.
type Resolution string

// The decisions about a row in doubt.
const (
	// ResolveDelivered: the receiver has the effect.
	ResolveDelivered Resolution = "delivered"
	// ResolveRetry: the receiver does not have it; one more attempt.
	ResolveRetry Resolution = "retry"
	// ResolveDead: nobody is to send it again.
	ResolveDead Resolution = "dead"
)

// ResolveParams is one operator decision.
type ResolveParams struct {
	IDs     []int64
	Outcome Resolution
	// By names who decided (an operator, "reconcile probe"); Reason says
	// why. Both are required.
	By, Reason string
	// KeepDelivered keeps a delivered row (as Settle does) instead of
	// deleting it.
	KeepDelivered bool
}

// ResolveResult sorts the rows of one Resolve.
type ResolveResult struct {
	Resolved   []int64
	NotInDoubt []int64
}

// ResolutionRecord is one recorded decision about a row in doubt.
type ResolutionRecord struct {
	OutboxID   int64
	MessageID  [16]byte
	Type, Key  string
	Outcome    Resolution
	By, Reason string
	At         time.Time
}

// ErrInvalidResolve is wrapped by Resolve's refusal of a decision that
// lacks what must be recorded (no rows, an unknown outcome, no By or no
// Reason); nothing is changed.
var ErrInvalidResolve = errors.New("mensageria: invalid resolution of messages in doubt")

// CheckResolve returns an error wrapping ErrInvalidResolve when p cannot be
// recorded; backends call it first.
func CheckResolve(p ResolveParams) error {
	switch {
	case len(p.IDs) == 0:
		return fmt.Errorf("%w: no message ids given", ErrInvalidResolve)
	case p.Outcome != ResolveDelivered && p.Outcome != ResolveRetry && p.Outcome != ResolveDead:
		return fmt.Errorf("%w: outcome %q is none of delivered, retry, dead", ErrInvalidResolve, p.Outcome)
	case strings.TrimSpace(p.By) == "":
		return fmt.Errorf("%w: say who decides (By)", ErrInvalidResolve)
	case strings.TrimSpace(p.Reason) == "":
		return fmt.Errorf("%w: say why (Reason): the decision is recorded for whoever looks at the message later", ErrInvalidResolve)
	}
	return nil
}
