package m2mhttp

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/transport/transporttest"
)

// The Sender and the BatchSender pass the transport conformance suite
// against a receiver that records every envelope it accepts (at least
// once: the receiver's inbox drops the duplicates, which this one does
// not have).
func TestConformance(t *testing.T) {
	for _, batch := range []bool{false, true} {
		name := "Sender"
		if batch {
			name = "BatchSender"
		}
		t.Run(name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) *transporttest.Harness { return httpHarness(t, batch) })
		})
	}
}

// suiteReceiver is the destination of a suite's subtest: it refuses the
// poison message for good, answers 401 to everything while unauthorized
// is set, and records the rest in arrival order.
type suiteReceiver struct {
	unauthorized atomic.Bool
	mu           sync.Mutex
	got          []transporttest.Received
}

const poisonDetail = "the suite's poison"

func (rc *suiteReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rc.unauthorized.Load() {
		writeProblem(w, Problem{Type: ProblemUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: "token rotated"}, 0)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	poisoned := func(e *Envelope) bool { return strings.Contains(string(e.Payload), `"pad"`) }
	if r.Header.Get("Content-Type") != ContentTypeBatch {
		e, err := DecodeEnvelope(body)
		switch {
		case err != nil:
			writeProblem(w, Problem{Type: ProblemMalformed, Title: "Malformed", Status: http.StatusBadRequest, Detail: err.Error()}, 0)
		case poisoned(e):
			writeProblem(w, Problem{Type: ProblemRefused, Title: "Refused", Status: http.StatusUnprocessableEntity, Detail: poisonDetail}, 0)
		default:
			rc.record(e)
			w.WriteHeader(http.StatusOK)
		}
		return
	}
	items, err := DecodeBatch(body, 1000)
	if err != nil {
		writeProblem(w, Problem{Type: ProblemMalformed, Title: "Malformed", Status: http.StatusBadRequest, Detail: err.Error()}, 0)
		return
	}
	rs := make([]BatchResult, len(items))
	for i, it := range items {
		rs[i].ID = it.ID
		switch {
		case it.Err != nil:
			rs[i].Status = ItemRefused
			rs[i].Problem = &Problem{Type: ProblemMalformed, Title: "Malformed", Status: http.StatusBadRequest, Detail: it.Err.Error()}
		case poisoned(it.Envelope):
			rs[i].Status = ItemRefused
			rs[i].Problem = &Problem{Type: ProblemRefused, Title: "Refused", Status: http.StatusUnprocessableEntity, Detail: poisonDetail}
		default:
			rc.record(it.Envelope)
			rs[i].Status = ItemApplied
		}
	}
	w.Header().Set("Content-Type", ContentTypeBatch)
	_ = json.NewEncoder(w).Encode(batchAnswer{Results: rs})
}

func (rc *suiteReceiver) record(e *Envelope) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.got = append(rc.got, transporttest.Received{ID: e.ID.String(), Key: e.Key, Payload: e.Payload})
}

func (rc *suiteReceiver) received(*testing.T) []transporttest.Received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]transporttest.Received(nil), rc.got...)
}

// httpHarness serves a suiteReceiver on a port that outlives its server,
// so an outage is the server closed and started again there.
func httpHarness(t *testing.T, batch bool) *transporttest.Harness {
	rc := &suiteReceiver{}
	var (
		srv  *httptest.Server
		addr string
	)
	up := func(t *testing.T) {
		t.Helper()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv = httptest.NewUnstartedServer(rc)
		srv.Listener.Close()
		srv.Listener = l
		srv.Start()
		addr = l.Addr().String()
		t.Cleanup(srv.Close)
	}
	addr = "127.0.0.1:0"
	up(t)
	url := "http://" + addr + "/m2m"
	return &transporttest.Harness{
		NewSender: func(t *testing.T, log *slog.Logger) mensageria.Sender {
			cfg := SenderConfig{URL: url, Token: "tok"}
			if batch {
				s, err := NewBatchSender(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s, err := NewSender(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Received: rc.received,
		Outage: &transporttest.Outage{
			Down:       func(*testing.T) { srv.Close() },
			Up:         up,
			Says:       []string{"connection refused", addr},
			PausedSays: []string{"connection refused"},
		},
		RouteFaults: []transporttest.RouteFault{{
			Name:       "Unauthorized",
			Begin:      func(*testing.T) { rc.unauthorized.Store(true) },
			End:        func(*testing.T) { rc.unauthorized.Store(false) },
			Says:       []string{"http 401", "token rotated"},
			PausedSays: []string{"http 401"},
			Is: func(err error) bool {
				var se *StatusError
				return errors.As(err, &se) && se.StatusCode == http.StatusUnauthorized
			},
		}},
		Poison: &transporttest.Poison{
			Payload: json.RawMessage(`{"pad":"refused"}`),
			Says:    []string{"http 422", poisonDetail},
		},
		Features: transporttest.Features{OrderedPerKey: true},
	}
}
