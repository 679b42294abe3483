package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// catalogEnv is a driver on its own schema, migrated unless told not to.
type catalogEnv struct {
	t      testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	schema string
	d      *postgres.Driver
}

func newCatalogEnv(t testing.TB, migrate bool) *catalogEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &catalogEnv{t: t, ctx: ctx, pool: testdb.Pool(t), schema: testdb.Schema(t)}
	d, err := postgres.New(e.pool, &postgres.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	if migrate {
		if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *catalogEnv) table(name string) string { return e.schema + "." + name }

func (e *catalogEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *catalogEnv) own(app string, types ...string) {
	e.t.Helper()
	rs := make([]driver.Resource, len(types))
	for i, typ := range types {
		rs[i] = driver.Resource{Kind: driver.ResourceType, Name: typ}
	}
	if _, err := e.d.Register(e.ctx, driver.RegisterParams{App: app, Resources: rs}); err != nil {
		e.t.Fatalf("register %v as %s's: %v", types, app, err)
	}
}

func (e *catalogEnv) count(where string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM "+e.table("outbox")+" WHERE "+where).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func newRow(t *testing.T, typ, key string) driver.InsertRow {
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return driver.InsertRow{MessageID: id, Type: typ, Key: key, Payload: []byte(`{}`)}
}

// The enqueue trigger's flag of a type passed in this transaction reads as
// an empty string once a transaction that set it has ended; an empty type must still be
// refused then, as on a fresh connection (schema versions 7 to 9 let it
// through).
func TestEmptyTypeIsRefusedAfterAnEarlierEnqueue(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "ok")
	conn, err := e.pool.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	ins := "INSERT INTO " + e.table("outbox") + " (type, key) VALUES ($1, $2)"
	if _, err := conn.Exec(e.ctx, ins, "ok", "first"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(e.ctx, ins, "", "second")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "MS003" {
		t.Fatalf("an empty type after an earlier enqueue on the connection: err = %v, want SQLSTATE MS003", err)
	}
	if n := e.count("type = ''"); n != 0 {
		t.Fatalf("%d rows of an empty type were stored", n)
	}
}

// Every refusal of the outbox carries its own SQLSTATE and names the column,
// so that a JDBC or psycopg caller branches on the code, not on the text;
// the text says what is wrong and what to do. Nothing of a refused
// statement is stored, whatever other rows it held, COPY included.
func TestOutboxRefusalsHaveTheirSQLSTATE(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "ok")
	cases := []struct {
		what, values, state, column string
		says                        []string
	}{
		{"an unowned type", `('nobody', 'k', '{}')`, "MS001", "type", []string{`"nobody"`, "no owner app", e.schema, "owners register", "nothing was enqueued"}},
		{"an empty key", `('ok', '', '{}')`, "MS002", "key", []string{"1 to 1000 bytes", "got 0 bytes"}},
		{"a 1001-byte key", `('ok', repeat('x', 1001), '{}')`, "MS002", "key", []string{"got 1001 bytes"}},
		{"an empty type", `('', 'k', '{}')`, "MS003", "type", []string{"1 to 200 bytes", "got 0 bytes"}},
		{"101 two-byte characters of type", `(repeat('é', 101), 'k', '{}')`, "MS003", "type", []string{"got 202 bytes"}},
		{"headers that are an array", `('ok', 'k', '["a"]')`, "MS004", "headers", []string{"object", "got a JSON array"}},
		{"a number header", `('ok', 'k', '{"a": "x", "n": 1}')`, "MS004", "headers", []string{`header "n"`, "got a JSON number", "quote"}},
		{"a header with an empty name", `('ok', 'k', '{"": "x"}')`, "MS004", "headers", []string{`header ""`, "non-empty name"}},
		{"one bad row among good ones", `('ok', 'k1', '{}'), ('nobody', 'k2', '{}'), ('ok', 'k3', '{}')`, "MS001", "type", []string{`"nobody"`}},
		// The rows after a statement's first of a type are checked too,
		// though the type itself is looked up once.
		{"an empty key after a good row", `('ok', 'k1', '{}'), ('ok', '', '{}')`, "MS002", "key", []string{"got 0 bytes"}},
		{"a long key after a good row", `('ok', 'k1', '{}'), ('ok', repeat('x', 1001), '{}')`, "MS002", "key", []string{"got 1001 bytes"}},
		{"a number header after a good row", `('ok', 'k1', '{"a":"x"}'), ('ok', 'k2', '{"a":"x","n":1}')`, "MS004", "headers", []string{`header "n"`, "got a JSON number"}},
		{"an object header after a good row", `('ok', 'k1', '{}'), ('ok', 'k2', '{"o":{"a":"b"}}')`, "MS004", "headers", []string{`header "o"`, "got a JSON object"}},
		{"a string for headers after a good row", `('ok', 'k1', '{}'), ('ok', 'k2', '"a:b"')`, "MS004", "headers", []string{"got a JSON string"}},
		{"an empty header name after a good row", `('ok', 'k1', '{}'), ('ok', 'k2', '{"":"x"}')`, "MS004", "headers", []string{`header ""`}},
		{"a null header hidden by a colon in a value", `('ok', 'k1', '{}'), ('ok', 'k2', '{"u":"http://h:1","n":null}')`, "MS004", "headers", []string{`header "n"`, "got a JSON null"}},
	}
	for _, c := range cases {
		_, err := e.pool.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, headers) VALUES "+c.values)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			t.Fatalf("%s: err = %v, want a refusal", c.what, err)
		}
		if pe.Code != c.state || pe.ColumnName != c.column || pe.TableName != "outbox" || pe.SchemaName != e.schema {
			t.Fatalf("%s: SQLSTATE %s on %s.%s.%s, want %s on %s.outbox.%s (%s)", c.what, pe.Code, pe.SchemaName, pe.TableName, pe.ColumnName, c.state, e.schema, c.column, pe.Message)
		}
		for _, s := range append(c.says, "mensageria: ") {
			if !strings.Contains(pe.Message, s) {
				t.Fatalf("%s: message %q does not say %q", c.what, pe.Message, s)
			}
		}
	}
	// A header value may be any string, and the check leaves it as written:
	// whitespace, colons and empty strings, which the trigger's quick test
	// sends on to the full rule, included.
	e.exec("INSERT INTO " + e.table("outbox") + ` (type, key, headers) VALUES ('ok', 'fine', '{"a": "1", "b": "", "c": "say \"hi\""}'),
		('ok', 'fine2', '{"url":"http://h:80/p","at":"12:30"}'), ('ok', 'fine3', ' { "x" : "y" } ')`)
	_, err := e.pool.CopyFrom(e.ctx, pgx.Identifier{e.schema, "outbox"}, []string{"type", "key"},
		pgx.CopyFromRows([][]any{{"ok", "c1"}, {"nobody.copies", "c2"}}))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "MS001" {
		t.Fatalf("COPY of an unowned type = %v, want SQLSTATE MS001", err)
	}
	if n := e.count("true"); n != 3 {
		t.Fatalf("%d rows stored, want only the 3 valid ones", n)
	}
}

// Every way the driver enqueues reports the refused type exactly, however
// it is spelled.
func TestUnownedTypeErrorFromEveryPath(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "ok")
	const odd = `he said "olá" \ ✓`
	rows := func(n int) []driver.InsertRow {
		out := make([]driver.InsertRow, n)
		for i := range out {
			out[i] = newRow(t, "ok", fmt.Sprint(i))
		}
		out[n-1].Type = odd
		return out
	}
	want := func(path string, err error) {
		t.Helper()
		var ue *driver.UnownedTypeError
		if !errors.As(err, &ue) || ue.Type != odd || !errors.Is(err, driver.ErrUnownedType) {
			t.Fatalf("%s: err = %v, want an *UnownedTypeError for %q", path, err, odd)
		}
	}
	want("Insert", e.d.Insert(e.ctx, driver.InsertParams{Rows: rows(1)}))
	want("Insert with a notification", e.d.Insert(e.ctx, driver.InsertParams{Rows: rows(3), Notify: true}))
	want("Insert of several statements", e.d.Insert(e.ctx, driver.InsertParams{Rows: rows(1500)}))

	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want("InsertTx with a pgx.Tx", e.d.InsertTx(e.ctx, tx, driver.InsertParams{Rows: rows(2)}))
	_ = tx.Rollback(e.ctx)

	tx, err = e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := &pgx.Batch{}
	e.d.QueueInsert(b, driver.InsertParams{Rows: rows(2)})
	want("QueueInsert through EnqueueError", postgres.EnqueueError(tx.SendBatch(e.ctx, b).Close()))
	_ = tx.Rollback(e.ctx)

	db := stdlib.OpenDBFromPool(e.pool)
	defer db.Close()
	stx, err := db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want("InsertTx with a *sql.Tx", e.d.InsertTx(e.ctx, stx, driver.InsertParams{Rows: rows(2)}))
	_ = stx.Rollback()

	// The other refusals come wrapped, with the database's words and code.
	stx, err = db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := newRow(t, "ok", strings.Repeat("k", 1001))
	err = e.d.InsertTx(e.ctx, stx, driver.InsertParams{Rows: []driver.InsertRow{long}})
	var se interface{ SQLState() string }
	if !errors.As(err, &se) || se.SQLState() != "MS002" || !strings.Contains(err.Error(), "1000 bytes") || errors.Is(err, driver.ErrUnownedType) {
		t.Fatalf("a 1001-byte key through *sql.Tx = %v, want the MS002 refusal wrapped", err)
	}
	_ = stx.Rollback()
	if n := e.count("true"); n != 0 {
		t.Fatalf("%d rows stored by refused enqueues", n)
	}
	if err := postgres.EnqueueError(nil); err != nil {
		t.Fatalf("EnqueueError(nil) = %v", err)
	}
	other := errors.New("connection reset")
	if err := postgres.EnqueueError(other); err != other {
		t.Fatalf("EnqueueError of an unrelated error = %v, want it unchanged", err)
	}
}

// An enqueue only reads the type's owners row: a foreign key would lock it
// (KEY SHARE) for every inserting transaction, and concurrent enqueues of one
// type would pile up on a MultiXact.
func TestEnqueueTakesNoLockOnTheOwnersRow(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "hot")
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	if err := e.d.InsertTx(e.ctx, tx, driver.InsertParams{Rows: []driver.InsertRow{newRow(t, "hot", "1"), newRow(t, "hot", "2")}}); err != nil {
		t.Fatal(err)
	}
	// A row lock is recorded in the row itself: the xmax of a row locked by
	// one transaction is that transaction.
	var xid, xmax string
	if err := tx.QueryRow(e.ctx, "SELECT pg_current_xact_id()::text").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(e.ctx, "SELECT xmax::text FROM "+e.table("owners")+" WHERE kind = 'type' AND name = 'hot'").Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if xmax == xid {
		t.Fatalf("the owners row of the type carries the open enqueue's xid %s as xmax: the enqueue locked it", xid)
	}
	// And an operator may move the type meanwhile without waiting for it.
	if err := e.d.Transfer(e.ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "hot", From: "a", To: "b"}); err != nil {
		t.Fatalf("transfer while an enqueue is open: %v", err)
	}
}

// The relays of the last version-1 build keep running on a version-2 schema,
// upgraded under them with their rows in it: every statement they send
// still runs and does what it did.
func TestVersion1StatementsRunOnVersion2(t *testing.T) {
	e := newCatalogEnv(t, false)
	ms, err := e.d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(ms[0].SQL)
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) SELECT 'legacy', 'k' || g FROM generate_series(1, 6) g")
	if _, err := e.d.Migrate(e.ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "upgrader"}); err != nil {
		t.Fatal(err)
	}
	v1 := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "v1", name+".sql"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(b), "{{schema}}", e.schema)
	}
	const token = 41
	rows, err := e.pool.Query(e.ctx, v1("claim"), []string{"legacy"}, 10, int64(token), time.Minute, []bool{false}, "", int64(0))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var id int64
		var skip [8]any
		err := r.Scan(&id, &skip[0], &skip[1], &skip[2], &skip[3], &skip[4], &skip[5], &skip[6], &skip[7])
		return id, err
	})
	if err != nil || len(ids) != 6 {
		t.Fatalf("version-1 claim = %v, %v; want the 6 rows enqueued before the upgrade", ids, err)
	}
	slices.Sort(ids)
	var delivered int64
	if err := e.pool.QueryRow(e.ctx, v1("settle_delivered"), ids[:2], int64(token), false).Scan(&delivered); err != nil || delivered != 2 {
		t.Fatalf("version-1 settle of delivered rows = %d, %v", delivered, err)
	}
	steps := []struct {
		name string
		args []any
		want int64
	}{
		{"settle_retry", []any{ids[2:3], int64(token), []int64{int64(time.Hour / time.Microsecond)}, []string{"503"}}, 1},
		{"settle_dead", []any{ids[3:4], int64(token), []string{"404"}}, 1},
		{"settle_release", []any{ids[4:6], int64(token)}, 2},
		{"inbox_record", []any{"old-receiver", "key-1", uuid.New(), nil, time.Duration(0)}, 1},
		{"purge_outbox", []any{time.Duration(0), 100}, 0},
		{"purge_inbox", []any{time.Hour, 100}, 0},
		{"purge_counts", nil, 0},
	}
	for _, s := range steps {
		tag, err := e.pool.Exec(e.ctx, v1(s.name), s.args...)
		if err != nil || tag.RowsAffected() != s.want {
			t.Fatalf("version-1 %s = %v, %v; want %d rows", s.name, tag, err, s.want)
		}
	}
	var types int
	stats := strings.TrimSuffix(strings.TrimSpace(v1("stats")), ";")
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM ("+stats+") s").Scan(&types); err != nil || types != 1 {
		t.Fatalf("version-1 stats = %d types, %v", types, err)
	}
	// What the old relay wrote reads back through the new driver.
	jobs, err := e.d.ListMessages(e.ctx, driver.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 4 || jobs[1].LastError != "404" || jobs[1].State != driver.StateDead || jobs[1].LastRoute != "" || jobs[0].Owner != "" {
		t.Fatalf("rows after the old relay: %+v", jobs)
	}
	var res driver.InboxResult
	err = e.d.InTx(e.ctx, func(ctx context.Context, tx driver.Tx) error {
		res, err = tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "old-receiver", Key: "key-1", MessageID: uuid.New(), PayloadHash: []byte("h")})
		return err
	})
	if err != nil || !res.Duplicate || res.FirstPayloadHash != nil {
		t.Fatalf("a record of the old receiver = %+v, %v; want a duplicate without a hash", res, err)
	}
}

// The upgrade leaves unclaimed every type the outbox shows in use, in any
// state and in the delivered counts, and no other.
func TestUpgradeSeedsEveryTypeInUse(t *testing.T) {
	e := newCatalogEnv(t, false)
	ms, err := e.d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(ms[0].SQL)
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) VALUES ('pending.t', 'k')")
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, state) VALUES ('dead.t', 'k', 'dead')")
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, state, delivered_at) VALUES ('kept.t', 'k', 'delivered', now())")
	e.exec("INSERT INTO " + e.table("delivered_counts") + " (type, minute, n) VALUES ('counted.t', date_trunc('minute', now()), 3)")
	var after1 []int
	for _, m := range ms[1:] {
		after1 = append(after1, m.Version)
	}
	res, err := e.d.Migrate(e.ctx, driver.MigrateParams{Mode: driver.MigrateUp})
	if err != nil || !slices.Equal(res.Applied, after1) || res.Owner != "" {
		t.Fatalf("upgrade = %+v, %v; want migrations %v applied and no owner recorded for an anonymous caller", res, err, after1)
	}
	owners, err := e.d.Owners(e.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range owners {
		if o.Kind != driver.ResourceType || o.App != "" {
			t.Fatalf("upgrade recorded %+v, want unclaimed types only", o)
		}
		got = append(got, o.Name)
	}
	if want := []string{"counted.t", "dead.t", "kept.t", "pending.t"}; !slices.Equal(got, want) {
		t.Fatalf("unclaimed types %v, want %v", got, want)
	}
	for _, typ := range got {
		e.exec("INSERT INTO "+e.table("outbox")+" (type, key) VALUES ($1, 'after')", typ)
	}
	if err := e.d.Insert(e.ctx, driver.InsertParams{Rows: []driver.InsertRow{newRow(t, "new.t", "k")}}); !errors.Is(err, driver.ErrUnownedType) {
		t.Fatalf("a type first enqueued after the upgrade = %v, want ErrUnownedType", err)
	}
	// A named app migrating up with nothing left to apply becomes the owner.
	res, err = e.d.Migrate(e.ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "owner"})
	if err != nil || len(res.Applied) != 0 || res.Owner != "owner" {
		t.Fatalf("named migration of an up-to-date schema = %+v, %v; want it recorded as owner", res, err)
	}
}

// A registration with a bad resource names it and records nothing.
func TestRegisterRefusesBadInput(t *testing.T) {
	e := newCatalogEnv(t, true)
	ty := func(name string) driver.Resource { return driver.Resource{Kind: driver.ResourceType, Name: name} }
	cases := []struct {
		what string
		p    driver.RegisterParams
		says string
	}{
		{"no app", driver.RegisterParams{Resources: []driver.Resource{ty("x")}}, "app name"},
		{"an unknown kind", driver.RegisterParams{App: "a", Resources: []driver.Resource{ty("x"), {Kind: "queue", Name: "q"}}}, `kind "queue"`},
		{"an empty name", driver.RegisterParams{App: "a", Resources: []driver.Resource{ty("x"), ty("")}}, "needs a name"},
		{"a negative window", driver.RegisterParams{App: "a", Resources: []driver.Resource{{Kind: driver.ResourceConsumer, Name: "c", Window: -time.Second}}}, "negative window"},
		{"one consumer with two windows", driver.RegisterParams{App: "a", Resources: []driver.Resource{
			{Kind: driver.ResourceConsumer, Name: "c", Window: time.Hour}, {Kind: driver.ResourceConsumer, Name: "c", Window: time.Minute}}}, "listed twice"},
	}
	for _, c := range cases {
		_, err := e.d.Register(e.ctx, c.p)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("%s: err = %v, want one saying %q", c.what, err, c.says)
		}
	}
	if owners, err := e.d.Owners(e.ctx, ""); err != nil || len(owners) != 0 {
		t.Fatalf("refused registrations recorded %+v, %v", owners, err)
	}
	if err := e.d.Transfer(e.ctx, driver.TransferParams{Kind: "queue", Name: "q", From: "a", To: "b"}); err == nil || !strings.Contains(err.Error(), `kind "queue"`) {
		t.Fatalf("transfer of an unknown kind = %v", err)
	}
	// Listed twice alike is listed once; a window on anything but a
	// consumer means nothing.
	res, err := e.d.Register(e.ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{
		ty("x"), ty("x"), {Kind: driver.ResourceType, Name: "y", Window: time.Hour}}})
	if err != nil || len(res.Unlisted) != 0 {
		t.Fatalf("register = %+v, %v", res, err)
	}
	owners, err := e.d.Owners(e.ctx, "a")
	if err != nil || len(owners) != 2 || owners[1].Window != 0 {
		t.Fatalf("owners = %+v, %v; want x and y, y without a window", owners, err)
	}
}

// An entry left with no app (by hand, or the upgrade's unclaimed types) is
// taken by the first app that registers it, and keeps the date it was
// taken through later registrations; the consumer's window follows its
// app's latest registration, down to none.
func TestRegisterAdoptsUnclaimedEntries(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.exec("INSERT INTO " + e.table("owners") + " (kind, name, since) VALUES ('consumer', 'left', now() - interval '1 day'), ('type', 'left.t', now() - interval '1 day')")
	reg := func(w time.Duration) driver.Ownership {
		t.Helper()
		if _, err := e.d.Register(e.ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{
			{Kind: driver.ResourceConsumer, Name: "left", Window: w}, {Kind: driver.ResourceType, Name: "left.t"}}}); err != nil {
			t.Fatal(err)
		}
		owners, err := e.d.Owners(e.ctx, "a")
		if err != nil || len(owners) != 2 {
			t.Fatalf("owners of a = %+v, %v", owners, err)
		}
		return owners[0]
	}
	first := reg(time.Hour)
	if first.App != "a" || first.Window != time.Hour || time.Since(first.Since) > time.Hour {
		t.Fatalf("adopted consumer = %+v, want a's with a 1h window, taken now", first)
	}
	again := reg(0)
	if again.Window != 0 || !again.Since.Equal(first.Since) {
		t.Fatalf("re-registered consumer = %+v, want no window and the first date %s", again, first.Since)
	}
	var window *string
	if err := e.pool.QueryRow(e.ctx, "SELECT dedup_window::text FROM "+e.table("owners")+" WHERE name = 'left'").Scan(&window); err != nil || window != nil {
		t.Fatalf("stored window = %v, %v; want NULL (records kept)", window, err)
	}
}

// Settle sorts every row it was given once: a row listed under two
// outcomes takes the first; a release after the lease ran out is expired.
func TestSettleSortsEachRowOnce(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "s")
	if err := e.d.Insert(e.ctx, driver.InsertParams{Rows: []driver.InsertRow{newRow(t, "s", "1"), newRow(t, "s", "2"), newRow(t, "s", "3")}}); err != nil {
		t.Fatal(err)
	}
	jobs, err := e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{"s"}, Limit: 10, Lease: time.Minute, Token: 1})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("claim = %d, %v", len(jobs), err)
	}
	a, b, c := jobs[0].ID, jobs[1].ID, jobs[2].ID
	res, err := e.d.Settle(e.ctx, driver.SettleParams{Token: 1, Delivered: []int64{a}, Dead: []driver.Failure{{ID: a, Error: "twice"}, {ID: b, Error: "x", Route: "a → http https://b/m2m"}}})
	if err != nil || !slices.Equal(res.Settled, []int64{a, b}) || len(res.Fenced)+len(res.Expired) != 0 {
		t.Fatalf("settle = %+v, %v; want %d and %d settled, each once", res, err, a, b)
	}
	e.exec("UPDATE "+e.table("outbox")+" SET lease_until = now() - interval '1 second' WHERE id = $1", c)
	res, err = e.d.Settle(e.ctx, driver.SettleParams{Token: 1, Release: []int64{c}})
	if err != nil || !slices.Equal(res.Expired, []int64{c}) || len(res.Settled)+len(res.Fenced) != 0 {
		t.Fatalf("release after the lease = %+v, %v; want %d expired", res, err, c)
	}
	if res, err := e.d.Settle(e.ctx, driver.SettleParams{Token: 1}); err != nil || len(res.Settled)+len(res.Fenced)+len(res.Expired) != 0 {
		t.Fatalf("empty settle = %+v, %v", res, err)
	}
}

// Two apps registering overlapping sets at once, in opposite orders, never
// deadlock: one wins everything, the other gets a conflict and records
// nothing.
func TestRegisterOverlappingSetsConcurrently(t *testing.T) {
	e := newCatalogEnv(t, true)
	for round := range 10 {
		names := []string{fmt.Sprintf("r%d.a", round), fmt.Sprintf("r%d.b", round), fmt.Sprintf("r%d.c", round)}
		sets := [][]string{names, {names[2], names[1], names[0]}}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 2 {
			wg.Go(func() {
				<-start
				rs := make([]driver.Resource, 3)
				for k, n := range sets[i] {
					rs[k] = driver.Resource{Kind: driver.ResourceType, Name: n}
				}
				_, errs[i] = e.d.Register(e.ctx, driver.RegisterParams{App: fmt.Sprintf("app%d", i), Resources: rs})
			})
		}
		close(start)
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, driver.ErrOwnerConflict):
				t.Fatalf("round %d: app%d: %v", round, i, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d registrations succeeded (%v), want 1", round, ok, errs)
		}
		owners, err := e.d.Owners(e.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		byApp := map[string]int{}
		for _, o := range owners {
			if strings.HasPrefix(o.Name, fmt.Sprintf("r%d.", round)) {
				byApp[o.App]++
			}
		}
		if len(byApp) != 1 {
			t.Fatalf("round %d: the types are split between apps: %v", round, byApp)
		}
	}
}

// A producer of the old build that commits a new type while the upgrade
// runs (after its first look at the outbox, before it locks it) keeps
// enqueueing that type afterwards: the upgrade looks again once it holds
// the outbox.
func TestUpgradeCatchesATypeEnqueuedWhileItRuns(t *testing.T) {
	e := newCatalogEnv(t, false)
	ms, err := e.d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(ms[0].SQL)
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) VALUES ('before', 'k')")
	producer, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = producer.Rollback(e.ctx) }()
	if _, err := producer.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key) VALUES ('meanwhile', 'k')"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.d.Migrate(e.ctx, driver.MigrateParams{Mode: driver.MigrateUp})
		done <- err
	}()
	// The upgrade has looked at the outbox and now waits for the producer's
	// lock on it.
	for {
		var waiting bool
		err := e.pool.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE NOT l.granted AND n.nspname = $1 AND c.relname = 'outbox')`, e.schema).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the upgrade ended (%v) without waiting for the open producer", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := producer.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	owners, err := e.d.Owners(e.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range owners {
		names = append(names, o.Name)
	}
	if !slices.Equal(names, []string{"before", "meanwhile"}) {
		t.Fatalf("unclaimed types %v, want the one enqueued before the upgrade and the one enqueued during it", names)
	}
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) VALUES ('meanwhile', 'k2')")
}

// A producer role granted only INSERT on the outbox, all version 1 asked,
// still enqueues after the upgrade, and is still refused an unowned type:
// the check reads owners with the rights of the role that migrated.
func TestProducerWithOnlyInsertEnqueues(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "ok")
	role := e.schema + "_producer"
	e.exec("CREATE ROLE " + role + " NOLOGIN")
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.pool.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = e.pool.Exec(ctx, "DROP ROLE "+role)
	})
	e.exec("GRANT USAGE ON SCHEMA " + e.schema + " TO " + role)
	e.exec("GRANT INSERT ON " + e.table("outbox") + " TO " + role)
	as := func(typ string) error {
		return pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(e.ctx, "SET LOCAL ROLE "+role); err != nil {
				return err
			}
			_, err := tx.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, payload) VALUES ($1, 'k', '{}')", typ)
			return err
		})
	}
	if err := as("ok"); err != nil {
		t.Fatalf("enqueue by a role with INSERT only: %v", err)
	}
	var pe *pgconn.PgError
	if err := as("nobody"); !errors.As(err, &pe) || pe.Code != "MS001" {
		t.Fatalf("unowned enqueue by a role with INSERT only = %v, want SQLSTATE MS001", err)
	}
}

// A connection remembers that a type has an owner, so that its enqueues do
// not read the catalog each time; a release must still be obeyed at once by
// every connection, including one that remembered the type, and one
// enqueueing while the release is being made.
func TestReleasedTypeIsRefusedOnEveryConnection(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "kept", "released", "moved")
	conn, err := e.pool.Acquire(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	n := 0
	enqueue := func(typ string) error {
		n++
		_, err := conn.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key) VALUES ($1, $2)", typ, fmt.Sprint("k", n))
		return err
	}
	refused := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "MS001"
	}
	for _, typ := range []string{"kept", "released", "moved", "kept", "released", "moved"} {
		if err := enqueue(typ); err != nil {
			t.Fatalf("enqueue %s: %v", typ, err)
		}
	}

	// A release open in another transaction: the enqueue neither waits for
	// it nor remembers what it read meanwhile.
	other, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(e.ctx) }()
	if _, err := other.Exec(e.ctx, "DELETE FROM "+e.table("owners")+" WHERE kind = 'type' AND name = 'released'"); err != nil {
		t.Fatal(err)
	}
	if err := enqueue("released"); err != nil {
		t.Fatalf("enqueue while the release is uncommitted: %v", err)
	}
	if err := other.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := enqueue("released"); !refused(err) {
		t.Fatalf("enqueue of a released type on a connection that had enqueued it = %v, want SQLSTATE MS001", err)
	}
	// The release through the driver, on a type this connection remembers.
	if err := e.d.Transfer(e.ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "kept", From: "a", To: ""}); err != nil {
		t.Fatal(err)
	}
	if err := enqueue("kept"); !refused(err) {
		t.Fatalf("enqueue after the driver released the type = %v, want SQLSTATE MS001", err)
	}
	// A type moved to another app still has an owner.
	if err := e.d.Transfer(e.ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "moved", From: "a", To: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := enqueue("moved"); err != nil {
		t.Fatalf("enqueue of a type moved to another app: %v", err)
	}
	// Registered again, the released types are accepted again.
	e.own("c", "kept", "released")
	for _, typ := range []string{"kept", "released"} {
		if err := enqueue(typ); err != nil {
			t.Fatalf("enqueue of %s after it was registered again: %v", typ, err)
		}
	}
}
