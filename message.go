package mensageria

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Message is what a sender enqueues.
type Message struct {
	// Type names the message kind; the app must have registered a Sender
	// for it. Required.
	Type string
	// Key is the natural key of the domain event (an order number, a
	// closing's id). Receivers dedupe on it and ordered types keep its
	// messages in enqueue order. Required.
	Key string
	// Payload is a JSON document; nil is stored as {}.
	Payload json.RawMessage
	// Headers travel with the message (request id, traceparent).
	Headers map[string]string
	// ID is assigned by Enqueue (a UUIDv7) when zero.
	ID uuid.UUID
	// NotBefore schedules the message: the relay delivers it no earlier
	// than this instant, as the database's clock reads it, and as soon as
	// it can after (docs/guarantees.md, "Scheduled delivery"). Zero, or
	// any time already past, is now. It must be before year 10000 (UTC);
	// a later one is refused with an *InvalidMessageError. On an Ordered
	// route the message keeps its place in its key's order: the key's
	// later messages wait until it is delivered, whatever their own
	// NotBefore.
	NotBefore time.Time
}

// Delivery is one attempt to deliver a message, as a Sender sees it.
type Delivery struct {
	// ID is the message id; stable across attempts.
	ID      uuid.UUID
	Type    string
	Key     string
	Payload json.RawMessage
	Headers map[string]string
	// CreatedAt is the database time at enqueue.
	CreatedAt time.Time
	// Attempt is 1 on the first delivery.
	Attempt int
	// Seq is the outbox row id: increasing in claim order, unique per
	// outbox table.
	Seq int64
	// AtMostOnce is set on an AtMostOnce route: the Sender must not send
	// the request twice on its own (no transparent retry of a request that
	// may have left), and should wrap the errors that prove it never
	// reached the receiver with NotSent.
	AtMostOnce bool
}

// Header names the library sets or reads.
const (
	HeaderRequestID   = "X-Request-Id"
	HeaderTraceparent = "traceparent"
)
