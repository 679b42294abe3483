// Package chaos is the fault-injection suite of mensageria: real relay and
// receiver processes on one machine, a fault proxy between them, a nemesis
// that kills, pauses and cuts them off on a schedule, and a checker that
// proves from the recorded history that nothing was lost, doubled, stolen
// or reordered — as package verdict defines those, for the demo too — and
// that leases, elections and the wire kept their promises
// (docs/reliability.md).
//
// The checker is pure Go over a History, so it is tested without a
// database; the harness (chaos_test.go) fills a History from a real run.
package chaos

import "time"

// Lease event kinds, as the outbox trigger records them.
const (
	KindClaim     = "claim"
	KindDelivered = "delivered"
	KindRetry     = "retry"
	KindDead      = "dead"
	KindRelease   = "release"
	// KindPostpone is a retry that took its attempt back: the destination
	// failed while its route answered nothing else.
	KindPostpone = "postpone"
)

// History is everything a run recorded. Messages are named by N, a number
// the producer gives each message (it is also the low half of its id).
type History struct {
	// Owner maps each message type to the app that registered it.
	Owner map[string]string
	// Ordered holds the types delivered in per-key order.
	Ordered map[string]bool

	// Enqueued are the messages whose business transaction committed.
	Enqueued []Enqueued
	// RolledBack are messages whose transaction was rolled back on
	// purpose: they must never be seen anywhere.
	RolledBack []int64

	// Arrivals are the requests that reached the receiver, in arrival
	// order, recorded before the inbox ran.
	Arrivals []Arrival
	// Effects are the effects the inbox applied, in commit order of their
	// sequence (a later effect of one key always has a larger Seq, since
	// the next message of an ordered key is claimed only after this one
	// was settled).
	Effects []Effect
	// Leases are the outbox rows' lease transitions, recorded by a trigger
	// in the same transaction as the claim or settle that made them.
	Leases []LeaseEvent

	// Dead are the messages parked as dead at the end of the run.
	Dead []int64
	// Pending are the messages still unsettled at the end of the run.
	Pending []int64

	// Business is the state of each producer's business row.
	Business []Business

	// Elections are the epochs each relay process reported winning.
	Elections []Election

	// Figures, not checked: faults injected by kind and settles the
	// relays saw refused for a lost lease (outcomes "fenced" and
	// "expired").
	Faults map[string]int
	Fenced int
}

// Enqueued is one committed message.
type Enqueued struct {
	N    int64
	Type string
	Key  string
	// Index is the message's position among the committed messages of
	// its (type, key), from 0.
	Index int
	// Poison marks a message the receiver refuses for good (HTTP 422):
	// it, and only it, may end dead.
	Poison bool
}

// Arrival is one request seen by the receiver.
type Arrival struct {
	ID      int64
	N       int64
	Type    string
	Attempt int
	// Route is the app whose receiver endpoint took the request.
	Route string
	// Relay is "app/replica#incarnation" of the relay process that sent
	// it.
	Relay string
	// AckDropped: the receiver was told to apply and then drop the
	// answer (a lost acknowledgement).
	AckDropped bool
}

// Effect is one applied effect.
type Effect struct {
	Seq int64
	N   int64
	// ArrivalID is the arrival that applied it.
	ArrivalID int64
}

// LeaseEvent is one claim or settle of an outbox row.
type LeaseEvent struct {
	Seq  int64
	Row  int64 // outbox id
	N    int64
	Type string
	Kind string
	// Token and Until are the lease set by a claim, or the lease a settle
	// found on the row.
	Token int64
	Until time.Time
	// At is the database time of the transaction, the clock the lease
	// guard compares with.
	At time.Time
	// Relay is the relay process whose connection made the change ("" if
	// it was not one of the harness's relays).
	Relay string
}

// Business is a producer's business row: every committed transaction
// bumped it once, every rolled-back one left it alone.
type Business struct {
	Producer  int
	Committed int64
	Value     int64
}

// Election is one relay process taking its app's leadership.
type Election struct {
	// Relay is "app/replica#incarnation".
	Relay string
	Epoch int64
}
