// Package guarantee is the guarantee map of mensageria as data: for each
// transport, what holds on each hop from the business transaction to the
// receiver's effect, and where idempotency still has to defend. `mensageria
// explain` prints it for a config, and docs can be checked against it, so
// the claims live in one place.
package guarantee

import "slices"

// Level names how many times something happens.
type Level string

// The levels, weakest first.
const (
	// AtMostOnce: never more than once, possibly zero times; an attempt
	// whose outcome is unknown is in doubt (it applied zero or one time)
	// and is surfaced, never repeated automatically.
	AtMostOnce Level = "at-most-once"
	// AtLeastOnce: never zero times, possibly more than once.
	AtLeastOnce Level = "at-least-once"
	// EffectivelyOnce: may be delivered many times, but the effect is
	// applied once (deduplicated where the effect commits).
	EffectivelyOnce Level = "effectively-once"
	// ExactlyOnce: happens once, inside a stated boundary.
	ExactlyOnce Level = "exactly-once"
)

// Hop is one step of a message's path and the level that holds on it.
type Hop struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Level Level  `json:"level"`
	// Why is what makes the level hold, or what breaks the stronger one.
	Why string `json:"why"`
	// Requires is what the user must do for the level to hold; empty when
	// it holds by construction.
	Requires string `json:"requires,omitempty"`
}

// Map is the guarantee map of one route.
type Map struct {
	Transport string `json:"transport"`
	Hops      []Hop  `json:"hops"`
	// EndToEnd is the strongest level from commit to effect when every
	// requirement is met, and Boundary is where it stops holding.
	EndToEnd Level  `json:"end_to_end"`
	Boundary string `json:"boundary"`
	// Defend lists where duplicates can still reach a side effect, so
	// idempotency has to be built there.
	Defend []string `json:"defend"`
	// Ordering describes the per-key order, when the route asks for it.
	Ordering string `json:"ordering,omitempty"`
}

// Transports lists the transports the map describes.
func Transports() []string {
	out := make([]string, 0, len(maps))
	for t := range maps {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Options describe a route beyond its transport.
type Options struct {
	// Ordered: the route delivers each key's messages in enqueue order.
	Ordered bool
	// NoElection: replicas relay concurrently (election none).
	NoElection bool
	// KafkaTransactional: a kafka route relayed with the transactional
	// sender (a transactional_id in the config).
	KafkaTransactional bool
	// AtMostOnce: an http route delivered at most once, to a receiver
	// that is not idempotent (delivery: at_most_once); Reconcile: it has a
	// reconcile probe for its messages in doubt.
	AtMostOnce bool
	Reconcile  bool
}

// For returns the map of a transport; ok is false for one it does not know.
func For(transport string, o Options) (Map, bool) {
	m, ok := maps[transport]
	if !ok {
		return Map{}, false
	}
	// Copy the slices so callers cannot change the shared data.
	m.Hops = slices.Clone(m.Hops)
	m.Defend = slices.Clone(m.Defend)
	if transport == "kafka" && o.KafkaTransactional {
		m.Hops[1] = kafkaTransactionalHop
		m.EndToEnd = ExactlyOnce
		m.Boundary = "exactly-once from the outbox into Kafka for read_committed consumers, and from Kafka into one database through kafka.Sink; it holds while one relay at a time uses the transactional id (election leader) and an unsettled batch comes back within the sender's Retain (default 5 minutes; the relay's lease is 30 seconds)"
		m.Defend = []string{
			"consumers that apply through anything but kafka.Sink or an Inbox (their own effects repeat on their own redeliveries)",
			"consumers in read_uncommitted mode see aborted records",
			"effects outside the database that stores the offsets",
			"a second relay of the same topic under another transactional id, or election none: a batch can then be produced twice",
		}
	}
	if transport == "http" && o.AtMostOnce {
		m = atMostOnceMap(o.Reconcile)
	}
	if o.Ordered {
		m.Ordering = orderedText
		if o.NoElection {
			m.Ordering += " " + orderedNoElection
		}
	}
	return m, true
}

const orderedText = "per key, in enqueue order: only the oldest unsettled message of a key is claimed, so a failing message blocks its own key and no other; a redelivery repeats a message but never overtakes it."

const orderedNoElection = "With election none, concurrent relays keep the order only as long as the leases hold: a relay paused past its lease can deliver late; prefer election leader for ordered routes."

// kafkaTransactionalHop replaces the kafka route's at-least-once hop when
// the relay uses the transactional sender.
var kafkaTransactionalHop = Hop{
	From:     "outbox",
	To:       "Kafka topic",
	Level:    ExactlyOnce,
	Why:      "each relay batch is one Kafka transaction that also records which outbox rows it carried; a relay restarted between the Kafka commit and the database settle reads that record back and answers the rows delivered instead of producing them again",
	Requires: "election leader (one relay uses the transactional id at a time), the same transactional_id on every replica of the app and a different one per app and route, read_committed consumers",
}

// enqueueHop is the first hop of every route: the outbox row and the
// business write share one transaction.
var enqueueHop = Hop{
	From:     "business transaction",
	To:       "outbox",
	Level:    ExactlyOnce,
	Why:      "the message row commits in the caller's transaction: rolled back, no message; committed, exactly one row",
	Requires: "enqueue with EnqueueTx (or a plain INSERT) inside the business transaction; Enqueue outside it is a separate commit",
}

var maps = map[string]Map{
	"http": {
		Transport: "http",
		Hops: []Hop{
			enqueueHop,
			{
				From:  "outbox",
				To:    "receiver",
				Level: AtLeastOnce,
				Why:   "the relay marks a message delivered only after a 2xx; timeouts, 5xx, lost acks and relay crashes (expired leases) send it again; 4xx and max attempts park it as dead with its reason, never dropped",
			},
			{
				From:     "receiver",
				To:       "effect",
				Level:    EffectivelyOnce,
				Why:      "the inbox stores (consumer, natural key) in the same transaction as the effect: a repeat is a no-op answered 200 duplicate",
				Requires: "the receiver applies the effect through an Inbox on the same database as the effect, with a dedup window longer than the sender's retry horizon",
			},
		},
		EndToEnd: EffectivelyOnce,
		Boundary: "the receiver's database transaction: the inbox record and the effect commit together",
		Defend: []string{
			"side effects outside the receiver's transaction (emails, calls to third parties, files): pass the natural key on as their idempotency key",
			"a receiver that does not use the inbox: its handler must be idempotent by itself (upsert by natural key, compare-and-set on a version)",
			"a message older than the dedup window is refused with 409 and parked as dead: it needs a human decision, never a blind re-apply",
		},
	},
	"kafka": {
		Transport: "kafka",
		Hops: []Hop{
			enqueueHop,
			{
				From:     "outbox",
				To:       "Kafka topic",
				Level:    AtLeastOnce,
				Why:      "the idempotent producer removes its own retries within one producer session, but a relay that crashes after the produce and before the settle publishes the message again",
				Requires: "for exactly-once on this hop, set transactional_id on the route (kafka.TransactionalSender in the library): each batch is one Kafka transaction that also records its outbox positions, so a restarted relay reconciles instead of producing again; it needs one active relay per app and read_committed consumers",
			},
			{
				From:     "Kafka topic",
				To:       "Kafka topic",
				Level:    ExactlyOnce,
				Why:      "consume-transform-produce in one Kafka transaction commits the consumed offsets and the produced records together; epochs fence zombie producers",
				Requires: "transactional producer, read_committed consumers",
			},
			{
				From:     "Kafka topic",
				To:       "effect in a database",
				Level:    ExactlyOnce,
				Why:      "the consumed offset and the effect commit in one database transaction, so a restart resumes exactly after the last applied record",
				Requires: "the effect lives in the same database as the stored offsets",
			},
		},
		EndToEnd: EffectivelyOnce,
		Boundary: "exactly-once holds inside Kafka and from Kafka into one database; the outbox-to-Kafka hop is at-least-once, so consumers dedupe by message id or natural key",
		Defend: []string{
			"the outbox-to-Kafka hop: the same message can be on the topic twice (same message id); consume through an inbox or a dedup by message id",
			"consumers in read_uncommitted mode see aborted records",
			"effects outside the database that stores the offsets",
		},
	},
	"nats": {
		Transport: "nats",
		Hops: []Hop{
			enqueueHop,
			{
				From:  "outbox",
				To:    "JetStream stream",
				Level: AtLeastOnce,
				Why:   "a republish after a relay crash carries the same Nats-Msg-Id, which the stream drops inside its duplicate window; past that window it is stored again",
			},
			{
				From:     "JetStream stream",
				To:       "effect in a database",
				Level:    EffectivelyOnce,
				Why:      "consumers ack after the effect and are redelivered on a missing ack; the inbox absorbs the repeat. With nats.Sink the stream sequence commits in the effect's transaction, which makes this hop exactly-once into that database",
				Requires: "apply through an Inbox, or consume with nats.Sink on the same database as the effect",
			},
		},
		EndToEnd: EffectivelyOnce,
		Boundary: "the consumer's database transaction; the stream's duplicate window only covers republishes within it",
		Defend: []string{
			"republishes older than the stream's duplicate window",
			"consumers that ack before applying (they lose messages) or apply outside a transaction with the dedup record",
			"effects outside the consumer's database",
		},
	},
}

// atMostOnceMap is an http route's map when its receiver cannot be
// idempotent (docs/adr/0015-at-most-once-in-doubt.md): the at-least-once
// hop and the inbox's effectively-once do not hold there, and nothing
// dedupes a repeat, so the relay sends at most once and surfaces doubt.
func atMostOnceMap(probe bool) Map {
	doubt := "an operator decides ('mensageria doubt list', 'doubt resolve'): the route has no reconcile probe"
	if probe {
		doubt = "the route's reconcile probe asks the receiver a lease after the attempt and every reconcile interval: applied is delivered, not applied is sent once more under the same rules, no answer leaves it in doubt (an operator may still decide with 'mensageria doubt resolve')"
	}
	return Map{
		Transport: "http",
		Hops: []Hop{
			enqueueHop,
			{
				From:     "outbox",
				To:       "receiver",
				Level:    AtMostOnce,
				Why:      "before the requests of a claim the relay commits a mark on their rows, and a marked row is never claimed again; 2xx is delivered, a 3xx or 4xx refusal parks it dead, and only a failure that proves the request never reached the receiver (a refused connection, a name that does not resolve, a TLS failure, no free request slot, a status declared not_applied) is retried. Anything else (a timeout, a connection cut after the request was written, another 5xx, the relay dying after the mark) leaves the message in doubt: applied zero or one time, never sent again automatically",
				Requires: "one active relay (election leader; a claim's token and lease fence the rest), a request that ends inside the lease's delivery window (the relay refuses a longer timeout)",
			},
			{
				From:     "receiver",
				To:       "effect",
				Level:    AtMostOnce,
				Why:      "the receiver applies every request it gets, so each attempt that reaches it is one effect: the relay's single attempt is what bounds the effects",
				Requires: "the receiver applies a request once (no retries of its own behind a gateway); with a reconcile probe, the probe reports the receiver's own record of the effect",
			},
		},
		EndToEnd: AtMostOnce,
		Boundary: "the mark committed before the request: a message is applied at most once; one whose attempt's outcome is unknown is in doubt, counted in 'mensageria status' and /metrics, until " + doubt,
		Defend: []string{
			"the messages in doubt: " + doubt,
			"resolving 'retry' for an effect that exists applies it twice: check the receiver first",
			"effects the receiver causes outside itself (calls to third parties): they repeat if it retries them",
			"a request delayed in the network past a lease after the relay's deadline, and HTTP/2's retry after a peer's PROTOCOL_ERROR (docs/adr/0015)",
		},
	}
}
