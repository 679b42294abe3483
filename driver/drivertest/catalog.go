package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

func typeRes(name string) driver.Resource {
	return driver.Resource{Kind: driver.ResourceType, Name: name}
}

// owners returns app's catalog entries (app "" for all) keyed "kind/name".
func owners(t *testing.T, d driver.Driver, app string) map[string]driver.Ownership {
	t.Helper()
	list, err := d.Owners(ctxOf(t), app)
	if err != nil {
		t.Fatalf("Owners(%q): %v", app, err)
	}
	out := map[string]driver.Ownership{}
	for i, o := range list {
		if i > 0 && (list[i-1].Kind > o.Kind || (list[i-1].Kind == o.Kind && list[i-1].Name >= o.Name)) {
			t.Fatalf("Owners(%q) not sorted by kind and name: %+v", app, list)
		}
		if app != "" && o.App != app {
			t.Fatalf("Owners(%q) listed %+v, another app's entry", app, o)
		}
		out[string(o.Kind)+"/"+o.Name] = o
	}
	return out
}

// conflictOf asserts err is an *OwnerConflictError of app naming want (as
// "kind/name" → owner).
func conflictOf(t *testing.T, err error, app string, want map[string]string) {
	t.Helper()
	var ce *driver.OwnerConflictError
	if !errors.As(err, &ce) || !errors.Is(err, driver.ErrOwnerConflict) {
		t.Fatalf("err = %v, want an *OwnerConflictError wrapping ErrOwnerConflict", err)
	}
	if ce.App != app {
		t.Fatalf("conflict names app %q, want %q", ce.App, app)
	}
	got := map[string]string{}
	for _, c := range ce.Conflicts {
		got[string(c.Kind)+"/"+c.Name] = c.App
	}
	if len(got) != len(want) {
		t.Fatalf("conflicts %v, want %v", got, want)
	}
	for k, owner := range want {
		if got[k] != owner {
			t.Fatalf("conflicts %v, want %v", got, want)
		}
	}
	msg := err.Error()
	for _, c := range ce.Conflicts {
		if !strings.Contains(msg, c.App) || (c.Kind != driver.ResourceMigrations && !strings.Contains(msg, c.Name)) {
			t.Fatalf("message %q must name the owner %q and the thing %q", msg, c.App, c.Name)
		}
		break // the message details the first; the rest are counted
	}
	if app != "" && !strings.Contains(msg, app) {
		t.Fatalf("message %q must name the claiming app %q", msg, app)
	}
}

func (s *suite) catalogTests() []test {
	return []test{
		{"RegisterRecordsAndIsIdempotent", func(t *testing.T, h *Harness) {
			d := h.Driver
			rs := []driver.Resource{typeRes("x"), typeRes("y"),
				{Kind: driver.ResourceConsumer, Name: "billing", Window: time.Hour},
				{Kind: driver.ResourceKafkaTransactionalID, Name: "relay-a"}}
			first := register(t, d, "a", rs...)
			if first.OutboxID == [16]byte{} {
				t.Fatal("Register returned no outbox id")
			}
			if len(first.Unlisted) != 0 {
				t.Fatalf("first registration reports unlisted %+v", first.Unlisted)
			}
			got := owners(t, d, "a")
			if len(got) != 4 {
				t.Fatalf("app a owns %v, want its 4 resources", got)
			}
			for _, r := range rs {
				o, ok := got[string(r.Kind)+"/"+r.Name]
				if !ok || o.App != "a" {
					t.Fatalf("%s/%s: %+v, want owned by a", r.Kind, r.Name, o)
				}
				near(t, "Since", o.Since)
			}
			if w := got["consumer/billing"].Window; w != time.Hour {
				t.Fatalf("consumer window = %s, want 1h", w)
			}
			// A restart registers the same again; the consumer's window may
			// change with a new deploy.
			rs[2].Window = 30 * 24 * time.Hour
			again := register(t, d, "a", rs...)
			if again.OutboxID != first.OutboxID {
				t.Fatal("the outbox id changed between registrations")
			}
			if w := owners(t, d, "a")["consumer/billing"].Window; w != 30*24*time.Hour {
				t.Fatalf("consumer window after re-registration = %s, want 720h", w)
			}
			// Another process on the same database sees the same outbox.
			if other := register(t, reopen(t, h), "b", typeRes("z")); other.OutboxID != first.OutboxID {
				t.Fatal("a second driver on the same database sees another outbox id")
			}
			if all := owners(t, d, ""); len(all) != 5 || all["type/z"].App != "b" {
				t.Fatalf("every owner = %v, want a's 4 and b's z", all)
			}
		}},
		{"ConflictNamesBothAppsAndRecordsNothing", func(t *testing.T, h *Harness) {
			d := h.Driver
			register(t, d, "pedidos", typeRes("pedido.criado"), driver.Resource{Kind: driver.ResourceKafkaTransactionalID, Name: "tx-1"})
			_, err := d.Register(ctxOf(t), driver.RegisterParams{App: "faturas", Resources: []driver.Resource{
				typeRes("fatura.emitida"), typeRes("pedido.criado"),
				{Kind: driver.ResourceConsumer, Name: "faturas-inbox", Window: time.Hour},
				{Kind: driver.ResourceKafkaTransactionalID, Name: "tx-1"}}})
			conflictOf(t, err, "faturas", map[string]string{"type/pedido.criado": "pedidos", "kafka_transactional_id/tx-1": "pedidos"})
			if got := owners(t, d, "faturas"); len(got) != 0 {
				t.Fatalf("a refused registration recorded %v", got)
			}
			if got := owners(t, d, "pedidos"); got["type/pedido.criado"].App != "pedidos" {
				t.Fatalf("the owner lost its type: %v", got)
			}
		}},
		{"ConcurrentRegistrationsOneWinner", func(t *testing.T, h *Harness) {
			drivers := []driver.Driver{h.Driver, reopen(t, h), reopen(t, h), reopen(t, h)}
			for round := range 5 {
				typ := "contested." + string(rune('a'+round))
				var wg sync.WaitGroup
				errs := make([]error, len(drivers))
				start := make(chan struct{})
				for i, d := range drivers {
					wg.Go(func() {
						<-start
						_, errs[i] = d.Register(context.Background(), driver.RegisterParams{
							App: appName(round, i), Resources: []driver.Resource{typeRes(typ), typeRes(typ + ".own" + string(rune('0'+i)))}})
					})
				}
				close(start)
				wg.Wait()
				winners := 0
				for i, err := range errs {
					switch {
					case err == nil:
						winners++
					case errors.Is(err, driver.ErrOwnerConflict):
						if got := owners(t, h.Driver, appName(round, i)); len(got) != 0 {
							t.Fatalf("round %d: the refused %s recorded %v", round, appName(round, i), got)
						}
					default:
						t.Fatalf("round %d: registration %d: %v (want success or a conflict)", round, i, err)
					}
				}
				if winners != 1 {
					t.Fatalf("round %d: %d registrations of one type succeeded, want exactly 1 (errors %v)", round, winners, errs)
				}
			}
		}},
		{"UnlistedAreReportedAndKept", func(t *testing.T, h *Harness) {
			d := h.Driver
			register(t, d, "a", typeRes("x"), typeRes("y"))
			res := register(t, d, "a", typeRes("x"))
			if len(res.Unlisted) != 1 || res.Unlisted[0].Name != "y" || res.Unlisted[0].App != "a" {
				t.Fatalf("Unlisted = %+v, want a's type y", res.Unlisted)
			}
			if got := owners(t, d, "a"); got["type/y"].App != "a" {
				t.Fatalf("a type no longer listed was dropped: %v (moving it is an operator step)", got)
			}
		}},
		{"MigrationsAreNeverUnlisted", func(t *testing.T, h *Harness) {
			// The migrations entry is recorded by Migrate, never listed by
			// a registration: reporting it as unlisted made every start of
			// the owner's relay warn to release or transfer it.
			d := h.Driver
			if _, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp, App: "a"}); err != nil {
				t.Fatal(err)
			}
			if got := owners(t, d, "a"); got["migrations/"+driver.MigrationsName].App != "a" {
				t.Fatalf("the migrations are not a's: %v", got)
			}
			if res := register(t, d, "a", typeRes("x")); len(res.Unlisted) != 0 {
				t.Fatalf("Unlisted = %+v, want none: the migrations entry is no forgotten route", res.Unlisted)
			}
		}},
		{"Transfer", func(t *testing.T, h *Harness) {
			d := h.Driver
			register(t, d, "a", typeRes("x"))
			err := d.Transfer(ctxOf(t), driver.TransferParams{Kind: driver.ResourceType, Name: "x", From: "b", To: "c"})
			conflictOf(t, err, "b", map[string]string{"type/x": "a"})
			err = d.Transfer(ctxOf(t), driver.TransferParams{Kind: driver.ResourceType, Name: "nope", From: "a", To: "b"})
			if !errors.Is(err, driver.ErrNotOwned) {
				t.Fatalf("transfer of a missing entry = %v, want ErrNotOwned", err)
			}
			if err := d.Transfer(ctxOf(t), driver.TransferParams{Kind: driver.ResourceType, Name: "x", From: "a", To: "b"}); err != nil {
				t.Fatalf("transfer a → b: %v", err)
			}
			if got := owners(t, d, ""); got["type/x"].App != "b" {
				t.Fatalf("after transfer: %v, want x owned by b", got)
			}
			_, err = d.Register(ctxOf(t), driver.RegisterParams{App: "a", Resources: []driver.Resource{typeRes("x")}})
			conflictOf(t, err, "a", map[string]string{"type/x": "b"})
			if err := d.Transfer(ctxOf(t), driver.TransferParams{Kind: driver.ResourceType, Name: "x", From: "b"}); err != nil {
				t.Fatalf("release: %v", err)
			}
			if got := owners(t, d, ""); len(got) != 0 {
				t.Fatalf("after release: %v, want an empty catalog", got)
			}
			err = d.Insert(ctxOf(t), driver.InsertParams{Rows: []driver.InsertRow{row(t, "x", "k")}})
			if !errors.Is(err, driver.ErrUnownedType) {
				t.Fatalf("insert of a released type = %v, want ErrUnownedType", err)
			}
		}},
		{"InsertOfAnUnownedTypeWritesNothing", func(t *testing.T, h *Harness) {
			d := h.Driver
			own(t, d, "owned")
			rows := []driver.InsertRow{row(t, "owned", "1"), row(t, "nobody.owns", "2"), row(t, "owned", "3")}
			err := d.Insert(ctxOf(t), driver.InsertParams{Rows: rows})
			var ue *driver.UnownedTypeError
			if !errors.As(err, &ue) || ue.Type != "nobody.owns" {
				t.Fatalf("Insert = %v, want an *UnownedTypeError naming nobody.owns", err)
			}
			ctx := ctxOf(t)
			tx, commit, rollback, err := h.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rollback() }()
			if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: rows}); !errors.As(err, &ue) || ue.Type != "nobody.owns" {
				t.Fatalf("InsertTx = %v, want an *UnownedTypeError naming nobody.owns", err)
			}
			_ = commit()
			if got := list(t, d, driver.ListFilter{}); len(got) != 0 {
				t.Fatalf("%d rows written by refused enqueues", len(got))
			}
		}},
		{"PlainSQLFollowsTheGoRules", func(t *testing.T, h *Harness) {
			d := h.Driver
			own(t, d, "sql.owned")
			ins := func(typ, key, headers string) error {
				cols, vals := "type, key, payload", "'"+typ+"', '"+key+"', '{}'"
				if headers != "" {
					cols, vals = cols+", headers", vals+", '"+headers+"'"
				}
				return h.Exec(ctxOf(t), "INSERT INTO "+h.Table("outbox")+" ("+cols+") VALUES ("+vals+")")
			}
			// 500 two-byte characters: 1000 bytes, the limit, accepted.
			if err := ins("sql.owned", strings.Repeat("é", 500), `{"traceparent":"00-x"}`); err != nil {
				t.Fatalf("a 1000-byte key and string headers: %v", err)
			}
			// The shape checks come before the owner check, so an overlong
			// type is told it is too long rather than unowned.
			refused := []struct{ what, typ, key, headers, says string }{
				{"an unowned type", "sql.nobody", "k", "", "owner"},
				{"a key over 1000 bytes", "sql.owned", strings.Repeat("é", 501), "", "1000"},
				{"an empty key", "sql.owned", "", "", "key"},
				{"a header value that is not a string", "sql.owned", "k", `{"n":1}`, "string"},
				{"headers that are not an object", "sql.owned", "k", `["a"]`, "object"},
				{"a type over 200 bytes", strings.Repeat("t", 201), "k", "", "200"},
			}
			for _, r := range refused {
				err := ins(r.typ, r.key, r.headers)
				if err == nil {
					t.Fatalf("plain SQL insert of %s succeeded", r.what)
				}
				if msg := err.Error(); !strings.Contains(msg, "mensageria") || !strings.Contains(msg, r.says) {
					t.Fatalf("plain SQL insert of %s: %q; want a mensageria message mentioning %q", r.what, msg, r.says)
				}
			}
			// The same rows, each after good rows of the same type in one
			// statement: what the check learnt from the earlier rows never
			// lets the bad one through, and none of the statement is stored.
			for _, r := range refused {
				var vals []string
				for i := range 3 {
					vals = append(vals, fmt.Sprintf(`('sql.owned', 'good-%d', '{}', '{"traceparent":"00-%d"}')`, i, i))
				}
				headers := "NULL"
				if r.headers != "" {
					headers = "'" + r.headers + "'"
				}
				vals = append(vals, "('"+r.typ+"', '"+r.key+"', '{}', "+headers+")")
				err := h.Exec(ctxOf(t), "INSERT INTO "+h.Table("outbox")+" (type, key, payload, headers) VALUES "+strings.Join(vals, ", "))
				if err == nil {
					t.Fatalf("plain SQL insert of %s after good rows succeeded", r.what)
				}
				if msg := err.Error(); !strings.Contains(msg, "mensageria") || !strings.Contains(msg, r.says) {
					t.Fatalf("plain SQL insert of %s after good rows: %q; want a mensageria message mentioning %q", r.what, msg, r.says)
				}
			}
			if got := list(t, d, driver.ListFilter{}); len(got) != 1 {
				t.Fatalf("%d rows stored, want only the valid one", len(got))
			}
		}},
		{"SettleSortsRowsTruthfully", func(t *testing.T, h *Harness) {
			d := h.Driver
			gone, taken := insertOne(t, d, "s", "1"), insertOne(t, d, "s", "2")
			_, zombie := claimWith(t, d, claimer{types: []string{"s"}, lease: shortLease})
			time.Sleep(shortLease + 100*time.Millisecond)
			// A successor takes both rows again: it delivers the first (the
			// row is deleted) and is still working on the second.
			jobs, successor := claimWith(t, d, claimer{types: []string{"s"}, limit: 1})
			wantIDs(t, "successor's first claim", jobs, gone)
			if n := settle(t, d, driver.SettleParams{Token: successor, Delivered: []int64{gone}}); n != 1 {
				t.Fatalf("successor settled %d", n)
			}
			jobs, _ = claimWith(t, d, claimer{types: []string{"s"}, limit: 1})
			wantIDs(t, "successor's second claim", jobs, taken)
			// The zombie wakes up with its old outcomes, and a live batch of
			// its own beside them.
			live := insertOne(t, d, "s", "3")
			jobs, mine := claimWith(t, d, claimer{types: []string{"s"}})
			wantIDs(t, "a live claim", jobs, live)
			res := settleResult(t, d, driver.SettleParams{Token: zombie, Delivered: []int64{gone}, Dead: []driver.Failure{{ID: taken, Error: "zombie"}}})
			if len(res.Settled) != 0 || !slices.Equal(sorted(res.Fenced), sorted([]int64{gone, taken})) || len(res.Expired) != 0 {
				t.Fatalf("zombie settle = %+v, want fenced [%d %d]: one deleted by the successor, one under its token", res, gone, taken)
			}
			if j, _ := byID(t, d, taken); j.State != driver.StatePending || j.LastError != "" {
				t.Fatalf("the zombie changed the successor's row: %+v", j)
			}
			res = settleResult(t, d, driver.SettleParams{Token: mine, Delivered: []int64{live}})
			if !slices.Equal(res.Settled, []int64{live}) || len(res.Fenced)+len(res.Expired) != 0 {
				t.Fatalf("live settle = %+v, want settled [%d]", res, live)
			}
		}},
		{"SettleReportsAnExpiredLease", func(t *testing.T, h *Harness) {
			d := h.Driver
			a, b, c := insertOne(t, d, "e", "1"), insertOne(t, d, "e", "2"), insertOne(t, d, "e", "3")
			_, tok := claimWith(t, d, claimer{types: []string{"e"}, lease: shortLease})
			time.Sleep(shortLease + 100*time.Millisecond)
			// Another relay reclaims a (a new token); b stays under the
			// expired lease; c too.
			jobs, other := claimWith(t, d, claimer{types: []string{"e"}, limit: 1, lease: longLease})
			wantIDs(t, "reclaim", jobs, a)
			res := settleResult(t, d, driver.SettleParams{Token: tok, Delivered: []int64{a}, Retry: []driver.Retry{{ID: b, Delay: time.Second, Error: "x"}}, Dead: []driver.Failure{{ID: c, Error: "y"}}})
			if len(res.Settled) != 0 || !slices.Equal(res.Fenced, []int64{a}) || !slices.Equal(sorted(res.Expired), sorted([]int64{b, c})) {
				t.Fatalf("settle = %+v, want fenced [%d] (another token) and expired [%d %d]", res, a, b, c)
			}
			for _, id := range []int64{b, c} {
				if j, _ := byID(t, d, id); j.State != driver.StatePending || j.LastError != "" {
					t.Fatalf("an expired settle changed row %d: %+v", id, j)
				}
			}
			if n := settle(t, d, driver.SettleParams{Token: other, Delivered: []int64{a}}); n != 1 {
				t.Fatalf("the rightful owner settled %d", n)
			}
		}},
		{"RouteAndOwnerAreListed", func(t *testing.T, h *Harness) {
			d := h.Driver
			register(t, d, "pedidos", typeRes("r"))
			x, y := insertOne(t, d, "r", "1"), insertOne(t, d, "r", "2")
			_, tok := claim(t, d, "r")
			settle(t, d, driver.SettleParams{Token: tok,
				Retry: []driver.Retry{{ID: x, Delay: time.Hour, Error: "503", Route: "pedidos → http https://billing/m2m"}},
				Dead:  []driver.Failure{{ID: y, Error: "404", Route: "pedidos → http https://wrong/m2m"}}})
			jx, _ := byID(t, d, x)
			jy, _ := byID(t, d, y)
			if jx.LastRoute != "pedidos → http https://billing/m2m" || jy.LastRoute != "pedidos → http https://wrong/m2m" {
				t.Fatalf("LastRoute = %q / %q", jx.LastRoute, jy.LastRoute)
			}
			if jx.Owner != "pedidos" || jy.Owner != "pedidos" {
				t.Fatalf("Owner = %q / %q, want pedidos", jx.Owner, jy.Owner)
			}
			if st := stats(t, d, "r"); st.Owner != "pedidos" || st.Dead != 1 {
				t.Fatalf("stats = %+v, want owner pedidos and 1 dead", st)
			}
		}},
		{"InboxKeepsThePayloadHash", func(t *testing.T, h *Harness) {
			d := h.Driver
			first, second := newID(t), newID(t)
			hash := []byte("0123456789abcdef0123456789abcdef")
			if r := record(t, d, driver.InboxRecord{Consumer: "c", Key: "k", MessageID: first, PayloadHash: hash}); r.Duplicate {
				t.Fatal("first record reported Duplicate")
			}
			r := record(t, d, driver.InboxRecord{Consumer: "c", Key: "k", MessageID: second, PayloadHash: []byte("other")})
			if !r.Duplicate || r.FirstMessageID != first || string(r.FirstPayloadHash) != string(hash) {
				t.Fatalf("second record = %+v, want Duplicate of the first with its hash", r)
			}
			record(t, d, driver.InboxRecord{Consumer: "c", Key: "nohash", MessageID: first})
			if r := record(t, d, driver.InboxRecord{Consumer: "c", Key: "nohash", MessageID: second, PayloadHash: hash}); !r.Duplicate || r.FirstPayloadHash != nil {
				t.Fatalf("duplicate of a record without a hash = %+v, want Duplicate and no hash", r)
			}
		}},
		{"MigrationsHaveOneOwner", func(t *testing.T, h *Harness) {
			if h.Unmigrated == nil {
				t.Fatal("drivertest: the catalog tests need the Unmigrated hook")
			}
			fresh := h.Unmigrated(t)
			d := fresh.Driver
			res, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp, App: "schema-owner"})
			if err != nil || res.Owner != "schema-owner" {
				t.Fatalf("first named migration = %+v, %v; want it to record its app as owner", res, err)
			}
			for _, app := range []string{"intruder", ""} {
				_, err := reopen(t, fresh).Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp, App: app})
				conflictOf(t, err, app, map[string]string{"migrations/" + driver.MigrationsName: "schema-owner"})
				if res, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateCheck, App: app}); err != nil || res.Owner != "schema-owner" {
					t.Fatalf("migrate check by %q = %+v, %v; want it open to every app", app, res, err)
				}
			}
			if res, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp, App: "schema-owner"}); err != nil || res.Owner != "schema-owner" {
				t.Fatalf("the owner migrating again = %+v, %v", res, err)
			}
			if err := d.Transfer(ctxOf(t), driver.TransferParams{Kind: driver.ResourceMigrations, Name: driver.MigrationsName, From: "schema-owner", To: "intruder"}); err != nil {
				t.Fatalf("transfer of the migrations: %v", err)
			}
			if _, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp, App: "intruder"}); err != nil {
				t.Fatalf("the new owner migrating: %v", err)
			}
		}},
		{"UpgradeOfAPopulatedOutbox", func(t *testing.T, h *Harness) {
			if h.Unmigrated == nil || h.CatalogVersion < 2 {
				t.Fatal("drivertest: the upgrade test needs the Unmigrated hook and CatalogVersion")
			}
			fresh := h.Unmigrated(t)
			d := fresh.Driver
			ms, err := d.MigrationSQL(0)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if m.Version < fresh.CatalogVersion {
					if err := fresh.Exec(ctxOf(t), m.SQL); err != nil {
						t.Fatalf("migration %d: %v", m.Version, err)
					}
				}
			}
			// Rows enqueued before the catalog existed, by plain SQL.
			for _, v := range []string{"('legacy.a', 'k1', '{\"n\":1}')", "('legacy.a', 'k2', '{\"n\":2}')", "('legacy.b', 'k1', '{}')"} {
				if err := fresh.Exec(ctxOf(t), "INSERT INTO "+fresh.Table("outbox")+" (type, key, payload) VALUES "+v); err != nil {
					t.Fatalf("pre-catalog insert: %v", err)
				}
			}
			res, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp, App: "owner"})
			if err != nil || res.From != fresh.CatalogVersion-1 {
				t.Fatalf("upgrade = %+v, %v; want it to start at version %d", res, err, fresh.CatalogVersion-1)
			}
			rows := list(t, d, driver.ListFilter{})
			if len(rows) != 3 {
				t.Fatalf("%d rows after the upgrade, want the 3 enqueued before it", len(rows))
			}
			for _, j := range rows {
				if j.State != driver.StatePending || j.Attempt != 0 {
					t.Fatalf("row after the upgrade: %+v, want pending and untried", j)
				}
			}
			got := owners(t, d, "")
			for _, typ := range []string{"legacy.a", "legacy.b"} {
				if o, ok := got["type/"+typ]; !ok || o.App != "" {
					t.Fatalf("type %s after the upgrade: %+v, want it listed as unclaimed", typ, o)
				}
			}
			// Producers of the old types keep working; a new type is refused.
			if err := fresh.Exec(ctxOf(t), "INSERT INTO "+fresh.Table("outbox")+" (type, key) VALUES ('legacy.a', 'k3')"); err != nil {
				t.Fatalf("enqueue of an unclaimed type after the upgrade: %v", err)
			}
			if err := fresh.Exec(ctxOf(t), "INSERT INTO "+fresh.Table("outbox")+" (type, key) VALUES ('brand.new', 'k')"); err == nil {
				t.Fatal("an enqueue of a type no app owns was accepted after the upgrade")
			}
			// Until an owner registers, nobody claims them; the first app to
			// register one takes it, the next conflicts.
			register(t, d, "app-a", typeRes("legacy.a"))
			_, err = d.Register(ctxOf(t), driver.RegisterParams{App: "app-b", Resources: []driver.Resource{typeRes("legacy.a"), typeRes("legacy.b")}})
			conflictOf(t, err, "app-b", map[string]string{"type/legacy.a": "app-a"})
			if o := owners(t, d, "")["type/legacy.b"]; o.App != "" {
				t.Fatalf("legacy.b after a refused registration: %+v, want still unclaimed", o)
			}
			jobs, _ := claim(t, d, "legacy.a")
			if len(jobs) != 3 {
				t.Fatalf("claimed %d legacy.a rows after its owner registered, want 3", len(jobs))
			}
		}},
	}
}

func appName(round, i int) string {
	return "r" + string(rune('0'+round)) + "-app" + string(rune('0'+i))
}
