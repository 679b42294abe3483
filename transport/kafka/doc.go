// Package kafka carries mensageria messages into and out of Kafka, through
// franz-go.
//
// Four pieces, each with its own guarantee (docs/guarantees.md has the map):
//
//   - Sender: the relay's Sender for one topic, on the idempotent producer.
//     At least once from the outbox into Kafka: a retry inside one producer
//     session is deduplicated by the broker, a redelivery by the relay
//     (after a crash or a lost acknowledgement) is a new record. Receivers
//     dedupe through an inbox, by the natural key or the message id header;
//     DeliveryOf reads a record back into the delivery an Inbox applies.
//   - TransactionalSender: each relay batch is one Kafka transaction that
//     also writes the batch's outbox positions to a compacted topic. After a
//     crash between the Kafka commit and the database settle, the next
//     relay reads those positions back and does not produce the batch
//     again: exactly once from the outbox into Kafka for read_committed
//     consumers, within the boundary its doc comment states.
//   - Sink: Kafka into the database. The effect and the consumed offset
//     commit in one database transaction, and consumption resumes from the
//     offsets stored there: exactly once into the same database.
//   - Transformer: consume, transform and produce inside Kafka with the
//     consumed offsets sent into the producing transaction (franz-go's
//     GroupTransactSession): exactly once inside the cluster only.
//
// The tests run against kfake, franz-go's in-process cluster; no Kafka broker
// was available where this package was written.
package kafka
