package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testsignal"
	"github.com/xadm/mensageria/mensageriatest"
)

// Contract 1: enqueue is atomic with the caller's transaction.
func TestEnqueueTxRollbackLeavesNoMessage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		reg := mensageria.NewRegistry().MustRegister("order.created", &recorder{})
		c := newClient(t, b.open(), fastConfig(uniqueApp("rb"), reg))
		// An SQLite transaction holds the database's write lock, so the
		// app's first registration comes before it (EnqueueTx's doc).
		if _, err := c.Register(ctx); err != nil {
			t.Fatal(err)
		}

		tx, _, rollback := b.begin()
		if _, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: "order.created", Key: "o-1"}); err != nil {
			t.Fatal(err)
		}
		if err := rollback(); err != nil {
			t.Fatal(err)
		}
		tx, commit, _ := b.begin()
		if _, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: "order.created", Key: "o-2"}); err != nil {
			t.Fatal(err)
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key = 'o-1'"); n != 0 {
			t.Fatalf("rolled-back enqueue left %d rows", n)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key = 'o-2'"); n != 1 {
			t.Fatalf("committed enqueue left %d rows, want 1", n)
		}
	})
}

// Contract 2: a type without a Sender fails fast and writes nothing, not
// even the valid messages of the same call.
func TestEnqueueUnregisteredTypeFailsAndWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		reg := mensageria.NewRegistry().MustRegister("known", &recorder{})
		c := newClient(t, b.open(), fastConfig(uniqueApp("nosend"), reg))
		_, err := c.Enqueue(ctx,
			mensageria.Message{Type: "known", Key: "k1"},
			mensageria.Message{Type: "unknown.type", Key: "k2"})
		var nse *mensageria.NoSenderError
		if !errors.As(err, &nse) || nse.Type != "unknown.type" || !errors.Is(err, mensageria.ErrNoSender) {
			t.Fatalf("want *NoSenderError for unknown.type, got %v", err)
		}
		tx, _, rollback := b.begin()
		defer rollback()
		if _, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: "unknown.type", Key: "k3"}); !errors.Is(err, mensageria.ErrNoSender) {
			t.Fatalf("EnqueueTx: want ErrNoSender, got %v", err)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox")); n != 0 {
			t.Fatalf("failed enqueue wrote %d rows", n)
		}
	})
}

func TestEnqueueRejectsInvalidMessages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		reg := mensageria.NewRegistry().MustRegister("t", &recorder{})
		c := newClient(t, b.open(), fastConfig(uniqueApp("inv"), reg))
		for name, m := range map[string]mensageria.Message{
			"no key":       {Type: "t"},
			"bad json":     {Type: "t", Key: "k", Payload: json.RawMessage(`{"a":`)},
			"empty header": {Type: "t", Key: "k", Headers: map[string]string{"": "x"}},
			"NUL in key":   {Type: "t", Key: "k\x00"},
		} {
			_, err := c.Enqueue(context.Background(), m)
			var ime *mensageria.InvalidMessageError
			if !errors.As(err, &ime) || !errors.Is(err, mensageria.ErrInvalidMessage) {
				t.Errorf("%s: want *InvalidMessageError, got %v", name, err)
			}
		}
		if _, err := c.EnqueueTx(context.Background(), "not a tx", mensageria.Message{Type: "t", Key: "k"}); err == nil {
			t.Fatal("EnqueueTx accepted a string as a transaction")
		} else {
			var tte *mensageria.TxTypeError
			if !errors.As(err, &tte) {
				t.Fatalf("want *TxTypeError, got %v", err)
			}
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox")); n != 0 {
			t.Fatalf("invalid enqueues wrote %d rows", n)
		}
	})
}

// Contracts 3 and 4: every message reaches its owner app only; a type no
// app registers stays untouched; an app with no Sender claims nothing.
func TestTwoAppsOneSchemaPartition(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		recA, recB := &recorder{}, &recorder{}
		a := newClient(t, b.open(), fastConfig(uniqueApp("pedidos"), mensageria.NewRegistry().MustRegister("pedido.criado", recA)))
		bb := newClient(t, b.open(), fastConfig(uniqueApp("faturamento"), mensageria.NewRegistry().MustRegister("fatura.emitida", recB)))
		idle := newClient(t, b.open(), fastConfig(uniqueApp("receiver"), mensageria.NewRegistry()))
		// A foreign type, written as another language would, that no app
		// here can route: its owner app has not started yet.
		ownerApp := uniqueApp("integrador")
		own(t, b.open(), ownerApp, "xadm.push")
		if err := b.exec("INSERT INTO " + b.table("outbox") + ` (type, key, payload) VALUES ('xadm.push', 'foreign-1', '{"n": 1}')`); err != nil {
			t.Fatal(err)
		}
		const n = 50
		for i := range n {
			if _, err := a.Enqueue(ctx, mensageria.Message{Type: "pedido.criado", Key: fmt.Sprintf("p-%d", i)}); err != nil {
				t.Fatal(err)
			}
			if _, err := bb.Enqueue(ctx, mensageria.Message{Type: "fatura.emitida", Key: fmt.Sprintf("f-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		sigA, sigB := testsignal.ForClient(a), testsignal.ForClient(bb)
		start(t, a)
		start(t, bb)
		start(t, idle)
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return recA.len() >= n && recB.len() >= n }, "both apps deliver their messages")
		for _, d := range recA.got {
			if d.Type != "pedido.criado" {
				t.Fatalf("app A received %s", d.Type)
			}
		}
		for _, d := range recB.got {
			if d.Type != "fatura.emitida" {
				t.Fatalf("app B received %s", d.Type)
			}
		}
		// A few more claim cycles of both relays that claim (idle has no
		// type to claim), each a look at the table with the foreign row.
		for _, sig := range []*testsignal.Relay{sigA, sigB} {
			sig.Claimed.Drain()
			for range 3 {
				sig.Claimed.WaitOrTimeout(t)
			}
		}
		if got := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE type = 'xadm.push' AND state = 'pending' AND attempts = 0 AND lease_token IS NULL"); got != 1 {
			t.Fatalf("the foreign row was touched (untouched pending rows: %d)", got)
		}
		// Its owner, when it appears, can still take it.
		rec := &recorder{}
		owner := newClient(t, b.open(), fastConfig(ownerApp, mensageria.NewRegistry().MustRegister("xadm.push", rec)))
		start(t, owner)
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return rec.len() == 1 }, "the owner relays the foreign row")
	})
}

// Contract 3: a failure is retried with backoff; a permanent error or the
// attempt limit parks the message as dead with its reason.
func TestRetryThenDeadWithReason(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		var tries atomic.Int32
		rec := &recorder{fail: func(d *mensageria.Delivery) error {
			switch d.Key {
			case "flaky":
				if d.Attempt < 3 {
					tries.Add(1)
					return errors.New("503 from receiver")
				}
			case "refused":
				return mensageria.Permanent(errors.New("422 unknown customer"))
			case "broken":
				return errors.New("always down")
			}
			return nil
		}}
		cfg := fastConfig(uniqueApp("retry"), mensageria.NewRegistry().MustRegister("t", rec))
		cfg.MaxAttempts = 4
		c := newClient(t, b.open(), cfg)
		for _, k := range []string{"flaky", "refused", "broken"} {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: k}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE state = 'pending'") == 0
		}, "all settled")
		if rec.keys()["flaky"] != 1 || tries.Load() != 2 {
			t.Fatalf("flaky: delivered %d times after %d failures", rec.keys()["flaky"], tries.Load())
		}
		dead, err := c.Driver().ListMessages(ctx, driver.ListFilter{State: driver.StateDead})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]driver.Job{}
		for _, j := range dead {
			reasons[j.Key] = j
		}
		if j, ok := reasons["refused"]; !ok || j.Attempt != 1 || !contains(j.LastError, "422 unknown customer") {
			t.Fatalf("refused: %+v", j)
		}
		if j, ok := reasons["broken"]; !ok || j.Attempt != 4 || !contains(j.LastError, "always down") {
			t.Fatalf("broken: %+v", j)
		}
	})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A Sender's error is stored whatever bytes it holds: a NUL, invalid
// UTF-8 or a long text cut inside a character would be refused by
// PostgreSQL and fail the settle of the whole batch.
func TestUnstorableErrorTextStillSettles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rec := &recorder{fail: func(d *mensageria.Delivery) error {
			if d.Key == "garbled" {
				return mensageria.Permanent(errors.New("bad\x00byte \xff" + strings.Repeat("é", 1500)))
			}
			return nil
		}}
		c := newClient(t, b.open(), fastConfig(uniqueApp("garbled"), mensageria.NewRegistry().MustRegister("t", rec)))
		for _, k := range []string{"garbled", "fine"} {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: k}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE state = 'pending'") == 0
		}, "both settled")
		dead, err := c.Driver().ListMessages(ctx, driver.ListFilter{State: driver.StateDead})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || dead[0].Key != "garbled" || dead[0].Attempt != 1 {
			t.Fatalf("dead: %+v, want the garbled message after one attempt", dead)
		}
		e := dead[0].LastError
		if !utf8.ValidString(e) || strings.ContainsRune(e, 0) || !strings.Contains(e, "bad byte \uFFFDéé") || !strings.HasSuffix(e, "…") {
			t.Fatalf("last error %q", e)
		}
		if rec.keys()["fine"] != 1 {
			t.Fatalf("the batch's other message was delivered %d times", rec.keys()["fine"])
		}
	})
}

// Contract 3 under a crash: a relay that claimed a batch and died leaves
// leases that expire; the batch is redelivered and nothing is lost.
func TestCrashedRelayBatchIsRedelivered(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		rec := &recorder{}
		app := uniqueApp("crash")
		cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("t", rec))
		cfg.Election = mensageria.ElectionNone
		c := newClient(t, b.open(), cfg)
		for i := range 30 {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: fmt.Sprintf("k%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		// The dead relay: it claimed 20 rows and never settled them.
		jobs, err := b.open().Claim(ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 20, Lease: time.Second, Token: 99})
		if err != nil || len(jobs) != 20 {
			t.Fatalf("claim: %d %v", len(jobs), err)
		}
		start(t, c)
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return len(rec.keys()) == 30 }, "every message delivered")
		redelivered := 0
		rec.mu.Lock()
		for _, d := range rec.got {
			if d.Attempt == 2 {
				redelivered++
			}
		}
		rec.mu.Unlock()
		if redelivered != 20 {
			t.Fatalf("want the 20 crashed rows redelivered as attempt 2, got %d", redelivered)
		}
		// The crashed relay wakes up and tries to settle: fenced.
		res, err := b.open().Settle(ctx, driver.SettleParams{Token: 99, Dead: []driver.Failure{{ID: jobs[0].ID, Error: "zombie"}}})
		if err != nil || len(res.Settled) != 0 || len(res.Fenced) != 1 || res.Fenced[0] != jobs[0].ID {
			t.Fatalf("zombie settle: %+v (err %v); want its one row fenced, nothing changed", res, err)
		}
	})
}

// The lost ack: the receiver applied the effect but the sender saw an
// error. The message is redelivered and the inbox absorbs it.
func TestLostAckIsAbsorbedByInbox(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		if err := b.exec("CREATE TABLE " + b.table("lostack_effects") + " (key TEXT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		inbox, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: "ledger"})
		if err != nil {
			t.Fatal(err)
		}
		var dups, ackLost atomic.Int32
		sender := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			res, err := inbox.Apply(ctx, d, func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
				return b.execTx(tx, "INSERT INTO "+b.table("lostack_effects")+" (key) VALUES ($1)", d.Key)
			})
			if err != nil {
				return err
			}
			if res.Duplicate {
				dups.Add(1)
			}
			if d.Attempt == 1 {
				if !res.Duplicate {
					ackLost.Add(1) // applied and committed, but the sender will not know
				}
				return errors.New("connection reset after the receiver committed")
			}
			return nil
		})
		cfg := fastConfig(uniqueApp("lostack"), mensageria.NewRegistry().MustRegister("t", sender))
		cfg.Lease = 5 * time.Second // a loaded machine must not turn slow commits into lease expiries
		c := newClient(t, b.open(), cfg)
		for i := range 20 {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: fmt.Sprintf("k%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 60*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")) == 0
		}, "all delivered")
		if n := b.count("SELECT count(DISTINCT key) FROM " + b.table("lostack_effects")); n != 20 {
			t.Fatalf("effects for %d keys, want 20", n)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("lostack_effects")); n != 20 {
			t.Fatalf("%d effects for 20 keys: an effect was applied twice", n)
		}
		// Every effect whose ack was lost came back and was absorbed. (A
		// first attempt that failed before its commit is applied by the
		// redelivery instead, and is not a duplicate.)
		if ackLost.Load() == 0 || dups.Load() < ackLost.Load() {
			t.Fatalf("%d lost acks, %d duplicates absorbed", ackLost.Load(), dups.Load())
		}
	})
}

// Contract 5: N concurrent deliveries of one message apply it once; a
// failed effect leaves no record; a message older than the window is
// refused.
func TestInboxConcurrentRepeatsApplyOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		d := b.open()
		in, err := mensageria.NewInbox(d, mensageria.InboxConfig{Consumer: "c", Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		msg := &mensageria.Delivery{Type: "t", Key: "order-7", CreatedAt: time.Now()}
		var applied atomic.Int32
		var wg sync.WaitGroup
		results := make([]mensageria.ApplyResult, 16)
		errs := make([]error, 16)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = in.Apply(ctx, msg, func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
					applied.Add(1)
					time.Sleep(5 * time.Millisecond) // widen the race
					return nil
				})
			}()
		}
		wg.Wait()
		dups := 0
		for i := range 16 {
			if errs[i] != nil {
				t.Fatalf("apply %d: %v", i, errs[i])
			}
			if results[i].Duplicate {
				dups++
			}
		}
		if applied.Load() != 1 || dups != 15 {
			t.Fatalf("applied %d times with %d duplicates; want 1 and 15", applied.Load(), dups)
		}

		failing := &mensageria.Delivery{Type: "t", Key: "order-8", CreatedAt: time.Now()}
		if _, err := in.Apply(ctx, failing, func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
			return errors.New("effect failed")
		}); err == nil {
			t.Fatal("a failing effect reported success")
		}
		res, err := in.Apply(ctx, failing, func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return nil })
		if err != nil || res.Duplicate {
			t.Fatalf("retry after a failed effect: %+v %v; want applied", res, err)
		}

		old := &mensageria.Delivery{Type: "t", Key: "order-9", CreatedAt: time.Now().Add(-2 * time.Hour)}
		_, err = in.Apply(ctx, old, func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
			t.Fatal("a stale message was applied")
			return nil
		})
		var se *mensageria.StaleError
		if !errors.As(err, &se) || !errors.Is(err, mensageria.ErrStale) {
			t.Fatalf("want *StaleError, got %v", err)
		}
	})
}

// ApplyBatch applies a batch in one transaction; a failing effect makes it
// fall back to one transaction per delivery, and nothing is lost or
// doubled either way.
func TestInboxApplyBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		in, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: "batch"})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		applied := map[string]int{}
		effect := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			if d.Key == "poison" {
				return errors.New("cannot apply")
			}
			mu.Lock()
			applied[d.Key]++
			mu.Unlock()
			return nil
		}
		mk := func(keys ...string) []*mensageria.Delivery {
			var ds []*mensageria.Delivery
			for _, k := range keys {
				ds = append(ds, &mensageria.Delivery{Type: "t", Key: k, CreatedAt: time.Now()})
			}
			return ds
		}
		res, errs := in.ApplyBatch(ctx, mk("a", "b", "a", "c"), effect)
		if errs[0] != nil || errs[1] != nil || errs[2] != nil || errs[3] != nil {
			t.Fatalf("clean batch: %v", errs)
		}
		if res[0].Duplicate || res[1].Duplicate || !res[2].Duplicate || res[3].Duplicate {
			t.Fatalf("clean batch results %+v: want only the repeated key as a duplicate", res)
		}
		// The poison message forces the fallback; its neighbours still
		// apply (once), and the already-applied key stays a duplicate.
		applied = map[string]int{} // in-memory effects of the rolled-back attempt do not count
		res, errs = in.ApplyBatch(ctx, mk("d", "poison", "a", "e"), effect)
		if errs[0] != nil || errs[1] == nil || errs[2] != nil || errs[3] != nil {
			t.Fatalf("batch with poison: %v", errs)
		}
		if !res[2].Duplicate || res[0].Duplicate || res[3].Duplicate {
			t.Fatalf("batch with poison results %+v", res)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("inbox") + " WHERE consumer = 'batch'"); n != 5 {
			t.Fatalf("inbox holds %d records, want a, b, c, d, e", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if applied["d"] != 2 || applied["e"] != 1 {
			// d ran in the failed batch (rolled back) and again alone; e
			// came after the poison, so it only ran alone.
			t.Fatalf("effects %v: want d twice (one rolled back) and e once", applied)
		}
	})
}

// The pipelined enqueue (PrepareEnqueue + QueueInsert) keeps EnqueueTx's
// contract: atomic with the caller's transaction, fail-fast before anything
// is queued.
func TestPipelinedEnqueueIsAtomic(t *testing.T) {
	b := pgBackend(t)
	ctx := context.Background()
	drv := b.open().(*postgres.Driver)
	c := newClient(t, drv, fastConfig(uniqueApp("pipe"), mensageria.NewRegistry().MustRegister("t", &recorder{})))
	// PrepareEnqueue does not touch the database: the app registers first.
	if _, err := c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.PrepareEnqueue(mensageria.Message{Type: "nope", Key: "k"}); !errors.Is(err, mensageria.ErrNoSender) {
		t.Fatalf("PrepareEnqueue of an unregistered type: %v", err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := drv.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p, ids, err := c.PrepareEnqueue(mensageria.Message{Type: "t", Key: fmt.Sprintf("k-%v", commit)})
		if err != nil || len(ids) != 1 {
			t.Fatal(err)
		}
		batch := &pgx.Batch{}
		batch.Queue("SELECT 1") // the business write
		drv.QueueInsert(batch, p)
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key = 'k-false'"); n != 0 {
		t.Fatalf("a rolled-back pipelined enqueue left %d rows", n)
	}
	if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key = 'k-true'"); n != 1 {
		t.Fatalf("a committed pipelined enqueue left %d rows", n)
	}
}

// Keys the database cannot store are refused before anything is written,
// with the error that says why, instead of a database error mid-transaction.
func TestUnstorableKeysAreRefused(t *testing.T) {
	if err := mensageria.NewRegistry().Register("t\x00", &recorder{}); !errors.Is(err, mensageria.ErrConfig) {
		t.Errorf("registering a type with NUL: %v, want ErrConfig", err)
	}
	forEachBackend(t, func(t *testing.T, b *backend) {
		in, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: "nul"})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		for _, key := range []string{"a\x00b", "a\xffb"} {
			d := &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: "t", Key: key, Attempt: 1}
			_, err := in.Apply(context.Background(), d, func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
				ran = true
				return nil
			})
			if !errors.Is(err, mensageria.ErrInvalidMessage) {
				t.Errorf("Apply with key %q: %v, want ErrInvalidMessage", key, err)
			}
		}
		if ran {
			t.Error("the effect ran for a refused delivery")
		}
	})
}
