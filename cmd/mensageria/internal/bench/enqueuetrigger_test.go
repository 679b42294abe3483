package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/internal/testdb"
)

// The benchmarks' "without the rules" and "without the wake-up" are the
// migration's trigger with exactly that part taken out, and putting the
// whole trigger back restores both.
func TestEnqueueTriggerWithout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := Env{Pool: testdb.Pool(t), Schema: testdb.Schema(t)}
	d, err := e.driver()
	if err != nil {
		t.Fatal(err)
	}
	if err := own(ctx, d, "bench-trigger", "owned"); err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = listener.Close(context.Background()) }()
	channel := e.Schema + "_outbox"
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// woke enqueues typ and reports whether a wake-up came before a marker
	// sent after it (notifications arrive in commit order).
	n := 0
	woke := func(typ string) (bool, error) {
		t.Helper()
		n++
		// A wake-up is due whatever the debounce saw before.
		if err := e.exec(ctx, "SELECT setval($1, 0)", e.Schema+".outbox_wakeup_at"); err != nil {
			t.Fatal(err)
		}
		_, insertErr := e.Pool.Exec(ctx, "INSERT INTO "+e.Schema+".outbox (type, key) VALUES ($1, $2)", typ, "k"+time.Now().String())
		if err := e.exec(ctx, "SELECT pg_notify($1, 'marker')", channel); err != nil {
			t.Fatal(err)
		}
		got := false
		for {
			note, err := listener.WaitForNotification(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if note.Payload == "marker" {
				return got, insertErr
			}
			got = true
		}
	}
	refused := func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "MS001"
	}
	// An overlong key, which the owner test does not look at.
	longKey := func() error {
		_, err := e.Pool.Exec(ctx, "INSERT INTO "+e.Schema+".outbox (type, key) VALUES ('owned', repeat('k', 1001))")
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "MS002" {
			return nil
		}
		return errors.New("an overlong key was not refused with MS002")
	}
	check := func(what string, parts []string, wantOwner, wantShape, wantWakeup bool) {
		t.Helper()
		if err := installEnqueueTriggerWithout(ctx, e, d, parts...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		w, err := woke("owned")
		if err != nil || w != wantWakeup {
			t.Errorf("%s: an owned type's enqueue woke the relay %v (err %v), want %v", what, w, err, wantWakeup)
		}
		if _, err := woke("nobody"); refused(err) != wantOwner {
			t.Errorf("%s: an unowned type's enqueue = %v, want refused %v", what, err, wantOwner)
		}
		if err := longKey(); (err == nil) != wantShape {
			t.Errorf("%s: overlong key refused %v, want %v (%v)", what, err == nil, wantShape, err)
		}
		if err := e.exec(ctx, "DELETE FROM "+e.Schema+".outbox"); err != nil {
			t.Fatal(err)
		}
	}
	check("as migrated", nil, true, true, true)
	check("without the rules", []string{triggerRules}, false, false, true)
	check("without the owner test", []string{triggerOwner}, false, true, true)
	check("without the wake-up", []string{triggerWakeup}, true, true, false)
	check("without either", []string{triggerRules, triggerWakeup}, false, false, false)
	check("put back", nil, true, true, true)
	if _, err := cutOwnerTest("DROP TRIGGER outbox_enqueue ON s.outbox;"); err == nil {
		t.Error("a trigger without the owner test had it taken out without an error")
	}
	if _, err := enqueueTriggerWithout(d, e.Schema, "no-such-part"); err == nil {
		t.Error("a part the trigger does not mark was taken out without an error")
	}
}
