package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// securityEnv is a migrated schema shared by apps a and b, each with the
// four least-privilege roles of docs/security.md granted from the driver's
// own SQL (GrantSQL), and row-level security on (RowLevelSecuritySQL).
type securityEnv struct {
	*catalogEnv
	roles map[string]map[postgres.Role]*postgres.Driver // app -> role -> driver connected as it
	names map[string]map[postgres.Role]string
}

func newSecurityEnv(t testing.TB, rls bool) *securityEnv {
	e := &securityEnv{catalogEnv: newCatalogEnv(t, true), roles: map[string]map[postgres.Role]*postgres.Driver{}, names: map[string]map[postgres.Role]string{}}
	// The catalog as the apps' relays leave it: a owns a.x and the
	// consumer a.in, b owns b.x and b.in; ops migrates.
	e.exec("INSERT INTO " + e.table("owners") + " (kind, name, app) VALUES ('migrations', 'schema', 'ops')")
	for _, app := range []string{"a", "b"} {
		if _, err := e.d.Register(e.ctx, driver.RegisterParams{App: app, Resources: []driver.Resource{
			{Kind: driver.ResourceType, Name: app + ".x"}, {Kind: driver.ResourceConsumer, Name: app + ".in", Window: time.Hour},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, app := range []string{"a", "b"} {
		e.roles[app], e.names[app] = map[postgres.Role]*postgres.Driver{}, map[postgres.Role]string{}
		for _, r := range postgres.Roles {
			name := testdb.Role(t, "ms_"+string(r)+"_"+app)
			sql, err := e.d.GrantSQL(r, name, app)
			if err != nil {
				t.Fatal(err)
			}
			e.exec(sql)
			pool, err := pgxpool.New(e.ctx, testdb.URLAs(t, name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			d, err := postgres.New(pool, &postgres.Config{Schema: e.schema})
			if err != nil {
				t.Fatal(err)
			}
			e.roles[app][r], e.names[app][r] = d, name
		}
	}
	if rls {
		sql, err := e.d.RowLevelSecuritySQL()
		if err != nil {
			t.Fatal(err)
		}
		e.exec(sql)
		e.exec(sql) // an upgrade runs it again
	}
	return e
}

func (e *securityEnv) as(app string, r postgres.Role) *postgres.Driver { return e.roles[app][r] }

// refused wants err to be the server's "permission denied" (42501): the
// role lacks the grant, or row-level security refused the row it wrote.
func refused(t *testing.T, what string, err error) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("%s = %v, want SQLSTATE 42501", what, err)
	}
}

// affects runs q as d's role and returns the rows it changed.
func affects(t *testing.T, d *postgres.Driver, q string, args ...any) int64 {
	t.Helper()
	tag, err := d.Pool().Exec(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return tag.RowsAffected()
}

// Each role does its job through the driver, and touches nothing of the
// other app: a write to another app's rows is refused (42501) or finds no
// row, a table outside its grants is refused, and the catalog entries of
// the other app cannot be taken, moved or deleted.
func TestLeastPrivilegeRolesWithRowLevelSecurity(t *testing.T) {
	e := newSecurityEnv(t, true)
	ctx := e.ctx
	outbox := e.table("outbox")

	// The producer enqueues its app's type, by a plain INSERT and through
	// the driver, and nothing else.
	for _, app := range []string{"a", "b"} {
		p := e.as(app, postgres.RoleProducer)
		affects(t, p, "INSERT INTO "+outbox+" (type, key) VALUES ($1, 'k1')", app+".x")
		if err := p.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: uuid.New(), Type: app + ".x", Key: "k2", Payload: []byte(`{}`)}}}); err != nil {
			t.Fatalf("producer %s: %v", app, err)
		}
	}
	pa := e.as("a", postgres.RoleProducer)
	_, err := pa.Pool().Exec(ctx, "INSERT INTO "+outbox+" (type, key) VALUES ('b.x', 'k')")
	refused(t, "a's producer enqueueing b's type", err)
	_, err = pa.Pool().Exec(ctx, "SELECT count(*) FROM "+outbox)
	refused(t, "a's producer reading the outbox", err)
	_, err = pa.Pool().Exec(ctx, "DELETE FROM "+outbox)
	refused(t, "a's producer deleting", err)
	var pe *pgconn.PgError
	if _, err = pa.Pool().Exec(ctx, "INSERT INTO "+outbox+" (type, key) VALUES ('nobody.x', 'k')"); !errors.As(err, &pe) || pe.Code != "MS001" {
		t.Fatalf("an unowned type = %v, want the catalog's MS001 first", err)
	}

	// The relay registers its own entries, elects, claims and settles its
	// app's rows, and no other app's.
	ra := e.as("a", postgres.RoleRelay)
	if _, err := ra.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{
		{Kind: driver.ResourceType, Name: "a.x"}, {Kind: driver.ResourceType, Name: "a.new"},
		{Kind: driver.ResourceConsumer, Name: "a.in", Window: 2 * time.Hour},
	}}); err != nil {
		t.Fatalf("relay a registers its own: %v", err)
	}
	var oce *driver.OwnerConflictError
	if _, err := ra.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "b.x"}}}); !errors.As(err, &oce) || oce.Conflicts[0].App != "b" {
		t.Fatalf("relay a registering b's type = %v, want an ownership conflict naming b", err)
	}
	if _, err := ra.Register(ctx, driver.RegisterParams{App: "b", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "b.new"}}}); err == nil {
		t.Fatal("relay a registered an entry in b's name")
	}
	el, err := ra.Elector("a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	epoch, ok, err := el.Acquire(ctx)
	if err != nil || !ok {
		t.Fatalf("relay a's election: %v %v", ok, err)
	}
	defer func() { _ = el.Release(context.Background()) }()
	jobs, err := ra.Claim(ctx, driver.ClaimParams{Types: []string{"a.x", "b.x"}, Limit: 10, Lease: time.Minute, Token: 1, Fence: &driver.Fence{App: "a", Epoch: epoch}})
	if err != nil {
		t.Fatalf("relay a claims: %v", err)
	}
	for _, j := range jobs {
		if j.Type != "a.x" {
			t.Fatalf("relay a claimed a row of %s", j.Type)
		}
	}
	if len(jobs) != 2 {
		t.Fatalf("relay a claimed %d rows, want its 2", len(jobs))
	}
	res, err := ra.Settle(ctx, driver.SettleParams{Token: 1, Delivered: []int64{jobs[0].ID}, Dead: []driver.Failure{{ID: jobs[1].ID, Error: "refused"}}})
	if err != nil || len(res.Settled) != 2 {
		t.Fatalf("relay a settles: %+v %v", res, err)
	}
	if err := ra.SetRouteStates(ctx, driver.RouteStatesParams{App: "a", Replace: true, States: []driver.RouteState{{Type: "a.x", App: "a", Route: "r", State: "flowing", Since: time.Now()}}}); err != nil {
		t.Fatalf("relay a records its route: %v", err)
	}
	if _, err := ra.Purge(ctx, driver.PurgeParams{App: "a", Types: []string{"a.x"}, DeliveredBefore: time.Hour}); err != nil {
		t.Fatalf("relay a purges: %v", err)
	}
	// b's rows, by hand: invisible to a's relay, so nothing changes.
	for _, q := range []string{
		"UPDATE " + outbox + " SET state = 'delivered' WHERE type = 'b.x'",
		"UPDATE " + outbox + " SET type = 'a.x' WHERE type = 'b.x'",
		"DELETE FROM " + outbox + " WHERE type = 'b.x'",
		"UPDATE " + e.table("owners") + " SET app = 'a' WHERE app = 'b'",
		"UPDATE " + e.table("leader") + " SET epoch = epoch + 1 WHERE app <> 'a'",
		"DELETE FROM " + e.table("inbox") + " WHERE consumer = 'b.in'",
	} {
		if n := affects(t, ra, q); n != 0 {
			t.Fatalf("relay a: %s changed %d rows", q, n)
		}
	}
	_, err = ra.Pool().Exec(ctx, "UPDATE "+outbox+" SET type = 'b.x' WHERE type = 'a.x'")
	refused(t, "relay a retyping its rows to b's type", err)
	_, err = ra.Pool().Exec(ctx, "INSERT INTO "+e.table("owners")+" (kind, name, app) VALUES ('type', 'b.y', 'b')")
	refused(t, "relay a inserting an entry of b", err)
	_, err = ra.Pool().Exec(ctx, "UPDATE "+e.table("owners")+" SET app = 'b' WHERE app = 'a'")
	refused(t, "relay a giving its entries away", err)
	_, err = ra.Pool().Exec(ctx, "DELETE FROM "+e.table("owners")+" WHERE app = 'b'")
	refused(t, "relay a deleting catalog entries", err)
	if n := affects(t, ra, "UPDATE "+e.table("owners")+" SET app = 'a' WHERE kind = 'migrations'"); n != 0 {
		t.Fatal("relay a took the migrations")
	}
	_, err = ra.Pool().Exec(ctx, "INSERT INTO "+e.table("leader")+" (app, epoch, holder) VALUES ('b', 99, 'x')")
	refused(t, "relay a writing b's election", err)
	_, err = ra.Pool().Exec(ctx, "INSERT INTO "+outbox+" (type, key) VALUES ('a.x', 'k')")
	refused(t, "relay a enqueueing (the producer's grant)", err)
	if n := e.count("type = 'b.x' AND state = 'pending'"); n != 2 {
		t.Fatalf("%d of b's rows still pending, want 2", n)
	}

	// The receive daemon stores deliveries for its consumers, never for
	// another app's, and cannot touch the outbox.
	rb := e.as("b", postgres.RoleReceive)
	if _, err := rb.Register(ctx, driver.RegisterParams{App: "b", Resources: []driver.Resource{{Kind: driver.ResourceConsumer, Name: "b.in", Window: time.Hour}}}); err != nil {
		t.Fatalf("receive b registers its consumer: %v", err)
	}
	store := func(consumer string) error {
		return rb.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
			if _, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: consumer, Key: "k", MessageID: uuid.New()}); err != nil {
				return err
			}
			_, err := tx.(driver.InboxQueueTx).QueueInbox(ctx, driver.QueuedDelivery{Consumer: consumer, Type: "a.x", Key: "k", MessageID: uuid.New(), Payload: []byte(`{}`)})
			return err
		})
	}
	if err := store("b.in"); err != nil {
		t.Fatalf("receive b stores for its consumer: %v", err)
	}
	refused(t, "receive b storing for a's consumer", store("a.in"))
	if _, err := rb.Purge(ctx, driver.PurgeParams{App: "b"}); err != nil {
		t.Fatalf("receive b purges: %v", err)
	}
	if n := affects(t, rb, "DELETE FROM "+e.table("inbox_queue")+" WHERE consumer <> 'b.in'"); n != 0 {
		t.Fatalf("receive b deleted %d queue rows of other consumers", n)
	}
	_, err = rb.Pool().Exec(ctx, "UPDATE "+outbox+" SET state = 'dead'")
	refused(t, "receive b updating the outbox", err)

	// The app's SQL applier claims and applies its consumer's rows only.
	claim := func(app, consumer string) (n int, err error) {
		err = pgx.BeginFunc(ctx, e.as(app, postgres.RoleApplier).Pool(), func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "SELECT id FROM "+e.schema+".inbox_claim($1, 10)", consumer)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			for _, id := range ids {
				if _, err := tx.Exec(ctx, "SELECT "+e.schema+".inbox_applied($1)", id); err != nil {
					return err
				}
			}
			n = len(ids)
			return err
		})
		return n, err
	}
	if n, err := claim("a", "b.in"); err != nil || n != 0 {
		t.Fatalf("a's applier claimed %d of b's rows (%v)", n, err)
	}
	if n, err := claim("b", "b.in"); err != nil || n != 1 {
		t.Fatalf("b's applier claimed %d of its rows (%v), want 1", n, err)
	}

	// The console reads every app, and retries or discards its own app's
	// dead letters only, whatever the console's own scope says.
	ca := e.as("a", postgres.RoleConsole)
	all, err := ca.ListMessages(ctx, driver.ListFilter{})
	if err != nil {
		t.Fatalf("console a lists: %v", err)
	}
	seen := map[string]bool{}
	for _, j := range all {
		seen[j.Type] = true
	}
	if !seen["a.x"] || !seen["b.x"] {
		t.Fatalf("console a sees %v, want both apps' rows", seen)
	}
	if _, err := ca.Stats(ctx); err != nil {
		t.Fatalf("console a counts: %v", err)
	}
	e.exec("UPDATE " + outbox + " SET state = 'dead' WHERE type = 'b.x'")
	if n, err := ca.Revive(ctx, driver.ReviveParams{Types: []string{"b.x"}}); err != nil || n != 0 {
		t.Fatalf("console a retrying b's dead letters = %d, %v; want 0", n, err)
	}
	if n, err := ca.Revive(ctx, driver.ReviveParams{Types: []string{"b.x"}, Discard: true}); err != nil || n != 0 {
		t.Fatalf("console a discarding b's dead letters = %d, %v; want 0", n, err)
	}
	if n, err := ca.Revive(ctx, driver.ReviveParams{Types: []string{"a.x"}}); err != nil || n != 1 {
		t.Fatalf("console a retrying its dead letter = %d, %v; want 1", n, err)
	}
	_, err = ca.Pool().Exec(ctx, "UPDATE "+e.table("owners")+" SET app = 'a'")
	refused(t, "console a writing the catalog", err)

	// A login role that is a member of a's producer and relay roles acts
	// as both, for a only: the grants and the mapping follow membership.
	member := testdb.Role(t, "ms_member_a")
	e.exec("GRANT " + e.names["a"][postgres.RoleProducer] + ", " + e.names["a"][postgres.RoleRelay] + " TO " + member)
	mp, err := pgxpool.New(ctx, testdb.URLAs(t, member))
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	if _, err := mp.Exec(ctx, "INSERT INTO "+outbox+" (type, key) VALUES ('a.x', 'by-member')"); err != nil {
		t.Fatalf("a member of a's producer role enqueueing: %v", err)
	}
	_, err = mp.Exec(ctx, "INSERT INTO "+outbox+" (type, key) VALUES ('b.x', 'by-member')")
	refused(t, "a member of a's roles enqueueing b's type", err)
	if tag, err := mp.Exec(ctx, "UPDATE "+outbox+" SET attempts = attempts WHERE key = 'by-member'"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("a member of a's relay role updating a's row: %v %v", tag, err)
	}

	// Nothing of b's moved.
	if n := e.count("type = 'b.x' AND state = 'dead'"); n != 2 {
		t.Fatalf("%d of b's rows dead as the test left them, want 2", n)
	}
	var owners []string
	rows, _ := e.pool.Query(ctx, "SELECT kind || ' ' || name || ' ' || coalesce(app, '') FROM "+e.table("owners")+" ORDER BY 1")
	owners, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	want := "consumer a.in a,consumer b.in b,migrations schema ops,type a.new a,type a.x a,type b.x b"
	if got := strings.Join(owners, ","); got != want {
		t.Fatalf("catalog %s, want %s", got, want)
	}
}

// Under the policies the settle still finds its rows by the primary key
// and skips the branch it does not take (keep or delete): its constant
// false no longer sits beside the policies' conditions, where the planner
// stopped folding it away and scanned the whole outbox for it.
func TestSettleUnderRowLevelSecurityReadsNoWholeOutbox(t *testing.T) {
	e := newSecurityEnv(t, true)
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) SELECT 'a.x', 'k' || g FROM generate_series(1, 2000) g")
	e.exec("ANALYZE " + e.table("outbox"))
	r := e.as("a", postgres.RoleRelay)
	q, err := r.Statement("settle_delivered")
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		err := pgx.BeginFunc(e.ctx, r.Pool(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
				return err
			}
			rows, err := tx.Query(e.ctx, "EXPLAIN "+q, pgx.QueryExecModeExec, []int64{1, 2, 3}, int64(1), keep)
			if err != nil {
				return err
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			plan := strings.Join(lines, "\n")
			if strings.Contains(plan, "Seq Scan on outbox") || !strings.Contains(plan, "One-Time Filter: false") {
				t.Errorf("settle (keep %v) as a confined relay:\n%s", keep, plan)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
