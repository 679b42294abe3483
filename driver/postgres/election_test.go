package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/internal/testdb"
)

// A role that may only connect, with no grant on the schema, used to stop
// every relay of an app: the election was a session advisory lock whose
// key is a hash of public names, and advisory locks have no privileges,
// so pg_advisory_lock(key) stood every relay by for as long as its
// session lasted, with status saying that no relay ran. The election is a
// lease row now (ADR 0025): the outsider can still take that lock, and
// nothing waits for it; it cannot write the row; status names it.
func TestOutsiderWithoutGrantsCannotStopTheElection(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	exec := execer(t, ctx, pool)
	role := fmt.Sprintf("mensageria_test_outsider_%08x", rand.Uint32())
	exec("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	outsider, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outsider.Close(context.Background()) })

	const app = "pedidos"
	// What it could do before: take the key relays of earlier versions
	// elected with.
	if _, err := outsider.Exec(ctx, "SELECT pg_advisory_lock($1)", d.lockKey("relay\x00"+app)); err != nil {
		t.Fatalf("the outsider's advisory lock: %v", err)
	}
	// What it would need now: the election's row, which it may not write.
	for _, q := range []string{
		"INSERT INTO " + d.table("leader") + " (app, epoch, holder, since, expires_at) VALUES ('" + app + "', 99, 'outsider', now(), 'infinity')",
		"UPDATE " + d.table("leader") + " SET holder = 'outsider', expires_at = 'infinity'",
	} {
		if _, err := outsider.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("%s as a role with no grants: %v, want permission denied", q, err)
		}
	}

	lease := time.Minute
	first, err := d.Elector(app, lease)
	if err != nil {
		t.Fatal(err)
	}
	epoch, leads, err := first.Acquire(ctx)
	if err != nil || !leads || epoch < 1 {
		t.Fatalf("a relay's Acquire while the outsider holds the old lock: epoch %d, leads %v, err %v; want it to lead", epoch, leads, err)
	}
	second, err := d.Elector(app, lease)
	if err != nil {
		t.Fatal(err)
	}
	if _, leads, err := second.Acquire(ctx); err != nil || leads {
		t.Fatalf("a standby's Acquire while the first relay's lease runs: leads %v, err %v; want no lead and no error", leads, err)
	}
	h, err := first.Holder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Holder != first.(*elector).holder || h.Epoch != epoch || h.Expires.IsZero() {
		t.Fatalf("Holder = %+v; want the first relay at epoch %d with its lease's end", h, epoch)
	}
	if !strings.Contains(h.Outsider, "pid") || !strings.Contains(h.Outsider, role) {
		t.Fatalf("Holder's Outsider = %q; want the session that holds the old lock named, with its role", h.Outsider)
	}

	// The first relay stops renewing: once its lease runs out the standby
	// takes over with a higher epoch, and the first one's renewal fails.
	exec("UPDATE "+d.table("leader")+" SET expires_at = now() WHERE app = $1", app)
	epoch2, leads, err := second.Acquire(ctx)
	if err != nil || !leads || epoch2 <= epoch {
		t.Fatalf("the standby after the lease ran out: epoch %d, leads %v, err %v; want it to lead above %d", epoch2, leads, err, epoch)
	}
	if _, leads, err := first.Acquire(ctx); err != nil || leads {
		t.Fatalf("the deposed relay's renewal: leads %v, err %v; want no lead", leads, err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if epoch3, leads, err := first.Acquire(ctx); err != nil || !leads || epoch3 <= epoch2 {
		t.Fatalf("after a release: epoch %d, leads %v, err %v; want the next relay to lead at once, above %d", epoch3, leads, err, epoch2)
	}
}
