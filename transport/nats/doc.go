// Package nats carries mensageria messages into and out of NATS JetStream.
//
//   - Sender publishes each delivery with Nats-Msg-Id set to the message id,
//     so the server drops a redelivery that arrives inside the stream's
//     duplicate window. Outside the window the redelivery is stored again
//     and the receiver's inbox must absorb it. Client.Start hands the
//     Sender the relay's retry horizon (mensageria.RelayAware) and the
//     Sender warns, naming both figures, when the window is shorter; Check
//     does the same on demand.
//   - Sink consumes a stream into the database with the stream sequence
//     stored in the same transaction as the effect: exactly once into that
//     database. Messages are acknowledged after the commit.
//
// Tests run against a real nats-server (MENSAGERIA_TEST_NATS_URL, default
// nats://127.0.0.1:4222).
package nats
