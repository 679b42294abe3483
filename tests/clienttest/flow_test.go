package clienttest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// The flow-control tests drive the real relay through transport/m2mhttp's
// Sender against httptest receivers that answer as the test says, and
// record every request: when it arrived, which message, which attempt,
// and what they answered.

type arrival struct {
	at      time.Time // just before the answer was written
	id      uuid.UUID
	attempt int
	status  int
}

type answer struct {
	status int
	header map[string]string
}

// httpReceiver answers each envelope with what answer returns for it.
type httpReceiver struct {
	mu     sync.Mutex
	hits   []arrival
	answer func(n int, env *m2mhttp.Envelope) answer // n counts requests from 0
	srv    *httptest.Server
}

func newHTTPReceiver(t *testing.T, answer func(n int, env *m2mhttp.Envelope) answer) *httpReceiver {
	rc := &httpReceiver{answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") == m2mhttp.ContentTypeBatch {
			rc.batch(w, body)
			return
		}
		env, err := m2mhttp.DecodeEnvelope(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		a := rc.answer(len(rc.hits), env)
		if a.status == 0 {
			a.status = http.StatusOK
		}
		rc.hits = append(rc.hits, arrival{at: time.Now(), id: env.ID, attempt: env.Attempt, status: a.status})
		rc.mu.Unlock()
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		if a.status == http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"status":"applied"}`)
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(a.status)
		_, _ = fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d}`, http.StatusText(a.status), a.status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// batch answers a batch request as a whole with the answer of its first
// envelope when that is not a 200 (as a receiver that is down, or that
// refuses the token, answers any request), and otherwise applies each.
func (rc *httpReceiver) batch(w http.ResponseWriter, body []byte) {
	items, err := m2mhttp.DecodeBatch(body, 1000)
	if err != nil || len(items) == 0 || items[0].Err != nil {
		http.Error(w, "bad batch", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	a := rc.answer(len(rc.hits), items[0].Envelope)
	if a.status == 0 {
		a.status = http.StatusOK
	}
	now := time.Now()
	for _, it := range items {
		rc.hits = append(rc.hits, arrival{at: now, id: it.Envelope.ID, attempt: it.Envelope.Attempt, status: a.status})
	}
	rc.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	if a.status != http.StatusOK {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(a.status)
		_, _ = fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d}`, http.StatusText(a.status), a.status)
		return
	}
	res := make([]string, len(items))
	for i, it := range items {
		res[i] = fmt.Sprintf(`{"id":%q,"status":"applied"}`, it.Envelope.ID)
	}
	w.Header().Set("Content-Type", m2mhttp.ContentTypeBatch)
	_, _ = io.WriteString(w, `{"results":[`+strings.Join(res, ",")+`]}`)
}

func (rc *httpReceiver) arrivals() []arrival {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]arrival(nil), rc.hits...)
}

// delivered is each message's successful arrivals.
func (rc *httpReceiver) delivered() map[uuid.UUID][]arrival {
	out := map[uuid.UUID][]arrival{}
	for _, a := range rc.arrivals() {
		if a.status == http.StatusOK {
			out[a.id] = append(out[a.id], a)
		}
	}
	return out
}

func (rc *httpReceiver) count(status int) int {
	n := 0
	for _, a := range rc.arrivals() {
		if a.status == status {
			n++
		}
	}
	return n
}

func httpSender(t *testing.T, url string, conc int) *m2mhttp.Sender {
	t.Helper()
	s, err := m2mhttp.NewSender(m2mhttp.SenderConfig{URL: url, Token: "tok", MaxConcurrent: conc, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routeEvents records the route transitions a relay reports.
type routeEvents struct {
	mu  sync.Mutex
	evs []mensageria.RouteEvent
}

func (r *routeEvents) OnRouteState(ev mensageria.RouteEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *routeEvents) count(from, to mensageria.RouteState) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs {
		if ev.From == from && ev.State == to {
			n++
		}
	}
	return n
}

func enqueueN(t *testing.T, c *mensageria.Client, typ string, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for i := 0; i < n; i += 100 {
		var msgs []mensageria.Message
		for k := i; k < min(i+100, n); k++ {
			msgs = append(msgs, mensageria.Message{Type: typ, Key: fmt.Sprintf("%s-%04d", typ, k), Payload: []byte(`{}`)})
		}
		got, err := c.Enqueue(context.Background(), msgs...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// TestRouteOutageSpendsNoAttempts: a receiver answering 401 (a rotated
// token) to everything until the test lets it through. With MaxAttempts 3
// the old classification (401 permanent) would have parked the whole
// backlog dead at once, and counted failures within three claims; now the
// route pauses, probes (and fails at least twice), resumes when the
// receiver answers 200, and every message is delivered on its first
// counted attempt. The pause is recorded in the database for another
// process to read, and logged once per transition. The same holds for a
// BatchSender, whose whole request the 401 answers.
func TestRouteOutageSpendsNoAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		t.Run("single", func(t *testing.T) { routeOutage(t, b, false) })
		t.Run("batch", func(t *testing.T) { routeOutage(t, b, true) })
	})
}

func routeOutage(t *testing.T, b *backend, batch bool) {
	{
		const n = 200
		var mu sync.Mutex
		healed := false
		rc := newHTTPReceiver(t, func(int, *m2mhttp.Envelope) answer {
			mu.Lock()
			defer mu.Unlock()
			if !healed {
				return answer{status: http.StatusUnauthorized, header: map[string]string{"WWW-Authenticate": `Bearer error="invalid_token"`}}
			}
			return answer{}
		})
		app := uniqueApp("outage")
		typ := "o.single"
		var snd mensageria.Sender = httpSender(t, rc.srv.URL, 8)
		if batch {
			typ = "o.batch"
			bs, err := m2mhttp.NewBatchSender(m2mhttp.SenderConfig{URL: rc.srv.URL, Token: "tok", MaxConcurrent: 8, MaxBatchItems: 20})
			if err != nil {
				t.Fatal(err)
			}
			snd = bs
		}
		reg := mensageria.NewRegistry().MustRegister(typ, snd)
		var evs routeEvents
		log, logs := capture()
		cfg := fastConfig(app, reg)
		cfg.MaxAttempts = 3
		// A lease that a loaded machine cannot outrun: an expired lease
		// is an attempt, and this test counts them.
		cfg.Lease = 10 * time.Second
		cfg.RoutePause = 50 * time.Millisecond
		cfg.RoutePauseMax = 200 * time.Millisecond
		cfg.Hooks = []mensageria.Hook{&evs}
		cfg.Logger = log
		drv := b.open()
		c := newClient(t, drv, cfg)
		ids := enqueueN(t, c, typ, n)
		start(t, c)

		// The outage lasts until the route paused and two probes failed.
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			return evs.count(mensageria.RouteProbing, mensageria.RoutePaused) >= 2
		}, "the route to pause and two probes to fail")
		routes := c.Routes()
		if len(routes) != 1 || routes[0].State == mensageria.RouteFlowing || !strings.Contains(routes[0].LastError, "401") ||
			routes[0].Failures < cfg.RouteFailureThreshold || len(routes[0].Types) != 1 || routes[0].Types[0] != typ {
			t.Fatalf("Routes() during the outage: %+v", routes)
		}
		if err := c.Ready(); err != nil {
			t.Fatalf("Ready during a destination's outage: %v; a paused route is the route's problem, not the relay's", err)
		}
		// Another process reads the pause from the database.
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			st, err := b.open().RouteStates(context.Background(), app)
			return err == nil && len(st) == 1 && st[0].State != string(mensageria.RouteFlowing) && strings.Contains(st[0].LastError, "401") && st[0].Type == typ
		}, "the pause to be recorded")
		if dead := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'dead'"); dead != 0 {
			t.Fatalf("%d messages dead during the outage", dead)
		}
		refused := rc.count(http.StatusUnauthorized)

		mu.Lock()
		healed = true
		mu.Unlock()
		mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(rc.delivered()) == n }, "every message delivered")
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")) == 0
		}, "the outbox drained")
		got := rc.delivered()
		for _, id := range ids {
			as := got[id]
			if len(as) == 0 {
				t.Fatalf("message %s never delivered", id)
			}
			if as[0].attempt != 1 {
				t.Fatalf("message %s delivered on attempt %d after the outage; the outage spent its attempts", id, as[0].attempt)
			}
		}
		if refused < min(cfg.RouteFailureThreshold, n)+2 {
			t.Fatalf("only %d requests refused; the outage did not reach the threshold and two probes", refused)
		}
		// A paused route sends nothing but its probes. One at a time, the
		// relay stops sending within a few requests of the threshold: far
		// fewer refusals than messages. A batch goes out whole (the first
		// claim took every message), and then only the probes, one
		// message each.
		if failedProbes := evs.count(mensageria.RouteProbing, mensageria.RoutePaused); batch {
			if total := rc.count(http.StatusUnauthorized); total != n+failedProbes {
				t.Fatalf("%d envelopes refused: want the first claim's %d and one per failed probe (%d)", total, n, failedProbes)
			}
		} else if refused >= n {
			t.Fatalf("%d requests refused for %d messages: the paused route kept sending", refused, n)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			st, err := b.open().RouteStates(context.Background(), app)
			return err == nil && len(st) == 1 && st[0].State == string(mensageria.RouteFlowing)
		}, "the recovery to be recorded")
		if r := c.Routes(); r[0].State != mensageria.RouteFlowing || r[0].Failures != 0 {
			t.Fatalf("Routes() after recovery: %+v", r)
		}
		out := logs.String()
		if k := strings.Count(out, "route paused: its destination failed"); k != 1 {
			t.Errorf("%d 'route paused' lines, want one for the one outage:\n%s", k, out)
		}
		if k := strings.Count(out, "route resumed"); k != 1 {
			t.Errorf("%d 'route resumed' lines, want 1", k)
		}
		if evs.count(mensageria.RouteFlowing, mensageria.RoutePaused) != 1 || evs.count(mensageria.RouteProbing, mensageria.RouteFlowing) != 1 {
			t.Errorf("transitions: %+v", evs.evs)
		}
		t.Logf("%d messages, %d refused requests during the outage, %d probes failed", n, refused, evs.count(mensageria.RouteProbing, mensageria.RoutePaused))
	}
}

// TestRetryAfterIsALowerBound: a receiver answers its first request 429
// with a Retry-After (delay-seconds, then an HTTP date in another run),
// above BackoffMax. Nothing of the route is sent again before that
// instant, measured against the instant the 429 was written (a lower
// bound, so no clock margin is needed), nothing goes dead, and the
// refused message's attempt is not spent.
func TestRetryAfterIsALowerBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		for _, form := range []string{"seconds", "date"} {
			t.Run(form, func(t *testing.T) {
				var until time.Time
				rc := newHTTPReceiver(t, func(n int, _ *m2mhttp.Envelope) answer {
					if n > 0 {
						return answer{}
					}
					now := time.Now()
					if form == "seconds" {
						until = now.Add(5 * time.Second)
						return answer{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": "5"}}
					}
					// An HTTP date has whole seconds: the next one after
					// three seconds from now.
					until = now.Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
					return answer{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": until.UTC().Format(http.TimeFormat)}}
				})
				app := uniqueApp("retry-after")
				// One request at a time, so that the 429 is the route's
				// only answer before the relay acts on it.
				reg := mensageria.NewRegistry().MustRegister("ra."+form, httpSender(t, rc.srv.URL, 1))
				cfg := fastConfig(app, reg)
				cfg.Lease = 10 * time.Second
				cfg.Concurrency = 1
				cfg.BackoffMax = time.Second // below the Retry-After
				cfg.MaxAttempts = 2
				c := newClient(t, b.open(), cfg)
				const n = 20
				ids := enqueueN(t, c, "ra."+form, n)
				start(t, c)
				mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(rc.delivered()) == n }, "every message delivered")
				hits := rc.arrivals()
				if hits[0].status != http.StatusTooManyRequests {
					t.Fatalf("first answer %d", hits[0].status)
				}
				for _, h := range hits[1:] {
					if h.at.Before(until) {
						t.Fatalf("a request arrived at %s, %s before the Retry-After instant %s", h.at.Format(time.StampMicro), until.Sub(h.at), until.Format(time.StampMicro))
					}
				}
				got := rc.delivered()
				for _, id := range ids {
					if as := got[id]; len(as) == 0 || as[0].attempt != 1 {
						t.Fatalf("message %s: deliveries %+v, want one on attempt 1", id, as)
					}
				}
				if dead := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'dead'"); dead != 0 {
					t.Fatalf("%d dead", dead)
				}
			})
		}
	})
}

// TestSickRouteDoesNotStarveOthers: one route's receiver answers 503 to
// everything while another's answers 200. The healthy route delivers all
// of its messages while the sick one stays paused; the sick route's
// messages are neither dead nor charged an attempt, and far fewer of its
// requests are sent than it has messages.
func TestSickRouteDoesNotStarveOthers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const healthyN, sickN = 600, 300
		sick := newHTTPReceiver(t, func(int, *m2mhttp.Envelope) answer {
			return answer{status: http.StatusServiceUnavailable}
		})
		healthy := newHTTPReceiver(t, func(int, *m2mhttp.Envelope) answer { return answer{} })
		app := uniqueApp("starve")
		reg := mensageria.NewRegistry().
			MustRegister("s.sick", httpSender(t, sick.srv.URL, 16)).
			MustRegister("s.healthy", httpSender(t, healthy.srv.URL, 16))
		cfg := fastConfig(app, reg)
		cfg.MaxAttempts = 2
		cfg.Lease = 10 * time.Second
		cfg.BatchSize = 50
		cfg.RoutePause = 100 * time.Millisecond
		cfg.RoutePauseMax = 500 * time.Millisecond
		c := newClient(t, b.open(), cfg)
		// The sick route's backlog first, so the claims meet it first.
		enqueueN(t, c, "s.sick", sickN)
		enqueueN(t, c, "s.healthy", healthyN)
		start(t, c)
		mensageriatest.Eventually(t, 60*time.Second, func() bool { return len(healthy.delivered()) == healthyN }, "the healthy route to deliver everything")
		var sickState mensageria.RouteState
		for _, r := range c.Routes() {
			if r.Types[0] == "s.sick" {
				sickState = r.State
			}
		}
		if sickState == mensageria.RouteFlowing {
			t.Fatalf("the sick route is flowing: %+v", c.Routes())
		}
		if d := len(sick.delivered()); d != 0 {
			t.Fatalf("%d sick deliveries", d)
		}
		if dead := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'dead'"); dead != 0 {
			t.Fatalf("%d messages dead", dead)
		}
		pending := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE type = 's.sick' AND state = 'pending'")
		if pending != sickN {
			t.Fatalf("%d sick messages pending, want %d", pending, sickN)
		}
		// Attempts are counted at claim and taken back at settle: a row
		// in flight shows 1 for a moment. None shows 2 or more.
		if spent := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE type = 's.sick' AND attempts > 1"); spent != 0 {
			t.Fatalf("%d sick messages were charged attempts for the destination's outage", spent)
		}
		requests := len(sick.arrivals())
		if requests >= sickN {
			t.Fatalf("%d requests to the sick destination for %d messages: the paused route kept sending", requests, sickN)
		}
		t.Logf("healthy route: %d delivered; sick route: %d requests while paused, %s", healthyN, requests, sickState)
	})
}

// TestMaxRateIsNeverExceeded: a route limited to 20 messages a second
// never has more than 20 (+1 at the window's edge, +1 for scheduling
// jitter) requests begin in any one-second window at the receiver, and
// none of its messages waits into a dead letter; a route without a limit
// beside it is not held to it.
func TestMaxRateIsNeverExceeded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const rate, n, free = 20, 70, 300
		limited := newHTTPReceiver(t, func(int, *m2mhttp.Envelope) answer { return answer{} })
		unlimited := newHTTPReceiver(t, func(int, *m2mhttp.Envelope) answer { return answer{} })
		app := uniqueApp("rate")
		reg := mensageria.NewRegistry().
			MustRegister("r.slow", httpSender(t, limited.srv.URL, 16), mensageria.MaxRate(rate)).
			MustRegister("r.fast", httpSender(t, unlimited.srv.URL, 16))
		cfg := fastConfig(app, reg)
		cfg.MaxAttempts = 1 // a single failure would show as a dead letter
		// Deliveries the relay's own lease cuts short count as attempts;
		// a loaded machine must not be mistaken for the pace failing.
		cfg.Lease = 10 * time.Second
		c := newClient(t, b.open(), cfg)
		enqueueN(t, c, "r.slow", n)
		enqueueN(t, c, "r.fast", free)
		start(t, c)
		mensageriatest.Eventually(t, 60*time.Second, func() bool {
			return len(limited.delivered()) == n && len(unlimited.delivered()) == free
		}, "both routes delivered")
		hits := limited.arrivals()
		worst := 0
		for i := range hits {
			k := 0
			for j := i; j < len(hits) && hits[j].at.Sub(hits[i].at) < time.Second; j++ {
				k++
			}
			worst = max(worst, k)
		}
		if worst > rate+2 {
			t.Fatalf("%d requests began within one second on a route limited to %d a second", worst, rate)
		}
		if len(hits) != n {
			t.Fatalf("%d requests for %d messages: some were retried", len(hits), n)
		}
		if dead := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'dead'"); dead != 0 {
			t.Fatalf("%d dead", dead)
		}
		// The unlimited route drained at its own pace: more than the
		// limited route's rate in its busiest second.
		fast := unlimited.arrivals()
		busiest := 0
		for i := range fast {
			k := 0
			for j := i; j < len(fast) && fast[j].at.Sub(fast[i].at) < time.Second; j++ {
				k++
			}
			busiest = max(busiest, k)
		}
		if busiest <= rate+2 {
			t.Fatalf("the unlimited route's busiest second had %d requests: it was held to the other route's rate", busiest)
		}
		t.Logf("limited route: busiest second %d of %d allowed; unlimited route: %d", worst, rate, busiest)
	})
}

// TestMaxRateRegistration: a rate must be a positive number, and the
// types of one Sender (one route) must agree on it.
func TestMaxRateRegistration(t *testing.T) {
	s := mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil })
	for _, bad := range []float64{0, -1} {
		if err := mensageria.NewRegistry().Register("t", s, mensageria.MaxRate(bad)); err == nil || !strings.Contains(err.Error(), "MaxRate") {
			t.Errorf("MaxRate(%v): %v", bad, err)
		}
	}
	shared := &recorder{}
	reg := mensageria.NewRegistry().MustRegister("a", shared, mensageria.MaxRate(5))
	if err := reg.Register("b", shared, mensageria.MaxRate(7)); err == nil || !strings.Contains(err.Error(), "share one Sender") {
		t.Errorf("two rates on one Sender: %v", err)
	}
	if err := reg.Register("c", shared); err == nil {
		t.Errorf("a type without the rate on a limited Sender was accepted")
	}
	if err := reg.Register("d", shared, mensageria.MaxRate(5)); err != nil {
		t.Errorf("the same rate on one Sender: %v", err)
	}
}
