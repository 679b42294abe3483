// Package fault holds the faults a destination injects on purpose: a lost
// answer and a refusal. The fault-injection suite's receiver (chaosworker)
// injects both, the demo's receivers the refusal.
package fault

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// LoseAnswer ends the request with no answer at all, as a receiver that
// applied a message and crashed before answering would: the connection
// is reset, so the sender sees a broken connection, not a status.
func LoseAnswer(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the handler, which resets the
		// stream just as well.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// Refuse answers status (401 or 503 and the like) as a problem document,
// without reading or applying anything. A 401 names an invalid token, as
// a rotated one would; retryAfter, when not zero, is sent as Retry-After.
func Refuse(w http.ResponseWriter, status int, detail string, retryAfter time.Duration) {
	w.Header().Set("Content-Type", "application/problem+json")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	}
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"detail":%q}`, http.StatusText(status), status, detail)
}

// Discard is a ResponseWriter whose answer nobody will read: the handler
// runs to its end (the effect commits) and the answer goes nowhere.
type Discard struct{ H http.Header }

func (d Discard) Header() http.Header         { return d.H }
func (d Discard) Write(b []byte) (int, error) { return len(b), nil }
func (d Discard) WriteHeader(int)             {}
