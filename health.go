package mensageria

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FailureKind names a part of the relay's own work with its database that
// failed: each kind that keeps failing makes Ready fail, and has its own
// counter (OnFailure).
type FailureKind string

// The failure kinds.
const (
	// FailureClaim: a claim failed (a privilege revoked, a statement
	// timeout, a lock timeout): nothing of the app is delivered.
	FailureClaim FailureKind = "claim"
	// FailureSettle: a settle failed: deliveries happen but are not
	// recorded, so their rows are delivered again after their lease.
	FailureSettle FailureKind = "settle"
	// FailureElection: an election round failed on an error (not a round
	// another relay won): the relay stands by while it lasts.
	FailureElection FailureKind = "election"
	// FailureDatabase: the database could not be reached at all (a
	// connection refused, reset or timed out): whatever the step was.
	FailureDatabase FailureKind = "database"
)

// failureKinds in the order Ready names them.
var failureKinds = []FailureKind{FailureDatabase, FailureElection, FailureClaim, FailureSettle}

// FailureEvent reports one failed attempt of the relay's work with its
// database.
type FailureEvent struct {
	App  string
	Kind FailureKind
	Err  error
}

// OnFailure is called after every failed attempt of the relay's claims,
// settles and election rounds, and of any step that found the database
// unreachable (Kind FailureDatabase then, whatever the step).
type OnFailure interface{ OnFailure(FailureEvent) }

// failureSummaryEvery is how often a streak of failures that goes on is
// logged again, with the number of attempts since the last line.
const failureSummaryEvery = time.Minute

// failureHealth follows the streaks of failures of each kind, for Ready
// and for the logs: a streak's first failure and its end are logged once
// each, and a line sums it up every failureSummaryEvery while it lasts,
// however often the relay tries meanwhile.
type failureHealth struct {
	app   string
	log   *slog.Logger
	hooks []OnFailure
	// summaryEvery is failureSummaryEvery, shorter in a test; 0 for it.
	summaryEvery time.Duration
	// clock is time.Now, a test's own clock when set, so a test ages a
	// streak without waiting for it.
	clock func() time.Time

	mu      sync.Mutex
	streaks map[FailureKind]*failStreak
}

type failStreak struct {
	since    time.Time // the first failure
	lastLine time.Time // the last line logged of it
	err      error     // the latest failure
	attempts int       // failed attempts of the failStreak
	unlogged int       // failed attempts since the last line
}

// failureLines say, for each kind, what a failStreak means and what the relay
// does meanwhile.
var failureLines = map[FailureKind]string{
	FailureClaim:    "claim failing on a database error: nothing of this app is delivered until a claim succeeds; the relay is not ready meanwhile and tries again each poll interval",
	FailureSettle:   "settle failed on a database error; the relay retries each batch's settle while its lease lasts and claims one row at a time until a settle succeeds; it is not ready meanwhile",
	FailureElection: "election failing on a database error: the relay stands by and is not ready until a round succeeds",
	FailureDatabase: "database unreachable: the relay is not ready and keeps trying",
}

// recoveryLines end a streak of each kind.
var recoveryLines = map[FailureKind]string{
	FailureClaim:    "claims work again",
	FailureSettle:   "settles work again",
	FailureElection: "election rounds work again",
	FailureDatabase: "database reachable again",
}

// failed records one failed attempt of kind. An error that says the
// database could not be reached counts as FailureDatabase; any other says
// the database answered, which ends a failStreak of FailureDatabase.
func (h *failureHealth) failed(kind FailureKind, err error) {
	if h == nil { // a part tested alone
		return
	}
	if unreachable(err) {
		kind = FailureDatabase
	}
	now := h.now()
	h.mu.Lock()
	if kind != FailureDatabase {
		h.endLocked(FailureDatabase, now)
	}
	if h.streaks == nil {
		h.streaks = map[FailureKind]*failStreak{}
	}
	s := h.streaks[kind]
	if s == nil {
		s = &failStreak{since: now, lastLine: now}
		h.streaks[kind] = s
		h.log.Error(failureLines[kind], "app", h.app, "kind", string(kind), "err", err)
	} else {
		s.unlogged++
		every := h.summaryEvery
		if every == 0 {
			every = failureSummaryEvery
		}
		if now.Sub(s.lastLine) >= every {
			h.log.Warn(fmt.Sprintf("%s still failing", kind), "app", h.app, "kind", string(kind), "for", now.Sub(s.since).Round(time.Second),
				"attempts", s.attempts+1, "attempts_since_last_line", s.unlogged, "err", err)
			s.lastLine, s.unlogged = now, 0
		}
	}
	s.err = err
	s.attempts++
	h.mu.Unlock()
	for _, hk := range h.hooks {
		hk.OnFailure(FailureEvent{App: h.app, Kind: kind, Err: err})
	}
}

// succeeded ends the failStreak of kind, and of FailureDatabase: the database
// answered.
func (h *failureHealth) succeeded(kind FailureKind) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.streaks) == 0 {
		return
	}
	now := h.now()
	h.endLocked(kind, now)
	h.endLocked(FailureDatabase, now)
}

func (h *failureHealth) endLocked(kind FailureKind, now time.Time) {
	s := h.streaks[kind]
	if s == nil {
		return
	}
	delete(h.streaks, kind)
	h.log.Info(recoveryLines[kind], "app", h.app, "kind", string(kind), "failing_for", now.Sub(s.since).Round(time.Millisecond),
		"attempts", s.attempts, "last_err", s.err)
}

// reason says why the relay is not ready ("claim failing for 12s: ..."),
// "" while nothing fails.
func (h *failureHealth) reason() string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for _, k := range failureKinds {
		s := h.streaks[k]
		if s == nil {
			continue
		}
		what := string(k) + " failing"
		if k == FailureDatabase {
			what = "database unreachable"
		}
		parts = append(parts, fmt.Sprintf("%s for %s (%d attempts): %v", what, h.now().Sub(s.since).Round(time.Second), s.attempts, s.err))
	}
	return strings.Join(parts, "; ")
}

func (h *failureHealth) now() time.Time {
	if h.clock != nil {
		return h.clock()
	}
	return time.Now()
}

// failing reports whether a failStreak of kind is under way.
func (h *failureHealth) failing(kind FailureKind) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streaks[kind] != nil
}

// unreachable reports whether err says the database could not be reached
// at all, rather than that it answered with an error: a network error
// (refused, reset, timed out, no route), a connection closed under a
// statement, or a server that says it is shutting down or starting. A context's own deadline is not one: a slow statement is the
// step's failure.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	// The server's own word that it cannot serve: a connection exception
	// (class 08), or shutting down, crashed, starting up (57P01-57P03).
	// Asked through the method pgconn.PgError has, so the core names no
	// driver's types.
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		code := coded.SQLState()
		if strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && !errors.Is(err, context.DeadlineExceeded)
}
