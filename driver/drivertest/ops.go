package drivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// deliver claims and settles the given rows of typ as delivered, keeping
// them (KeepDelivered) for Purge and ListMessages to see.
func deliver(t *testing.T, d driver.Driver, typ string, want ...int64) {
	t.Helper()
	jobs, tok := claim(t, d, typ)
	wantIDs(t, "claim to deliver", jobs, want...)
	if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: want, KeepDelivered: true}); n != len(want) {
		t.Fatalf("delivered %d, want %d", n, len(want))
	}
}

func kill(t *testing.T, d driver.Driver, typ string, want ...int64) {
	t.Helper()
	jobs, tok := claim(t, d, typ)
	wantIDs(t, "claim to kill", jobs, want...)
	var fs []driver.Failure
	for _, id := range want {
		fs = append(fs, driver.Failure{ID: id, Error: "gave up"})
	}
	if n := settle(t, d, driver.SettleParams{Token: tok, Dead: fs}); n != len(want) {
		t.Fatalf("killed %d, want %d", n, len(want))
	}
}

func purge(t *testing.T, d driver.Driver, p driver.PurgeParams) driver.PurgeResult {
	t.Helper()
	r, err := d.Purge(ctxOf(t), p)
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	return r
}

func (s *suite) purgeTests() []test {
	// Long enough that the "young" rows stay young on a loaded machine.
	const age = 2 * time.Second
	return []test{
		{"DeliveredOnlyOlderThanAge", func(t *testing.T, h *Harness) {
			d := h.Driver
			old1, old2 := insertOne(t, d, "p", "1"), insertOne(t, d, "p", "2")
			deliver(t, d, "p", old1, old2)
			pending := insertOne(t, d, "q", "1")
			dead := insertOne(t, d, "r", "1")
			kill(t, d, "r", dead)
			time.Sleep(age + 300*time.Millisecond)
			young := insertOne(t, d, "p", "3")
			deliver(t, d, "p", young)

			if r := purge(t, d, driver.PurgeParams{Types: []string{"p", "q", "r"}, DeliveredBefore: age, Batch: 1}); r.Outbox != 1 {
				t.Fatalf("first batch of 1 purged %d", r.Outbox)
			}
			if r := purge(t, d, driver.PurgeParams{Types: []string{"p", "q", "r"}, DeliveredBefore: age, Batch: 1}); r.Outbox != 1 {
				t.Fatalf("second batch of 1 purged %d", r.Outbox)
			}
			if r := purge(t, d, driver.PurgeParams{Types: []string{"p", "q", "r"}, DeliveredBefore: age, Batch: 10}); r.Outbox != 0 {
				t.Fatalf("third pass purged %d, want 0", r.Outbox)
			}
			left := ids(list(t, d, driver.ListFilter{}))
			if want := []int64{pending, dead, young}; !slices.Equal(left, sorted(want)) {
				t.Fatalf("rows left %v, want %v (pending, dead and the young delivered row)", left, sorted(want))
			}
			// Age zero keeps no delivered row.
			if r := purge(t, d, driver.PurgeParams{Types: []string{"p"}}); r.Outbox != 1 {
				t.Fatalf("purge with zero delivered age = %+v, want the young delivered row", r)
			}
			left = ids(list(t, d, driver.ListFilter{}))
			if want := []int64{pending, dead}; !slices.Equal(left, sorted(want)) {
				t.Fatalf("rows left %v, want %v", left, sorted(want))
			}
		}},
		{"DeliveredOnlyOfTheAppsTypes", func(t *testing.T, h *Harness) {
			d := h.Driver
			mine, theirs := insertOne(t, d, "mine", "1"), insertOne(t, d, "theirs", "1")
			deliver(t, d, "mine", mine)
			deliver(t, d, "theirs", theirs)
			if r := purge(t, d, driver.PurgeParams{App: "a", Types: []string{"mine"}}); r.Outbox != 1 {
				t.Fatalf("purge of app a's types = %+v, want its one delivered row", r)
			}
			if left := ids(list(t, d, driver.ListFilter{})); !slices.Equal(left, []int64{theirs}) {
				t.Fatalf("rows left %v, want only the other type's delivered row %d", left, theirs)
			}
		}},
		{"DeliveredCountsSurviveEveryPurge", func(t *testing.T, h *Harness) {
			// A backend may keep the counts in more than one place (a log the
			// settles append to, folded by Purge): no purge may lose or
			// double a count, whatever it folds, and a later settle adds to
			// what was folded.
			d := h.Driver
			for i, k := range []string{"1", "2", "3"} {
				deliver(t, d, "counted", insertOne(t, d, "counted", k))
				if got := stats(t, d, "counted").DeliveredLastHr; got != int64(i+1) {
					t.Fatalf("after %d settles the last hour counts %d", i+1, got)
				}
			}
			deliver(t, d, "other", insertOne(t, d, "other", "1"))
			check := func(when string, counted int64) {
				t.Helper()
				if got := stats(t, d, "counted").DeliveredLastHr; got != counted {
					t.Fatalf("%s: the last hour counts %d of type counted, want %d", when, got, counted)
				}
				if got := stats(t, d, "other").DeliveredLastHr; got != 1 {
					t.Fatalf("%s: the last hour counts %d of type other, want 1", when, got)
				}
				hist, ok := d.(driver.DeliveryHistory)
				if !ok {
					return
				}
				mins, err := hist.DeliveredPerMinute(ctxOf(t), []string{"counted"}, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				var sum int64
				for i, m := range mins {
					if i > 0 && !mins[i-1].Minute.Before(m.Minute) {
						t.Fatalf("%s: minute %s listed twice or out of order: %+v", when, m.Minute, mins)
					}
					sum += m.N
				}
				if sum != counted {
					t.Fatalf("%s: the minutes %+v add up to %d, want %d", when, mins, sum, counted)
				}
			}
			check("before any purge", 3)
			purge(t, d, driver.PurgeParams{Types: []string{"counted"}})
			check("after the first purge", 3)
			purge(t, d, driver.PurgeParams{Types: []string{"counted", "other"}})
			purge(t, d, driver.PurgeParams{Types: []string{"counted", "other"}})
			check("after two more", 3)
			deliver(t, d, "counted", insertOne(t, d, "counted", "4"))
			check("after a settle that follows them", 4)
			purge(t, d, driver.PurgeParams{Types: []string{"counted", "other"}})
			check("after the last purge", 4)
		}},
		{"InboxOfTheAppsConsumersEachByItsWindow", func(t *testing.T, h *Harness) {
			d := h.Driver
			register(t, d, "a", driver.Resource{Kind: driver.ResourceConsumer, Name: "short", Window: age},
				driver.Resource{Kind: driver.ResourceConsumer, Name: "long", Window: time.Hour},
				driver.Resource{Kind: driver.ResourceConsumer, Name: "forever"})
			register(t, d, "b", driver.Resource{Kind: driver.ResourceConsumer, Name: "neighbour", Window: age})
			for _, c := range []string{"short", "long", "forever", "neighbour", "unowned"} {
				for _, k := range []string{"old1", "old2"} {
					record(t, d, driver.InboxRecord{Consumer: c, Key: k, MessageID: newID(t)})
				}
			}
			time.Sleep(age + 300*time.Millisecond)
			record(t, d, driver.InboxRecord{Consumer: "short", Key: "young", MessageID: newID(t)})
			if r := purge(t, d, driver.PurgeParams{App: "a", Batch: 1}); r.Inbox != 1 || r.Outbox != 0 {
				t.Fatalf("first batch = %+v, want 1 inbox row", r)
			}
			if r := purge(t, d, driver.PurgeParams{App: "a", Batch: 5}); r.Inbox != 1 {
				t.Fatalf("second batch = %+v, want 1 inbox row", r)
			}
			if r := purge(t, d, driver.PurgeParams{App: "a", Batch: 5}); r.Inbox != 0 {
				t.Fatalf("third pass = %+v, want nothing", r)
			}
			if r := record(t, d, driver.InboxRecord{Consumer: "short", Key: "old1", MessageID: newID(t)}); r.Duplicate {
				t.Fatal("a purged record still reports Duplicate")
			}
			if r := record(t, d, driver.InboxRecord{Consumer: "short", Key: "young", MessageID: newID(t)}); !r.Duplicate {
				t.Fatal("a young record was purged")
			}
			// Each other consumer keeps its records: a longer window, no
			// window, another app's consumer (whatever its window), a
			// consumer nobody registered.
			for _, c := range []string{"long", "forever", "neighbour", "unowned"} {
				if r := record(t, d, driver.InboxRecord{Consumer: c, Key: "old2", MessageID: newID(t)}); !r.Duplicate {
					t.Fatalf("app a's purge deleted a record of consumer %q", c)
				}
			}
			if r := purge(t, d, driver.PurgeParams{App: "b"}); r.Inbox != 2 {
				t.Fatalf("app b's purge = %+v, want its consumer's 2 old records", r)
			}
		}},
	}
}

func sorted(s []int64) []int64 {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func (s *suite) operatorTests() []test {
	return []test{
		{"Stats", func(t *testing.T, h *Harness) {
			d := h.Driver
			a1 := insertOne(t, d, "a", "1")
			insertOne(t, d, "a", "2")
			insertOne(t, d, "a", "3")
			b1, b2 := insertOne(t, d, "b", "1"), insertOne(t, d, "b", "2")
			deliver(t, d, "b", b1, b2)
			b3 := insertOne(t, d, "b", "3")
			jobs, tok := claim(t, d, "b")
			wantIDs(t, "claim b3", jobs, b3)
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{b3}}) // deleted, still counted
			c1 := insertOne(t, d, "c", "1")
			jobs, tok = claim(t, d, "c")
			wantIDs(t, "claim c1", jobs, c1)
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{c1}})
			revived := insertOne(t, d, "b", "4")
			jobs, tok = claim(t, d, "b")
			wantIDs(t, "claim b4", jobs, revived)
			settle(t, d, driver.SettleParams{Token: tok, Dead: []driver.Failure{{ID: revived, Error: "x"}}})
			jobs, _ = claimWith(t, d, claimer{types: []string{"a"}, limit: 1})
			wantIDs(t, "claim one of a", jobs, a1)
			time.Sleep(200 * time.Millisecond)

			sa := stats(t, d, "a")
			if sa.Pending != 2 || sa.InFlight != 1 || sa.Dead != 0 || sa.DeliveredLastHr != 0 {
				t.Fatalf("stats of a = %+v, want 2 pending, 1 in flight", sa)
			}
			if sa.OldestPending < 150*time.Millisecond || sa.OldestPending > time.Minute {
				t.Fatalf("oldest pending of a = %s, want about 200ms", sa.OldestPending)
			}
			sb := stats(t, d, "b")
			if sb.Pending != 0 || sb.InFlight != 0 || sb.Dead != 1 || sb.DeliveredLastHr != 3 || sb.OldestPending != 0 {
				t.Fatalf("stats of b = %+v, want 1 dead, 3 delivered, nothing pending", sb)
			}
			if sc := stats(t, d, "c"); sc.DeliveredLastHr != 1 || sc.Pending+sc.InFlight+sc.Dead != 0 {
				t.Fatalf("stats of c, whose only row was delivered and deleted = %+v, want 1 delivered", sc)
			}
			all, err := d.Stats(ctxOf(t))
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range all {
				if st.Type != "a" && st.Type != "b" && st.Type != "c" {
					t.Fatalf("stats report a type %q that has no rows or deliveries", st.Type)
				}
			}
		}},
		{"ListMessagesFilters", func(t *testing.T, h *Harness) {
			d := h.Driver
			a1, a2, a3 := insertOne(t, d, "a", "1"), insertOne(t, d, "a", "2"), insertOne(t, d, "a", "3")
			b1, b2 := insertOne(t, d, "b", "1"), insertOne(t, d, "b", "2")
			kill(t, d, "b", b1, b2)
			c1 := insertOne(t, d, "c", "1")
			deliver(t, d, "c", c1)
			cases := []struct {
				name string
				f    driver.ListFilter
				want []int64
			}{
				{"all", driver.ListFilter{}, []int64{a1, a2, a3, b1, b2, c1}},
				{"dead", driver.ListFilter{State: driver.StateDead}, []int64{b1, b2}},
				{"pending", driver.ListFilter{State: driver.StatePending}, []int64{a1, a2, a3}},
				{"delivered", driver.ListFilter{State: driver.StateDelivered}, []int64{c1}},
				{"types", driver.ListFilter{Types: []string{"a", "c"}}, []int64{a1, a2, a3, c1}},
				{"ids", driver.ListFilter{IDs: []int64{a2, b1, 1 << 50}}, []int64{a2, b1}},
				{"after", driver.ListFilter{AfterID: a3}, []int64{b1, b2, c1}},
				{"limit", driver.ListFilter{Limit: 2}, []int64{a1, a2}},
				{"page", driver.ListFilter{AfterID: a2, Limit: 2}, []int64{a3, b1}},
				{"combined", driver.ListFilter{State: driver.StateDead, Types: []string{"a", "b"}, AfterID: b1}, []int64{b2}},
				{"none", driver.ListFilter{Types: []string{"zzz"}}, nil},
			}
			for _, c := range cases {
				jobs, err := d.ListMessages(ctxOf(t), c.f)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				got := make([]int64, len(jobs))
				for i, j := range jobs {
					got[i] = j.ID
				}
				if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
					t.Fatalf("%s: ids %v, want %v in id order", c.name, got, c.want)
				}
			}
			dead := list(t, d, driver.ListFilter{IDs: []int64{b1}})[0]
			if dead.State != driver.StateDead || dead.LastError != "gave up" || dead.Type != "b" || dead.Key != "1" {
				t.Fatalf("listed dead row = %+v", dead)
			}
		}},
		{"ListMessagesPageBound", func(t *testing.T, h *Harness) {
			d := h.Driver
			// One row past the largest page, so that a bound of more than
			// MaxListLimit (or a fallback to the default) shows.
			rows := make([]driver.InsertRow, driver.MaxListLimit+1)
			for i := range rows {
				rows[i] = row(t, "bound", fmt.Sprint(i))
			}
			for part := range slices.Chunk(rows, 1000) {
				insert(t, d, part...)
			}
			cases := []struct {
				limit, want int
			}{
				{0, driver.DefaultListLimit},
				{-1, driver.DefaultListLimit},
				{7, 7},
				{driver.MaxListLimit + 1, driver.MaxListLimit},
			}
			var first int64
			for _, c := range cases {
				jobs, err := d.ListMessages(ctxOf(t), driver.ListFilter{Limit: c.limit})
				if err != nil {
					t.Fatalf("limit %d: %v", c.limit, err)
				}
				if len(jobs) != c.want {
					t.Fatalf("limit %d listed %d rows, want %d", c.limit, len(jobs), c.want)
				}
				if first == 0 {
					first = jobs[0].ID
				}
				if jobs[0].ID != first {
					t.Fatalf("limit %d: first row %d, want %d: a page starts at the lowest id", c.limit, jobs[0].ID, first)
				}
			}
		}},
		{"Revive", func(t *testing.T, h *Harness) {
			d := h.Driver
			x1, x2 := insertOne(t, d, "x", "1"), insertOne(t, d, "x", "2")
			y1 := insertOne(t, d, "y", "1")
			kill(t, d, "x", x1, x2)
			kill(t, d, "y", y1)
			pending := insertOne(t, d, "x", "3")
			delivered := insertOne(t, d, "z", "1")
			deliver(t, d, "z", delivered)
			ctx := ctxOf(t)
			revive := func(p driver.ReviveParams) int {
				n, err := d.Revive(ctx, p)
				if err != nil {
					t.Fatalf("Revive(%+v): %v", p, err)
				}
				return n
			}
			if n := revive(driver.ReviveParams{IDs: []int64{pending, delivered}}); n != 0 {
				t.Fatalf("revive of live rows changed %d", n)
			}
			if n := revive(driver.ReviveParams{}); n != 0 {
				t.Fatalf("revive with no selection changed %d", n)
			}
			if n := revive(driver.ReviveParams{IDs: []int64{x1}}); n != 1 {
				t.Fatalf("revive by id changed %d, want 1", n)
			}
			jobs, _ := claim(t, d, "x")
			wantIDs(t, "revived row is claimable", jobs, x1, pending)
			if n := revive(driver.ReviveParams{Types: []string{"y"}}); n != 1 {
				t.Fatalf("revive by type changed %d, want 1", n)
			}
			if j, _ := byID(t, d, y1); j.State != driver.StatePending {
				t.Fatalf("revived by type: state %s", j.State)
			}
			jobs, _ = claim(t, d, "y")
			wantIDs(t, "revived by type is claimable", jobs, y1)
			if n := revive(driver.ReviveParams{IDs: []int64{x2, pending}, Discard: true}); n != 1 {
				t.Fatalf("discard changed %d, want 1 (only the dead row)", n)
			}
			if _, ok := byID(t, d, x2); ok {
				t.Fatal("discarded row still listed")
			}
			if _, ok := byID(t, d, pending); !ok {
				t.Fatal("discard deleted a pending row")
			}
		}},
	}
}

func (s *suite) migrateTests() []test {
	return []test{
		{"Idempotent", func(t *testing.T, h *Harness) {
			ms, err := h.Driver.MigrationSQL(0)
			if err != nil || len(ms) == 0 {
				t.Fatalf("MigrationSQL(0) = %d migrations, %v", len(ms), err)
			}
			last := ms[len(ms)-1].Version
			for _, d := range []driver.Driver{h.Driver, reopen(t, h)} {
				res, err := d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp})
				if err != nil || len(res.Applied) != 0 || res.From != last || res.To != last {
					t.Fatalf("Migrate on a migrated schema = %+v, %v; want nothing applied at version %d", res, err, last)
				}
				res, err = d.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateCheck})
				if err != nil || res.To != last {
					t.Fatalf("MigrateCheck on a migrated schema = %+v, %v", res, err)
				}
			}
		}},
		{"MigrationSQL", func(t *testing.T, h *Harness) {
			ms, err := h.Driver.MigrationSQL(0)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range ms {
				if m.Version != i+1 || m.Name == "" || len(m.SQL) < 20 {
					t.Fatalf("migration %d = {%d %q %d bytes}, want versions 1..n in order, each named, with SQL", i, m.Version, m.Name, len(m.SQL))
				}
			}
			rest, err := h.Driver.MigrationSQL(1)
			if err != nil || len(rest) != len(ms)-1 || (len(rest) > 0 && rest[0].Version != 2) {
				t.Fatalf("MigrationSQL(1) = %d migrations, %v; want every one after version 1", len(rest), err)
			}
			none, err := h.Driver.MigrationSQL(ms[len(ms)-1].Version)
			if err != nil || len(none) != 0 {
				t.Fatalf("MigrationSQL(latest) = %v, %v; want none", none, err)
			}
		}},
		{"PlainSQLInsertIsAnEnqueue", func(t *testing.T, h *Harness) {
			if h.Exec == nil || h.Table == nil {
				t.Fatal("drivertest: harness has no Exec or Table")
			}
			own(t, h.Driver, "plain.sql")
			// What an app in another language runs.
			if err := h.Exec(ctxOf(t), `INSERT INTO `+h.Table("outbox")+` (type, key, payload) VALUES ('plain.sql', 'k1', '{"a":1}')`); err != nil {
				t.Fatalf("plain SQL enqueue: %v", err)
			}
			jobs, tok := claim(t, h.Driver, "plain.sql")
			if len(jobs) != 1 {
				t.Fatalf("claimed %d plain-SQL rows, want 1", len(jobs))
			}
			j := jobs[0]
			if j.Key != "k1" || j.Attempt != 1 || j.MessageID == [16]byte{} || !jsonEqual(t, j.Payload, []byte(`{"a":1}`)) {
				t.Fatalf("plain-SQL row = %+v, want key k1, attempt 1, a message id and payload {\"a\":1}", j)
			}
			near(t, "plain-SQL CreatedAt", j.CreatedAt)
			if hm := headerMap(t, j.Headers); len(hm) != 0 {
				t.Fatalf("plain-SQL headers = %v, want none", hm)
			}
			if n := settle(t, h.Driver, driver.SettleParams{Token: tok, Delivered: []int64{j.ID}, KeepDelivered: true}); n != 1 {
				t.Fatalf("settle of a plain-SQL row: %d", n)
			}
			// A second one gets its own message id.
			if err := h.Exec(ctxOf(t), `INSERT INTO `+h.Table("outbox")+` (type, key, payload) VALUES ('plain.sql', 'k1', '{"a":2}')`); err != nil {
				t.Fatal(err)
			}
			rows := list(t, h.Driver, driver.ListFilter{Types: []string{"plain.sql"}})
			if len(rows) != 2 || rows[0].MessageID == rows[1].MessageID {
				t.Fatalf("two plain-SQL rows share a message id: %+v", rows)
			}
		}},
		{"FreshSchema", func(t *testing.T, h *Harness) {
			if h.Unmigrated == nil {
				t.Skip("harness has no Unmigrated hook")
			}
			fresh := h.Unmigrated(t)
			a, b := fresh.Driver, reopen(t, fresh)
			res, err := a.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateCheck})
			if !errors.Is(err, driver.ErrSchemaBehind) {
				t.Fatalf("MigrateCheck on a fresh schema = %+v, %v; want an error wrapping ErrSchemaBehind", res, err)
			}
			if res.From != 0 {
				t.Fatalf("fresh schema From = %d, want 0", res.From)
			}
			ms, err := a.MigrationSQL(0)
			if err != nil {
				t.Fatal(err)
			}
			// Two apps start at once: both succeed, the migrations run once.
			var wg sync.WaitGroup
			results := make([]driver.MigrateResult, 2)
			errs := make([]error, 2)
			start := make(chan struct{})
			for i, d := range []driver.Driver{a, b} {
				wg.Go(func() {
					<-start
					results[i], errs[i] = d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp})
				})
			}
			close(start)
			wg.Wait()
			var applied []int
			for i := range 2 {
				if errs[i] != nil {
					t.Fatalf("concurrent Migrate %d: %v", i, errs[i])
				}
				if results[i].To != len(ms) {
					t.Fatalf("concurrent Migrate %d ended at %d, want %d", i, results[i].To, len(ms))
				}
				applied = append(applied, results[i].Applied...)
			}
			slices.Sort(applied)
			if len(applied) != len(ms) || applied[0] != 1 || applied[len(applied)-1] != len(ms) {
				t.Fatalf("migrations applied across both: %v, want each of 1..%d once", applied, len(ms))
			}
			if _, err := b.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateCheck}); err != nil {
				t.Fatalf("MigrateCheck after migrating: %v", err)
			}
			insertOne(t, a, "t", "k")
		}},
	}
}
