// Package ops is the operator's API over a driver.Driver: the read model
// of the outbox's status, the messages of every state (list), the dead
// letters (list, show, retry, discard),
// the messages in doubt of at-most-once routes (list, show, resolve) and
// the ownership catalog (list, register, transfer, release).
//
// It is what the mensageria command and its console are built on, and what
// a Go app calls to operate its own outbox without shelling out. It never
// prints: every verb returns a typed result, and every refusal a typed
// error (*OutOfScopeError, *NotFoundError, *AtMostOnceError,
// *TransferConflictError, *PauseRouteError, or one wrapping ErrInvalid,
// ErrInvalidDecision or ErrNoAtMostOnce) that a caller maps to its own
// exit code, HTTP status or message. What a caller checks before it
// connects (CheckApp, CheckPause, Decision.Check) is refused the same way
// without a database, and the vocabulary of the results (State, Outcome,
// RoutePause, Leader) is named here, so that a caller needs no driver
// package of its own beyond the one it opens.
//
// An Ops acts within a Scope, and there is one rule for it: an app may act
// only on the message types the ownership catalog gives it. A dead letter
// or a message in doubt of another app's type, or a type another app owns
// (or no app owns), is refused with an *OutOfScopeError naming the type's
// owner, and nothing changes. AllApps is the explicit scope of a DBA who
// acts across every app of the schema. See docs/adr/0029-operator-api.md.
package ops
