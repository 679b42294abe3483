package drivertest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

func (s *suite) insertTests() []test {
	return []test{
		{"CommitVisible", func(t *testing.T, h *Harness) {
			d := h.Driver
			r := driver.InsertRow{MessageID: newID(t), Type: "order.created", Key: "order-1", Payload: []byte(`{"id":1}`),
				Headers: []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x-request-id":"req-1"}`)}
			insert(t, d, r)
			j := byMessageID(t, d, r.MessageID)
			if j.ID <= 0 || j.Type != r.Type || j.Key != r.Key || string(j.Payload) != string(r.Payload) {
				t.Fatalf("row = %+v, want %+v", j, r)
			}
			if j.State != driver.StatePending || j.Attempt != 0 || j.DeliveredAt != nil || j.LastError != "" {
				t.Fatalf("new row: state %q attempt %d delivered %v error %q, want pending, 0, nil, empty", j.State, j.Attempt, j.DeliveredAt, j.LastError)
			}
			near(t, "CreatedAt", j.CreatedAt)
			near(t, "AvailableAt", j.AvailableAt)
			hm := headerMap(t, j.Headers)
			if len(hm) != 2 || hm["x-request-id"] != "req-1" || hm["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" {
				t.Fatalf("headers = %v", hm)
			}
			// A second driver, as another process, sees the committed row.
			if got := byMessageID(t, reopen(t, h), r.MessageID); got.ID != j.ID {
				t.Fatalf("other driver sees id %d, want %d", got.ID, j.ID)
			}
		}},
		{"PayloadBytesExact", func(t *testing.T, h *Harness) {
			d := h.Driver
			payloads := []string{
				`{"a":1}`,
				`{ "b" : [1, 2.50, 3e2, -0.0] ,	"a":"x" }`,
				`{"s":"ção ✓ \u00e9 \"q\" \\ / 😀","z":null,"t":true}`,
				`[1,"two",null,false]`,
				`"just a string"`,
				"{\n  \"pretty\": {\n    \"nested\": [ ]\n  }\n}",
				`{"big":"` + strings.Repeat("x", 1<<20) + `"}`,
			}
			want := map[[16]byte]string{}
			var rows []driver.InsertRow
			for i, p := range payloads {
				r := row(t, "payload", "k"+string(rune('a'+i)))
				r.Payload = []byte(p)
				want[r.MessageID] = p
				rows = append(rows, r)
			}
			insert(t, d, rows...)
			for _, j := range list(t, d, driver.ListFilter{}) {
				if !bytes.Equal(j.Payload, []byte(want[j.MessageID])) {
					t.Fatalf("listed payload of %s:\n got %.200q\nwant %.200q", j.Key, j.Payload, want[j.MessageID])
				}
			}
			jobs, _ := claim(t, d, "payload")
			if len(jobs) != len(payloads) {
				t.Fatalf("claimed %d, want %d", len(jobs), len(payloads))
			}
			for _, j := range jobs {
				if !bytes.Equal(j.Payload, []byte(want[j.MessageID])) {
					t.Fatalf("claimed payload of %s:\n got %.200q\nwant %.200q", j.Key, j.Payload, want[j.MessageID])
				}
			}
		}},
		{"NilHeaders", func(t *testing.T, h *Harness) {
			r := row(t, "t", "k")
			insert(t, h.Driver, r)
			if hm := headerMap(t, byMessageID(t, h.Driver, r.MessageID).Headers); len(hm) != 0 {
				t.Fatalf("nil headers came back as %v", hm)
			}
		}},
		{"EmptyCallWritesNothing", func(t *testing.T, h *Harness) {
			if err := h.Driver.Insert(ctxOf(t), driver.InsertParams{}); err != nil {
				t.Fatalf("Insert of no rows: %v", err)
			}
			if n := len(list(t, h.Driver, driver.ListFilter{})); n != 0 {
				t.Fatalf("%d rows after an empty insert", n)
			}
		}},
		{"ManyRowsOneCall", func(t *testing.T, h *Harness) {
			d := h.Driver
			var rows []driver.InsertRow
			for i := range 1200 {
				rows = append(rows, row(t, "bulk", "k"+uuid.NewString()[:8]+string(rune('a'+i%26))))
			}
			insert(t, d, rows...)
			got := list(t, d, driver.ListFilter{Types: []string{"bulk"}, Limit: 2000})
			if len(got) != len(rows) {
				t.Fatalf("%d rows visible, want %d", len(got), len(rows))
			}
			// Insertion order is id order.
			for i, j := range got {
				if j.MessageID != rows[i].MessageID {
					t.Fatalf("row %d is %s, want %s: ids must follow insertion order", i, uuid.UUID(j.MessageID), uuid.UUID(rows[i].MessageID))
				}
			}
		}},
		{"ManyRowsAllOrNothing", func(t *testing.T, h *Harness) {
			d := h.Driver
			var rows []driver.InsertRow
			for range 300 {
				rows = append(rows, row(t, "bulk", "k"))
			}
			rows = append(rows, rows[0]) // a duplicate message id fails the call
			own(t, d, "bulk")
			if err := d.Insert(ctxOf(t), driver.InsertParams{Rows: rows}); err == nil {
				t.Fatal("Insert with a duplicate message id succeeded")
			}
			if n := len(list(t, d, driver.ListFilter{})); n != 0 {
				t.Fatalf("%d rows written by a failed Insert, want none", n)
			}
		}},
		{"TxCommit", func(t *testing.T, h *Harness) {
			d := h.Driver
			ctx := ctxOf(t)
			own(t, d, "t") // before the caller's transaction holds SQLite's write lock
			tx, commit, rollback, err := h.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rollback() }()
			r1, r2 := row(t, "t", "a"), row(t, "t", "b")
			if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: []driver.InsertRow{r1, r2}}); err != nil {
				t.Fatalf("InsertTx: %v", err)
			}
			if n := len(list(t, d, driver.ListFilter{})); n != 0 {
				t.Fatalf("%d rows visible before the caller committed", n)
			}
			// No Claim here: on SQLite the caller's open write transaction
			// holds the single write lock, so a claim would wait for it.
			if err := commit(); err != nil {
				t.Fatal(err)
			}
			byMessageID(t, d, r1.MessageID)
			byMessageID(t, d, r2.MessageID)
		}},
		{"TxRollback", func(t *testing.T, h *Harness) {
			d := h.Driver
			ctx := ctxOf(t)
			own(t, d, "t")
			tx, _, rollback, err := h.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: []driver.InsertRow{row(t, "t", "a")}, Notify: true}); err != nil {
				t.Fatalf("InsertTx: %v", err)
			}
			if err := rollback(); err != nil {
				t.Fatal(err)
			}
			if n := len(list(t, d, driver.ListFilter{})); n != 0 {
				t.Fatalf("%d rows after the caller rolled back, want none", n)
			}
			if jobs, _ := claim(t, d, "t"); len(jobs) != 0 {
				t.Fatalf("claimed %d rolled-back rows", len(jobs))
			}
		}},
		{"TxWrongType", func(t *testing.T, h *Harness) {
			d := h.Driver
			for _, bad := range []any{nil, "a string", 42, struct{}{}} {
				err := d.InsertTx(ctxOf(t), bad, driver.InsertParams{Rows: []driver.InsertRow{row(t, "t", "k")}})
				var te *driver.TxTypeError
				if !errors.As(err, &te) {
					t.Fatalf("InsertTx(%T) = %v, want a *driver.TxTypeError", bad, err)
				}
				if te.Driver == "" || len(te.Want) == 0 || te.Error() == "" {
					t.Fatalf("TxTypeError %+v must name the driver and the accepted types", te)
				}
			}
			if n := len(list(t, d, driver.ListFilter{})); n != 0 {
				t.Fatalf("%d rows written with a wrong transaction type", n)
			}
		}},
		{"TxFailureWritesNothing", func(t *testing.T, h *Harness) {
			d := h.Driver
			ctx := ctxOf(t)
			own(t, d, "t") // before the caller's transaction holds SQLite's write lock
			tx, commit, rollback, err := h.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rollback() }()
			// Enough rows that a driver writing in chunks has written some
			// before the duplicate at the end fails.
			var bad []driver.InsertRow
			for range 450 {
				bad = append(bad, row(t, "t", "x"))
			}
			bad = append(bad, bad[0])
			if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: bad}); err == nil {
				t.Fatal("InsertTx with a duplicate message id succeeded")
			}
			// The caller commits anyway. A backend may have left the
			// transaction usable (SQLite, through a savepoint) or aborted
			// (PostgreSQL, whose commit then fails); either way no row of
			// the failed call may land.
			_ = commit()
			if got := list(t, d, driver.ListFilter{}); len(got) != 0 {
				t.Fatalf("%d rows of a failed InsertTx were committed", len(got))
			}
		}},
	}
}

func (s *suite) claimTests() []test {
	return []test{
		{"OnlyItsTypes", func(t *testing.T, h *Harness) {
			d := h.Driver
			a, b := insertOne(t, d, "a", "1"), insertOne(t, d, "b", "1")
			c1, c2 := insertOne(t, d, "c", "1"), insertOne(t, d, "c", "2")
			jobs, _ := claim(t, d, "a", "b")
			wantIDs(t, "claim a,b", jobs, a, b)
			// The other app's rows are untouched...
			for _, id := range []int64{c1, c2} {
				if j, _ := byID(t, d, id); j.Attempt != 0 || j.State != driver.StatePending {
					t.Fatalf("row of type c was touched: %+v", j)
				}
			}
			// ...and its owner, another process, claims them.
			other := reopen(t, h)
			jobs, _ = claim(t, other, "c")
			wantIDs(t, "owner of c", jobs, c1, c2)
			if jobs, _ = claim(t, d, "a", "b", "c"); len(jobs) != 0 {
				t.Fatalf("leased rows claimed again: %v", ids(jobs))
			}
		}},
		{"NoTypesClaimsNothing", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := insertOne(t, d, "a", "1")
			for _, types := range [][]string{nil, {}} {
				if jobs, _ := claimWith(t, d, claimer{types: types}); len(jobs) != 0 {
					t.Fatalf("claim with types %v returned %v", types, ids(jobs))
				}
			}
			if jobs, _ := claim(t, d, "zzz"); len(jobs) != 0 {
				t.Fatalf("claim of an unknown type returned %v", ids(jobs))
			}
			if j, _ := byID(t, d, id); j.Attempt != 0 {
				t.Fatalf("row touched by empty claims: attempt %d", j.Attempt)
			}
		}},
		{"LimitOldestFirst", func(t *testing.T, h *Harness) {
			d := h.Driver
			var want []int64
			for i := range 5 {
				want = append(want, insertOne(t, d, "a", string(rune('a'+i))))
			}
			for i, n := range []int{2, 2, 1, 0} {
				jobs, _ := claimWith(t, d, claimer{types: []string{"a"}, limit: 2})
				if len(jobs) != n {
					t.Fatalf("claim %d returned %d rows, want %d", i, len(jobs), n)
				}
				wantIDs(t, "oldest first", jobs, want[:n]...)
				want = want[n:]
			}
		}},
		{"AttemptAndLeaseExpiry", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := insertOne(t, d, "a", "1")
			other := reopen(t, h)
			start := time.Now()
			jobs, tok1 := claimWith(t, d, claimer{types: []string{"a"}, lease: shortLease})
			wantIDs(t, "first claim", jobs, id)
			if jobs[0].Attempt != 1 {
				t.Fatalf("first claim attempt = %d, want 1", jobs[0].Attempt)
			}
			near(t, "claimed CreatedAt", jobs[0].CreatedAt)
			// Another relay gets the row only once the lease passed, under a
			// new token.
			jobs, tok2 := claimNotYet(t, other, claimer{types: []string{"a"}, lease: longLease}, start, shortLease, "a leased row")
			wantIDs(t, "after the lease", jobs, id)
			if jobs[0].Attempt != 2 {
				t.Fatalf("second claim attempt = %d, want 2", jobs[0].Attempt)
			}
			if n := settle(t, d, driver.SettleParams{Token: tok1, Delivered: []int64{id}}); n != 0 {
				t.Fatalf("the first, expired token settled %d rows", n)
			}
			if n := settle(t, d, driver.SettleParams{Token: tok2, Delivered: []int64{id}}); n != 1 {
				t.Fatalf("the current token settled %d rows, want 1", n)
			}
		}},
		{"ConcurrentClaimersNeverShare", func(t *testing.T, h *Harness) {
			d := h.Driver
			var rows []driver.InsertRow
			for range 400 {
				rows = append(rows, row(t, "a", uuid.NewString()))
			}
			insert(t, d, rows...)
			drivers := []driver.Driver{d, reopen(t, h)}
			ctx := ctxOf(t)
			var mu sync.Mutex
			seen := map[int64]int{}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Go(func() {
					dd := drivers[w%2]
					// Bounded, so a driver that hands rows out twice fails
					// instead of spinning.
					for range len(rows) {
						jobs, err := dd.Claim(ctx, driver.ClaimParams{Types: []string{"a"}, Limit: 7, Lease: longLease, Token: int64(w + 1)})
						if err != nil {
							errs <- err
							return
						}
						if len(jobs) == 0 {
							return
						}
						mu.Lock()
						for _, j := range jobs {
							seen[j.ID]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("concurrent Claim: %v", err)
			}
			if len(seen) != len(rows) {
				t.Fatalf("claimed %d distinct rows, want %d", len(seen), len(rows))
			}
			for id, n := range seen {
				if n != 1 {
					t.Fatalf("row %d claimed %d times", id, n)
				}
			}
		}},
		{"Fence", func(t *testing.T, h *Harness) {
			d, other := h.Driver, reopen(t, h)
			ctx := ctxOf(t)
			insertOne(t, d, "a", "1")
			e1, err := d.Elector("fenced-app", longLease)
			if err != nil {
				t.Fatal(err)
			}
			epoch1, ok, err := e1.Acquire(ctx)
			if err != nil || !ok {
				t.Fatalf("Acquire = %d, %v, %v", epoch1, ok, err)
			}
			jobs, tok := claimWith(t, d, claimer{types: []string{"a"}, fence: &driver.Fence{App: "fenced-app", Epoch: epoch1}})
			if len(jobs) != 1 {
				t.Fatalf("the leader's fenced claim returned %d rows, want 1", len(jobs))
			}
			settle(t, d, driver.SettleParams{Token: tok, Release: ids(jobs)})
			// Leadership moves to another process.
			if err := e1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			e2, err := other.Elector("fenced-app", longLease)
			if err != nil {
				t.Fatal(err)
			}
			epoch2, ok, err := e2.Acquire(ctx)
			if err != nil || !ok || epoch2 <= epoch1 {
				t.Fatalf("new leader Acquire = %d, %v, %v; want leader with epoch > %d", epoch2, ok, err, epoch1)
			}
			if jobs, _ := claimWith(t, d, claimer{types: []string{"a"}, fence: &driver.Fence{App: "fenced-app", Epoch: epoch1}}); len(jobs) != 0 {
				t.Fatalf("a deposed leader (epoch %d, current %d) claimed %v", epoch1, epoch2, ids(jobs))
			}
			if j := list(t, d, driver.ListFilter{}); j[0].Attempt != 0 {
				t.Fatalf("a fenced-off claim touched the row: attempt %d", j[0].Attempt)
			}
			jobs, _ = claimWith(t, other, claimer{types: []string{"a"}, fence: &driver.Fence{App: "fenced-app", Epoch: epoch2}})
			if len(jobs) != 1 {
				t.Fatalf("the new leader's fenced claim returned %d rows, want 1", len(jobs))
			}
		}},
	}
}

func (s *suite) orderedTests() []test {
	ord := func(lease time.Duration) claimer {
		return claimer{types: []string{"o", "u"}, ordered: []string{"o"}, lease: lease}
	}
	return []test{
		{"OneHeadPerKey", func(t *testing.T, h *Harness) {
			d := h.Driver
			m1, m2, m3 := insertOne(t, d, "o", "k1"), insertOne(t, d, "o", "k1"), insertOne(t, d, "o", "k1")
			n1 := insertOne(t, d, "o", "k2")
			u1, u2 := insertOne(t, d, "u", "k1"), insertOne(t, d, "u", "k1")
			jobs, tok := claimWith(t, d, ord(longLease))
			// Unordered types flow freely, even within one key.
			wantIDs(t, "first ordered claim", jobs, m1, n1, u1, u2)
			if jobs2, _ := claimWith(t, reopen(t, h), ord(longLease)); len(jobs2) != 0 {
				t.Fatalf("the next of a key whose head is in flight was claimed: %v", ids(jobs2))
			}
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{m1, n1, u1, u2}})
			jobs, tok = claimWith(t, d, ord(longLease))
			wantIDs(t, "after the head was delivered", jobs, m2)
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{m2}})
			jobs, _ = claimWith(t, d, ord(longLease))
			wantIDs(t, "last of the key", jobs, m3)
		}},
		{"RetryBlocksOnlyItsKey", func(t *testing.T, h *Harness) {
			d := h.Driver
			m1, m2 := insertOne(t, d, "o", "k1"), insertOne(t, d, "o", "k1")
			jobs, tok := claimWith(t, d, ord(longLease))
			wantIDs(t, "head", jobs, m1)
			delay := 400 * time.Millisecond
			start := time.Now()
			if n := settle(t, d, driver.SettleParams{Token: tok, Retry: []driver.Retry{{ID: m1, Delay: delay, Error: "down"}}}); n != 1 {
				t.Fatalf("retry settled %d", n)
			}
			// m1 waits for its retry and still holds its key; other keys flow.
			n1 := insertOne(t, d, "o", "k2")
			jobs, tok2 := claimWith(t, d, ord(longLease))
			wantIDs(t, "while k1 waits for a retry", jobs, n1)
			settle(t, d, driver.SettleParams{Token: tok2, Delivered: []int64{n1}})
			jobs, tok = claimNotYet(t, d, ord(longLease), start, delay, "k1 while its head waits for a retry")
			wantIDs(t, "the retried head comes first", jobs, m1)
			if jobs[0].Attempt != 2 {
				t.Fatalf("retried head attempt %d, want 2", jobs[0].Attempt)
			}
			settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{m1}})
			jobs, _ = claimWith(t, d, ord(longLease))
			wantIDs(t, "then the next of k1", jobs, m2)
		}},
		{"DeadDoesNotBlock", func(t *testing.T, h *Harness) {
			d := h.Driver
			m1, m2 := insertOne(t, d, "o", "k1"), insertOne(t, d, "o", "k1")
			jobs, tok := claimWith(t, d, ord(longLease))
			wantIDs(t, "head", jobs, m1)
			settle(t, d, driver.SettleParams{Token: tok, Dead: []driver.Failure{{ID: m1, Error: "bad"}}})
			jobs, _ = claimWith(t, d, ord(longLease))
			wantIDs(t, "after the head died", jobs, m2)
		}},
		{"ExpiredLeaseKeepsOrder", func(t *testing.T, h *Harness) {
			d := h.Driver
			m1, m2 := insertOne(t, d, "o", "k1"), insertOne(t, d, "o", "k1")
			start := time.Now()
			jobs, _ := claimWith(t, d, ord(shortLease))
			wantIDs(t, "head", jobs, m1)
			// A crashed relay: the head comes back, never the second first.
			jobs, _ = claimEventually(t, d, ord(longLease), start, shortLease)
			wantIDs(t, "after the lease", jobs, m1)
			_ = m2
		}},
	}
}

func (s *suite) settleTests() []test {
	claimOne := func(t *testing.T, d driver.Driver, lease time.Duration) (int64, int64) {
		id := insertOne(t, d, "s", "k")
		jobs, tok := claimWith(t, d, claimer{types: []string{"s"}, lease: lease})
		wantIDs(t, "claim", jobs, id)
		return id, tok
	}
	// claimN inserts n rows of type s, each of its own key, and claims
	// them all.
	claimN := func(t *testing.T, d driver.Driver, n int) ([]int64, int64) {
		var ids []int64
		for k := range n {
			ids = append(ids, insertOne(t, d, "s", fmt.Sprint(k)))
		}
		jobs, tok := claim(t, d, "s")
		wantIDs(t, "claim", jobs, ids...)
		return ids, tok
	}
	return []test{
		{"DeliveredDeletes", func(t *testing.T, h *Harness) {
			d := h.Driver
			id, tok := claimOne(t, d, longLease)
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}}); n != 1 {
				t.Fatalf("settled %d, want 1", n)
			}
			if j, ok := byID(t, d, id); ok {
				t.Fatalf("a delivered row without KeepDelivered is still there: %+v", j)
			}
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}}); n != 0 {
				t.Fatalf("settling a settled row again changed %d", n)
			}
			if jobs, _ := claim(t, d, "s"); len(jobs) != 0 {
				t.Fatal("a delivered row was claimed")
			}
			if st := stats(t, d, "s"); st.DeliveredLastHr != 1 || st.Pending != 0 {
				t.Fatalf("stats after a deleted delivery = %+v, want it counted as delivered", st)
			}
		}},
		{"DeliveredKept", func(t *testing.T, h *Harness) {
			d := h.Driver
			id, tok := claimOne(t, d, longLease)
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}, KeepDelivered: true}); n != 1 {
				t.Fatalf("settled %d, want 1", n)
			}
			j, ok := byID(t, d, id)
			if !ok || j.State != driver.StateDelivered || j.DeliveredAt == nil {
				t.Fatalf("after delivered and kept: %+v (found %v)", j, ok)
			}
			near(t, "DeliveredAt", *j.DeliveredAt)
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}, KeepDelivered: true}); n != 0 {
				t.Fatalf("settling a settled row again changed %d", n)
			}
			if jobs, _ := claim(t, d, "s"); len(jobs) != 0 {
				t.Fatal("a delivered row was claimed")
			}
			if st := stats(t, d, "s"); st.DeliveredLastHr != 1 {
				t.Fatalf("stats after a kept delivery = %+v, want 1 delivered", st)
			}
		}},
		{"WrongToken", func(t *testing.T, h *Harness) {
			d := h.Driver
			id, tok := claimOne(t, d, longLease)
			n := settle(t, d, driver.SettleParams{Token: tok + 1, Delivered: []int64{id},
				Retry: []driver.Retry{{ID: id, Delay: time.Second, Error: "x"}}, Dead: []driver.Failure{{ID: id, Error: "x"}}, Release: []int64{id}})
			if n != 0 {
				t.Fatalf("a wrong token changed %d rows", n)
			}
			if j, _ := byID(t, d, id); j.State != driver.StatePending || j.LastError != "" || j.Attempt != 1 {
				t.Fatalf("row changed by a wrong token: %+v", j)
			}
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}}); n != 1 {
				t.Fatalf("the right token settled %d, want 1", n)
			}
		}},
		{"ExpiredLease", func(t *testing.T, h *Harness) {
			d := h.Driver
			start := time.Now()
			id, tok := claimOne(t, d, shortLease)
			time.Sleep(shortLease + 100*time.Millisecond)
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}}); n != 0 {
				t.Fatalf("an expired lease settled %d rows", n)
			}
			if j, _ := byID(t, d, id); j.State != driver.StatePending {
				t.Fatalf("expired settle changed the state to %s", j.State)
			}
			jobs, _ := claimEventually(t, d, claimer{types: []string{"s"}}, start, shortLease)
			wantIDs(t, "reclaimed", jobs, id)
		}},
		{"Retry", func(t *testing.T, h *Harness) {
			d := h.Driver
			id, tok := claimOne(t, d, longLease)
			delay := 400 * time.Millisecond
			start := time.Now()
			if n := settle(t, d, driver.SettleParams{Token: tok, Retry: []driver.Retry{{ID: id, Delay: delay, Error: "503 from peer"}}}); n != 1 {
				t.Fatalf("retry settled %d, want 1", n)
			}
			j, _ := byID(t, d, id)
			if j.State != driver.StatePending || j.LastError != "503 from peer" {
				t.Fatalf("after retry: state %s error %q", j.State, j.LastError)
			}
			if st := stats(t, d, "s"); st.Pending != 1 || st.InFlight != 0 {
				t.Fatalf("stats of a row waiting to retry: %+v, want pending 1, in flight 0", st)
			}
			jobs, tok := claimNotYet(t, d, claimer{types: []string{"s"}}, start, delay, "a row waiting for its retry")
			if jobs[0].Attempt != 2 {
				t.Fatalf("retried attempt %d, want 2", jobs[0].Attempt)
			}
			if n := settle(t, d, driver.SettleParams{Token: tok, Delivered: []int64{id}}); n != 1 {
				t.Fatalf("delivered after retry settled %d", n)
			}
		}},
		{"Dead", func(t *testing.T, h *Harness) {
			d := h.Driver
			id, tok := claimOne(t, d, longLease)
			if n := settle(t, d, driver.SettleParams{Token: tok, Dead: []driver.Failure{{ID: id, Error: "permanent: 400 bad request"}}}); n != 1 {
				t.Fatalf("dead settled %d, want 1", n)
			}
			j, _ := byID(t, d, id)
			if j.State != driver.StateDead || j.LastError != "permanent: 400 bad request" || j.DeliveredAt != nil {
				t.Fatalf("after dead: %+v", j)
			}
			if jobs, _ := claim(t, d, "s"); len(jobs) != 0 {
				t.Fatal("a dead row was claimed")
			}
		}},
		{"UncountedRetry", func(t *testing.T, h *Harness) {
			// A destination's failure: scheduled like a retry, with its
			// error and route, but the attempt is taken back, beside a
			// counted retry in the same settle.
			d := h.Driver
			a, b := insertOne(t, d, "s", "a"), insertOne(t, d, "s", "b")
			jobs, tok := claim(t, d, "s")
			wantIDs(t, "claim", jobs, a, b)
			delay := 400 * time.Millisecond
			start := time.Now()
			n := settle(t, d, driver.SettleParams{Token: tok, Retry: []driver.Retry{
				{ID: a, Delay: delay, Error: "http 503", Route: "app → dest", Uncounted: true},
				{ID: b, Delay: delay, Error: "http 500", Route: "app → dest"},
			}})
			if n != 2 {
				t.Fatalf("settled %d, want 2", n)
			}
			ja, _ := byID(t, d, a)
			if ja.State != driver.StatePending || ja.Attempt != 0 || ja.LastError != "http 503" || ja.LastRoute != "app → dest" {
				t.Fatalf("after an uncounted retry: %+v, want pending, attempt 0, its error and route", ja)
			}
			if jb, _ := byID(t, d, b); jb.Attempt != 1 {
				t.Fatalf("the counted retry beside it has attempt %d, want 1", jb.Attempt)
			}
			jobs, _ = claimNotYet(t, d, claimer{types: []string{"s"}}, start, delay, "a row waiting for its uncounted retry")
			for _, j := range jobs {
				want := 2
				if j.ID == a {
					want = 1
				}
				if j.Attempt != want {
					t.Fatalf("row %d claimed again with attempt %d, want %d", j.ID, j.Attempt, want)
				}
			}
		}},
		{"ReleaseDoesNotCount", func(t *testing.T, h *Harness) {
			d := h.Driver
			id, tok := claimOne(t, d, longLease)
			if n := settle(t, d, driver.SettleParams{Token: tok, Release: []int64{id}}); n != 1 {
				t.Fatalf("release settled %d, want 1", n)
			}
			jobs, _ := claim(t, reopen(t, h), "s")
			wantIDs(t, "released row, claimed at once", jobs, id)
			if jobs[0].Attempt != 1 {
				t.Fatalf("attempt after release and reclaim = %d, want 1 (a release is not an attempt)", jobs[0].Attempt)
			}
		}},
		{"MixedBatch", func(t *testing.T, h *Harness) {
			d := h.Driver
			var want []int64
			for _, k := range []string{"a", "b", "c", "d"} {
				want = append(want, insertOne(t, d, "s", k))
			}
			jobs, tok := claim(t, d, "s")
			wantIDs(t, "claim", jobs, want...)
			n := settle(t, d, driver.SettleParams{Token: tok, Delivered: want[:1], Retry: []driver.Retry{{ID: want[1], Delay: time.Hour, Error: "r"}},
				Dead: []driver.Failure{{ID: want[2], Error: "d"}}, Release: want[3:]})
			if n != 4 {
				t.Fatalf("mixed settle changed %d, want 4", n)
			}
			states := map[int64]driver.State{}
			for _, j := range list(t, d, driver.ListFilter{}) {
				states[j.ID] = j.State
			}
			if _, kept := states[want[0]]; kept || states[want[1]] != driver.StatePending || states[want[2]] != driver.StateDead || states[want[3]] != driver.StatePending {
				t.Fatalf("states after mixed settle: %v", states)
			}
			jobs, _ = claim(t, d, "s")
			wantIDs(t, "only the released row is claimable", jobs, want[3])
		}},
		{"FailuresEachTheirOwn", func(t *testing.T, h *Harness) {
			// Several rows of each failed outcome in one settle: each row
			// keeps its own error, route, time and count, however the
			// driver batches them.
			d := h.Driver
			id, tok := claimN(t, d, 7)
			n := settle(t, d, driver.SettleParams{Token: tok,
				Retry: []driver.Retry{
					{ID: id[0], Delay: time.Hour, Error: "r0 é🙂", Route: "app → a"},
					{ID: id[1], Error: "r1", Uncounted: true},
					{ID: id[2], Delay: time.Hour, Error: "r2", Route: "app → c", Uncounted: true},
				},
				Dead:    []driver.Failure{{ID: id[3], Error: "d3", Route: "app → d"}, {ID: id[4], Error: "d4 ✓"}},
				InDoubt: []driver.Doubt{{ID: id[5], Error: "u5", Route: "app → f", ProbeAfter: time.Hour}, {ID: id[6], Error: "u6"}},
			})
			if n != 7 {
				t.Fatalf("settle changed %d, want 7", n)
			}
			type want struct {
				state        driver.State
				attempt      int
				error, route string
			}
			wants := []want{
				{driver.StatePending, 1, "r0 é🙂", "app → a"},
				{driver.StatePending, 0, "r1", ""},
				{driver.StatePending, 0, "r2", "app → c"},
				{driver.StateDead, 1, "d3", "app → d"},
				{driver.StateDead, 1, "d4 ✓", ""},
				{driver.StateInDoubt, 1, "u5", "app → f"},
				{driver.StateInDoubt, 1, "u6", ""},
			}
			for i, w := range wants {
				j, ok := byID(t, d, id[i])
				if !ok {
					t.Fatalf("row %d gone", i)
				}
				if got := (want{j.State, j.Attempt, j.LastError, j.LastRoute}); got != w {
					t.Fatalf("row %d: %+v, want %+v", i, got, w)
				}
			}
			jobs, _ := claim(t, d, "s")
			wantIDs(t, "only the retry without a delay is claimable", jobs, id[1])
		}},
		{"ListedTwiceTakesTheFirst", func(t *testing.T, h *Harness) {
			// A row in two outcomes takes the first in the order of
			// SettleParams.IDs: delivered, retry, dead, in doubt, release.
			d := h.Driver
			id, tok := claimN(t, d, 3)
			n := settle(t, d, driver.SettleParams{Token: tok, KeepDelivered: true,
				Delivered: id[:1],
				Retry:     []driver.Retry{{ID: id[1], Delay: time.Hour, Error: "retry"}, {ID: id[0], Error: "retry"}},
				Dead:      []driver.Failure{{ID: id[2], Error: "dead"}, {ID: id[1], Error: "dead"}},
				InDoubt:   []driver.Doubt{{ID: id[2], Error: "doubt"}},
				Release:   id,
			})
			if n != 3 {
				t.Fatalf("settle changed %d, want 3", n)
			}
			for i, w := range []struct {
				state driver.State
				error string
			}{{driver.StateDelivered, ""}, {driver.StatePending, "retry"}, {driver.StateDead, "dead"}} {
				if j, _ := byID(t, d, id[i]); j.State != w.state || j.LastError != w.error {
					t.Fatalf("row %d: %s %q, want %s %q", i, j.State, j.LastError, w.state, w.error)
				}
			}
			jobs, _ := claim(t, d, "s")
			wantIDs(t, "the retried row waits its delay, not released", jobs)
		}},
	}
}
