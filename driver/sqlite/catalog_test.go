package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

func typ(name string) driver.Resource { return driver.Resource{Kind: driver.ResourceType, Name: name} }

func consumer(name string, window time.Duration) driver.Resource {
	return driver.Resource{Kind: driver.ResourceConsumer, Name: name, Window: window}
}

// conflictsOf checks that err is an *OwnerConflictError of app and returns
// its conflicts as "kind/name=owner", sorted.
func conflictsOf(t *testing.T, err error, app string) []string {
	t.Helper()
	var ce *driver.OwnerConflictError
	if !errors.As(err, &ce) || !errors.Is(err, driver.ErrOwnerConflict) {
		t.Fatalf("err = %v, want an *OwnerConflictError", err)
	}
	if ce.App != app {
		t.Fatalf("conflict of app %q, want %q (%v)", ce.App, app, err)
	}
	var out []string
	for _, c := range ce.Conflicts {
		out = append(out, fmt.Sprintf("%s/%s=%s", c.Kind, c.Name, c.App))
	}
	slices.Sort(out)
	return out
}

func ownersOf(t *testing.T, d *sqlite.Driver, app string) []string {
	t.Helper()
	entries, err := d.Owners(t.Context(), app)
	if err != nil {
		t.Fatalf("Owners(%q): %v", app, err)
	}
	var out []string
	for _, o := range entries {
		s := fmt.Sprintf("%s/%s=%s", o.Kind, o.Name, o.App)
		if o.Window > 0 {
			s += "@" + o.Window.String()
		}
		out = append(out, s)
	}
	return out
}

// A registration that meets another app's entries records nothing and
// names every conflict; the owner's own registration updates its
// consumer's window and lists what it no longer names.
func TestRegisterConflictsAreAllOrNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := migrated(t, path, nil)
	ctx := t.Context()
	first, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{typ("x"), typ("y"), consumer("c", time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	if first.OutboxID == [16]byte{} || len(first.Unlisted) != 0 {
		t.Fatalf("first registration = %+v, want an outbox id and nothing unlisted", first)
	}
	_, err = d.Register(ctx, driver.RegisterParams{App: "b", Resources: []driver.Resource{typ("z"), typ("y"), consumer("c", time.Minute)}})
	if got, want := conflictsOf(t, err, "b"), []string{"consumer/c=a", "type/y=a"}; !slices.Equal(got, want) {
		t.Fatalf("conflicts %v, want %v", got, want)
	}
	if !strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("conflict message %q must name both apps", err)
	}
	if got := ownersOf(t, d, ""); !slices.Equal(got, []string{"consumer/c=a@1h0m0s", "type/x=a", "type/y=a"}) {
		t.Fatalf("catalog after a refused registration: %v; b's free type z must not be recorded", got)
	}
	// The owner again: a new window, and y no longer listed.
	again, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{typ("x"), consumer("c", 2*time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	if again.OutboxID != first.OutboxID {
		t.Fatalf("outbox id changed from %x to %x", first.OutboxID, again.OutboxID)
	}
	if len(again.Unlisted) != 1 || again.Unlisted[0].Kind != driver.ResourceType || again.Unlisted[0].Name != "y" || again.Unlisted[0].App != "a" {
		t.Fatalf("unlisted %+v, want type y of a", again.Unlisted)
	}
	if got := ownersOf(t, d, "a"); !slices.Equal(got, []string{"consumer/c=a@2h0m0s", "type/x=a", "type/y=a"}) {
		t.Fatalf("a's entries %v", got)
	}
	// A window of zero keeps the records forever.
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{consumer("c", 0)}}); err != nil {
		t.Fatal(err)
	}
	if got := ownersOf(t, d, "a"); got[0] != "consumer/c=a" {
		t.Fatalf("consumer after a zero window: %s", got[0])
	}
	// Another process sees the same outbox; another file is another one.
	if res, err := openT(t, path, nil).Register(ctx, driver.RegisterParams{App: "b"}); err != nil || res.OutboxID != first.OutboxID {
		t.Fatalf("outbox id through a second handle = %x, %v; want %x", res.OutboxID, err, first.OutboxID)
	}
	other := migrated(t, filepath.Join(t.TempDir(), "other.db"), nil)
	if res, err := other.Register(ctx, driver.RegisterParams{App: "a"}); err != nil || res.OutboxID == first.OutboxID {
		t.Fatalf("another database's outbox id = %x, %v; want a different one", res.OutboxID, err)
	}
}

func TestRegisterRefusesBadInput(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	var ce *sqlite.ConfigError
	if _, err := d.Register(ctx, driver.RegisterParams{Resources: []driver.Resource{typ("x")}}); !errors.As(err, &ce) {
		t.Fatalf("no app: %v, want a *ConfigError", err)
	}
	for _, c := range []struct {
		rs   []driver.Resource
		want string
	}{
		{[]driver.Resource{{Kind: "table", Name: "x"}}, "unknown kind"},
		{[]driver.Resource{typ("")}, "empty name"},
		{[]driver.Resource{typ(strings.Repeat("x", 1001))}, "longer than"},
		{[]driver.Resource{consumer("c", -time.Second)}, "negative window"},
		{[]driver.Resource{consumer("c", time.Hour), consumer("c", time.Minute)}, "listed twice"},
		{[]driver.Resource{{Kind: driver.ResourceMigrations, Name: "other"}}, "named"},
	} {
		_, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: append([]driver.Resource{typ("fine")}, c.rs...)})
		var re *sqlite.ResourceError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Register(%+v) = %v, want a *ResourceError saying %q", c.rs, err, c.want)
		}
	}
	if got := ownersOf(t, d, ""); len(got) != 0 {
		t.Fatalf("refused registrations recorded %v", got)
	}
	// The same entry twice alike is one entry.
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{typ("x"), typ("x")}}); err != nil {
		t.Fatal(err)
	}
}

// Two processes registering the same things at once: exactly one app wins
// each round, and the other is told who.
func TestRegisterConcurrentFromTwoDrivers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	ds := []*sqlite.Driver{migrated(t, path, nil), openT(t, path, nil)}
	for round := range 20 {
		rs := []driver.Resource{typ(fmt.Sprint("t", round)), consumer(fmt.Sprint("c", round), time.Hour)}
		if round == 0 {
			rs = append(rs, typ("shared"))
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, d := range ds {
			wg.Go(func() {
				<-start
				_, errs[i] = d.Register(context.Background(), driver.RegisterParams{App: fmt.Sprint("app", i), Resources: rs})
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			if err == nil {
				if won >= 0 {
					t.Fatalf("round %d: both apps registered the same resources", round)
				}
				won = i
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither registration succeeded: %v", round, errs)
		}
		lost := 1 - won
		got := conflictsOf(t, errs[lost], fmt.Sprint("app", lost))
		if len(got) != len(rs) {
			t.Fatalf("round %d: conflicts %v, want one per resource", round, got)
		}
		for _, c := range got {
			if !strings.HasSuffix(c, fmt.Sprint("=app", won)) {
				t.Fatalf("round %d: conflict %s does not name the winner app%d", round, c, won)
			}
		}
	}
}

// Transfer is a compare-and-set on the current owner; releasing a type
// makes the outbox refuse it again.
func TestTransfer(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "a", "x")
	if err := d.Transfer(ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "missing", From: "a", To: "b"}); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("transfer of an entry the catalog lacks = %v, want ErrNotOwned", err)
	}
	err := d.Transfer(ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "x", From: "c", To: "b"})
	if got := conflictsOf(t, err, "c"); !slices.Equal(got, []string{"type/x=a"}) {
		t.Fatalf("transfer from a non-owner: conflicts %v", got)
	}
	if err := d.Transfer(ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "x", From: "a", To: "b"}); err != nil {
		t.Fatal(err)
	}
	if got := ownersOf(t, d, ""); !slices.Equal(got, []string{"type/x=b"}) {
		t.Fatalf("after the transfer: %v", got)
	}
	// The old owner's relay, deployed again, is refused.
	_, err = d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{typ("x")}})
	if got := conflictsOf(t, err, "a"); !slices.Equal(got, []string{"type/x=b"}) {
		t.Fatalf("old owner registering again: conflicts %v", got)
	}
	if err := d.Transfer(ctx, driver.TransferParams{Kind: driver.ResourceType, Name: "x", From: "b"}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := ownersOf(t, d, ""); len(got) != 0 {
		t.Fatalf("after the release: %v", got)
	}
	if _, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key) VALUES ('x', 'k')`); err == nil || !strings.Contains(err.Error(), "has no owner app") {
		t.Fatalf("plain insert of a released type: %v, want the outbox's refusal", err)
	}
	var re *sqlite.ResourceError
	if err := d.Transfer(ctx, driver.TransferParams{Kind: "nope", Name: "x", From: "b", To: "a"}); !errors.As(err, &re) {
		t.Fatalf("unknown kind: %v", err)
	}
}

// preCatalog builds a database at version 2, the last before the catalog,
// with the SQL those versions had.
func preCatalog(t *testing.T, path string) *sqlite.Driver {
	t.Helper()
	d := openT(t, path, nil)
	ms, err := d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:2] {
		if _, err := d.DB().Exec(m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	return d
}

// dump reads every row of a table as text, in its key order.
func dump(t *testing.T, d *sqlite.Driver, table, cols, order string) []string {
	t.Helper()
	rows, err := d.DB().Query("SELECT " + cols + " FROM " + d.Table(table) + " ORDER BY " + order)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := len(strings.Split(cols, ","))
	var out []string
	for rows.Next() {
		vals := make([]any, n)
		ptrs := make([]any, n)
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%v", vals))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const v1OutboxCols = "id, message_id, type, key, payload, headers, state, attempts, available_at, lease_token, lease_until, created_at, delivered_at, last_error"

// A populated version-2 database is upgraded without losing or changing a
// row: types in use are recorded unclaimed, their rows wait for the owner,
// ids keep counting, inbox records keep deduplicating.
func TestUpgradeFromPreCatalogKeepsEverything(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := preCatalog(t, path)
	ctx := t.Context()
	for _, q := range []string{
		`INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES ('order', 'o1', '{"n":1}', '{"h":"v"}')`,
		`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('order', 'o2', '{"n":2}')`,
		`INSERT INTO mensageria_outbox (type, key, payload, state, attempts, last_error) VALUES ('invoice', 'i1', '{}', 'dead', 3, '404 from billing')`,
		`INSERT INTO mensageria_outbox (type, key, payload, lease_token, lease_until, attempts) VALUES ('invoice', 'i2', '{}', 7, 1, 1)`,
		`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('gone', 'g1', '{}')`,
		`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('gone', 'g2', '{}')`,
		`DELETE FROM mensageria_outbox WHERE type = 'gone'`, // ids 5 and 6 were handed out
		`INSERT INTO mensageria_delivered_counts (type, minute, n) VALUES ('counted', 60000000, 4)`,
		`INSERT INTO mensageria_inbox (consumer, key, message_id) VALUES ('billing', 'k1', '0190a0a0-0000-7000-8000-000000000001')`,
	} {
		if _, err := d.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	outbox := dump(t, d, "outbox", v1OutboxCols, "id")
	inbox := dump(t, d, "inbox", "consumer, key, message_id, received_at", "consumer, key")
	counts := dump(t, d, "delivered_counts", "type, minute, n", "type, minute")

	res, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 2 || res.To < 3 || len(res.Applied) == 0 || res.Applied[0] != 3 || res.Owner != "ops" {
		t.Fatalf("upgrade = %+v, want 2 -> 3 with ops as the migrations owner", res)
	}
	if got := dump(t, d, "outbox", v1OutboxCols, "id"); !slices.Equal(got, outbox) {
		t.Fatalf("outbox rows changed by the upgrade:\n got %v\nwant %v", got, outbox)
	}
	if got := dump(t, d, "inbox", "consumer, key, message_id, received_at", "consumer, key"); !slices.Equal(got, inbox) {
		t.Fatalf("inbox rows changed:\n got %v\nwant %v", got, inbox)
	}
	if got := dump(t, d, "delivered_counts", "type, minute, n", "type, minute"); !slices.Equal(got, counts) {
		t.Fatalf("delivered counts changed:\n got %v\nwant %v", got, counts)
	}
	if got, want := ownersOf(t, d, ""), []string{"migrations/schema=ops", "type/counted=", "type/invoice=", "type/order="}; !slices.Equal(got, want) {
		t.Fatalf("catalog after the upgrade %v, want %v", got, want)
	}
	// No default is left that an older SQLite cannot evaluate.
	var n int
	if err := d.DB().QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('mensageria_outbox', 'mensageria_inbox', 'mensageria_owners') AND sql LIKE '%unixepoch%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables still default with unixepoch (%v)", n, err)
	}
	// A producer of an unclaimed type keeps enqueueing; a new type is refused.
	if _, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('order', 'o3', '{"n":3}')`); err != nil {
		t.Fatalf("plain insert of an unclaimed type: %v", err)
	}
	var id int64
	if err := d.DB().QueryRow(`SELECT max(id) FROM mensageria_outbox`).Scan(&id); err != nil || id != 7 {
		t.Fatalf("the first id after the upgrade is %d (%v), want 7: an id handed out before may not be given again", id, err)
	}
	if _, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key, payload) VALUES ('brand.new', 'b', '{}')`); err == nil {
		t.Fatal("plain insert of a type nobody owns succeeded")
	}
	// The owner registers and its relay drains what was waiting.
	reg, err := d.Register(ctx, driver.RegisterParams{App: "shop", Resources: []driver.Resource{typ("order"), typ("invoice")}})
	if err != nil || len(reg.Unlisted) != 0 {
		t.Fatalf("adopting unclaimed types = %+v, %v", reg, err)
	}
	jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"order", "invoice"}, Limit: 10, Lease: time.Minute, Token: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(jobs); got != 4 {
		t.Fatalf("claimed %d rows after the upgrade, want the 3 pending orders and the expired invoice lease", got)
	}
	var dead []driver.Job
	if dead, err = d.ListMessages(ctx, driver.ListFilter{State: driver.StateDead}); err != nil || len(dead) != 1 ||
		dead[0].LastError != "404 from billing" || dead[0].Owner != "shop" || dead[0].LastRoute != "" {
		t.Fatalf("dead row after the upgrade = %+v, %v", dead, err)
	}
	// The kept inbox record still deduplicates (and has no hash).
	err = d.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		r, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "billing", Key: "k1", MessageID: uuid.New(), PayloadHash: []byte{1}})
		if err == nil && (!r.Duplicate || r.FirstPayloadHash != nil || uuid.UUID(r.FirstMessageID).String() != "0190a0a0-0000-7000-8000-000000000001") {
			t.Errorf("old inbox record after the upgrade: %+v", r)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The migrations have one owner: the first named app to migrate up.
func TestMigrateOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := openT(t, path, nil)
	ctx := t.Context()
	up := func(app string) (driver.MigrateResult, error) {
		return d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: app})
	}
	// An anonymous caller may build a schema nobody owns, and records no one.
	if res, err := up(""); err != nil || res.Owner != "" || res.To < 3 {
		t.Fatalf("anonymous migrate up = %+v, %v", res, err)
	}
	if res, err := up("a"); err != nil || res.Owner != "a" || len(res.Applied) != 0 {
		t.Fatalf("first named app = %+v, %v; want it recorded as the owner", res, err)
	}
	if res, err := up("a"); err != nil || res.Owner != "a" {
		t.Fatalf("owner again = %+v, %v", res, err)
	}
	for _, app := range []string{"b", ""} {
		res, err := up(app)
		if got := conflictsOf(t, err, app); !slices.Equal(got, []string{"migrations/schema=a"}) {
			t.Fatalf("migrate up by %q: conflicts %v", app, got)
		}
		if !strings.Contains(err.Error(), `"a"`) || res.Owner != "a" {
			t.Fatalf("migrate up by %q = %+v, %v: the message and result must name the owner", app, res, err)
		}
	}
	// Check is open to everyone and says who owns it.
	if res, err := openT(t, path, nil).Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateCheck, App: "b"}); err != nil || res.Owner != "a" {
		t.Fatalf("check by b = %+v, %v", res, err)
	}
	// An operator hands the migrations over.
	if err := d.Transfer(ctx, driver.TransferParams{Kind: driver.ResourceMigrations, Name: driver.MigrationsName, From: "a", To: "b"}); err != nil {
		t.Fatal(err)
	}
	if res, err := up("b"); err != nil || res.Owner != "b" {
		t.Fatalf("new owner = %+v, %v", res, err)
	}
	// A fresh schema migrated by a named app is its from the start.
	fresh := openT(t, filepath.Join(t.TempDir(), "fresh.db"), nil)
	if res, err := fresh.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "c"}); err != nil || res.Owner != "c" || res.From != 0 {
		t.Fatalf("fresh schema = %+v, %v", res, err)
	}
}

// The upgrade to the catalog runs while a relay of the previous build keeps
// enqueueing, claiming and settling through another handle with that
// build's statements: every row it enqueued is delivered once or still
// pending, before, during and after the upgrade.
func TestUpgradeWithAnOldRelayRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := preCatalog(t, path)
	old := openT(t, path, nil).DB()
	ctx := t.Context()
	// One round of the old relay: enqueue a row, claim up to five, settle
	// them as delivered (deleted, and counted), in that build's SQL. The
	// counts are what keep the type known to the upgrade when every row of
	// it has just been delivered.
	round := func(i int) (delivered []string, err error) {
		if _, err := old.ExecContext(ctx, "INSERT INTO mensageria_outbox (message_id, type, key, payload, headers) VALUES (?, 'order', ?, '{}', NULL)",
			uuid.NewString(), fmt.Sprint("k", i)); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
		tx, err := old.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback() }()
		rows, err := tx.QueryContext(ctx, `UPDATE mensageria_outbox SET lease_token = 1, lease_until = 9e15, available_at = 9e15, attempts = attempts + 1
			WHERE id IN (SELECT id FROM mensageria_outbox WHERE state = 'pending' AND type = 'order' AND available_at <= 9e15 ORDER BY available_at, id LIMIT 5)
			RETURNING id, key`)
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			var key string
			if err := rows.Scan(&id, &key); err != nil {
				return nil, err
			}
			ids = append(ids, id)
			delivered = append(delivered, key)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, "DELETE FROM mensageria_outbox WHERE id = ? AND lease_token = 1", id); err != nil {
				return nil, fmt.Errorf("settle: %w", err)
			}
		}
		if len(ids) > 0 {
			if _, err := tx.ExecContext(ctx, "INSERT INTO mensageria_delivered_counts (type, minute, n) VALUES ('order', 60000000, ?) ON CONFLICT (type, minute) DO UPDATE SET n = n + excluded.n", len(ids)); err != nil {
				return nil, fmt.Errorf("settle counts: %w", err)
			}
		}
		return delivered, tx.Commit()
	}
	progress := make(chan int, 1000)
	stop := make(chan struct{})
	var delivered []string
	var relayErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			got, err := round(i)
			if err != nil {
				relayErr = fmt.Errorf("round %d: %w", i, err)
				close(progress)
				return
			}
			delivered = append(delivered, got...)
			progress <- i + 1
		}
	})
	waitRounds := func(n int) {
		for r := range progress {
			if r >= n {
				return
			}
		}
	}
	waitRounds(20)
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "ops"}); err != nil {
		t.Fatalf("upgrade with the old relay running: %v", err)
	}
	var after int
	for r := range progress {
		if after == 0 {
			after = r + 20
		}
		if r >= after {
			break
		}
	}
	close(stop)
	wg.Wait()
	if relayErr != nil {
		t.Fatalf("the old relay failed across the upgrade: %v", relayErr)
	}
	var inserted int
	if err := d.DB().QueryRow("SELECT seq FROM sqlite_sequence WHERE name = 'mensageria_outbox'").Scan(&inserted); err != nil {
		t.Fatal(err)
	}
	pending := dump(t, d, "outbox", "key", "id")
	seen := map[string]bool{}
	for _, k := range delivered {
		if seen[k] {
			t.Fatalf("row %s delivered twice", k)
		}
		seen[k] = true
	}
	for _, k := range pending {
		k = strings.Trim(k, "[]")
		if seen[k] {
			t.Fatalf("row %s both delivered and pending", k)
		}
		seen[k] = true
	}
	if len(seen) != inserted || inserted < 40 {
		t.Fatalf("%d rows enqueued, %d delivered and %d pending: rows were lost", inserted, len(delivered), len(pending))
	}
}

// A team's own view on the outbox survives the rebuild of the table; a
// team's own trigger on it stops the upgrade, with the fix in the message,
// rather than being dropped with the old table.
func TestUpgradeKeepsViewsAndStopsForTriggers(t *testing.T) {
	d := preCatalog(t, filepath.Join(t.TempDir(), "m.db"))
	d.DB().SetMaxOpenConns(1) // the connection that migrated is the one asked about its settings
	ctx := t.Context()
	execT(t, d, "INSERT INTO mensageria_outbox (type, key) VALUES ('order', 'o1')")
	execT(t, d, "CREATE VIEW pending_orders AS SELECT id, key FROM mensageria_outbox WHERE state = 'pending'")
	execT(t, d, "CREATE TABLE audit (id INTEGER)")
	execT(t, d, "CREATE TRIGGER audit_outbox AFTER INSERT ON mensageria_outbox BEGIN INSERT INTO audit VALUES (NEW.id); END")
	_, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp})
	if err == nil || !strings.Contains(err.Error(), "mensageria: drop your own triggers on mensageria_outbox") {
		t.Fatalf("upgrade with a team's trigger on the outbox = %v, want it refused with the fix", err)
	}
	if res, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateCheck}); res.From != 2 || !errors.Is(err, driver.ErrSchemaBehind) {
		t.Fatalf("after the refused upgrade: %+v, %v; want version 2 untouched", res, err)
	}
	execT(t, d, "DROP TRIGGER audit_outbox")
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatalf("upgrade with a team's view on the outbox: %v", err)
	}
	if got := dump(t, d, "outbox", "key", "id"); !slices.Equal(got, []string{"[o1]"}) {
		t.Fatalf("rows after the upgrade: %v", got)
	}
	var key string
	if err := d.DB().QueryRow("SELECT key FROM pending_orders").Scan(&key); err != nil || key != "o1" {
		t.Fatalf("the team's view after the upgrade: %q, %v", key, err)
	}
	var legacy int
	if err := d.DB().QueryRow("PRAGMA legacy_alter_table").Scan(&legacy); err != nil || legacy != 0 {
		t.Fatalf("legacy_alter_table left at %d (%v)", legacy, err)
	}
}
