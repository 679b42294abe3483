package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// Issue #10, failure 1: a second app whose config routes the first app's
// type (a copy-pasted route) used to claim every row and park it dead with
// its own 404. Now it fails at Start, naming both apps and the type, and
// the owner delivers every row.
func TestAnotherAppsTypeFailsAtStart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		appA, appB := uniqueApp("pedidos"), uniqueApp("copia")
		recA := &recorder{}
		wrong := &recorder{fail: func(*mensageria.Delivery) error { return mensageria.Permanent(errors.New("404 not found")) }}
		a := newClient(t, b.open(), fastConfig(appA, mensageria.NewRegistry().MustRegister("pedido.criado", recA)))
		const n = 200
		for i := range n {
			if _, err := a.Enqueue(ctx, mensageria.Message{Type: "pedido.criado", Key: fmt.Sprintf("p-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}

		bb := newClient(t, b.open(), fastConfig(appB, mensageria.NewRegistry().MustRegister("pedido.criado", wrong)))
		err := bb.Start(ctx)
		if err == nil {
			_ = bb.Stop(ctx)
			t.Fatal("an app routing another app's type started")
		}
		var oce *mensageria.OwnerConflictError
		if !errors.As(err, &oce) || !errors.Is(err, mensageria.ErrOwnerConflict) {
			t.Fatalf("want an *OwnerConflictError, got %v", err)
		}
		if oce.App != appB || len(oce.Conflicts) != 1 || oce.Conflicts[0].App != appA ||
			oce.Conflicts[0].Kind != driver.ResourceType || oce.Conflicts[0].Name != "pedido.criado" {
			t.Fatalf("conflict %+v: want app %s refused type pedido.criado of app %s", oce, appB, appA)
		}
		for _, want := range []string{appA, appB, "pedido.criado"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error %q does not name %s", err, want)
			}
		}
		if bb.Ready() == nil {
			t.Fatal("a client that failed to start reports ready")
		}

		start(t, a)
		mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(recA.keys()) == n }, "the owner delivers every row")
		if wrong.len() != 0 {
			t.Fatalf("the refused app received %d messages", wrong.len())
		}
		if dead := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'dead'"); dead != 0 {
			t.Fatalf("%d rows parked dead", dead)
		}
	})
}

// Enqueue before Start records the app's ownership itself, so a replica
// that only enqueues works; an enqueue of a type another app owns fails
// with the conflict and writes nothing, even the valid messages of the
// same call.
func TestEnqueueRegistersLazilyAndRefusesAnotherAppsType(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		appA, appB := uniqueApp("producer"), uniqueApp("other")
		a := newClient(t, b.open(), fastConfig(appA, mensageria.NewRegistry().MustRegister("pedido.criado", &recorder{})))
		if _, err := a.Enqueue(ctx, mensageria.Message{Type: "pedido.criado", Key: "p-1"}); err != nil {
			t.Fatalf("enqueue before any Start: %v", err)
		}
		owners, err := b.open().Owners(ctx, appA)
		if err != nil {
			t.Fatal(err)
		}
		if len(owners) != 1 || owners[0].Kind != driver.ResourceType || owners[0].Name != "pedido.criado" || owners[0].App != appA {
			t.Fatalf("catalog of %s after its first enqueue: %+v", appA, owners)
		}
		// A replica of the same app, also enqueue-only, is no conflict.
		a2 := newClient(t, b.open(), fastConfig(appA, mensageria.NewRegistry().MustRegister("pedido.criado", &recorder{})))
		tx, commit, _ := b.begin()
		if _, err := a2.EnqueueTx(ctx, tx, mensageria.Message{Type: "pedido.criado", Key: "p-2"}); err != nil {
			t.Fatalf("a second replica's EnqueueTx: %v", err)
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}

		other := newClient(t, b.open(), fastConfig(appB, mensageria.NewRegistry().
			MustRegister("pedido.criado", &recorder{}).
			MustRegister("fatura.emitida", &recorder{})))
		_, err = other.Enqueue(ctx,
			mensageria.Message{Type: "fatura.emitida", Key: "f-1"},
			mensageria.Message{Type: "pedido.criado", Key: "p-x"})
		var oce *mensageria.OwnerConflictError
		if !errors.As(err, &oce) || oce.App != appB || len(oce.Conflicts) != 1 || oce.Conflicts[0].App != appA {
			t.Fatalf("enqueue of another app's type: want an *OwnerConflictError naming %s, got %v", appA, err)
		}
		// The conflict is retried by every call, and refused every time.
		if _, err := other.Enqueue(ctx, mensageria.Message{Type: "fatura.emitida", Key: "f-2"}); !errors.Is(err, mensageria.ErrOwnerConflict) {
			t.Fatalf("second enqueue after a conflict: %v", err)
		}
		if got := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key IN ('f-1', 'f-2', 'p-x')"); got != 0 {
			t.Fatalf("a refused enqueue wrote %d rows", got)
		}
		if got := b.count("SELECT count(*) FROM " + b.table("outbox")); got != 2 {
			t.Fatalf("the outbox holds %d rows, want the owner's 2", got)
		}
		if owned, err := b.open().Owners(ctx, appB); err != nil || len(owned) != 0 {
			t.Fatalf("the refused app owns %+v (%v); a conflict records nothing", owned, err)
		}
	})
}

// Registering is idempotent: the same app registering again (a restart, a
// replica) changes nothing, keeps the outbox's identity, and an app that
// dropped a route is told its type is still its own.
func TestRegisterIsIdempotentAcrossRestarts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("restart")
		mk := func(types ...string) *mensageria.Client {
			reg := mensageria.NewRegistry()
			for _, typ := range types {
				reg.MustRegister(typ, &recorder{})
			}
			in, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: app + ".ledger", Window: 48 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.RegisterInbox(in); err != nil {
				t.Fatal(err)
			}
			cfg := fastConfig(app, reg)
			return newClient(t, b.open(), cfg)
		}
		first, err := mk("a.one", "a.two").Register(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if first.OutboxID == ([16]byte{}) || len(first.Unlisted) != 0 {
			t.Fatalf("first registration: %+v", first)
		}
		want := []string{"consumer " + app + ".ledger 48h0m0s", "type a.one", "type a.two"}
		if got := ownedBy(t, b, app); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("catalog after registering: %q, want %q", got, want)
		}
		c := mk("a.one", "a.two")
		start(t, c)
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatalf("start again after stop: %v", err)
		}
		again, err := mk("a.one", "a.two").Register(ctx)
		if err != nil || again.OutboxID != first.OutboxID || len(again.Unlisted) != 0 {
			t.Fatalf("registering again: %+v %v; want the same outbox and nothing unlisted", again, err)
		}
		if got := ownedBy(t, b, app); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("catalog after registering again: %q, want %q", got, want)
		}

		// A deploy that dropped the route of a.two: the type stays the
		// app's (moving it is an operator's step), and Start says so.
		log, lb := capture()
		cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("a.one", &recorder{}))
		cfg.Logger = log
		cfg.Election = mensageria.ElectionNone
		dropped := newClient(t, b.open(), cfg)
		start(t, dropped)
		out := lb.String()
		if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "a.two") || !strings.Contains(out, "mensageria owners release") {
			t.Fatalf("no warning naming the type still owned and how to release it:\n%s", out)
		}
		if strings.Count(out, "owners release") != 1 {
			t.Fatalf("the warning is not one line:\n%s", out)
		}
	})
}

// ownedBy lists the catalog entries of app as "kind name [window]".
func ownedBy(t *testing.T, b *backend, app string) []string {
	t.Helper()
	owned, err := b.open().Owners(context.Background(), app)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range owned {
		if o.App != app {
			t.Fatalf("Owners(%s) listed an entry of %q", app, o.App)
		}
		s := string(o.Kind) + " " + o.Name
		if o.Kind == driver.ResourceConsumer {
			s += " " + o.Window.String()
		}
		out = append(out, s)
	}
	return out
}

// A pure receiver (no types, no inboxes) registers nothing, and runs.
func TestAppWithNothingRegistersNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("idle")
		c := newClient(t, b.open(), fastConfig(app, mensageria.NewRegistry()))
		res, err := c.Register(context.Background())
		if err != nil || len(res.Unlisted) != 0 {
			t.Fatalf("Register: %+v %v", res, err)
		}
		start(t, c)
		if got := ownedBy(t, b, app); len(got) != 0 {
			t.Fatalf("an app with nothing owns %q", got)
		}
		if err := c.Ready(); err != nil {
			t.Fatalf("Ready: %v", err)
		}
	})
}

// Issue #10, failure 2: every relay used to purge the inbox records of
// every consumer in the schema after its own Config.InboxWindow. Now each
// app's purge takes only its own consumers, each after the window its
// Inbox registered: after the short-window app's purge ran, the 30-day and
// the keep-forever consumers of the other apps still have every record.
func TestInboxWindowsArePurgedPerConsumer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		type app struct {
			name   string
			window time.Duration
			inbox  *mensageria.Inbox
			client *mensageria.Client
		}
		apps := []*app{
			{name: uniqueApp("short"), window: time.Second},
			{name: uniqueApp("month"), window: 30 * 24 * time.Hour},
			{name: uniqueApp("forever"), window: -1}, // no staleness check
		}
		const records = 20
		for _, a := range apps {
			in, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: a.name + ".ledger", Window: a.window})
			if err != nil {
				t.Fatal(err)
			}
			reg := mensageria.NewRegistry()
			if err := reg.RegisterInbox(in); err != nil {
				t.Fatal(err)
			}
			cfg := fastConfig(a.name, reg)
			cfg.PurgeInterval = 20 * time.Millisecond
			a.inbox, a.client = in, newClient(t, b.open(), cfg)
			for i := range records {
				d := &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: "t", Key: fmt.Sprintf("k%d", i), CreatedAt: time.Now(), Payload: []byte(`{}`)}
				if _, err := in.Apply(ctx, d, func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
		}
		consumer := func(a *app) int {
			return b.count("SELECT count(*) FROM "+b.table("inbox")+" WHERE consumer = $1", a.name+".ledger")
		}
		// Every relay purges, the long-window ones too.
		for _, a := range apps {
			start(t, a.client)
		}
		mensageriatest.Eventually(t, 30*time.Second, func() bool { return consumer(apps[0]) == 0 }, "the short-window app purges its records")
		// The purge that emptied the short consumer saw the others'
		// records just as old; give the long-window relays purges of
		// their own too, then count.
		for _, a := range apps[1:] {
			ownPurges(t, b, a.client)
		}
		for _, a := range apps[1:] {
			if got := consumer(a); got != records {
				t.Fatalf("consumer %s.ledger (window %s) kept %d of its %d records", a.name, a.window, got, records)
			}
		}
		if got := ownedBy(t, b, apps[2].name); len(got) != 1 || got[0] != "consumer "+apps[2].name+".ledger 0s" {
			t.Fatalf("an inbox without a staleness check is registered as %q, want a zero window (keep forever)", got)
		}
	})
}

// ownPurges waits until c's relay has run a purge pass of its own after
// this call, by purging as c's app once more through the driver: passes of
// one app are idempotent, so what one deletes the other would have.
func ownPurges(t *testing.T, b *backend, c *mensageria.Client) {
	t.Helper()
	cfg := c.Config()
	if _, err := b.open().Purge(context.Background(), driver.PurgeParams{App: cfg.App, Types: cfg.Registry.Types(), Batch: 1000}); err != nil {
		t.Fatal(err)
	}
}

// Sender hooks need no listing in Config.Hooks: the Client finds them in
// its Registry. One value both listed and registered (for two types, too)
// is called once per event.
func TestSenderHooksAreDiscoveredAndCalledOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		listed := &hookedSender{}
		unlisted := &hookedSender{}
		reg := mensageria.NewRegistry().
			MustRegister("a", listed).
			MustRegister("b", listed).
			MustRegister("c", unlisted)
		cfg := fastConfig(uniqueApp("hooks"), reg)
		cfg.Hooks = []mensageria.Hook{listed}
		c := newClient(t, b.open(), cfg)
		for _, typ := range []string{"a", "b", "c"} {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: typ, Key: "k-" + typ}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		// Hooks are called in order, the listed one first: once the other
		// has seen an event, so has the listed one, as often as it will.
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return unlisted.count(mensageria.OutcomeDelivered) >= 3 }, "every delivery observed")
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return unlisted.leaderEvents() > 0 }, "the election observed")
		// Each hook sees every delivery once, whichever Sender made it.
		if got := listed.count(mensageria.OutcomeDelivered); got != 3 {
			t.Fatalf("the hook listed and registered twice saw %d deliveries of 3", got)
		}
		if got := unlisted.count(mensageria.OutcomeDelivered); got != 3 {
			t.Fatalf("the registered-only hook saw %d deliveries of 3", got)
		}
		if l, u := listed.leaderEvents(), unlisted.leaderEvents(); l != u {
			t.Fatalf("election events: %d for the listed hook, %d for the other; want the same", l, u)
		}
	})
}

// hookedSender is a Sender that observes deliveries and elections.
type hookedSender struct {
	mu       sync.Mutex
	outcomes []mensageria.Outcome
	leader   int
}

func (h *hookedSender) Send(context.Context, *mensageria.Delivery) error { return nil }

func (h *hookedSender) OnDelivery(ev mensageria.DeliveryEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outcomes = append(h.outcomes, ev.Outcome)
}

func (h *hookedSender) OnElection(mensageria.ElectionEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leader++
}

func (h *hookedSender) count(o mensageria.Outcome) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, x := range h.outcomes {
		if x == o {
			n++
		}
	}
	return n
}

func (h *hookedSender) leaderEvents() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leader
}

// A hook that implements no hook interface is refused by New.
func TestNewRefusesAHookThatIsNone(t *testing.T) {
	b := sqliteBackend(t)
	cfg := fastConfig("a", mensageria.NewRegistry())
	cfg.Hooks = []mensageria.Hook{&hookedSender{}, &recorder{}}
	_, err := mensageria.New(b.open(), cfg)
	var ce *mensageria.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Hooks[1]" || !strings.Contains(err.Error(), "*clienttest_test.recorder") {
		t.Fatalf("want a *ConfigError naming Hooks[1] and *clienttest_test.recorder, got %v", err)
	}
}

// awareSender adapts to the relay's settings and owns a transactional id.
type awareSender struct {
	recorder
	id     string
	smu    sync.Mutex
	seen   []mensageria.RelaySettings
	refuse error
	dest   string
}

func (s *awareSender) UseRelaySettings(rs mensageria.RelaySettings) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.seen = append(s.seen, rs)
	return s.refuse
}

func (s *awareSender) OwnedResources() []driver.Resource {
	return []driver.Resource{{Kind: driver.ResourceKafkaTransactionalID, Name: s.id}}
}

func (s *awareSender) Destination() string { return s.dest }

func (s *awareSender) settings() []mensageria.RelaySettings {
	s.smu.Lock()
	defer s.smu.Unlock()
	return append([]mensageria.RelaySettings(nil), s.seen...)
}

// Start hands the relay's resolved settings once to each distinct Sender
// that asks (RelayAware) and records what Senders own (ResourceOwner)
// with the app's types: a second app with the same transactional id fails
// at start; a Sender refusing the settings fails Start naming its type.
func TestRelayAwareAndResourceOwnerSenders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("aware")
		txid := uniqueApp("txid")
		s := &awareSender{id: txid}
		reg := mensageria.NewRegistry().MustRegister("one", s).MustRegister("two", s)
		cfg := fastConfig(app, reg)
		cfg.MaxAttempts = 5
		cfg.DeliveredRetention = time.Hour
		c := newClient(t, b.open(), cfg)
		reg0, err := c.Register(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start(t, c)
		got := s.settings()
		if len(got) != 1 {
			t.Fatalf("UseRelaySettings called %d times for one Sender of two types, want once", len(got))
		}
		// 5 leases of 1s; delays 10ms, 20ms, 40ms, then capped at 50ms.
		horizon := 5*time.Second + (10+20+40+50)*time.Millisecond
		want := mensageria.RelaySettings{App: app, OutboxID: uuid.UUID(reg0.OutboxID), Lease: time.Second,
			BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, MaxAttempts: 5,
			RetryHorizon: horizon, DeliveredRetention: time.Hour, DeliveryWindow: mensageria.DeliveryWindow(time.Second)}
		if got[0] != want || got[0].OutboxID == uuid.Nil {
			t.Fatalf("settings %+v\nwant     %+v", got[0], want)
		}
		if owned := ownedBy(t, b, app); strings.Join(owned, "|") != "kafka_transactional_id "+txid+"|type one|type two" {
			t.Fatalf("catalog: %q", owned)
		}

		other := uniqueApp("other")
		c2 := newClient(t, b.open(), fastConfig(other, mensageria.NewRegistry().MustRegister("three", &awareSender{id: txid})))
		err = c2.Start(ctx)
		var oce *mensageria.OwnerConflictError
		if !errors.As(err, &oce) || len(oce.Conflicts) != 1 || oce.Conflicts[0].Kind != driver.ResourceKafkaTransactionalID || oce.Conflicts[0].App != app {
			_ = c2.Stop(ctx)
			t.Fatalf("a second app with the same transactional id: want a conflict naming %s, got %v", app, err)
		}
		if owned := ownedBy(t, b, other); len(owned) != 0 {
			t.Fatalf("the refused app owns %q; a conflict records nothing", owned)
		}

		refusing := &awareSender{id: uniqueApp("txid"), refuse: errors.New("retention shorter than the lease")}
		c3 := newClient(t, b.open(), fastConfig(uniqueApp("refused"), mensageria.NewRegistry().MustRegister("four", refusing)))
		err = c3.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), `"four"`) || !strings.Contains(err.Error(), "retention shorter than the lease") {
			_ = c3.Stop(ctx)
			t.Fatalf("a Sender refusing the settings: want Start to fail naming its type, got %v", err)
		}
		if c3.Ready() == nil {
			t.Fatal("a client whose Start failed reports ready")
		}
	})
}

// A retried or dead row says which route answered: the app and the
// Sender's destination (DestinationNamer), else the Sender's Go type.
func TestDeadLetterNamesTheRoute(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("routes")
		named := &awareSender{id: uniqueApp("txid"), dest: "http https://billing.example/m2m"}
		named.fail = func(*mensageria.Delivery) error { return mensageria.Permanent(errors.New("422")) }
		plain := &recorder{fail: func(*mensageria.Delivery) error { return mensageria.Permanent(errors.New("410")) }}
		c := newClient(t, b.open(), fastConfig(app, mensageria.NewRegistry().MustRegister("named", named).MustRegister("plain", plain)))
		for _, typ := range []string{"named", "plain"} {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: typ, Key: "k"}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		var dead []driver.Job
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			var err error
			dead, err = c.Driver().ListMessages(ctx, driver.ListFilter{State: driver.StateDead})
			return err == nil && len(dead) == 2
		}, "both dead")
		routes := map[string]string{}
		for _, j := range dead {
			routes[j.Type] = j.LastRoute
			if j.Owner != app {
				t.Errorf("dead row of %s lists owner %q, want %s", j.Type, j.Owner, app)
			}
		}
		if want := app + " → http https://billing.example/m2m"; routes["named"] != want {
			t.Errorf("named route: %q, want %q", routes["named"], want)
		}
		if want := app + " → *clienttest_test.recorder"; routes["plain"] != want {
			t.Errorf("plain route: %q, want %q", routes["plain"], want)
		}
	})
}

// The Client registers again what it has not recorded yet: a type added
// to the Registry after the first enqueue is recorded before its own first
// enqueue. A type an operator released since is refused once by the
// database, unchanged (*UnownedTypeError), and the next enqueue records
// the app's ownership again.
func TestEnqueueRegistersWhatIsNew(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("growing")
		reg := mensageria.NewRegistry().MustRegister("first", &recorder{})
		c := newClient(t, b.open(), fastConfig(app, reg))
		if _, err := c.Enqueue(ctx, mensageria.Message{Type: "first", Key: "k"}); err != nil {
			t.Fatal(err)
		}
		reg.MustRegister("later", &recorder{})
		if _, err := c.Enqueue(ctx, mensageria.Message{Type: "later", Key: "k"}); err != nil {
			t.Fatalf("enqueue of a type registered after the first enqueue: %v", err)
		}
		if got := ownedBy(t, b, app); strings.Join(got, "|") != "type first|type later" {
			t.Fatalf("catalog: %q", got)
		}

		if err := b.open().Transfer(ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "first", From: app}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Enqueue(ctx, mensageria.Message{Type: "first", Key: "k2"})
		var ute *mensageria.UnownedTypeError
		if !errors.As(err, &ute) || !errors.Is(err, mensageria.ErrUnownedType) || ute.Type != "first" {
			t.Fatalf("enqueue of a released type: want an *UnownedTypeError for it, got %v", err)
		}
		if _, err := c.Enqueue(ctx, mensageria.Message{Type: "first", Key: "k3"}); err != nil {
			t.Fatalf("the next enqueue: %v", err)
		}
		if got := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE type = 'first'"); got != 2 {
			t.Fatalf("%d rows of the released type, want k and k3", got)
		}
	})
}
