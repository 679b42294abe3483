// Package transporttest is the conformance suite every mensageria
// transport must pass: what a Sender (and a BatchSender) owes the relay,
// checked through the real relay on PostgreSQL. A transport's test calls
// Run with a function that gives each subtest a fresh destination:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) *transporttest.Harness { ... })
//	}
//
// The suite holds every transport to one contract:
//
//   - Every message enqueued reaches the destination with its id, key and
//     payload (Deliver); once each when Features.ExactlyOnce says the
//     destination drops a redelivery, at least once otherwise.
//   - Send's errors are classified as the relay needs them (Classify): a
//     failure of the destination is mensageria.Unavailable (the route
//     pauses, no attempt is spent), a message the destination refuses
//     for good is mensageria.Permanent (it parks dead), anything else is a
//     plain error (retried with backoff); never both, and the cause is
//     kept (errors.Is).
//   - A destination that is missing or refused at Start fails Start with
//     an error saying what to do, and nothing is claimed (StartRefused).
//   - A destination down when the relay starts, or going down while it
//     relays, pauses the route: every failure is the route's, none spends
//     an attempt, nothing goes dead; Ready stays nil while Routes reports
//     the route paused with its error; the outage is logged once as the
//     route pauses and once as it resumes, and the Sender adds nothing at
//     warning level but its start check's line; when the destination is
//     back every message is delivered (Outage).
//   - A destination that goes missing or refuses the route while the
//     relay runs (a topic or stream deleted, a right withdrawn) is
//     answered as the route's failure, saying what is wrong, well before
//     the delivery's deadline (RouteFault).
//   - One message the destination refuses for good parks dead after its
//     first attempt with the destination's reason, and the others flow:
//     the route never pauses for it (Poison). A BatchSender answers such
//     a batch per message: the refused one Permanent, the others
//     delivered, or with Features.AtomicBatch retryable and held by
//     none, then delivered when sent again without it (Batch).
//   - With Features.OrderedPerKey, an ordered route's messages of one key
//     reach the destination in enqueue order (Ordered).
//
// A part of the Harness left nil skips the tests that need it (the
// transport's own tests then say why); the rest always run.
package transporttest

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/xadm/mensageria"
)

// Harness is what a transport gives each subtest: a Sender and a way to
// read and to break its destination. Every function may fail t.
type Harness struct {
	// NewSender returns the Sender under test, for a destination of this
	// subtest's own, logging to log. The harness closes it (t.Cleanup).
	// Required.
	NewSender func(t *testing.T, log *slog.Logger) mensageria.Sender
	// Received returns the messages the destination holds, in its order
	// (the order one key's messages arrived in). Required.
	Received func(t *testing.T) []Received

	// Classify is the transport's classification of a failure, and
	// Classes the failures it must classify (the table of docs/config.md,
	// "Broker errors"). Without Classify the Classify test is skipped.
	Classify func(err error) error
	Classes  []Class

	// StartRefusals are destinations Start must refuse.
	StartRefusals []StartRefusal
	// Outage takes the whole destination down and back; nil skips the
	// Outage tests.
	Outage *Outage
	// RouteFaults are faults of the destination that concern every
	// message of the route while the server still answers.
	RouteFaults []RouteFault
	// Poison is a message the destination refuses for good; nil skips
	// the Poison and Batch tests.
	Poison *Poison

	Features Features
}

// Features are the guarantees a transport gives beyond the contract every
// transport keeps; the suite checks each one a transport claims.
type Features struct {
	// ExactlyOnce: the destination holds each message once however often
	// the relay delivered it (NATS's duplicate window on the message id,
	// Kafka transactions read committed). Without it the suite checks
	// at least once, and duplicates are the receiver's to drop (its
	// inbox): an idempotent producer or an HTTP receiver that did not
	// answer in time may hold a message twice after an outage.
	ExactlyOnce bool
	// OrderedPerKey: the destination keeps one key's messages in the
	// order the relay hands them over, within a batch too (one Kafka
	// partition per key, one stream, one request or one at a time).
	// A transport that spreads a batch over parallel connections cannot
	// claim it.
	OrderedPerKey bool
	// AtomicBatch: a BatchSender's batch is all or nothing (a Kafka
	// transaction). A message refused for good fails its neighbours with
	// a plain, retryable error, and the destination shows none of them;
	// the relay sends them again without it. Without it a batch settles
	// per message: the neighbours are delivered at once.
	AtomicBatch bool
}

// Received is one message as the destination holds it.
type Received struct {
	// ID is the message id the transport carried (a header, the
	// envelope's id), as a UUID string.
	ID      string
	Key     string
	Payload []byte
}

// Kind is how the relay treats a failed delivery.
type Kind int

const (
	// Retryable: a plain error; the attempt counts and the message is
	// retried after a backoff.
	Retryable Kind = iota
	// Permanent: mensageria.Permanent, the message's fault; it parks
	// dead at once.
	Permanent
	// Unavailable: mensageria.Unavailable, the route's fault; the route
	// pauses and the attempt does not count.
	Unavailable
)

func (k Kind) String() string {
	switch k {
	case Permanent:
		return "the message's (Permanent)"
	case Unavailable:
		return "the route's (Unavailable)"
	}
	return "retryable"
}

// Class is a failure and how Classify must classify it.
type Class struct {
	Err  error
	Want Kind
}

// StartRefusal is a destination Start must refuse: missing, or not this
// client's to use.
type StartRefusal struct {
	Name string
	// NewSender returns a Sender of such a destination.
	NewSender func(t *testing.T, log *slog.Logger) mensageria.Sender
	// Is checks Start's error (its type, its cause).
	Is func(err error) bool
	// Says is what Start's error must say, each of them.
	Says []string
}

// Outage takes the whole destination down (a server stopped, its port
// closed) and brings it back as it was.
type Outage struct {
	Down func(t *testing.T)
	Up   func(t *testing.T)
	// Says: one failure at least says all of these (the refused
	// connection and where to, once the client knows).
	Says []string
	// PausedSays: the relay's one "route paused" line says each of these.
	PausedSays []string
	// StartWarning is in the Sender's one warning line when the relay
	// starts with the destination down ("could not be checked at start");
	// empty when the Sender does not check its destination at start.
	StartWarning string
}

// RouteFault is a fault of the destination that every message of the
// route meets while the server still answers (the topic or stream
// deleted, the right to write it withdrawn).
type RouteFault struct {
	Name string
	// Begin starts the fault; End lifts it, the destination as it was.
	Begin, End func(t *testing.T)
	// Says: every failure while the fault lasts says all of these.
	Says []string
	// PausedSays: the relay's one "route paused" line says each of these.
	PausedSays []string
	// Is, when set, holds for every failure of the test, those after End
	// included (a typed error naming the destination).
	Is func(err error) bool
}

// Poison is a message the destination refuses for good (too large, a
// receiver's refusal).
type Poison struct {
	Payload json.RawMessage
	// Says: its dead letter's reason says each of these.
	Says []string
}
