package m2mhttp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/testsignal"
)

func onceDelivery() *mensageria.Delivery {
	d := testDelivery()
	d.AtMostOnce = true
	return d
}

// closedURL is an address nothing listens on: a connection is refused.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr + "/m2m"
}

func TestAtMostOnceSendSaysWhatWasNeverSent(t *testing.T) {
	var effects atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/gateway-503":
			w.WriteHeader(http.StatusServiceUnavailable) // the gateway answers without forwarding
			return
		case "/slow":
			effects.Add(1)
			time.Sleep(500 * time.Millisecond) // a receiver slower than the Send's timeout
		case "/cut":
			effects.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		case "/500":
			effects.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		case "/422":
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		effects.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cases := []struct {
		name, url string
		notSent   bool
		permanent bool
		ok        bool
	}{
		{"connection refused", closedURL(t), true, false, false},
		{"name does not resolve", "http://mensageria-no-such-host.invalid/m2m", true, false, false},
		{"declared not-applied status", srv.URL + "/gateway-503", true, false, false},
		{"timeout after the request was written", srv.URL + "/slow", false, false, false},
		{"connection cut after the request was written", srv.URL + "/cut", false, false, false},
		{"a 5xx that does not say", srv.URL + "/500", false, false, false},
		{"a refusal", srv.URL + "/422", false, true, false},
		{"2xx", srv.URL + "/ok", false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSender(t, tc.url, SenderConfig{Timeout: 200 * time.Millisecond, NotApplied: []int{503}})
			err := s.Send(context.Background(), onceDelivery())
			if tc.ok {
				if err != nil {
					t.Fatalf("Send = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Send = nil, want an error")
			}
			if got := mensageria.IsNotSent(err); got != tc.notSent {
				t.Fatalf("IsNotSent(%v) = %v, want %v", err, got, tc.notSent)
			}
			if got := mensageria.IsPermanent(err); got != tc.permanent {
				t.Fatalf("IsPermanent(%v) = %v, want %v", err, got, tc.permanent)
			}
			// On an at-least-once route nothing changes: no failure is
			// claimed to be unsent.
			if err := s.Send(context.Background(), testDelivery()); mensageria.IsNotSent(err) {
				t.Fatalf("at-least-once Send said NotSent: %v", err)
			}
		})
	}
}

func TestAtMostOnceSlotWaitIsNotSent(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	s := newTestSender(t, srv.URL, SenderConfig{MaxConcurrent: 1, Timeout: 5 * time.Second})
	go func() { _ = s.Send(context.Background(), onceDelivery()) }()
	// Once the first Send holds the only slot, this one waits for it until
	// ctx ends: nothing of it was sent.
	testsignal.Eventually(t, 0, func() bool { return len(s.sem) > 0 }, "the first Send to hold the only slot")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Send(ctx, onceDelivery())
	if !mensageria.IsNotSent(err) {
		t.Fatalf("waiting for a request slot: %v, want NotSent", err)
	}
}

// A keep-alive connection that dies after the request was read: net/http
// replays a POST that carries Idempotency-Key on a new connection. On an
// at-most-once route it must not, and the failure is in doubt.
func TestAtMostOnceNoTransparentReplay(t *testing.T) {
	for _, once := range []bool{false, true} {
		name := map[bool]string{false: "at-least-once replays", true: "at-most-once does not"}[once]
		t.Run(name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var mu sync.Mutex
			var keys []string
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go func(c net.Conn) {
						defer c.Close()
						br := bufio.NewReader(c)
						for {
							req, err := http.ReadRequest(br)
							if err != nil {
								return
							}
							_, _ = io.Copy(io.Discard, req.Body)
							mu.Lock()
							keys = append(keys, req.Header.Get("Idempotency-Key"))
							n := len(keys)
							mu.Unlock()
							if n == 2 {
								return // read the second request, then the connection dies
							}
							_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
						}
					}(c)
				}
			}()
			s := newTestSender(t, "http://"+l.Addr().String()+"/m2m", SenderConfig{Timeout: 2 * time.Second})
			d := testDelivery()
			d.AtMostOnce = once
			if err := s.Send(context.Background(), d); err != nil {
				t.Fatalf("first Send: %v", err)
			}
			d2 := testDelivery()
			d2.Key, d2.AtMostOnce = "order-2", once
			err2 := s.Send(context.Background(), d2)
			mu.Lock()
			got := append([]string(nil), keys...)
			mu.Unlock()
			if !once {
				if len(got) != 3 || err2 != nil {
					t.Fatalf("at-least-once: the server saw %v (err %v); net/http was expected to replay the second request once", got, err2)
				}
				return
			}
			if len(got) != 2 || got[1] != "order-2" {
				t.Fatalf("at-most-once: the server saw %v, want each request once, with its Idempotency-Key", got)
			}
			if err2 == nil || mensageria.IsNotSent(err2) {
				t.Fatalf("at-most-once: a request read by the server and then cut: %v, want an error that is not NotSent (in doubt)", err2)
			}
		})
	}
}

func TestPayloadOnlySendsThePayload(t *testing.T) {
	var body []byte
	var typ, key string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		typ, key = r.Header.Get(HeaderMessageType), r.Header.Get("Idempotency-Key")
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	s := newTestSender(t, srv.URL, SenderConfig{PayloadOnly: true})
	d := onceDelivery()
	if err := s.Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if string(body) != string(d.Payload) || typ != d.Type || key != d.Key {
		t.Fatalf("PayloadOnly request: body %q type %q key %q, want %q %q %q", body, typ, key, d.Payload, d.Type, d.Key)
	}
}

func TestSenderNotAppliedMustRefuse(t *testing.T) {
	for _, st := range []int{200, 204, 99, 600} {
		_, err := NewSender(SenderConfig{URL: "http://x/m2m", Token: "t", NotApplied: []int{st}})
		var ce *mensageria.ConfigError
		if !errors.As(err, &ce) || ce.Field != "NotApplied" {
			t.Fatalf("NotApplied %d: %v, want a ConfigError", st, err)
		}
	}
}

func TestProbe(t *testing.T) {
	var paths []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		if r.Method != http.MethodGet || r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		switch r.URL.Query().Get("case") {
		case "gone":
			w.WriteHeader(http.StatusGone)
		case "broken":
			w.WriteHeader(http.StatusBadGateway)
		}
		switch r.URL.Path {
		case "/orders/applied":
			w.WriteHeader(http.StatusOK)
		case "/orders/fresh":
			w.WriteHeader(http.StatusNotFound)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	p, err := NewProbe(ProbeConfig{URL: srv.URL + "/orders/{key}", Token: "s3cret", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]mensageria.Reconciliation{"applied": mensageria.Applied, "fresh": mensageria.NotApplied, "other": mensageria.Unknown} {
		d := testDelivery()
		d.Key = key
		got, err := p.Reconcile(context.Background(), d)
		if got != want || (want == mensageria.Unknown) != (err != nil) {
			t.Fatalf("probe of %q = %v, %v; want %v", key, got, err, want)
		}
	}
	d := testDelivery()
	d.Key = "a/b c"
	_, _ = p.Reconcile(context.Background(), d)
	mu.Lock()
	last := paths[len(paths)-1]
	mu.Unlock()
	if last != "/orders/a%2Fb%20c" {
		t.Fatalf("a key with / and space probed as %q, want it path-escaped", last)
	}
	// A probe that cannot reach the receiver is no answer.
	down, _ := NewProbe(ProbeConfig{URL: closedURL(t) + "/{id}", Timeout: time.Second})
	if got, err := down.Reconcile(context.Background(), testDelivery()); got != mensageria.Unknown || err == nil {
		t.Fatalf("probe of a closed port = %v, %v; want unknown with an error", got, err)
	}
}

func TestProbeConfigErrors(t *testing.T) {
	for _, cfg := range []ProbeConfig{
		{URL: "http://legacy/orders"},
		{URL: "http://{key}/orders"},
		{URL: "ftp://legacy/{key}"},
		{URL: "http://u:p@legacy/{key}"},
		{URL: "http://legacy/{key}", Applied: []int{200}, NotApplied: []int{200}},
		{URL: "http://legacy/{key}", Applied: []int{700}},
		{URL: "http://legacy/{key}", Timeout: -1},
	} {
		var ce *mensageria.ConfigError
		if _, err := NewProbe(cfg); !errors.As(err, &ce) {
			t.Fatalf("NewProbe(%+v) = %v, want a ConfigError", cfg, err)
		}
	}
}
