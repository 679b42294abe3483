package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/xadm/mensageria/internal/testdb"
)

// wakeups is a LISTEN session of its own on the schema's wake-up channel.
// It counts the notifications committed before a marker: notifications
// arrive in commit order, so once the marker sent after the transactions
// under test has arrived, every notification they sent has too.
type wakeups struct {
	t       *testing.T
	e       *catalogEnv
	conn    *pgx.Conn
	channel string
}

func listenWakeups(t *testing.T, e *catalogEnv) *wakeups {
	t.Helper()
	conn, err := pgx.Connect(e.ctx, testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	w := &wakeups{t: t, e: e, conn: conn, channel: e.schema + "_outbox"}
	if _, err := conn.Exec(e.ctx, "LISTEN "+pgx.Identifier{w.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return w
}

// count returns the wake-ups that arrived since the last count.
func (w *wakeups) count() int {
	w.t.Helper()
	w.e.exec("SELECT pg_notify($1, 'marker')", w.channel)
	n := 0
	for {
		ctx, cancel := context.WithTimeout(w.e.ctx, 30*time.Second)
		got, err := w.conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			w.t.Fatalf("waiting for the marker on %s: %v", w.channel, err)
		}
		if got.Payload == "marker" {
			return n
		}
		n++
	}
}

// rewind makes the next commit's wake-up due, whatever the clock: the
// debounce has nothing to hold it back.
func (w *wakeups) rewind() {
	w.t.Helper()
	w.e.exec("SELECT setval($1, 0)", w.e.schema+".outbox_wakeup_at")
}

// A plain INSERT from any client, committed, wakes the relay's listener:
// the driver's own Listen, on the channel the relay uses.
func TestPlainInsertWakesTheRelay(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "t")
	l, err := e.d.Listen(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, payload) VALUES ('t', 'k', '{}')")
	select {
	case _, ok := <-l.C():
		if !ok {
			t.Fatal("the listener closed instead of waking")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a committed plain INSERT did not wake the listener")
	}
}

// One transaction sends one wake-up however many rows and statements it
// enqueues, from pgx and from database/sql alike; a rolled-back one sends
// none, and neither does a statement refused by the outbox's check.
func TestWakeupOncePerCommittedTransaction(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "t")
	w := listenWakeups(t, e)
	ins := "INSERT INTO " + e.table("outbox") + " (type, key, payload) SELECT 't', 'k-' || g, '{}' FROM generate_series(1, $1::int) g"

	w.rewind()
	if err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		for _, n := range []int{100, 1, 3} {
			if _, err := tx.Exec(e.ctx, ins, n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := w.count(); n != 1 {
		t.Fatalf("a transaction of three INSERTs (104 rows) sent %d wake-ups, want 1", n)
	}

	db := stdlib.OpenDBFromPool(e.pool)
	defer db.Close()
	w.rewind()
	tx, err := db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := tx.ExecContext(e.ctx, ins, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := w.count(); n != 1 {
		t.Fatalf("a database/sql transaction of five INSERTs sent %d wake-ups, want 1", n)
	}

	w.rewind()
	rolledBack := func(tx *sql.Tx) {
		if _, err := tx.ExecContext(e.ctx, ins, 10); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
	tx, err = db.BeginTx(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack(tx)
	if _, err := e.pool.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, payload) VALUES ('nobody', 'k', '{}')"); err == nil {
		t.Fatal("an unowned type was accepted")
	}
	if n := w.count(); n != 0 {
		t.Fatalf("a rolled-back transaction and a refused INSERT sent %d wake-ups, want 0", n)
	}
	if got := e.count("true"); got != 114 {
		t.Fatalf("%d rows in the outbox, want the 104 + 5×2 committed ones", got)
	}
}

// Schema version 10 decides the wake-up at each type's first row in a
// transaction: a transaction of two types, each finding a wake-up due,
// still sends one notification, because PostgreSQL sends a channel's
// notifications of one transaction (same payload) as one.
func TestWakeupOncePerTransactionOfSeveralTypes(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "t", "u")
	w := listenWakeups(t, e)
	w.rewind()
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		for _, typ := range []string{"t", "u"} {
			if _, err := tx.Exec(e.ctx, "SELECT setval($1, 0)", e.schema+".outbox_wakeup_at"); err != nil {
				return err
			}
			if _, err := tx.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, payload) VALUES ($1, 'k', '{}')", typ); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.count(); n != 1 {
		t.Fatalf("a committed transaction of two types, each due for a wake-up, sent %d, want 1", n)
	}
}

// A savepoint rolled back takes its INSERT's wake-up with it, and the
// transaction's next INSERT decides again: the flag that lets only the
// first row through is undone with the savepoint.
func TestWakeupSurvivesARolledBackSavepoint(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "t")
	w := listenWakeups(t, e)
	flag := "mensageria.wakeup_" + e.schema
	w.rewind()
	err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		sp, err := tx.Begin(e.ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, payload) VALUES ('t', 'gone', '{}')"); err != nil {
			return err
		}
		if err := sp.Rollback(e.ctx); err != nil {
			return err
		}
		var v string
		if err := tx.QueryRow(e.ctx, "SELECT coalesce(current_setting($1, true), '')", flag).Scan(&v); err != nil {
			return err
		}
		if v == "decided" {
			t.Errorf("after the savepoint's rollback the flag is still %q", v)
		}
		// The rolled-back INSERT chose to notify, and recorded it: make the
		// next one due, to see that it decides again.
		if _, err := tx.Exec(e.ctx, "SELECT setval($1, 0)", e.schema+".outbox_wakeup_at"); err != nil {
			return err
		}
		_, err = tx.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, payload) VALUES ('t', 'kept', '{}')")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.count(); n != 1 {
		t.Fatalf("the transaction whose first INSERT was rolled back to a savepoint sent %d wake-ups, want 1", n)
	}
	if got := e.count("key = 'kept'"); got != 1 || e.count("true") != 1 {
		t.Fatalf("outbox holds %d rows, want only the kept one", e.count("true"))
	}
}

// The debounce: a transaction whose first row finds a wake-up chosen less
// than 10 ms earlier sends none, and one that finds it older, or in the
// future (a clock stepped back), sends one. The skip is caught by what the
// INSERT left in the sequence, never by timing: one that chose to notify
// moved it, one that did not left it where the test put it, and each must
// have sent exactly what it says.
func TestWakeupDebounce(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "t")
	w := listenWakeups(t, e)
	seq := e.schema + ".outbox_wakeup_at"
	ins := "INSERT INTO " + e.table("outbox") + " (type, key, payload) VALUES ('t', $1, '{}')"
	last := func() int64 {
		var v int64
		if err := e.pool.QueryRow(e.ctx, "SELECT last_value FROM "+seq).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	// An hour in the future: the clock went back. Not silenced for an hour.
	future := time.Now().Add(time.Hour).UnixMilli()
	e.exec("SELECT setval($1, $2)", seq, future)
	e.exec(ins, "after-clock-step")
	if n := w.count(); n != 1 || last() >= future {
		t.Fatalf("with the last wake-up an hour ahead: %d wake-ups, sequence %d; want 1, and the sequence moved back", n, last())
	}

	// Just now, as the database sees it, and the INSERT right after: it is
	// usually inside the window. A machine stalled for 10 ms between the
	// two makes it notify, consistently; the loop looks for a skip.
	skipped := false
	for i := 0; i < 20 && !skipped; i++ {
		var set int64
		err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			if err := tx.QueryRow(e.ctx, "SELECT setval($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)", seq).Scan(&set); err != nil {
				return err
			}
			_, err := tx.Exec(e.ctx, ins, "k-"+time.Now().String())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		n, moved := w.count(), last() != set
		if moved != (n == 1) || n > 1 {
			t.Fatalf("transaction %d: %d wake-ups, sequence moved %v; a transaction notifies exactly when it records the time", i, n, moved)
		}
		skipped = n == 0
	}
	if !skipped {
		t.Fatal("no INSERT inside the 10 ms window skipped its wake-up in 20 tries")
	}

	w.rewind()
	e.exec(ins, "after-window")
	if n := w.count(); n != 1 {
		t.Fatalf("past the window: %d wake-ups, want 1", n)
	}
}
