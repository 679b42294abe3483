// Package daemon is what the command's long-running parts share, and where
// the daemons and the operator commands open a database by its URL (the
// benchmarks, the demo's scratch databases and the chaos worker open
// their own): the logger, the database open and ping, the schema
// check at start, tracing, the health endpoints and their probe, and the
// reading of PostgreSQL's refusals for want of a grant.
package daemon

import (
	"errors"
	"fmt"

	"github.com/xadm/mensageria"
)

// The command's exit codes an Error carries.
const (
	ExitFailure = 1 // a runtime failure: database down, schema behind, ...
	ExitUsage   = 2 // bad flags, a bad URL, an address that cannot be listened on
)

// Error is a failure with the exit code the command ends with.
type Error struct {
	Code int
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ConflictError is a catalog conflict met at a daemon's start: another app
// owns what the config claims. What says what the app could not do
// ("start its relay", "receive", "migrate the schema up (--migrate)");
// the command words the way out.
type ConflictError struct {
	What string
	Err  *mensageria.OwnerConflictError
}

func (e *ConflictError) Error() string { return e.Err.Error() }
func (e *ConflictError) Unwrap() error { return e.Err }

// Conflict is err as a *ConflictError saying what the app could not do
// when err holds a catalog conflict, and err itself otherwise (nil
// included), so that a caller returns Conflict(what, err) on every path.
func Conflict(what string, err error) error {
	var oce *mensageria.OwnerConflictError
	if errors.As(err, &oce) {
		return &ConflictError{What: what, Err: oce}
	}
	return err
}

// Usage makes a usage error (exit code 2): what only the operator can fix.
func Usage(format string, args ...any) error {
	return &Error{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Fail makes a runtime failure (exit code 1).
func Fail(format string, args ...any) error {
	return &Error{Code: ExitFailure, Err: fmt.Errorf(format, args...)}
}
