package clienttest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// poison is a row a plain INSERT stored that the relay cannot send, and
// what its dead letter must say.
type poison struct {
	key, says string
}

// plantUnreadable writes, by SQL, each backend's rows that no relay can
// read or send, as a database written before the rules that refuse them
// would hold them (the rules are dropped first): issue 24's SQLite id that
// is no UUID and PostgreSQL's infinite created_at among them. Headers are
// spoilt by an UPDATE, which no enqueue rule sees.
func plantUnreadable(t *testing.T, b *backend, typ string) []poison {
	t.Helper()
	o := b.table("outbox")
	var stmts []string
	var ps []poison
	switch b.name {
	case "postgres":
		for _, c := range []string{"created_at", "available_at", "lease_until", "attempted_at"} {
			stmts = append(stmts, "ALTER TABLE "+o+" DROP CONSTRAINT outbox_"+c+"_readable")
		}
		stmts = append(stmts,
			"INSERT INTO "+o+" (type, key, created_at) VALUES ('"+typ+"', 'p-minus', '-infinity'), ('"+typ+"', 'p-plus', 'infinity')",
			"INSERT INTO "+o+" (type, key, created_at) VALUES ('"+typ+"', 'p-far', '20000-01-01 00:00:00+00')",
			"INSERT INTO "+o+" (type, key, available_at) VALUES ('"+typ+"', 'p-available', '-infinity')")
		ps = append(ps, poison{"p-minus", "created_at is -infinity"}, poison{"p-plus", "created_at is infinity"},
			poison{"p-far", "created_at is out of range (20000-01-01"}, poison{"p-available", "available_at is -infinity"})
	case "sqlite":
		stmts = append(stmts, "DROP TRIGGER mensageria_outbox_enqueue_readable",
			"INSERT INTO "+o+" (type, key, message_id) VALUES ('"+typ+"', 's-id', 'order-0001-created-by-java-app-00001')",
			"INSERT INTO "+o+" (type, key, created_at) VALUES ('"+typ+"', 's-created', 'yesterday')",
			"INSERT INTO "+o+" (type, key, created_at) VALUES ('"+typ+"', 's-far', 253402300800000000)")
		ps = append(ps, poison{"s-id", "message_id is not a UUID"}, poison{"s-created", "created_at is not an integer"},
			poison{"s-far", "created_at is out of range (10000-01-01"})
	case "mysql":
		stmts = append(stmts, "DROP TRIGGER "+b.table("outbox_enqueue_readable"),
			"INSERT INTO "+o+" (type, key, message_id) VALUES ('"+typ+"', 'm-id', 'order-0001-created-by-java-app-00001')",
			"INSERT INTO "+o+" (type, key, created_at) VALUES ('"+typ+"', 'm-far', 253402300800000000)")
		ps = append(ps, poison{"m-id", "message_id is not a UUID"}, poison{"m-far", "created_at is out of range (253402300800000000 µs)"})
	default:
		t.Fatalf("no unreadable rows written for backend %s", b.name)
	}
	stmts = append(stmts,
		"INSERT INTO "+o+" (type, key) VALUES ('"+typ+"', 'bad-headers')",
		"UPDATE "+o+" SET headers = '{\"n\": 1}' WHERE key = 'bad-headers'")
	ps = append(ps, poison{"bad-headers", "headers is not a JSON object of string values"})
	for _, s := range stmts {
		if err := b.exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return ps
}

// Issue 24, items 1 and 2: rows a plain INSERT stored that the relay
// cannot read (an id that is no UUID on SQLite, an infinite created_at on
// PostgreSQL, headers that are no object of strings, a created_at no
// transport carries) are each parked dead alone, with a reason naming the
// column, while every good row of the same batch, and of the app's other
// types, is delivered; stats, what status and /metrics read, never fail.
// Before, one such row failed every claim of its app (SQLite) or wedged
// its batch forever (PostgreSQL), and stats failed with SQLSTATE 22008.
func TestUnreadableRowIsParkedAloneAndTheRestDelivered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("poison")
		typ, other := app+".t", app+".u"
		rec := &recorder{}
		reg := mensageria.NewRegistry().MustRegister(typ, rec).MustRegister(other, rec)
		cfg := fastConfig(app, reg)
		log, logs := capture()
		cfg.Logger = log
		drv := b.open()
		c := newClient(t, drv, cfg)
		if _, err := c.Register(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: "good-1", Payload: []byte(`{}`)},
			mensageria.Message{Type: other, Key: "good-u", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		ps := plantUnreadable(t, b, typ)
		if err := b.exec("INSERT INTO " + b.table("outbox") + " (type, key) VALUES ('" + typ + "', 'good-sql')"); err != nil {
			t.Fatal(err)
		}
		if _, err := drv.Stats(context.Background()); err != nil {
			t.Fatalf("Stats with unreadable rows pending: %v", err)
		}
		start(t, c)
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			k := rec.keys()
			return k["good-1"] == 1 && k["good-u"] == 1 && k["good-sql"] == 1 &&
				b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE state = 'dead'") == len(ps)
		}, "the good rows delivered and the unreadable ones parked")
		jobs, err := drv.ListMessages(context.Background(), driver.ListFilter{State: driver.StateDead, Limit: 100})
		if err != nil {
			t.Fatalf("ListMessages of the parked rows: %v", err)
		}
		byKey := map[string]driver.Job{}
		for _, j := range jobs {
			byKey[j.Key] = j
		}
		for _, p := range ps {
			j, ok := byKey[p.key]
			if !ok || !strings.HasPrefix(j.LastError, "unreadable row: ") || !strings.Contains(j.LastError, p.says) || j.Attempt != 1 {
				t.Errorf("row %s = %+v, want dead after one claim saying %q", p.key, j, p.says)
			}
			if rec.keys()[p.key] != 0 {
				t.Errorf("row %s was sent", p.key)
			}
		}
		stats, err := drv.Stats(context.Background())
		if err != nil {
			t.Fatalf("Stats with unreadable rows parked: %v", err)
		}
		for _, s := range stats {
			if s.Type == typ && (s.Dead != int64(len(ps)) || s.Pending != 0 || s.InFlight != 0) {
				t.Errorf("Stats of %s = %+v, want %d dead and nothing pending", typ, s, len(ps))
			}
		}
		if !strings.Contains(logs.String(), "message parked as dead") || !strings.Contains(logs.String(), "unreadable row") {
			t.Errorf("the parked rows were not logged:\n%s", logs)
		}
	})
}

// A row in doubt that the relay cannot read (stored past the rules) is not
// probed, since no probe can ask about a message it cannot read: it stays
// in doubt with its reason, for an operator, while the probe resolves the
// route's other rows in doubt. Before, on PostgreSQL, its infinite
// created_at failed every probe claim of the route.
func TestUnreadableRowInDoubtIsLeftForAnOperator(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("poisondoubt")
		typ := app + ".t"
		var mu sync.Mutex
		probed := map[string]int{}
		rc := mensageria.ReconcilerFunc(func(ctx context.Context, d *mensageria.Delivery) (mensageria.Reconciliation, error) {
			mu.Lock()
			defer mu.Unlock()
			probed[d.Key]++
			return mensageria.Applied, nil
		})
		reg := mensageria.NewRegistry().MustRegister(typ, &recorder{}, mensageria.Mode(mensageria.AtMostOnce), mensageria.Reconcile(rc))
		cfg := fastConfig(app, reg)
		cfg.ReconcileInterval = 50 * time.Millisecond
		drv := b.open()
		c := newClient(t, drv, cfg)
		if _, err := c.Register(context.Background()); err != nil {
			t.Fatal(err)
		}
		o := b.table("outbox")
		var stmts []string
		switch b.name {
		case "postgres":
			stmts = []string{
				"ALTER TABLE " + o + " DROP CONSTRAINT outbox_created_at_readable",
				"INSERT INTO " + o + " (type, key, created_at, attempted_at) VALUES ('" + typ + "', 'u-doubt', '-infinity', now() - interval '1 minute'), ('" + typ + "', 'g-doubt', now(), now() - interval '1 minute')",
			}
		case "sqlite":
			ago := "CAST(unixepoch('subsec') * 1000000 AS INTEGER) - 60000000"
			stmts = []string{
				"DROP TRIGGER mensageria_outbox_enqueue_readable",
				"INSERT INTO " + o + " (type, key, message_id, attempted_at) VALUES ('" + typ + "', 'u-doubt', 'order-0001-created-by-java-app-00001', " + ago + "), ('" + typ + "', 'g-doubt', '0190f0e2-7c3b-7def-8abc-0123456789ab', " + ago + ")",
			}
		case "mysql":
			ago := "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) - 60000000"
			stmts = []string{
				"DROP TRIGGER " + b.table("outbox_enqueue_readable"),
				"INSERT INTO " + o + " (type, key, message_id, attempted_at) VALUES ('" + typ + "', 'u-doubt', 'order-0001-created-by-java-app-00001', " + ago + "), ('" + typ + "', 'g-doubt', '0190f0e2-7c3b-7def-8abc-0123456789ab', " + ago + ")",
			}
		default:
			t.Fatalf("no unreadable row written for backend %s", b.name)
		}
		for _, s := range stmts {
			if err := b.exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 15*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+o+" WHERE key = 'g-doubt'") == 0 &&
				b.count("SELECT count(*) FROM "+o+" WHERE key = 'u-doubt' AND state = 'pending' AND attempted_at IS NOT NULL AND last_error LIKE 'in doubt; not probed: unreadable row: %'") == 1
		}, "the good row resolved and the unreadable one left in doubt with its reason")
		mu.Lock()
		defer mu.Unlock()
		if probed["u-doubt"] != 0 || probed["g-doubt"] == 0 {
			t.Fatalf("probed %v, want the good row only", probed)
		}
		// Each ReconcileInterval the probe loop leases the row again, finds
		// it unreadable and leaves it in doubt once more: between, Stats
		// counts it in flight.
		mensageriatest.Eventually(t, 15*time.Second, func() bool {
			return typeStats(t, drv, typ).InDoubt == 1
		}, "the unreadable row counted in doubt by Stats")
	})
}
