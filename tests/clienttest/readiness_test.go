package clienttest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// failures counts the OnFailure events of a relay by kind.
type failures struct {
	mu sync.Mutex
	n  map[mensageria.FailureKind]int
}

func (f *failures) OnFailure(ev mensageria.FailureEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[mensageria.FailureKind]int{}
	}
	f.n[ev.Kind]++
}

func (f *failures) count(k mensageria.FailureKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[k]
}

// loud counts the log lines at WARN and above.
func loud(out string) int {
	return strings.Count(out, "level=WARN") + strings.Count(out, "level=ERROR")
}

// rolePool is a pool whose sessions act as a role of the test's own, with
// a relay's grants on schema, dropped when the test ends; the server's
// configuration is never touched. onConnect, when not nil, runs on each
// new session after the SET ROLE.
func rolePool(t *testing.T, b *backend, onConnect func(ctx context.Context, conn *pgx.Conn) error) (role string, pool *pgxpool.Pool, drv *postgres.Driver) {
	t.Helper()
	schema := strings.TrimSuffix(b.table("outbox"), ".outbox")
	role = fmt.Sprintf("mensageria_test_relay_%08x", rand.Uint32())
	if err := b.exec("CREATE ROLE " + role + " NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if err := b.exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	for _, q := range []string{
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		if err := b.exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pcfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 4
	pcfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SET ROLE "+role); err != nil {
			return err
		}
		if onConnect != nil {
			return onConnect(ctx, conn)
		}
		return nil
	}
	pool, err = pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	drv, err = postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return role, pool, drv
}

// Claims that fail (the relay's role may not UPDATE the outbox; on SQLite
// a trigger refuses the claim's UPDATE) used to leave the relay ready
// while it delivered nothing, each attempt logged and none counted. Now
// Ready says why, each attempt counts as a claim failure, the streak is
// logged once however many attempts it takes, and once claims work again
// Ready is nil and the backlog drains.
func TestClaimFailingMakesTheRelayUnready(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("noclaim")
		relayDrv := b.open()
		var breakClaims, mendClaims, refusal string
		if b.name == "postgres" {
			role, _, d := rolePool(t, b, nil)
			relayDrv = d
			breakClaims = "REVOKE UPDATE ON " + b.table("outbox") + " FROM " + role
			mendClaims = "GRANT UPDATE ON " + b.table("outbox") + " TO " + role
			refusal = "permission denied"
		} else if b.name == "mysql" {
			breakClaims = "CREATE TRIGGER refuse_claims BEFORE UPDATE ON " + b.table("outbox") +
				" FOR EACH ROW BEGIN IF NOT (NEW.lease_token <=> OLD.lease_token) THEN" +
				" SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'claims refused by the test'; END IF; END"
			mendClaims = "DROP TRIGGER refuse_claims"
			refusal = "claims refused by the test"
		} else {
			breakClaims = "CREATE TRIGGER refuse_claims BEFORE UPDATE OF lease_token ON " + b.table("outbox") +
				" BEGIN SELECT RAISE(ABORT, 'claims refused by the test'); END"
			mendClaims = "DROP TRIGGER refuse_claims"
			refusal = "claims refused by the test"
		}
		const backlog = 30
		producer := newClient(t, b.open(), fastConfig(app, mensageria.NewRegistry().MustRegister("t", &recorder{})))
		for i := range backlog {
			if _, err := producer.Enqueue(ctx, mensageria.Message{Type: "t", Key: fmt.Sprintf("k%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.exec(breakClaims); err != nil {
			t.Fatalf("%s: %v", breakClaims, err)
		}
		rec, fails := &recorder{}, &failures{}
		log, lb := capture()
		cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("t", rec))
		cfg.Hooks, cfg.Logger = []mensageria.Hook{fails}, log
		relay := newClient(t, relayDrv, cfg)
		start(t, relay)

		mensageriatest.Eventually(t, 30*time.Second, func() bool { return relay.Ready() != nil }, "Ready to report the failing claims")
		// Many attempts: the poll interval is 20 ms.
		mensageriatest.Eventually(t, 30*time.Second, func() bool { return fails.count(mensageria.FailureClaim) >= 20 }, "twenty failed claims counted")
		err := relay.Ready()
		if err == nil || !strings.Contains(err.Error(), "claim failing") || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("Ready = %v; want it to say the claims fail, and why", err)
		}
		if got := len(rec.keys()); got != 0 {
			t.Fatalf("%d keys delivered while claims failed", got)
		}
		out := lb.String()
		if n := strings.Count(out, "claim failing on a database error"); n != 1 {
			t.Fatalf("the failing streak was logged %d times, want once:\n%s", n, out)
		}
		if n := loud(out); n > 1 {
			t.Fatalf("%d WARN or ERROR lines for %d failed claims, want one:\n%s", n, fails.count(mensageria.FailureClaim), out)
		}

		if err := b.exec(mendClaims); err != nil {
			t.Fatalf("%s: %v", mendClaims, err)
		}
		mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(rec.keys()) == backlog }, "the backlog drains")
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return relay.Ready() == nil }, "Ready is nil again")
		if n := strings.Count(lb.String(), "claims work again"); n != 1 {
			t.Fatalf("the recovery was logged %d times, want once:\n%s", n, lb.String())
		}
	})
}

// A statement timeout of 1 ms on the relay's sessions (set per session by
// the test, never on the server) used to stop every claim while Ready
// stayed nil. Now Ready says what fails, and it is nil again once the
// sessions are back to normal.
func TestStatementTimeoutMakesTheRelayUnready(t *testing.T) {
	b := pgBackend(t)
	ctx := context.Background()
	var strangled atomic.Bool
	_, pool, d := rolePool(t, b, func(ctx context.Context, conn *pgx.Conn) error {
		if strangled.Load() {
			_, err := conn.Exec(ctx, "SET statement_timeout = 1")
			return err
		}
		return nil
	})
	app := uniqueApp("timeout")
	rec, fails := &recorder{}, &failures{}
	cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("t", rec))
	cfg.Hooks = []mensageria.Hook{fails}
	relay := newClient(t, d, cfg)
	start(t, relay)
	mensageriatest.Eventually(t, 10*time.Second, relay.IsLeader, "the relay leads")
	if err := relay.Ready(); err != nil {
		t.Fatalf("Ready before the timeout: %v", err)
	}

	strangled.Store(true)
	pool.Reset() // every session from now on has the timeout
	// A claim that finds the outbox free can finish within the 1 ms, and
	// one that does ends the failing streak: the test's own transaction
	// holds the outbox against writers (not readers) meanwhile, so every
	// claim waits, and times out, whatever the machine's speed. The
	// messages go in under that lock and are there once it is released.
	raw, commit, rollback := b.begin()
	held := raw.(pgx.Tx)
	released := false
	defer func() {
		if !released {
			_ = rollback()
		}
	}()
	if _, err := held.Exec(ctx, "LOCK TABLE "+b.table("outbox")+" IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := held.Exec(ctx, "INSERT INTO "+b.table("outbox")+" (type, key) VALUES ('t', $1)", fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		err = relay.Ready()
		return err != nil
	}, "Ready to report the timeouts")
	if !strings.Contains(err.Error(), "statement timeout") {
		t.Fatalf("Ready = %v; want it to name the statement timeout", err)
	}
	// The hooks hear of a failure just after Ready does.
	mensageriatest.Eventually(t, 5*time.Second, func() bool {
		return fails.count(mensageria.FailureClaim)+fails.count(mensageria.FailureElection) > 0
	}, "a claim or election failure counted")

	released = true
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	strangled.Store(false)
	pool.Reset()
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(rec.keys()) == 20 }, "the messages are delivered")
	mensageriatest.Eventually(t, 10*time.Second, func() bool { return relay.Ready() == nil }, "Ready is nil again")
}

// A database that cannot be reached (a private server, shut down) makes
// the relay unready, saying so, and the outage is logged once, not once
// per attempt (it used to be 2-4 WARN lines a second); once the server is
// back, so is the relay.
func TestUnreachableDatabaseMakesTheRelayUnready(t *testing.T) {
	testdb.Long(t, "private PostgreSQL server")
	srv := testdb.PrivateServer(t, pgserver.Config{})
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(pool, &postgres.Config{Schema: "outage"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	app := uniqueApp("outage")
	rec, fails := &recorder{}, &failures{}
	log, lb := capture()
	cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("t", rec))
	cfg.Hooks, cfg.Logger = []mensageria.Hook{fails}, log
	relay := newClient(t, d, cfg)
	start(t, relay)
	mensageriatest.Eventually(t, 10*time.Second, relay.IsLeader, "the relay leads")

	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		err := relay.Ready()
		return err != nil && strings.Contains(err.Error(), "database unreachable")
	}, "Ready to say the database is unreachable")
	// Two seconds of outage: a hundred claims at a 20 ms poll interval.
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return fails.count(mensageria.FailureDatabase) >= 50 }, "fifty attempts on an unreachable database")
	out := lb.String()
	if n := strings.Count(out, "database unreachable"); n != 1 {
		t.Fatalf("the outage was logged %d times, want once:\n%s", n, out)
	}
	if n := loud(out); n > 2 {
		t.Fatalf("%d WARN or ERROR lines for %d attempts on an unreachable database, want at most two (the outage, and LISTEN's own):\n%s",
			n, fails.count(mensageria.FailureDatabase), out)
	}

	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return relay.Ready() == nil }, "Ready is nil again")
	if _, err := relay.Enqueue(ctx, mensageria.Message{Type: "t", Key: "after"}); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return rec.keys()["after"] == 1 }, "the relay delivers again")
	if n := strings.Count(lb.String(), "database reachable again"); n != 1 {
		t.Fatalf("the recovery was logged %d times, want once:\n%s", n, lb.String())
	}
}
