// Package m2mhttp carries mensageria messages between applications over
// HTTP: a Sender the relay uses to POST each message as a JSON envelope,
// and a Receiver (an http.Handler) that authenticates the request, decodes
// the envelope strictly and applies it through a mensageria.Inbox, so a
// redelivered message has no second effect.
//
// The wire contract is docs/openapi.yaml. In short:
//
//	POST <URL exactly as configured>
//	Authorization: Bearer <token>
//	Content-Type: application/json
//	X-Request-Id: <message header X-Request-Id, else the message id; required>
//	Idempotency-Key: <natural key, when it is printable ASCII>
//	traceparent: <when the message carries one>
//
//	{"id":"<uuid>","type":"...","key":"...","created_at":"<RFC 3339>",
//	 "attempt":1,"payload":<JSON>,"headers":{"...":"..."}}
//
// The receiver answers 200 {"status":"applied"} or 200
// {"status":"duplicate"}; every refusal is an RFC 9457 problem document,
// among them 409 conflict for a dedup key already applied with another
// payload (by another message or by this one's id), and 400 for a string
// anywhere in the envelope holding NUL or an unpaired UTF-16 surrogate
// escape, a header name repeated, a created_at before the Unix epoch, or
// an X-Request-Id missing or malformed (docs/adr/0026).
// The Sender maps the status to the relay's outcome:
//
//	2xx                               delivered
//	401, 407, 408, 429, 5xx, network  the destination's (mensageria.Unavailable):
//	                                  retried without spending the attempt; the
//	                                  route pauses and probes (Retry-After honoured
//	                                  as a lower bound, for the route too)
//	425                               retried, as the message's attempt
//	3xx                               dead: redirects are never followed
//	400, 403, 404, 409, 413, 422,     dead, with the problem's detail as reason
//	other 4xx
//
// "Network" is a refused or reset connection, a DNS failure, a TLS
// handshake refused, a timeout, or every request slot to the destination
// staying busy until the relay's lease: none of them is about the
// message, so a rotated token (401) or a receiver that is down no longer
// turns a route's backlog into dead letters (docs/adr/0009-route-flow-control.md).
//
// A BatchSender (NewBatchSender) carries the messages of one type in a
// claimed batch in one request to the same URL instead:
//
//	Content-Type: application/vnd.mensageria.batch+json
//
//	{"messages":[<envelope>, ...]}
//
// The receiver refuses a malformed batch body whole (400) and a batch over
// its MaxBatchItems whole (413); otherwise it refuses each malformed or
// unknown-type envelope on its own, applies the rest through each type's
// Inbox.ApplyBatch (one transaction per type rather than per message),
// and answers 200 with one result per envelope, in order:
//
//	{"results":[{"id":"<uuid>","status":"applied"},
//	            {"id":"<uuid>","status":"retry","problem":{...},"retry_after":30}]}
//
// applied and duplicate are delivered, refused and stale dead, retry
// retried, exactly as the same envelope's answer alone would be; any other
// answer to the batch request applies to all of its envelopes.
package m2mhttp
