package mensageria

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sqlStateError is a database error with a SQLSTATE, as pgconn.PgError.
type sqlStateError struct{ code string }

func (e sqlStateError) Error() string    { return "ERROR: (SQLSTATE " + e.code + ")" }
func (e sqlStateError) SQLState() string { return e.code }

type failureLog struct{ events[FailureEvent] }

func (l *failureLog) OnFailure(ev FailureEvent) { l.add(ev) }

// The failure health alone: every attempt is counted, a streak is logged
// once when it starts, summed up once per summaryEvery, and its
// end once; an unreachable database counts as such whatever the step;
// Ready's reason names each streak under way.
func TestFailureHealthLogsStreaksNotAttempts(t *testing.T) {
	var buf bytes.Buffer
	hooks := &failureLog{}
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	h := &failureHealth{app: "parts", log: slog.New(slog.NewTextHandler(&buf, nil)), hooks: []OnFailure{hooks}, summaryEvery: 20 * time.Millisecond,
		clock: func() time.Time { return now }}

	denied := errors.New("permission denied for table outbox")
	attempts := 0
	for range 111 { // one attempt a millisecond, for 110 ms
		h.failed(FailureClaim, denied)
		attempts++
		now = now.Add(time.Millisecond)
	}
	why := h.reason()
	if !strings.HasPrefix(why, "claim failing for ") || !strings.Contains(why, fmt.Sprintf("(%d attempts)", attempts)) || !strings.Contains(why, "permission denied") {
		t.Fatalf("reason %q; want the claim streak with its %d attempts and its error", why, attempts)
	}
	h.succeeded(FailureClaim)
	if why := h.reason(); why != "" {
		t.Fatalf("reason after a success: %q", why)
	}
	out := buf.String()
	if n := strings.Count(out, "claim failing on a database error"); n != 1 {
		t.Fatalf("streak start logged %d times, want once:\n%s", n, out)
	}
	// 110 ms of failures, a summary every 20 ms: at 20, 40, 60, 80 and
	// 100 ms.
	if n := strings.Count(out, "claim still failing"); n != 5 {
		t.Fatalf("%d summaries of a 110 ms streak with one every 20 ms:\n%s", n, out)
	}
	if n := strings.Count(out, "claims work again"); n != 1 {
		t.Fatalf("recovery logged %d times, want once:\n%s", n, out)
	}
	if n := len(hooks.all()); n != attempts {
		t.Fatalf("%d failure events for %d attempts", n, attempts)
	}

	// A database gone counts as such, whatever failed; a step the
	// database answered ends it.
	buf.Reset()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	h.failed(FailureElection, fmt.Errorf("election: %w", refused))
	h.failed(FailureClaim, refused)
	if why := h.reason(); !strings.HasPrefix(why, "database unreachable for ") || strings.Contains(why, "claim") || strings.Contains(why, "election failing") {
		t.Fatalf("reason %q; want the unreachable database alone", why)
	}
	h.failed(FailureSettle, denied)
	if why := h.reason(); !strings.HasPrefix(why, "settle failing") {
		t.Fatalf("reason %q; want the settle alone: the database answered", why)
	}
	if n := strings.Count(buf.String(), "database reachable again"); n != 1 {
		t.Fatalf("the database's return logged %d times:\n%s", n, buf.String())
	}
	got := hooks.all()
	if k := got[len(got)-2].Kind; k != FailureDatabase {
		t.Fatalf("a refused connection counted as %s", k)
	}
}

func TestUnreachableTellsAGoneDatabaseFromAnAnswer(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{fmt.Errorf("claim: %w", io.ErrUnexpectedEOF), true},
		{sqlStateError{"57P01"}, true},  // admin shutdown
		{sqlStateError{"57P03"}, true},  // cannot connect now
		{sqlStateError{"08006"}, true},  // connection failure
		{sqlStateError{"42501"}, false}, // insufficient privilege
		{sqlStateError{"57014"}, false}, // statement timeout
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{errors.New("database is locked"), false},
		{nil, false},
	} {
		if got := unreachable(c.err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
