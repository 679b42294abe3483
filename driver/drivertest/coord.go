package drivertest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

func elector(t *testing.T, d driver.Driver, app string, lease time.Duration) driver.Elector {
	t.Helper()
	e, err := d.Elector(app, lease)
	if err != nil {
		t.Fatalf("Elector(%q): %v", app, err)
	}
	return e
}

func acquire(t *testing.T, e driver.Elector) (int64, bool) {
	t.Helper()
	epoch, ok, err := e.Acquire(ctxOf(t))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return epoch, ok
}

func holder(t *testing.T, e driver.Elector) driver.Leader {
	t.Helper()
	l, err := e.Holder(ctxOf(t))
	if err != nil {
		t.Fatalf("Holder: %v", err)
	}
	return l
}

func (s *suite) electorTests() []test {
	return []test{
		{"OneLeaderPerApp", func(t *testing.T, h *Harness) {
			a := elector(t, h.Driver, "app-1", longLease)
			b := elector(t, reopen(t, h), "app-1", longLease)
			if l := holder(t, a); l.Holder != "" || l.App != "app-1" {
				t.Fatalf("Holder before any Acquire = %+v, want no holder", l)
			}
			ea, ok := acquire(t, a)
			if !ok || ea <= 0 {
				t.Fatalf("first candidate: epoch %d leader %v, want leader with a positive epoch", ea, ok)
			}
			if _, ok := acquire(t, b); ok {
				t.Fatal("two leaders for one app")
			}
			// Renewal keeps leadership and epoch.
			for range 3 {
				if e, ok := acquire(t, a); !ok || e != ea {
					t.Fatalf("renewal: epoch %d leader %v, want %d, true", e, ok, ea)
				}
			}
			l := holder(t, b)
			if l.Holder == "" || l.Epoch != ea || l.App != "app-1" {
				t.Fatalf("Holder seen by the standby = %+v, want the leader at epoch %d", l, ea)
			}
			near(t, "Leader.Since", l.Since)
			// Another app elects independently, on the same database.
			if _, ok := acquire(t, elector(t, reopen(t, h), "app-2", longLease)); !ok {
				t.Fatal("app-2 could not lead while app-1 has a leader")
			}
			if _, ok := acquire(t, b); ok {
				t.Fatal("app-1 standby became leader")
			}
			// Still the leader, at the same epoch. This also keeps a
			// reachable to the end: an elector the garbage collector
			// frees closes its session (the socket's finalizer), which
			// releases the lock.
			if e, ok := acquire(t, a); !ok || e != ea {
				t.Fatalf("app-1 leader after app-2 was elected: epoch %d leader %v, want %d, true", e, ok, ea)
			}
		}},
		{"ReleaseHandsOver", func(t *testing.T, h *Harness) {
			a := elector(t, h.Driver, "app", longLease)
			b := elector(t, reopen(t, h), "app", longLease)
			ea, _ := acquire(t, a)
			first := holder(t, a).Holder
			if err := a.Release(ctxOf(t)); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if l := holder(t, b); l.Holder != "" {
				t.Fatalf("Holder after Release = %+v, want none", l)
			}
			eb, ok := acquire(t, b)
			if !ok || eb <= ea {
				t.Fatalf("after Release the standby got epoch %d leader %v, want leader with epoch > %d", eb, ok, ea)
			}
			if l := holder(t, a); l.Holder == "" || l.Holder == first || l.Epoch != eb {
				t.Fatalf("Holder = %+v, want the new leader (not %q) at epoch %d", l, first, eb)
			}
			if _, ok := acquire(t, a); ok {
				t.Fatal("the old leader took leadership back from a live one")
			}
			// Releasing what one does not hold changes nothing.
			if err := a.Release(ctxOf(t)); err != nil {
				t.Fatalf("Release by a non-leader: %v", err)
			}
			if e, ok := acquire(t, b); !ok || e != eb {
				t.Fatalf("leader after a stranger's Release: epoch %d leader %v", e, ok)
			}
		}},
		{"LeaseExpiryHandsOver", func(t *testing.T, h *Harness) {
			a := elector(t, h.Driver, "app", shortLease)
			b := elector(t, reopen(t, h), "app", shortLease)
			start := time.Now()
			ea, ok := acquire(t, a)
			if !ok {
				t.Fatal("first candidate did not lead")
			}
			// The leader stops calling Acquire (paused, crashed).
			eb, ok := acquire(t, b)
			if ok && early(start, shortLease) {
				t.Fatal("standby led while the lease was live")
			}
			if !ok {
				eventually(t, "standby takes over after the lease", func() bool {
					eb, ok = acquire(t, b)
					return ok
				})
			}
			if el := time.Since(start); el < shortLease-5*time.Millisecond {
				t.Fatalf("standby took over after %s, before the %s lease passed", el, shortLease)
			}
			if eb <= ea {
				t.Fatalf("new epoch %d, want > %d", eb, ea)
			}
			if _, ok := acquire(t, a); ok {
				t.Fatal("the paused leader woke up and still led")
			}
			if l := holder(t, a); l.Epoch != eb || l.Holder == "" {
				t.Fatalf("Holder = %+v, want the new leader at epoch %d", l, eb)
			}
		}},
		{"EpochsOnlyGrow", func(t *testing.T, h *Harness) {
			ds := []driver.Driver{h.Driver, reopen(t, h)}
			var last int64
			for i := range 6 {
				e := elector(t, ds[i%2], "app", longLease)
				epoch, ok := acquire(t, e)
				if !ok || epoch <= last {
					t.Fatalf("round %d: epoch %d leader %v, want leader with epoch > %d", i, epoch, ok, last)
				}
				last = epoch
				if err := e.Release(ctxOf(t)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
}

func (s *suite) listenTests() []test {
	return []test{
		{"WakesAfterInsert", func(t *testing.T, h *Harness) {
			ctx, cancel := context.WithCancel(ctxOf(t))
			defer cancel()
			l, err := h.Driver.Listen(ctx)
			if errors.Is(err, driver.ErrNotSupported) {
				t.Skip("driver does not push notifications (ErrNotSupported): relays poll")
			}
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			defer l.Close()
			// Drain a wake-up that may have been pending.
			select {
			case <-l.C():
			case <-time.After(50 * time.Millisecond):
			}
			insert(t, h.Driver) // no rows: no error, maybe no wake-up
			own(t, h.Driver, "t")
			if err := h.Driver.Insert(ctxOf(t), driver.InsertParams{Rows: []driver.InsertRow{row(t, "t", "k")}, Notify: true}); err != nil {
				t.Fatal(err)
			}
			select {
			case _, ok := <-l.C():
				if !ok {
					t.Fatal("listener channel closed instead of waking")
				}
			case <-time.After(waitFor):
				t.Fatal("no wake-up after an Insert with Notify")
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}},
		{"ClosesWithContext", func(t *testing.T, h *Harness) {
			ctx, cancel := context.WithCancel(ctxOf(t))
			l, err := h.Driver.Listen(ctx)
			if errors.Is(err, driver.ErrNotSupported) {
				cancel()
				t.Skip("driver does not push notifications")
			}
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			cancel()
			// The channel must end (closed) or the listener be closable;
			// either way nothing may block or panic.
			timer := time.NewTimer(waitFor)
			defer timer.Stop()
			for {
				select {
				case _, ok := <-l.C():
					if !ok {
						_ = l.Close()
						return
					}
				case <-timer.C:
					t.Fatal("listener channel still open after its context ended")
				}
			}
		}},
	}
}

func (s *suite) inboxTests() []test {
	rec := func(t *testing.T, consumer, key string) driver.InboxRecord {
		return driver.InboxRecord{Consumer: consumer, Key: key, MessageID: newID(t)}
	}
	return []test{
		{"FirstThenDuplicate", func(t *testing.T, h *Harness) {
			d := h.Driver
			first := rec(t, "billing", "invoice-1")
			if r := record(t, d, first); r.Duplicate || r.Stale {
				t.Fatalf("first record = %+v, want applied", r)
			}
			again := rec(t, "billing", "invoice-1")
			r := record(t, reopen(t, h), again)
			if !r.Duplicate || r.FirstMessageID != first.MessageID {
				t.Fatalf("second record = %+v, want Duplicate of %s", r, uuid.UUID(first.MessageID))
			}
			// Same message redelivered: still a duplicate.
			if r := record(t, d, first); !r.Duplicate {
				t.Fatalf("redelivery = %+v, want Duplicate", r)
			}
		}},
		{"ConsumersAndKeysIndependent", func(t *testing.T, h *Harness) {
			d := h.Driver
			for _, r := range []driver.InboxRecord{rec(t, "a", "k1"), rec(t, "b", "k1"), rec(t, "a", "k2")} {
				if res := record(t, d, r); res.Duplicate {
					t.Fatalf("%s/%s reported duplicate", r.Consumer, r.Key)
				}
			}
		}},
		{"RollbackLeavesNoRecord", func(t *testing.T, h *Harness) {
			d := h.Driver
			err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
				if tx.Raw() == nil {
					t.Error("Tx.Raw() is nil")
				}
				r, err := tx.InboxRecord(ctx, rec(t, "c", "k"))
				if err != nil || r.Duplicate {
					t.Errorf("InboxRecord = %+v, %v", r, err)
				}
				return errEffect
			})
			if !errors.Is(err, errEffect) {
				t.Fatalf("InTx returned %v, want the effect's error", err)
			}
			if r := record(t, d, rec(t, "c", "k")); r.Duplicate {
				t.Fatal("a rolled-back effect left its dedup record")
			}
		}},
		{"ConcurrentTwins", func(t *testing.T, h *Harness) {
			ds := []driver.Driver{h.Driver, reopen(t, h)}
			const n = 4
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				applied int
				dups    int
				errs    []error
			)
			startLine := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-startLine
					err := ds[i%2].InTx(context.Background(), func(ctx context.Context, tx driver.Tx) error {
						r, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: "twin", MessageID: newID(t)})
						if err != nil {
							return err
						}
						mu.Lock()
						if r.Duplicate {
							dups++
						} else {
							applied++
						}
						mu.Unlock()
						if !r.Duplicate {
							// Hold the first transaction open so the twins
							// really overlap it.
							time.Sleep(150 * time.Millisecond)
						}
						return nil
					})
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				})
			}
			close(startLine)
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("concurrent InTx errors: %v", errs)
			}
			if applied != 1 || dups != n-1 {
				t.Fatalf("%d applied, %d duplicates; want exactly 1 applied and %d duplicates", applied, dups, n-1)
			}
		}},
		{"TwinProceedsWhenFirstRollsBack", func(t *testing.T, h *Harness) {
			d, other := h.Driver, reopen(t, h)
			recorded := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- d.InTx(context.Background(), func(ctx context.Context, tx driver.Tx) error {
					if _, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "c", Key: "k", MessageID: newID(t)}); err != nil {
						return err
					}
					close(recorded)
					time.Sleep(150 * time.Millisecond)
					return errEffect
				})
			}()
			<-recorded
			r := record(t, other, rec(t, "c", "k"))
			if err := <-done; !errors.Is(err, errEffect) {
				t.Fatalf("first InTx = %v", err)
			}
			if r.Duplicate {
				t.Fatal("the twin saw a duplicate although the first rolled back")
			}
		}},
		{"Stale", func(t *testing.T, h *Harness) {
			d := h.Driver
			old := rec(t, "c", "k")
			old.CreatedAt, old.Window = time.Now().Add(-2*time.Hour), time.Hour
			if r := record(t, d, old); !r.Stale || r.Duplicate {
				t.Fatalf("message older than the window = %+v, want Stale", r)
			}
			// Nothing was stored: a fresh message of the key applies.
			fresh := rec(t, "c", "k")
			fresh.CreatedAt, fresh.Window = time.Now(), time.Hour
			if r := record(t, d, fresh); r.Stale || r.Duplicate {
				t.Fatalf("fresh message after a stale one = %+v, want applied", r)
			}
			// Zero window or zero time skips the check.
			noWin := rec(t, "c", "k2")
			noWin.CreatedAt = time.Now().Add(-1000 * time.Hour)
			if r := record(t, d, noWin); r.Stale {
				t.Fatal("zero window reported Stale")
			}
			noTime := rec(t, "c", "k3")
			noTime.Window = time.Millisecond
			if r := record(t, d, noTime); r.Stale {
				t.Fatal("zero CreatedAt reported Stale")
			}
		}},
	}
}

func (s *suite) offsetTests() []test {
	return []test{
		{"FirstAppliersSerialize", func(t *testing.T, h *Harness) {
			// Two sink members apply the first records of a partition at
			// once (a rebalance while the first transaction is open): the
			// second must see what the first stored, not "no position".
			d := h.Driver
			var applied atomic.Int32
			firstIn := make(chan struct{})
			apply := func(wait bool) error {
				return d.InTx(ctxOf(t), func(ctx context.Context, tx driver.Tx) error {
					off, ok, err := tx.Offset(ctx, "sink", "orders", 7)
					if err != nil {
						return err
					}
					if wait {
						close(firstIn)
						time.Sleep(300 * time.Millisecond) // the other one starts meanwhile
					}
					if ok && off >= 10 {
						return nil // already applied
					}
					applied.Add(1)
					return tx.SetOffset(ctx, "sink", "orders", 7, 10)
				})
			}
			errc := make(chan error, 1)
			go func() { errc <- apply(true) }()
			<-firstIn
			if err := apply(false); err != nil {
				t.Fatalf("second applier: %v", err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("first applier: %v", err)
			}
			if n := applied.Load(); n != 1 {
				t.Fatalf("the records were applied %d times, want once", n)
			}
		}},
		{"RoundTripAndRollback", func(t *testing.T, h *Harness) {
			d := h.Driver
			get := func(part int32) (int64, bool) {
				var off int64
				var ok bool
				if err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
					var err error
					off, ok, err = tx.Offset(ctx, "sink", "orders", part)
					return err
				}); err != nil {
					t.Fatalf("Offset: %v", err)
				}
				return off, ok
			}
			set := func(part int32, off int64, fail bool) {
				err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
					if err := tx.SetOffset(ctx, "sink", "orders", part, off); err != nil {
						return err
					}
					if fail {
						return errEffect
					}
					return nil
				})
				if (err != nil) != fail {
					t.Fatalf("SetOffset(%d, %d): %v", part, off, err)
				}
			}
			if _, ok := get(0); ok {
				t.Fatal("offset found before any was stored")
			}
			set(0, 42, false)
			if off, ok := get(0); !ok || off != 42 {
				t.Fatalf("offset = %d, %v; want 42", off, ok)
			}
			set(0, 43, true)
			if off, _ := get(0); off != 42 {
				t.Fatalf("rolled-back SetOffset left %d, want 42", off)
			}
			set(0, 1<<40, false)
			if off, _ := get(0); off != 1<<40 {
				t.Fatalf("offset = %d, want %d", off, int64(1<<40))
			}
			if _, ok := get(1); ok {
				t.Fatal("partition 1 shares partition 0's offset")
			}
			// Another consumer or source is its own position.
			err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
				if _, ok, err := tx.Offset(ctx, "other", "orders", 0); err != nil || ok {
					t.Errorf("other consumer: ok %v err %v", ok, err)
				}
				if _, ok, err := tx.Offset(ctx, "sink", "payments", 0); err != nil || ok {
					t.Errorf("other source: ok %v err %v", ok, err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}},
	}
}
