package transporttest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// Run runs the conformance suite. newHarness is called once per subtest,
// each on a destination of its own; subtests run one at a time, since
// the outage tests time the relay's answers.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	tests := []struct {
		name string
		run  func(t *testing.T, h *Harness)
	}{
		{"Deliver", testDeliver},
		{"Classify", testClassify},
		{"StartRefused", testStartRefused},
		{"Outage/DownAtStart", func(t *testing.T, h *Harness) { testOutage(t, h, true) }},
		{"Outage/DownWhileRelaying", func(t *testing.T, h *Harness) { testOutage(t, h, false) }},
		{"RouteFault", func(t *testing.T, h *Harness) { testRouteFaults(t, h, newHarness) }},
		{"Poison", testPoison},
		{"Batch", testBatch},
		{"Ordered", testOrdered},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if h == nil || h.NewSender == nil || h.Received == nil {
				t.Fatal("the harness has no NewSender or Received")
			}
			tc.run(t, h)
		})
	}
}

// byID counts the received messages per id.
func byID(rs []Received) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		m[r.ID]++
	}
	return m
}

// assertHolds checks that the destination holds every one of ids: once
// each and nothing else with ExactlyOnce, at least once otherwise.
func assertHolds(t *testing.T, h *Harness, ids []string) {
	t.Helper()
	rs := h.Received(t)
	if h.Features.ExactlyOnce && len(rs) != len(ids) {
		t.Fatalf("the destination holds %d messages, want %d, each once", len(rs), len(ids))
	}
	got := byID(rs)
	for _, id := range ids {
		switch n := got[id]; {
		case n == 0:
			t.Fatalf("message %s is not at the destination", id)
		case n > 1 && h.Features.ExactlyOnce:
			t.Fatalf("message %s is at the destination %d times, want once", id, n)
		}
	}
}

// Every message reaches the destination as enqueued: its id, key and
// payload, with nothing failing on the way.
func testDeliver(t *testing.T, h *Harness) {
	_, r := senderUnder(t, h.NewSender, relayConfig{lease: 5 * time.Second})
	if err := r.start(t); err != nil {
		t.Fatal(err)
	}
	r.enqueue(t, 50, 7)
	r.waitDrained(t)
	r.assertNoneDead(t)
	if f := r.out.failures(); len(f) > 0 {
		t.Fatalf("%d deliveries failed to a healthy destination, the first: %v", len(f), f[0].Err)
	}
	assertHolds(t, h, r.ids)
	want := map[string]int{}
	for i, id := range r.ids {
		want[id] = i
	}
	for _, m := range h.Received(t) {
		n, ok := want[m.ID]
		if !ok {
			t.Fatalf("the destination holds %s, which was not enqueued", m.ID)
		}
		if wantKey := fmt.Sprintf("k-%d", n%7); m.Key != wantKey || !jsonEqual(m.Payload, payload(n)) {
			t.Fatalf("message %s arrived with key %q and payload %s, want %q and %s", m.ID, m.Key, m.Payload, wantKey, payload(n))
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return false
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// Each failure of the table is classified as the relay needs it, never
// both Permanent and Unavailable, and the classified error keeps it.
func testClassify(t *testing.T, h *Harness) {
	if h.Classify == nil {
		t.Skip("the transport has no error table (its own tests classify its answers)")
	}
	if len(h.Classes) == 0 {
		t.Fatal("Classify without Classes checks nothing")
	}
	for _, c := range h.Classes {
		got := h.Classify(c.Err)
		kind := Retryable
		switch {
		case mensageria.IsPermanent(got) && mensageria.IsUnavailable(got):
			t.Errorf("%v: both Permanent and Unavailable", c.Err)
			continue
		case mensageria.IsPermanent(got):
			kind = Permanent
		case mensageria.IsUnavailable(got):
			kind = Unavailable
		}
		if kind != c.Want {
			t.Errorf("%v: classified %s, want %s", c.Err, kind, c.Want)
		}
		if !errors.Is(got, c.Err) {
			t.Errorf("%v: the classified error %v does not wrap it", c.Err, got)
		}
	}
}

// A destination that is missing or refused fails Start with an error
// saying so and what to do; nothing is claimed.
func testStartRefused(t *testing.T, h *Harness) {
	if len(h.StartRefusals) == 0 {
		t.Skip("the transport does not check its destination at start")
	}
	for _, sr := range h.StartRefusals {
		t.Run(sr.Name, func(t *testing.T) {
			_, r := senderUnder(t, sr.NewSender, relayConfig{lease: 5 * time.Second})
			r.enqueue(t, 30, 13)
			err := r.start(t)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			if sr.Is != nil && !sr.Is(err) {
				t.Fatalf("Start's error is not the one expected: %v", err)
			}
			for _, w := range sr.Says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start's error does not say %q: %v", w, err)
				}
			}
			if s := r.stats(t); s.Pending != 30 || s.InFlight+s.Dead != 0 || r.out.count(mensageria.OutcomeRetry)+r.out.count(mensageria.OutcomeDelivered) != 0 {
				t.Fatalf("after a failed Start: %+v; want the 30 rows pending, untouched", s)
			}
		})
	}
}

// The destination is down when the relay starts (downAtStart), or goes
// down once it runs, and comes back. Start goes on; every failure is the
// route's and spends no attempt; Ready stays nil while Routes reports the
// route paused; the outage is logged once each way and the Sender adds
// nothing but its start check's line; every message is delivered, none
// dead, and the route flows again.
func testOutage(t *testing.T, h *Harness, downAtStart bool) {
	o := h.Outage
	if o == nil {
		t.Skip("the harness cannot take the destination down")
	}
	// A lease of seconds: a client may take a second or two to produce
	// again to a restarted server (its reconnect backoff), and a
	// deadline shorter than that would flap the route after the outage.
	_, r := senderUnder(t, h.NewSender, relayConfig{lease: 5 * time.Second})
	if downAtStart {
		o.Down(t)
	}
	if err := r.start(t); err != nil {
		t.Fatalf("Start with the destination down: %v", err)
	}
	if !downAtStart {
		o.Down(t)
	}
	r.enqueue(t, 100, 13)
	r.waitPostponed(t)
	r.assertReadyWhilePaused(t)
	o.Up(t)
	r.waitDrained(t)
	r.assertNoneDead(t)
	assertHolds(t, h, r.ids)
	r.assertRouteFailures(t)
	if len(o.Says) > 0 && !anySays(r.out.failures(), o.Says) {
		t.Fatalf("no failure says all of %q: %v", o.Says, errorsOf(r.out.failures()))
	}
	warning := ""
	if downAtStart {
		warning = o.StartWarning
	}
	r.assertOneOutage(t, warning, o.PausedSays...)
	r.waitFlowing(t)
}

func errorsOf(evs []mensageria.DeliveryEvent) []error {
	out := make([]error, len(evs))
	for i, ev := range evs {
		out[i] = ev.Err
	}
	return out
}

func says(err error, want []string) bool {
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			return false
		}
	}
	return true
}

func anySays(evs []mensageria.DeliveryEvent, want []string) bool {
	for _, ev := range evs {
		if says(ev.Err, want) {
			return true
		}
	}
	return false
}

// routeFaultLease is the lease of the RouteFault tests: long, so that a
// failure answered at its deadline shows.
const routeFaultLease = 30 * time.Second

// A fault every message of the route meets while the server answers: the
// route's failure, saying what is wrong, answered as soon as it is known
// rather than at the deadline; logged once each way; when it is lifted
// every message is delivered, none dead.
func testRouteFaults(t *testing.T, h *Harness, newHarness func(t *testing.T) *Harness) {
	if len(h.RouteFaults) == 0 {
		t.Skip("the harness has no fault of the route")
	}
	for i := range h.RouteFaults {
		t.Run(h.RouteFaults[i].Name, func(t *testing.T) {
			// The parent's harness serves the first fault; each other
			// fault gets a destination of its own.
			h := h
			if i > 0 {
				h = newHarness(t)
			}
			f := h.RouteFaults[i]
			_, r := senderUnder(t, h.NewSender, relayConfig{lease: routeFaultLease})
			if err := r.start(t); err != nil {
				t.Fatal(err)
			}
			f.Begin(t)
			r.enqueue(t, 100, 13)
			// Enough failures for the route to have paused and probed.
			during := r.waitFailures(t, 25)
			f.End(t)
			r.waitDrained(t)
			r.assertNoneDead(t)
			assertHolds(t, h, r.ids)
			// Batches in flight as the fault ends may find it lifted.
			for _, ev := range during {
				if !says(ev.Err, f.Says) {
					t.Fatalf("a failure during the fault does not say all of %q: %v", f.Says, ev.Err)
				}
			}
			r.assertRouteFailures(t)
			for _, ev := range r.out.failures() {
				if f.Is != nil && !f.Is(ev.Err) {
					t.Fatalf("a failure is not the one expected: %v", ev.Err)
				}
				if ev.Duration > routeFaultLease/3 {
					t.Fatalf("a batch waited %v, for its deadline: %v", ev.Duration, ev.Err)
				}
			}
			r.assertOneOutage(t, "", f.PausedSays...)
		})
	}
}

// poisonKey is the key of the suite's poison message, among others.
const poisonKey = "poison"

// One message the destination refuses for good parks dead after one
// attempt, with the destination's reason, while the others are
// delivered and the route never pauses.
func testPoison(t *testing.T, h *Harness) {
	if h.Poison == nil {
		t.Skip("the harness has no message its destination refuses")
	}
	_, r := senderUnder(t, h.NewSender, relayConfig{lease: 5 * time.Second})
	if err := r.start(t); err != nil {
		t.Fatal(err)
	}
	r.enqueue(t, 15, 5)
	at := len(r.ids)
	r.enqueueMessages(t, mensageria.Message{Type: msgType, Key: poisonKey, Payload: h.Poison.Payload})
	poisonID := r.ids[at]
	r.enqueue(t, 15, 5)
	r.waitDrained(t)
	dead, err := r.drv.ListMessages(ctxOf(t), driver.ListFilter{State: driver.StateDead, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || uuid.UUID(dead[0].MessageID).String() != poisonID {
		t.Fatalf("dead letters %+v, want the poison message alone", dead)
	}
	if dead[0].Attempt != 1 {
		t.Fatalf("the poison message was attempted %d times, want once: a refusal for good is not retried", dead[0].Attempt)
	}
	for _, w := range h.Poison.Says {
		if !strings.Contains(dead[0].LastError, w) {
			t.Fatalf("the dead letter's reason does not say %q: %s", w, dead[0].LastError)
		}
	}
	if n := r.out.count(mensageria.OutcomeDead); n != 1 {
		t.Fatalf("%d deliveries dead, want the poison's", n)
	}
	if paused := r.log.Lines(slog.LevelWarn, "route paused"); len(paused) > 0 {
		t.Fatalf("one refused message paused the route: %q", paused)
	}
	good := append(slices.Clone(r.ids[:at]), r.ids[at+1:]...)
	assertHolds(t, h, good)
	if byID(h.Received(t))[poisonID] > 0 {
		t.Fatal("the destination holds the message it refused")
	}
}

// A BatchSender answers a batch with one refused message per message:
// the refused one Permanent (not the route's), the others delivered; or,
// with Features.AtomicBatch, the others retryable and held by none, and
// delivered when sent again without the refused one.
func testBatch(t *testing.T, h *Harness) {
	if h.Poison == nil {
		t.Skip("the harness has no message its destination refuses")
	}
	log := &LogRecords{}
	s, ok := h.NewSender(t, slog.New(log)).(mensageria.BatchSender)
	if !ok {
		t.Skip("the Sender is not a BatchSender")
	}
	const poisoned = 2
	ds := make([]*mensageria.Delivery, 5)
	for i := range ds {
		ds[i] = &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: msgType, Key: fmt.Sprintf("k-%d", i),
			Payload: payload(i), Attempt: 1, Seq: int64(i + 1), CreatedAt: time.Now()}
	}
	ds[poisoned].Key, ds[poisoned].Payload = poisonKey, h.Poison.Payload
	errs := s.SendBatch(ctxOf(t), ds)
	if len(errs) != len(ds) {
		t.Fatalf("SendBatch answered %d errors for %d deliveries: %v", len(errs), len(ds), errs)
	}
	var good []*mensageria.Delivery
	var ids []string
	for i, err := range errs {
		if i == poisoned {
			if !mensageria.IsPermanent(err) || mensageria.IsUnavailable(err) {
				t.Fatalf("the refused message: %v, want Permanent and not the route's", err)
			}
			continue
		}
		good = append(good, ds[i])
		ids = append(ids, ds[i].ID.String())
		switch {
		case !h.Features.AtomicBatch && err != nil:
			t.Fatalf("message %d of the batch failed with its neighbour refused: %v", i, err)
		case h.Features.AtomicBatch && (err == nil || mensageria.IsPermanent(err) || mensageria.IsUnavailable(err)):
			t.Fatalf("message %d of an all-or-nothing batch with a refused neighbour: %v, want a plain retryable error", i, err)
		}
	}
	if h.Features.AtomicBatch {
		if rs := h.Received(t); len(rs) > 0 {
			t.Fatalf("the destination shows %d messages of a batch that failed as a whole", len(rs))
		}
		if errs := s.SendBatch(ctxOf(t), good); errs != nil {
			t.Fatalf("the batch again without the refused message: %v", errors.Join(errs...))
		}
	}
	assertHolds(t, h, ids)
	if byID(h.Received(t))[ds[poisoned].ID.String()] > 0 {
		t.Fatal("the destination holds the message it refused")
	}
}

// An ordered route's messages of one key reach the destination in
// enqueue order.
func testOrdered(t *testing.T, h *Harness) {
	if !h.Features.OrderedPerKey {
		t.Skip("the transport does not keep one key's order")
	}
	_, r := senderUnder(t, h.NewSender, relayConfig{lease: 5 * time.Second, ordered: true})
	if err := r.start(t); err != nil {
		t.Fatal(err)
	}
	const keys = 5
	for range 4 {
		r.enqueue(t, 25, keys)
	}
	r.waitDrained(t)
	r.assertNoneDead(t)
	assertHolds(t, h, r.ids)
	seqOf := map[string]int{}
	for i, id := range r.ids {
		seqOf[id] = i
	}
	last := map[string]int{}
	for _, m := range h.Received(t) {
		n := seqOf[m.ID]
		if prev, ok := last[m.Key]; ok && n < prev {
			// A redelivery of an earlier message after a later one
			// would be the transport's reordering too.
			t.Fatalf("key %s: message %d arrived after message %d", m.Key, n, prev)
		}
		last[m.Key] = n
	}
}
