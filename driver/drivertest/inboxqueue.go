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

// The inbox queue (driver.InboxQueueTx): a receiver stores each accepted
// delivery with its dedup record in one transaction; an app claims rows in
// its own transaction, applies them and marks them applied, failed or dead.
// Each row is applied once, whatever the number of appliers.

// queueTx is tx as an inbox queue transaction, or the test is skipped for a
// backend without the queue.
func queueTx(t *testing.T, tx driver.Tx) driver.InboxQueueTx {
	t.Helper()
	q, ok := tx.(driver.InboxQueueTx)
	if !ok {
		t.Skipf("drivertest: %T has no inbox queue", tx)
	}
	return q
}

// store lands one delivery as the receiver does: its dedup record, then its
// row, in one transaction; it returns the row's id (0 for a duplicate).
func store(t *testing.T, d driver.Driver, consumer, key string) int64 {
	t.Helper()
	var id int64
	err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
		r, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: consumer, Key: key, MessageID: newID(t)})
		if err != nil || r.Duplicate {
			return err
		}
		id, err = queueTx(t, tx).QueueInbox(ctx, driver.QueuedDelivery{
			Consumer: consumer, Type: "order.created", Key: key, MessageID: newID(t),
			Payload: []byte(`{"key":"` + key + `"}`), CreatedAt: time.Now().Add(-time.Second),
		})
		return err
	})
	if err != nil {
		t.Fatalf("store %s/%s: %v", consumer, key, err)
	}
	return id
}

// claimIn claims in a transaction of its own and runs fn on the rows before
// it commits (fn's error rolls it back).
func claimIn(t *testing.T, d driver.Driver, consumer string, n int, fn func(ctx context.Context, q driver.InboxQueueTx, rows []driver.InboxRow) error) error {
	t.Helper()
	return inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
		q := queueTx(t, tx)
		rows, err := q.ClaimInbox(ctx, consumer, n)
		if err != nil {
			return err
		}
		return fn(ctx, q, rows)
	})
}

// pendingIDs claims (and releases) the due pending rows of consumer.
func pendingIDs(t *testing.T, d driver.Driver, consumer string) []int64 {
	t.Helper()
	var out []int64
	err := claimIn(t, d, consumer, 1000, func(_ context.Context, _ driver.InboxQueueTx, rows []driver.InboxRow) error {
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return out
}

// mark runs one protocol mark on row id in a transaction of its own.
func mark(t *testing.T, d driver.Driver, fn func(ctx context.Context, q driver.InboxQueueTx) error) error {
	t.Helper()
	return inTx(t, d, func(ctx context.Context, tx driver.Tx) error { return fn(ctx, queueTx(t, tx)) })
}

func notPending(t *testing.T, err error, id int64, state string) {
	t.Helper()
	var re *driver.InboxRowError
	if !errors.As(err, &re) || !errors.Is(err, driver.ErrInboxRowNotPending) || re.ID != id || re.State != state {
		t.Fatalf("got %v, want an *InboxRowError for row %d in state %q", err, id, state)
	}
}

func queueStats(t *testing.T, d driver.Driver, consumer string) driver.InboxQueueStats {
	t.Helper()
	r, ok := d.(driver.InboxQueueReader)
	if !ok {
		t.Skipf("drivertest: %T has no inbox queue", d)
	}
	all, err := r.InboxQueueStats(ctxOf(t))
	if err != nil {
		t.Fatalf("InboxQueueStats: %v", err)
	}
	for _, s := range all {
		if s.Consumer == consumer {
			return s
		}
	}
	return driver.InboxQueueStats{Consumer: consumer}
}

// applied counts consumer's applied rows, through the harness's Count.
func applied(t *testing.T, h *Harness, consumer string) int64 {
	t.Helper()
	if h.Count == nil || h.Table == nil {
		t.Fatal("drivertest: the inbox queue tests need the harness's Count and Table")
	}
	n, err := h.Count(ctxOf(t), "SELECT count(*) FROM "+h.Table("inbox_queue")+" WHERE state = 'applied' AND consumer = '"+consumer+"'")
	if err != nil {
		t.Fatalf("count applied: %v", err)
	}
	return n
}

func (s *suite) inboxQueueTests() []test {
	return []test{
		{"StoredRowIsClaimedWithEverything", func(t *testing.T, h *Harness) {
			d := h.Driver
			mid := newID(t)
			created := time.Now().Add(-3 * time.Second).Truncate(time.Millisecond)
			var id int64
			err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
				if _, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "billing", Key: "order-1", MessageID: mid}); err != nil {
					return err
				}
				var err error
				id, err = queueTx(t, tx).QueueInbox(ctx, driver.QueuedDelivery{
					Consumer: "billing", Type: "order.created", Key: "order-1", MessageID: mid,
					Payload: []byte(`{"total": 12.5, "name": "é"}`), Headers: []byte(`{"traceparent":"00-abc"}`), CreatedAt: created,
				})
				return err
			})
			if err != nil || id <= 0 {
				t.Fatalf("store = %d, %v", id, err)
			}
			err = claimIn(t, d, "billing", 10, func(_ context.Context, _ driver.InboxQueueTx, rows []driver.InboxRow) error {
				if len(rows) != 1 {
					return fmt.Errorf("claimed %d rows, want 1", len(rows))
				}
				r := rows[0]
				if r.ID != id || r.Consumer != "billing" || r.Type != "order.created" || r.Key != "order-1" || r.MessageID != mid ||
					r.State != driver.InboxPending || r.Attempts != 0 || r.LastError != "" {
					return fmt.Errorf("claimed %+v", r)
				}
				if !jsonEqual(t, r.Payload, []byte(`{"total": 12.5, "name": "é"}`)) || headerMap(t, r.Headers)["traceparent"] != "00-abc" {
					return fmt.Errorf("payload %s, headers %s", r.Payload, r.Headers)
				}
				if !r.CreatedAt.Equal(created) {
					return fmt.Errorf("created_at %s, want the sender's %s", r.CreatedAt, created)
				}
				near(t, "received_at", r.ReceivedAt)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// No headers are stored as an empty object; an unknown enqueue
			// time as the time it was stored.
			err = inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
				_, err := queueTx(t, tx).QueueInbox(ctx, driver.QueuedDelivery{Consumer: "plain", Type: "t", Key: "k", MessageID: newID(t), Payload: []byte(`[]`)})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			err = claimIn(t, d, "plain", 10, func(_ context.Context, _ driver.InboxQueueTx, rows []driver.InboxRow) error {
				if len(rows) != 1 || len(headerMap(t, rows[0].Headers)) != 0 || string(rows[0].Payload) != `[]` {
					return fmt.Errorf("claimed %+v", rows)
				}
				near(t, "created_at of an unknown enqueue time", rows[0].CreatedAt)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"ClaimOldestFirstWithinLimitAndConsumer", func(t *testing.T, h *Harness) {
			d := h.Driver
			var mine []int64
			for i := range 5 {
				mine = append(mine, store(t, d, "a", fmt.Sprint("k", i)))
				store(t, d, "b", fmt.Sprint("k", i))
			}
			err := claimIn(t, d, "a", 3, func(_ context.Context, _ driver.InboxQueueTx, rows []driver.InboxRow) error {
				var got []int64
				for _, r := range rows {
					if r.Consumer != "a" {
						return fmt.Errorf("claim of a returned a row of %s", r.Consumer)
					}
					got = append(got, r.ID)
				}
				if !slices.Equal(got, mine[:3]) {
					return fmt.Errorf("claimed %v, want the 3 oldest %v", got, mine[:3])
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := claimIn(t, d, "a", 0, func(context.Context, driver.InboxQueueTx, []driver.InboxRow) error { return nil }); err == nil {
				t.Fatal("a claim of 0 rows was accepted")
			}
		}},
		{"RolledBackStoreLeavesNeitherRowNorRecord", func(t *testing.T, h *Harness) {
			d := h.Driver
			err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
				if _, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: "k", MessageID: newID(t)}); err != nil {
					return err
				}
				if _, err := queueTx(t, tx).QueueInbox(ctx, driver.QueuedDelivery{Consumer: "c", Type: "t", Key: "k", MessageID: newID(t), Payload: []byte(`{}`)}); err != nil {
					return err
				}
				return errEffect
			})
			if !errors.Is(err, errEffect) {
				t.Fatalf("InTx = %v", err)
			}
			if ids := pendingIDs(t, d, "c"); len(ids) != 0 {
				t.Fatalf("rows %v left by a rolled-back store", ids)
			}
			if id := store(t, d, "c", "k"); id == 0 {
				t.Fatal("a rolled-back store left its dedup record")
			}
		}},
		{"AppliedOnceAndNeverAgain", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := store(t, d, "c", "k1")
			other := store(t, d, "c", "k2")
			// Applied, then rolled back: the row is pending again.
			err := claimIn(t, d, "c", 1, func(ctx context.Context, q driver.InboxQueueTx, rows []driver.InboxRow) error {
				if err := q.InboxApplied(ctx, rows[0].ID); err != nil {
					return err
				}
				return errEffect
			})
			if !errors.Is(err, errEffect) {
				t.Fatalf("rolled-back apply = %v", err)
			}
			if got := pendingIDs(t, d, "c"); !slices.Equal(got, []int64{id, other}) {
				t.Fatalf("pending after a rolled-back apply = %v, want %v", got, []int64{id, other})
			}
			err = claimIn(t, d, "c", 1, func(ctx context.Context, q driver.InboxQueueTx, rows []driver.InboxRow) error {
				return q.InboxApplied(ctx, rows[0].ID)
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := pendingIDs(t, d, "c"); !slices.Equal(got, []int64{other}) {
				t.Fatalf("pending after the apply = %v, want %v", got, []int64{other})
			}
			notPending(t, mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error { return q.InboxApplied(ctx, id) }), id, driver.InboxApplied)
			notPending(t, mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error {
				_, err := q.InboxFailed(ctx, id, "x", 0)
				return err
			}), id, driver.InboxApplied)
			notPending(t, mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error { return q.InboxDead(ctx, id, "x") }), id, driver.InboxApplied)
			notPending(t, mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error { return q.InboxApplied(ctx, id+1000) }), id+1000, "")
			// A hand-written statement cannot change an applied row either.
			if err := h.Exec(ctxOf(t), "UPDATE "+h.Table("inbox_queue")+" SET state = 'pending' WHERE id = "+fmt.Sprint(id)); err == nil {
				t.Fatal("an UPDATE set an applied row back to pending")
			}
			if got := pendingIDs(t, d, "c"); !slices.Equal(got, []int64{other}) {
				t.Fatalf("pending after the refused UPDATE = %v", got)
			}
		}},
		{"FailedIsRetriedAfterItsDelay", func(t *testing.T, h *Harness) {
			d := h.Driver
			later := store(t, d, "c", "later")
			now := store(t, d, "c", "now")
			var attempts []int
			for _, f := range []struct {
				id    int64
				delay time.Duration
			}{{later, time.Hour}, {now, 0}, {now, 0}} {
				err := mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error {
					n, err := q.InboxFailed(ctx, f.id, "the ledger was locked", f.delay)
					attempts = append(attempts, n)
					return err
				})
				if err != nil {
					t.Fatalf("InboxFailed(%d): %v", f.id, err)
				}
			}
			if !slices.Equal(attempts, []int{1, 1, 2}) {
				t.Fatalf("attempts returned %v, want [1 1 2]", attempts)
			}
			err := claimIn(t, d, "c", 10, func(_ context.Context, _ driver.InboxQueueTx, rows []driver.InboxRow) error {
				if len(rows) != 1 || rows[0].ID != now || rows[0].Attempts != 2 || rows[0].LastError != "the ledger was locked" {
					return fmt.Errorf("claimed %+v, want only row %d with 2 attempts and its reason", rows, now)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error {
				_, err := q.InboxFailed(ctx, now, "x", -time.Second)
				return err
			}); err == nil {
				t.Fatal("a negative retry delay was accepted")
			}
			if st := queueStats(t, d, "c"); st.Pending != 2 || st.Dead != 0 || applied(t, h, "c") != 0 || st.OldestPending <= 0 {
				t.Fatalf("stats %+v, want 2 pending (one waiting for its retry)", st)
			}
		}},
		{"DeadIsNeverClaimedUntilRevived", func(t *testing.T, h *Harness) {
			d := h.Driver
			id := store(t, d, "c", "poison")
			err := claimIn(t, d, "c", 1, func(ctx context.Context, q driver.InboxQueueTx, rows []driver.InboxRow) error {
				return q.InboxDead(ctx, rows[0].ID, "no such customer")
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := pendingIDs(t, d, "c"); len(got) != 0 {
				t.Fatalf("a dead row was claimed: %v", got)
			}
			notPending(t, mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error { return q.InboxApplied(ctx, id) }), id, driver.InboxDead)
			if err := h.Exec(ctxOf(t), "UPDATE "+h.Table("inbox_queue")+" SET state = 'applied' WHERE id = "+fmt.Sprint(id)); err == nil {
				t.Fatal("an UPDATE applied a dead row")
			}
			if st := queueStats(t, d, "c"); st.Dead != 1 || st.Pending != 0 {
				t.Fatalf("stats %+v, want 1 dead", st)
			}
			// Revived as docs/config.md says, it is claimed again, its
			// attempts and reason kept.
			if err := h.Exec(ctxOf(t), "UPDATE "+h.Table("inbox_queue")+" SET state = 'pending' WHERE id = "+fmt.Sprint(id)); err != nil {
				t.Fatalf("revive: %v", err)
			}
			err = claimIn(t, d, "c", 1, func(ctx context.Context, q driver.InboxQueueTx, rows []driver.InboxRow) error {
				if len(rows) != 1 || rows[0].ID != id || rows[0].Attempts != 1 || rows[0].LastError != "no such customer" {
					return fmt.Errorf("revived row claimed as %+v", rows)
				}
				return q.InboxApplied(ctx, id)
			})
			if err != nil {
				t.Fatal(err)
			}
			if st := queueStats(t, d, "c"); applied(t, h, "c") != 1 || st.Dead != 0 || st.Pending != 0 || st.OldestPending != 0 {
				t.Fatalf("stats %+v, want 1 applied", st)
			}
		}},
		{"AnOpenClaimKeepsItsRowsFromOthers", func(t *testing.T, h *Harness) {
			d, other := h.Driver, reopen(t, h)
			var all []int64
			for i := range 6 {
				all = append(all, store(t, d, "c", fmt.Sprint("k", i)))
			}
			held := make(chan []int64)
			release := make(chan struct{})
			errc := make(chan error, 2)
			go func() {
				errc <- d.InTx(context.Background(), func(ctx context.Context, tx driver.Tx) error {
					q := tx.(driver.InboxQueueTx)
					rows, err := q.ClaimInbox(ctx, "c", 3)
					if err != nil {
						close(held)
						return err
					}
					var ids []int64
					for _, r := range rows {
						ids = append(ids, r.ID)
						if err := q.InboxApplied(ctx, r.ID); err != nil {
							close(held)
							return err
						}
					}
					held <- ids
					<-release
					return nil
				})
			}()
			first, ok := <-held
			if !ok || len(first) != 3 {
				t.Fatalf("the first claim took %v: %v", first, <-errc)
			}
			// The second applier claims while the first is still open: it
			// gets other rows at once (PostgreSQL) or waits for the first
			// to commit (SQLite); either way none of the first's rows.
			second := make(chan []int64, 1)
			claimed := make(chan struct{})
			go func() {
				errc <- other.InTx(context.Background(), func(ctx context.Context, tx driver.Tx) error {
					q := tx.(driver.InboxQueueTx)
					rows, err := q.ClaimInbox(ctx, "c", 10)
					close(claimed)
					if err != nil {
						return err
					}
					var ids []int64
					for _, r := range rows {
						ids = append(ids, r.ID)
						if err := q.InboxApplied(ctx, r.ID); err != nil {
							return err
						}
					}
					second <- ids
					return nil
				})
			}()
			// Where claims skip locked rows, the second claims before the
			// first ends; where they wait, the first is let go after a
			// while. Only the outcome is checked, not the time.
			select {
			case <-claimed:
			case <-time.After(2 * time.Second):
			}
			close(release)
			for range 2 {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			got := append(slices.Clone(first), <-second...)
			slices.Sort(got)
			if !slices.Equal(got, all) {
				t.Fatalf("the two appliers applied %v and %v, want each of %v once", first, got[len(first):], all)
			}
		}},
		{"ConcurrentAppliersApplyEachRowOnce", func(t *testing.T, h *Harness) {
			ds := []driver.Driver{h.Driver, reopen(t, h)}
			const rows, appliers = 60, 6
			for i := range rows {
				store(t, h.Driver, "c", fmt.Sprint("k", i))
			}
			var (
				mu      sync.Mutex
				applied = map[int64]int{}
				wg      sync.WaitGroup
				errs    []error
			)
			for a := range appliers {
				wg.Go(func() {
					for {
						var got []int64
						err := ds[a%2].InTx(context.Background(), func(ctx context.Context, tx driver.Tx) error {
							q := tx.(driver.InboxQueueTx)
							claimed, err := q.ClaimInbox(ctx, "c", 4)
							if err != nil {
								return err
							}
							got = got[:0]
							for _, r := range claimed {
								if err := q.InboxApplied(ctx, r.ID); err != nil {
									return err
								}
								got = append(got, r.ID)
							}
							return nil
						})
						mu.Lock()
						if err != nil {
							errs = append(errs, err)
						} else {
							for _, id := range got {
								applied[id]++
							}
						}
						mu.Unlock()
						if err != nil || len(got) == 0 {
							return
						}
					}
				})
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("appliers failed: %v", errs)
			}
			for id, n := range applied {
				if n != 1 {
					t.Errorf("row %d applied %d times", id, n)
				}
			}
			if len(applied) != rows {
				t.Fatalf("%d rows applied, want %d", len(applied), rows)
			}
		}},
		{"PurgeTakesAppliedRowsWithTheirRecordsByWindow", func(t *testing.T, h *Harness) {
			d := h.Driver
			const age = 2 * time.Second
			register(t, d, "a", driver.Resource{Kind: driver.ResourceConsumer, Name: "short", Window: age},
				driver.Resource{Kind: driver.ResourceConsumer, Name: "long", Window: time.Hour},
				driver.Resource{Kind: driver.ResourceConsumer, Name: "forever"})
			register(t, d, "b", driver.Resource{Kind: driver.ResourceConsumer, Name: "neighbour", Window: age})
			apply := func(consumer string, id int64) {
				t.Helper()
				if err := mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error { return q.InboxApplied(ctx, id) }); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []string{"short", "long", "forever", "neighbour"} {
				apply(c, store(t, d, c, "old-applied"))
			}
			store(t, d, "short", "old-pending")
			dead := store(t, d, "short", "old-dead")
			if err := mark(t, d, func(ctx context.Context, q driver.InboxQueueTx) error { return q.InboxDead(ctx, dead, "x") }); err != nil {
				t.Fatal(err)
			}
			time.Sleep(age + 300*time.Millisecond)
			apply("short", store(t, d, "short", "young-applied"))

			r := purge(t, d, driver.PurgeParams{App: "a", Batch: 100})
			if r.InboxQueue != 1 || r.Inbox != 3 {
				t.Fatalf("purge of app a = %+v, want short's old applied row and its 3 old records", r)
			}
			if st := queueStats(t, d, "short"); st.Dead != 1 || st.Pending != 1 || applied(t, h, "short") != 1 {
				t.Fatalf("short's queue after the purge = %+v, want the pending and dead rows kept, and the young applied one", st)
			}
			// The purged row's key may come again; the young one's not.
			if id := store(t, d, "short", "old-applied"); id == 0 {
				t.Fatal("the purged row's dedup record was kept")
			}
			if id := store(t, d, "short", "young-applied"); id != 0 {
				t.Fatal("a young applied row's record was purged")
			}
			for _, c := range []string{"long", "forever", "neighbour"} {
				if n := applied(t, h, c); n != 1 {
					t.Fatalf("app a's purge took consumer %s's applied row: %d left", c, n)
				}
			}
			if r := purge(t, d, driver.PurgeParams{App: "a", Batch: 100}); r.InboxQueue != 0 {
				t.Fatalf("a second purge = %+v, want nothing", r)
			}
			if r := purge(t, d, driver.PurgeParams{App: "b"}); r.InboxQueue != 1 {
				t.Fatalf("app b's purge = %+v, want its consumer's old applied row", r)
			}
		}},
	}
}
