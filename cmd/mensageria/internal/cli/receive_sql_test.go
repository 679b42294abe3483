package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/internal/testdb"
)

// The app's side on PostgreSQL, as JDBC or node-pg would run it: the
// functions of the SQL protocol in the app's own transactions (claim with
// SKIP LOCKED, apply beside a business write, failed and dead under a
// savepoint), the refusals by SQLSTATE, two concurrent appliers, and the
// NOTIFY channel, sent after the commit and coalesced.
func TestReceiveSQLProtocolPostgres(t *testing.T) {
	b := pgBackend(t)
	pool := testdb.Pool(t)
	ctx := context.Background()
	d := startReceive(t, receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]\n  notify_interval: 2s", "1h"), nil)
	s := b.schema
	b.exec(t, "CREATE TABLE {s}.effects (key text NOT NULL, message_id uuid NOT NULL, amount int NOT NULL CHECK (amount >= 0))")

	// A notification names the consumer, and comes after the commit: a
	// claim right after it sees the row.
	lc := pgxConn(t)
	if _, err := lc.Exec(ctx, "LISTEN "+pgx.Identifier{s + "_inbox"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	first, _ := envelope(t, "pedido.criado", "n-0", `{"amount":1}`, time.Now())
	if a := deliver(t, d.url, "tok-0123456789abcdef", first); a.status != 200 {
		t.Fatalf("deliver: %d %s", a.status, a.body)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	n, err := lc.WaitForNotification(wctx)
	cancel()
	if err != nil || n.Channel != s+"_inbox" || n.Payload != "fat" {
		t.Fatalf("notification %+v, %v", n, err)
	}
	if got := b.count(t, "SELECT count(*) FROM {s}.inbox_claim('fat', 10)"); got != 1 {
		t.Fatalf("a claim after the notification found %d rows", got)
	}
	// A burst inside one interval: far fewer notifications than messages,
	// and one after the last of them.
	const burst = 30
	for i := range burst {
		e, _ := envelope(t, "pedido.criado", fmt.Sprint("n-", i+1), `{"amount":1}`, time.Now())
		if a := deliver(t, d.url, "tok-0123456789abcdef", e); a.status != 200 {
			t.Fatalf("deliver: %d %s", a.status, a.body)
		}
	}
	notes := 0
	for {
		// Two intervals of silence: the burst is over.
		wctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		_, err := lc.WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		notes++
	}
	if notes < 1 || notes >= burst {
		t.Fatalf("%d notifications for a burst of %d messages, want at least the one after the last and far fewer than one each", notes, burst)
	}
	t.Logf("%d notifications for %d messages sent within 2s intervals", notes, burst)

	// One applier round as docs/config.md gives it, while a second applier
	// claims: each gets rows the other does not.
	c1, c2 := pgxConn(t), pgxConn(t)
	tx1, err := c1.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx1.Rollback(ctx) }()
	claim := func(tx pgx.Tx, n int) []int64 {
		t.Helper()
		rows, err := tx.Query(ctx, "SELECT id FROM "+s+".inbox_claim('fat', $1)", n)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	mine := claim(tx1, 3)
	tx2, err := c2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	theirs := claim(tx2, 100)
	if len(mine) != 3 || len(theirs) != burst+1-3 || slices.ContainsFunc(theirs, func(id int64) bool { return slices.Contains(mine, id) }) {
		t.Fatalf("two open claims took %v and %v", mine, theirs)
	}
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	exec := func(tx pgx.Tx, q string, args ...any) error {
		_, err := tx.Exec(ctx, strings.ReplaceAll(q, "{s}", s), args...)
		return err
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Row 1 applies; row 2's business write fails, is rolled back to its
	// savepoint and recorded as failed; row 3 is parked as dead.
	must(exec(tx1, "SAVEPOINT row"))
	must(exec(tx1, "INSERT INTO {s}.effects (key, message_id, amount) SELECT key, message_id, 1 FROM {s}.inbox_queue WHERE id = $1", mine[0]))
	must(exec(tx1, "SELECT {s}.inbox_applied($1)", mine[0]))
	must(exec(tx1, "RELEASE SAVEPOINT row"))
	must(exec(tx1, "SAVEPOINT row"))
	if err := exec(tx1, "INSERT INTO {s}.effects (key, message_id, amount) SELECT key, message_id, -1 FROM {s}.inbox_queue WHERE id = $1", mine[1]); err == nil {
		t.Fatal("the failing business write succeeded")
	}
	must(exec(tx1, "ROLLBACK TO SAVEPOINT row"))
	var attempts int
	must(tx1.QueryRow(ctx, "SELECT "+s+".inbox_failed($1, $2, interval '1 hour')", mine[1], "amount below zero").Scan(&attempts))
	must(exec(tx1, "RELEASE SAVEPOINT row"))
	must(exec(tx1, "SELECT {s}.inbox_dead($1, $2)", mine[2], "no such customer"))
	must(tx1.Commit(ctx))
	state := func(id int64) (st string, att int, lastErr string) {
		t.Helper()
		must(pool.QueryRow(ctx, "SELECT state, attempts, coalesce(last_error, '') FROM "+s+".inbox_queue WHERE id = $1", id).Scan(&st, &att, &lastErr))
		return
	}
	if st, _, _ := state(mine[0]); st != "applied" {
		t.Fatalf("row 1 is %s", st)
	}
	if st, att, le := state(mine[1]); st != "pending" || att != 1 || attempts != 1 || le != "amount below zero" {
		t.Fatalf("row 2 is %s, %d attempts (returned %d), %q", st, att, attempts, le)
	}
	if st, att, le := state(mine[2]); st != "dead" || att != 1 || le != "no such customer" {
		t.Fatalf("row 3 is %s, %d attempts, %q", st, att, le)
	}

	// The refusals, by SQLSTATE, each rolling its transaction back.
	sqlstate := func(q string, args ...any) string {
		t.Helper()
		_, err := pool.Exec(ctx, strings.ReplaceAll(q, "{s}", s), args...)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			t.Fatalf("%s: %v, want a refusal", q, err)
		}
		return pe.Code
	}
	for _, c := range []struct {
		q    string
		args []any
		code string
	}{
		{"SELECT {s}.inbox_applied($1)", []any{mine[0]}, "MS010"},
		{"SELECT {s}.inbox_failed($1, 'x', interval '1s')", []any{mine[0]}, "MS010"},
		{"SELECT {s}.inbox_dead($1, 'x')", []any{mine[2]}, "MS010"},
		{"SELECT {s}.inbox_applied($1)", []any{int64(1 << 40)}, "MS010"},
		{"UPDATE {s}.inbox_queue SET state = 'pending' WHERE id = $1", []any{mine[0]}, "MS010"},
		{"UPDATE {s}.inbox_queue SET state = 'applied' WHERE id = $1", []any{mine[2]}, "MS010"},
		{"SELECT * FROM {s}.inbox_claim('fat', 0)", nil, "22023"},
		{"SELECT {s}.inbox_failed($1, 'x', interval '-1s')", []any{mine[1]}, "22023"},
	} {
		if code := sqlstate(c.q, c.args...); code != c.code {
			t.Errorf("%s: SQLSTATE %s, want %s", c.q, code, c.code)
		}
	}
	// A dead row revived as docs/config.md says is claimed again.
	b.exec(t, "UPDATE {s}.inbox_queue SET state = 'pending', available_at = now() WHERE id = {1}", mine[2])

	// Concurrent appliers in plain SQL: every due row applied once.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				var n int64
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT id, key, message_id FROM "+s+".inbox_claim('fat', 4)"); err != nil {
						return err
					}
					tag, err := tx.Exec(ctx, "INSERT INTO "+s+".effects (key, message_id, amount) SELECT key, message_id, 1 FROM claimed")
					if err != nil {
						return err
					}
					n = tag.RowsAffected()
					_, err = tx.Exec(ctx, "SELECT "+s+".inbox_applied(id) FROM claimed")
					return err
				})
				if err != nil || n == 0 {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every row but the one waiting an hour for its retry, each once.
	if got := b.count(t, "SELECT count(*) FROM {s}.effects"); got != burst+1-1 {
		t.Fatalf("%d effects, want %d", got, burst)
	}
	if got := b.count(t, "SELECT count(DISTINCT message_id) FROM {s}.effects"); got != burst {
		t.Fatalf("%d distinct effects, want %d", got, burst)
	}
	if got := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE state = 'applied'"); got != burst {
		t.Fatalf("%d applied rows, want %d", got, burst)
	}
}

// sqliteProtocol reads the SQLite statements of the SQL protocol out of
// docs/config.md, the clock filled in: what an app in another language
// copies is what this test runs.
func sqliteProtocol(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "**SQLite** has no functions")
	_, rest, ok2 := strings.Cut(rest, "```sql\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/config.md has no SQLite statements of the protocol")
	}
	clock := "(CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
	if !strings.Contains(string(doc), "`"+clock+"`") {
		t.Fatal("docs/config.md does not give the clock expression this test fills in")
	}
	now := regexp.MustCompile(`\bnow\b`)
	out := map[string]string{}
	name := ""
	for _, line := range strings.Split(block, "\n") {
		if label, ok := strings.CutPrefix(line, "-- "); ok {
			name, _, _ = strings.Cut(label, " ")
			continue
		}
		out[name] += now.ReplaceAllString(line, clock) + "\n"
	}
	for _, k := range []string{"claim", "applied", "failed", "dead"} {
		if strings.TrimSpace(out[k]) == "" {
			t.Fatalf("docs/config.md lacks the %s statement", k)
		}
	}
	return out
}

// The app's side on SQLite, with the statements docs/config.md gives, from
// connections of another program's own: claim, applied, failed, dead in
// BEGIN IMMEDIATE transactions, and concurrent appliers applying each row
// once.
func TestReceiveSQLProtocolSQLite(t *testing.T) {
	b := sqliteBackend(t)
	stmts := sqliteProtocol(t)
	d := startReceive(t, receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]", "1h"), nil)
	const n = 40
	for i := range n {
		e, _ := envelope(t, "pedido.criado", fmt.Sprint("k-", i), `{"amount":1}`, time.Now())
		if a := deliver(t, d.url, "tok-0123456789abcdef", e); a.status != 200 {
			t.Fatalf("deliver: %d %s", a.status, a.body)
		}
	}
	b.exec(t, "CREATE TABLE effects (key TEXT NOT NULL, message_id TEXT NOT NULL)")
	// Another program's handle: no _txlock, so it begins its transactions
	// itself, as the docs say.
	app, err := sql.Open("sqlite", strings.TrimPrefix(b.database, "sqlite:")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	ctx := context.Background()
	type row struct {
		id       int64
		key, mid string
		attempts int
	}
	// round runs one applier transaction: claim up to k rows, then fn.
	round := func(k int, fn func(c *sql.Conn, rows []row) error) (int, error) {
		c, err := app.Conn(ctx)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return 0, err
		}
		err = func() error {
			rs, err := c.QueryContext(ctx, stmts["claim"], "fat", k)
			if err != nil {
				return err
			}
			var rows []row
			for rs.Next() {
				var r row
				var typ, payload, headers string
				var created int64
				if err := rs.Scan(&r.id, &typ, &r.key, &r.mid, &payload, &headers, &created, &r.attempts); err != nil {
					rs.Close()
					return err
				}
				rows = append(rows, r)
			}
			rs.Close()
			if err := rs.Err(); err != nil {
				return err
			}
			k = len(rows)
			return fn(c, rows)
		}()
		if err != nil {
			_, _ = c.ExecContext(ctx, "ROLLBACK")
			return 0, err
		}
		_, err = c.ExecContext(ctx, "COMMIT")
		return k, err
	}
	changed := func(r sql.Result, err error) error {
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n != 1 {
			return fmt.Errorf("the statement changed %d rows: not pending, roll back", n)
		}
		return nil
	}
	apply := func(c *sql.Conn, r row) error {
		if _, err := c.ExecContext(ctx, "INSERT INTO effects (key, message_id) VALUES (?, ?)", r.key, r.mid); err != nil {
			return err
		}
		return changed(c.ExecContext(ctx, stmts["applied"], r.id))
	}
	var failedID, deadID int64
	_, err = round(3, func(c *sql.Conn, rows []row) error {
		if len(rows) != 3 {
			return fmt.Errorf("claimed %d rows", len(rows))
		}
		failedID, deadID = rows[1].id, rows[2].id
		if err := apply(c, rows[0]); err != nil {
			return err
		}
		if err := changed(c.ExecContext(ctx, stmts["failed"], "the ledger was locked", 3600, rows[1].id)); err != nil {
			return err
		}
		return changed(c.ExecContext(ctx, stmts["dead"], "no such customer", rows[2].id))
	})
	if err != nil {
		t.Fatal(err)
	}
	// Applying an applied row again changes nothing, and the app rolls
	// back its effect.
	_, err = round(1, func(c *sql.Conn, rows []row) error {
		return changed(c.ExecContext(ctx, stmts["applied"], deadID))
	})
	if err == nil {
		t.Fatal("a dead row was marked applied")
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			for {
				k, err := round(4, func(c *sql.Conn, rows []row) error {
					for _, r := range rows {
						if err := apply(c, r); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil || k == 0 {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every row but the failed (due in an hour) and the dead one, once.
	if got := b.count(t, "SELECT count(*) FROM effects"); got != n-2 {
		t.Fatalf("%d effects, want %d", got, n-2)
	}
	if got := b.count(t, "SELECT count(DISTINCT message_id) FROM effects"); got != n-2 {
		t.Fatalf("%d distinct effects, want %d", got, n-2)
	}
	if got := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE id = {1} AND state = 'pending' AND attempts = 1 AND last_error = 'the ledger was locked' AND available_at > received_at + 3000000000", failedID); got != 1 {
		t.Fatal("the failed row is not pending for its retry an hour on")
	}
	if got := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE id = {1} AND state = 'dead' AND last_error = 'no such customer'", deadID); got != 1 {
		t.Fatal("the dead row is not dead with its reason")
	}
	if err := func() error {
		_, err := b.db.ExecContext(ctx, "UPDATE mensageria_inbox_queue SET state = 'pending' WHERE state = 'applied'")
		return err
	}(); err == nil || !strings.Contains(err.Error(), "mensageria: ") {
		t.Fatalf("an UPDATE of applied rows: %v, want the table's refusal", err)
	}
}

// An app whose role is not the one that migrated needs only what
// docs/config.md says: USAGE on the schema, SELECT and UPDATE on the queue.
func TestReceiveSQLProtocolWithTheDocumentedGrants(t *testing.T) {
	b := pgBackend(t)
	pool := testdb.Pool(t)
	ctx := context.Background()
	d := startReceive(t, receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]", "1h"), nil)
	for i := range 2 {
		e, _ := envelope(t, "pedido.criado", fmt.Sprint("g-", i), `{}`, time.Now())
		if a := deliver(t, d.url, "tok-0123456789abcdef", e); a.status != 200 {
			t.Fatalf("deliver: %d %s", a.status, a.body)
		}
	}
	role := fmt.Sprintf("mensageria_app_%08x", time.Now().UnixNano()&0xffffffff)
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + b.schema + " TO " + role,
		"GRANT SELECT, UPDATE ON " + b.schema + ".inbox_queue TO " + role,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	cfg, err := pgx.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := b.schema
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT id FROM "+s+".inbox_claim('fat', 10)")
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) != 2 {
			return fmt.Errorf("claimed %v: %v", ids, err)
		}
		if _, err := tx.Exec(ctx, "SELECT "+s+".inbox_applied($1)", ids[0]); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT "+s+".inbox_failed($1, 'later', interval '1 hour')", ids[1]); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the protocol as a role with the documented grants: %v", err)
	}
	if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE state = 'applied'"); n != 1 {
		t.Fatalf("%d applied", n)
	}
}
