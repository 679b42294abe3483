package m2mhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
)

func testDelivery() *mensageria.Delivery {
	return &mensageria.Delivery{
		ID: uuid.Must(uuid.NewV7()), Type: "order.closed", Key: "order-1",
		Payload: json.RawMessage(`{"n":1}`), CreatedAt: time.Now().UTC(), Attempt: 1,
	}
}

func newTestSender(t *testing.T, url string, cfg SenderConfig) *Sender {
	t.Helper()
	cfg.URL, cfg.Token = url, "tok-1"
	s, err := NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSenderClassification: every response class maps to the documented
// outcome.
func TestSenderClassification(t *testing.T) {
	httpDate := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	type want int
	const (
		delivered want = iota
		retry
		unavailable // retried, and about the destination: the route's, not the message's
		dead
	)
	cases := []struct {
		status     int
		retryAfter string
		problem    bool
		want       want
		wantRA     time.Duration // 0: none expected
		reason     string
	}{
		{200, "", false, delivered, 0, ""},
		{201, "", false, delivered, 0, ""},
		{204, "", false, delivered, 0, ""},
		{301, "", false, dead, 0, "redirect not followed"},
		{302, "", false, dead, 0, "redirect not followed"},
		{307, "", false, dead, 0, "redirect not followed"},
		{308, "", false, dead, 0, "redirect not followed"},
		{400, "", true, dead, 0, "the detail"},
		{401, "", true, unavailable, 0, "the detail"},
		{407, "", false, unavailable, 0, "407"},
		{403, "", false, dead, 0, "plain text reason"},
		{404, "", false, dead, 0, "404"},
		{409, "", true, dead, 0, "the detail"},
		{410, "", false, dead, 0, "410"},
		{413, "", true, dead, 0, "the title"},
		{422, "", true, dead, 0, "the detail"},
		{408, "", false, unavailable, 0, "408"},
		{425, "", false, retry, 0, "425"},
		{429, "7", true, unavailable, 7 * time.Second, "the detail"},
		{429, "", false, unavailable, 0, "429"},
		{500, "", true, unavailable, 0, "the detail"},
		{502, "", false, unavailable, 0, "502"},
		{503, httpDate, false, unavailable, 90 * time.Second, "503"},
		{503, "garbage", false, unavailable, 0, "503"},
		{504, "0", false, unavailable, 0, "504"},
		{599, "", false, unavailable, 0, "599"},
	}
	for _, c := range cases {
		t.Run(http.StatusText(c.status)+"_"+c.retryAfter, func(t *testing.T) {
			var followed atomic.Bool
			mux := http.NewServeMux()
			mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Store(true) })
			mux.HandleFunc("/in", func(w http.ResponseWriter, r *http.Request) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				if c.status >= 300 && c.status < 400 {
					w.Header().Set("Location", "/elsewhere")
				}
				if c.problem {
					w.Header().Set("Content-Type", contentTypeProblem)
					w.WriteHeader(c.status)
					_, _ = w.Write([]byte(`{"type":"about:blank","title":"the title","status":1,"detail":` + map[bool]string{true: `""`, false: `"the detail"`}[c.status == 413] + `}`))
					return
				}
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte("plain text reason\n"))
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			err := newTestSender(t, srv.URL+"/in", SenderConfig{}).Send(context.Background(), testDelivery())
			switch c.want {
			case delivered:
				if err != nil {
					t.Fatalf("want delivered, got %v", err)
				}
				return
			case dead:
				if !mensageria.IsPermanent(err) || mensageria.IsUnavailable(err) {
					t.Fatalf("want a permanent error about the message, got %v", err)
				}
			case retry, unavailable:
				if err == nil || mensageria.IsPermanent(err) {
					t.Fatalf("want a retryable error, got %v", err)
				}
				if mensageria.IsUnavailable(err) != (c.want == unavailable) {
					t.Fatalf("Unavailable = %v, want %v: %v", mensageria.IsUnavailable(err), c.want == unavailable, err)
				}
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Errorf("error %q does not carry the reason %q", err, c.reason)
			}
			ra, ok := mensageria.RetryAfterOf(err)
			if c.wantRA == 0 && ok && ra != 0 {
				t.Errorf("unexpected Retry-After %s", ra)
			}
			if c.wantRA != 0 && (!ok || ra < c.wantRA-2*time.Second || ra > c.wantRA) {
				t.Errorf("Retry-After %s (%v), want about %s", ra, ok, c.wantRA)
			}
			if followed.Load() {
				t.Error("a redirect was followed")
			}
		})
	}
}

// TestSenderRequest: the request carries the contract's headers and body,
// to the URL exactly as configured.
func TestSenderRequest(t *testing.T) {
	type seen struct {
		path, query string
		h           http.Header
		body        []byte
	}
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Clone(), b}
		w.Header().Set("Content-Type", contentTypeJSON)
		_, _ = w.Write(bodyApplied)
	}))
	defer srv.Close()
	s := newTestSender(t, srv.URL+"/hooks/m2m?tenant=7", SenderConfig{})

	d := testDelivery()
	d.Headers = map[string]string{"X-Request-Id": "req-42", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if err := s.Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.path != "/hooks/m2m" || r.query != "tenant=7" {
		t.Errorf("POSTed to %s?%s, want the configured URL", r.path, r.query)
	}
	for k, v := range map[string]string{
		"Authorization": "Bearer tok-1", "Content-Type": "application/json", "X-Request-Id": "req-42",
		"Idempotency-Key": "order-1", "Traceparent": d.Headers["traceparent"],
	} {
		if r.h.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, r.h.Get(k), v)
		}
	}
	e, err := DecodeEnvelope(r.body)
	if err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	if e.ID != d.ID || e.Key != d.Key || e.Attempt != 1 || string(e.Payload) != `{"n":1}` {
		t.Errorf("envelope %+v does not match delivery %+v", e, d)
	}

	// Without a request id header the message id stands in; a key that
	// cannot travel as a header is left to the body.
	d = testDelivery()
	d.Key = "linha\nquebrada"
	if err := s.Send(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	r = <-got
	if r.h.Get("X-Request-Id") != d.ID.String() || r.h.Get("Idempotency-Key") != "" || r.h.Get("Traceparent") != "" {
		t.Errorf("headers %v", r.h)
	}
}

func TestSenderTimeoutAndNetworkErrors(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	start := time.Now()
	err := newTestSender(t, slow.URL, SenderConfig{Timeout: 100 * time.Millisecond}).Send(context.Background(), testDelivery())
	if err == nil || mensageria.IsPermanent(err) || !mensageria.IsUnavailable(err) || !strings.Contains(err.Error(), "no answer within") {
		t.Fatalf("timeout: want an error about the destination, got %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("timeout took %s", el)
	}

	// A port nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	_ = ln.Close()
	err = newTestSender(t, "http://"+addr+"/", SenderConfig{}).Send(context.Background(), testDelivery())
	if err == nil || mensageria.IsPermanent(err) || !mensageria.IsUnavailable(err) {
		t.Fatalf("refused connection: want an error about the destination, got %v", err)
	}

	// A name that does not resolve (.invalid never does, RFC 2606).
	err = newTestSender(t, "http://mensageria-receiver.invalid/m2m", SenderConfig{}).Send(context.Background(), testDelivery())
	if err == nil || mensageria.IsPermanent(err) || !mensageria.IsUnavailable(err) {
		t.Fatalf("DNS failure: want an error about the destination, got %v", err)
	}

	// A server that drops the connection without answering (a lost ack).
	drop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		_ = conn.Close()
	}))
	defer drop.Close()
	err = newTestSender(t, drop.URL, SenderConfig{}).Send(context.Background(), testDelivery())
	if err == nil || mensageria.IsPermanent(err) || !mensageria.IsUnavailable(err) {
		t.Fatalf("dropped connection: want an error about the destination, got %v", err)
	}
}

// TestSenderConcurrencyAndKeepAlive: at most MaxConcurrent requests are in
// flight to one destination, and connections are reused.
func TestSenderConcurrencyAndKeepAlive(t *testing.T) {
	var inflight, peak, conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond) // a request takes a while, so requests overlap
		inflight.Add(-1)
		_, _ = w.Write(bodyApplied)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	s := newTestSender(t, srv.URL, SenderConfig{MaxConcurrent: 3})
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := s.Send(context.Background(), testDelivery()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || p < 2 {
		t.Errorf("peak in-flight %d, want 2..3", p)
	}
	if c := conns.Load(); c > 3 {
		t.Errorf("%d connections for 100 requests at concurrency 3: keep-alive is not reusing them", c)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"0": 0, "5": 5 * time.Second, " 120 ": 2 * time.Minute,
		"Mon, 30 Nov 2026 12:00:30 GMT": 30 * time.Second,
		"Mon, 30 Nov 2026 11:00:00 GMT": 0,
	} {
		got, ok := parseRetryAfter(v, now)
		if !ok || got != want {
			t.Errorf("%q: %s %v, want %s", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon", "1.5"} {
		if _, ok := parseRetryAfter(v, now); ok {
			t.Errorf("%q parsed", v)
		}
	}
}

func TestNewSenderValidates(t *testing.T) {
	for _, c := range []SenderConfig{
		{URL: "", Token: "t"},
		{URL: "ftp://x/", Token: "t"},
		{URL: "/relative", Token: "t"},
		{URL: "http://user:pw@x/", Token: "t"},
		{URL: "http://x/"},
		{URL: "http://x/", Token: "bad\ntoken"},
		{URL: "http://x/", Token: "t", Timeout: -1},
		{URL: "http://x/", Token: "t", MaxConcurrent: -1},
	} {
		if _, err := NewSender(c); !errors.Is(err, mensageria.ErrConfig) {
			t.Errorf("%+v: err %v, want a config error", c, err)
		}
	}
	// A caller's client is used, but still never follows redirects.
	own := &http.Client{}
	s, err := NewSender(SenderConfig{URL: "http://x/", Token: "t", Client: own})
	if err != nil || s.client.CheckRedirect == nil || own.CheckRedirect != nil {
		t.Fatalf("caller's client: %v", err)
	}
}

// The destination a dead letter names is the receiver's URL, never the
// token nor a query string that may carry a key.
func TestSenderDestination(t *testing.T) {
	for url, want := range map[string]string{
		"https://billing.internal/m2m":                  "http https://billing.internal/m2m",
		"http://10.0.0.7:8080/hooks/orders":             "http http://10.0.0.7:8080/hooks/orders",
		"https://gw.example/api/in?code=s3cr3t&x=1#top": "http https://gw.example/api/in?…#…",
	} {
		cfg := SenderConfig{URL: url, Token: "tok-s3cr3t"}
		s, err := NewSender(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBatchSender(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range []string{s.Destination(), b.Destination()} {
			if got != want || strings.Contains(got, "s3cr3t") {
				t.Errorf("Destination() of %s = %q, want %q", url, got, want)
			}
		}
	}
}
