package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
)

// Payload is the message body of every scenario: the same document the raw
// pgbench figures in docs/benchmarks.md insert.
const Payload = `{"order_id": 12345, "customer": "c-000042", "amount_cents": 1999, "currency": "EUR", "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]}`

// Env is a PostgreSQL schema that a scenario may fill and empty. Scenarios
// migrate it themselves and create their own side tables in it.
type Env struct {
	Pool   *pgxpool.Pool
	Schema string
}

func (e Env) driver() (*postgres.Driver, error) {
	d, err := postgres.New(e.Pool, &postgres.Config{Schema: e.Schema})
	if err != nil {
		return nil, err
	}
	_, err = d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp})
	return d, err
}

func (e Env) exec(ctx context.Context, sql string, args ...any) error {
	_, err := e.Pool.Exec(ctx, sql, args...)
	return err
}

// sideSchema creates schema name next to e's, in the same database, for
// a variant that needs an outbox of its own; drop removes it.
func (e Env) sideSchema(ctx context.Context, name string) (side Env, drop func(), err error) {
	side = Env{Pool: e.Pool, Schema: name}
	if err := e.exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return Env{}, nil, err
	}
	return side, func() {
		dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = e.exec(dropCtx, "DROP SCHEMA "+name+" CASCADE")
	}, nil
}

// relayApp is the app whose relay newRelay starts for typ.
func relayApp(typ string) string { return "bench-" + typ }

// own records in the catalog that app owns types, as its relay would at
// start: the database refuses rows of a type no app owns, so a scenario
// that fills the outbox by SQL before its relay runs registers first.
func (e Env) own(ctx context.Context, app string, types ...string) error {
	d, err := postgres.New(e.Pool, &postgres.Config{Schema: e.Schema})
	if err != nil {
		return err
	}
	return own(ctx, d, app, types...)
}

// own records types as app's in the catalog of d's schema, as the app's
// relay does at start: the outbox refuses rows of a type no app owns.
func own(ctx context.Context, d driver.Driver, app string, types ...string) error {
	_, err := ownerClient(ctx, d, app, types...)
	return err
}

// ownerClient is a client of app on d whose types route to a no-op
// Sender, once it has recorded the app's ownership of them
// (Client.Register, as a relay does at start).
func ownerClient(ctx context.Context, d driver.Driver, app string, types ...string) (*mensageria.Client, error) {
	reg := mensageria.NewRegistry()
	for _, t := range types {
		reg.MustRegister(t, noop)
	}
	c, err := mensageria.New(d, &mensageria.Config{App: app, Registry: reg, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	if _, err := c.Register(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// fill inserts n pending rows of typ with one statement, typ owned by the
// app of its relay.
func (e Env) fill(ctx context.Context, typ string, n int) error {
	if err := e.own(ctx, relayApp(typ), typ); err != nil {
		return err
	}
	return e.exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload)
		SELECT $1, 'k-' || g, $2::json FROM generate_series(1, $3) g`, e.Schema), typ, Payload, n)
}

// settle runs the maintenance a bulk fill leaves due.
func (e Env) settle(ctx context.Context) error {
	if err := e.exec(ctx, "VACUUM ANALYZE "+e.Schema+".outbox"); err != nil {
		return err
	}
	return e.exec(ctx, "CHECKPOINT")
}

// deliveredCounter counts settled deliveries through the client's hook.
type deliveredCounter struct {
	n    atomic.Int64
	done chan struct{}
	want int64
	once sync.Once
}

func (c *deliveredCounter) OnDelivery(ev mensageria.DeliveryEvent) {
	if ev.Outcome == mensageria.OutcomeDelivered && c.n.Add(1) == c.want {
		c.once.Do(func() { close(c.done) })
	}
}

var noop = mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil })

// relayDrain starts a relay over an already filled backlog and times it
// until want messages are delivered and settled.
func relayDrain(ctx context.Context, d driver.Driver, typ string, want int) (float64, error) {
	return relayDrainTo(ctx, d, typ, noop, 0, want)
}

// relayDrainTo is relayDrain with the Sender, the claim size (0: the
// default) and more hooks on the relay given.
func relayDrainTo(ctx context.Context, d driver.Driver, typ string, s mensageria.Sender, batchSize, want int, hooks ...mensageria.Hook) (float64, error) {
	counter := &deliveredCounter{done: make(chan struct{}), want: int64(want)}
	c, err := newRelay(d, typ, s, batchSize, append([]mensageria.Hook{counter}, hooks...)...)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	if err := c.Start(ctx); err != nil {
		return 0, err
	}
	select {
	case <-counter.done:
	case <-ctx.Done():
	}
	elapsed := time.Since(began)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = c.Stop(stopCtx)
	if ctx.Err() != nil {
		return 0, fmt.Errorf("drain of %d %s: %w after %d", want, typ, ctx.Err(), counter.n.Load())
	}
	return float64(want) / elapsed.Seconds(), nil
}

// rawDrain is the ceiling: the bare SKIP LOCKED drain of
// shared/perf/drain100.sql on a plain table with the same rows, one client,
// simple protocol.
func rawDrain(ctx context.Context, e Env, n int) (float64, error) {
	t := e.Schema + ".raw_t"
	steps := []string{
		"DROP TABLE IF EXISTS " + t,
		"CREATE TABLE " + t + ` (id bigserial PRIMARY KEY, msg_type text NOT NULL, payload jsonb NOT NULL,
			state text NOT NULL DEFAULT 'pending', created_at timestamptz NOT NULL DEFAULT now())`,
		"CREATE INDEX ON " + t + " (id) WHERE state = 'pending'",
	}
	for _, s := range steps {
		if err := e.exec(ctx, s); err != nil {
			return 0, err
		}
	}
	if err := e.exec(ctx, "INSERT INTO "+t+" (msg_type, payload) SELECT 'order.created', $1::jsonb FROM generate_series(1, $2)", Payload, n); err != nil {
		return 0, err
	}
	q := "UPDATE " + t + " SET state = 'done' WHERE id IN (SELECT id FROM " + t +
		" WHERE state = 'pending' ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED)"
	conn, err := e.Pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	began := time.Now()
	done := 0
	for done < n {
		tag, err := conn.Exec(ctx, q, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return 0, err
		}
		if tag.RowsAffected() == 0 {
			break
		}
		done += int(tag.RowsAffected())
	}
	rate := float64(done) / time.Since(began).Seconds()
	return rate, e.exec(ctx, "DROP TABLE "+t)
}

// Drain measures the relay draining a backlog of n messages to a no-op
// Sender, against the raw drain of the same number of rows, in one run.
func Drain(ctx context.Context, e Env, n int) (Result, error) {
	r := Result{Scenario: "drain"}
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	raw, err := rawDrain(ctx, e, n)
	if err != nil {
		return r, err
	}
	if err := e.fill(ctx, "bench.drain", n); err != nil {
		return r, err
	}
	rate, err := relayDrain(ctx, d, "bench.drain", n)
	if err != nil {
		return r, err
	}
	r.Set("msgs", float64(n))
	r.Set("msgs/s", rate)
	r.Set("raw-rows/s", raw)
	r.Set("raw-ratio", rate/raw)
	return r, nil
}

// Backlog compares the drain rate over the first `sample` messages of a
// small backlog and of a large one.
func Backlog(ctx context.Context, e Env, small, large, sample int) (Result, error) {
	r := Result{Scenario: "backlog"}
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	if err := e.fill(ctx, "bench.small", small); err != nil {
		return r, err
	}
	if err := e.settle(ctx); err != nil {
		return r, err
	}
	smallRate, err := relayDrain(ctx, d, "bench.small", min(sample, small))
	if err != nil {
		return r, err
	}
	if err := e.fill(ctx, "bench.large", large); err != nil {
		return r, err
	}
	// A backlog builds up over time, with autovacuum and checkpoints
	// keeping pace; a bulk fill makes it in seconds and leaves a vacuum of
	// the whole table and a checkpoint due, which would run during (and be
	// billed to) the drain. Run them before timing, as for the small one.
	if err := e.settle(ctx); err != nil {
		return r, err
	}
	largeRate, err := relayDrain(ctx, d, "bench.large", min(sample, large))
	if err != nil {
		return r, err
	}
	r.Set("small-backlog", float64(small))
	r.Set("large-backlog", float64(large))
	r.Set("small-msgs/s", smallRate)
	r.Set("large-msgs/s", largeRate)
	r.Set("backlog-ratio", largeRate/smallRate)
	return r, nil
}

// business creates the side tables of a "business transaction": an order
// insert and a customer update, what a real enqueueing service does.
func (e Env) business(ctx context.Context) error {
	return e.exec(ctx, fmt.Sprintf(`
		CREATE TABLE IF NOT EXISTS %[1]s.bench_orders (id bigserial PRIMARY KEY, customer int NOT NULL, body jsonb NOT NULL);
		CREATE TABLE IF NOT EXISTS %[1]s.bench_customers (id int PRIMARY KEY, orders int NOT NULL DEFAULT 0);
		INSERT INTO %[1]s.bench_customers (id) SELECT g FROM generate_series(0, 999) g ON CONFLICT DO NOTHING;`, e.Schema))
}

func (e Env) businessWrite(ctx context.Context, tx pgx.Tx, customer int) error {
	return tx.SendBatch(ctx, e.businessBatch(customer)).Close()
}

// businessBatch is the business transaction's writes for customer, to be
// sent in one round trip.
func (e Env) businessBatch(customer int) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("INSERT INTO "+e.Schema+".bench_orders (customer, body) VALUES ($1, $2)", customer, Payload)
	b.Queue("UPDATE "+e.Schema+".bench_customers SET orders = orders + 1 WHERE id = $1", customer)
	return b
}

// SteadyState runs `producers` goroutines that each commit one business
// transaction with one message as fast as they can for dur, while the relay
// delivers to a no-op Sender. Latency runs from commit to the Sender.
func SteadyState(ctx context.Context, e Env, producers int, dur time.Duration) (Result, error) {
	r := Result{Scenario: "steady-state"}
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	if err := e.business(ctx); err != nil {
		return r, err
	}
	received := &firstSends{at: map[uuid.UUID]time.Time{}}
	c, err := mensageria.New(d, &mensageria.Config{
		App:      "bench-steady",
		Registry: mensageria.NewRegistry().MustRegister("bench.steady", mensageria.SenderFunc(received.send)),
		Logger:   quiet(),
	})
	if err != nil {
		return r, err
	}
	if err := c.Start(ctx); err != nil {
		return r, err
	}
	runCtx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	began := time.Now()
	committed, produceErr := e.steadyProduce(runCtx, c, producers)
	window := time.Since(began)
	received.mu.Lock()
	deliveredInWindow := len(received.at)
	received.mu.Unlock()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	_ = c.Stop(stopCtx)
	if produceErr != nil {
		return r, produceErr
	}
	var lat Latencies
	enqueued := 0
	received.mu.Lock()
	for _, m := range committed {
		enqueued += len(m)
		for id, at := range m {
			if got, ok := received.at[id]; ok {
				lat.Add(max(got.Sub(at), 0))
			}
		}
	}
	received.mu.Unlock()
	r.Set("producers", float64(producers))
	r.Set("enqueue/s", float64(enqueued)/window.Seconds())
	r.Set("delivered/s", float64(deliveredInWindow)/window.Seconds())
	r.Set("keepup-ratio", float64(deliveredInWindow)/float64(max(enqueued, 1)))
	r.Set("p50-ms", lat.PercentileMs(50))
	r.Set("p99-ms", lat.PercentileMs(99))
	return r, nil
}

// firstSends records when the Sender first saw each message.
type firstSends struct {
	mu sync.Mutex
	at map[uuid.UUID]time.Time
}

func (f *firstSends) send(_ context.Context, dl *mensageria.Delivery) error {
	now := time.Now()
	f.mu.Lock()
	if _, seen := f.at[dl.ID]; !seen {
		f.at[dl.ID] = now
	}
	f.mu.Unlock()
	return nil
}

// steadyProduce has producers commit business transactions with one
// message each through c until ctx ends, and returns, per producer, when
// each message committed, and the first error.
func (e Env) steadyProduce(ctx context.Context, c *mensageria.Client, producers int) ([]map[uuid.UUID]time.Time, error) {
	committed := make([]map[uuid.UUID]time.Time, producers)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		committed[p] = map[uuid.UUID]time.Time{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var ids []uuid.UUID
				err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
					if err := e.businessWrite(ctx, tx, (p*7919+i)%1000); err != nil {
						return err
					}
					var err error
					ids, err = c.EnqueueTx(ctx, tx, mensageria.Message{Type: "bench.steady", Key: fmt.Sprintf("o-%d-%d", p, i), Payload: []byte(Payload)})
					return err
				})
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				committed[p][ids[0]] = time.Now()
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return committed, err
	default:
		return committed, nil
	}
}

// EnqueueOverhead times one business transaction without and with one
// enqueue, sequentially on one connection, and the same with a NOTIFY on
// every enqueue to show what debouncing saves.
func EnqueueOverhead(ctx context.Context, e Env, dur time.Duration) (Result, error) {
	r := Result{Scenario: "enqueue-overhead"}
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	if err := e.business(ctx); err != nil {
		return r, err
	}
	client := func(debounce time.Duration, pollOnly bool) (*mensageria.Client, error) {
		return mensageria.New(d, &mensageria.Config{
			App:            "bench-overhead",
			Registry:       mensageria.NewRegistry().MustRegister("bench.overhead", noop),
			NotifyDebounce: debounce,
			PollOnly:       pollOnly,
			Logger:         quiet(),
		})
	}
	def, err := client(0, false)
	if err != nil {
		return r, err
	}
	every, err := client(time.Nanosecond, false)
	if err != nil {
		return r, err
	}
	silent, err := client(0, true)
	if err != nil {
		return r, err
	}
	// The pipelined variant writes through PrepareEnqueue, which leaves
	// recording the app's types to Register; the others would do it on
	// their first enqueue, inside the timed loop.
	if _, err := def.Register(ctx); err != nil {
		return r, err
	}
	// The variants, in the order of per below: the business transaction
	// alone, with an enqueue (debounced NOTIFY, no NOTIFY, a NOTIFY every
	// commit), and with the enqueue pipelined in the business write's own
	// batch (PrepareEnqueue + QueueInsert: no round trip of its own).
	variants := []func(pgx.Tx, int) error{
		e.overheadWrite(ctx, nil), e.overheadWrite(ctx, def), e.overheadWrite(ctx, silent), e.overheadWrite(ctx, every),
		e.pipelinedWrite(ctx, d, def),
	}
	// Interleave short runs of every variant many times, so that drift on
	// the machine (checkpoints, autovacuum, the disk's own cache) hits all
	// of them alike; each ratio is a median over the rounds.
	const rounds = 12
	per := make([][]float64, len(variants))
	for round := 0; round < rounds; round++ {
		for i, write := range variants {
			us, err := e.perTxMicros(ctx, dur/4, write)
			if err != nil {
				return r, err
			}
			per[i] = append(per[i], us)
		}
	}
	ratio := func(i int) float64 {
		rs := make([]float64, rounds)
		for k := range rs {
			rs[k] = per[i][k] / per[0][k]
		}
		sort.Float64s(rs)
		return rs[rounds/2]
	}
	// per[i][rounds/2] is a representative absolute figure.
	r.Set("business-us", per[0][rounds/2])
	r.Set("with-enqueue-us", per[1][rounds/2])
	r.Set("overhead-ratio", ratio(1))
	r.Set("no-notify-ratio", ratio(2))
	r.Set("notify-every-commit-ratio", ratio(3))
	r.Set("pipelined-ratio", ratio(4))
	return r, nil
}

// overheadWrite is the business write n, with one enqueue through c
// unless c is nil.
func (e Env) overheadWrite(ctx context.Context, c *mensageria.Client) func(pgx.Tx, int) error {
	return func(tx pgx.Tx, n int) error {
		if err := e.businessWrite(ctx, tx, n%1000); err != nil {
			return err
		}
		if c == nil {
			return nil
		}
		_, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: "bench.overhead", Key: fmt.Sprint(n), Payload: []byte(Payload)})
		return err
	}
}

// pipelinedWrite is the business write n with c's enqueue queued in the
// same batch.
func (e Env) pipelinedWrite(ctx context.Context, d *postgres.Driver, c *mensageria.Client) func(pgx.Tx, int) error {
	return func(tx pgx.Tx, n int) error {
		b := e.businessBatch(n % 1000)
		p, _, err := c.PrepareEnqueue(mensageria.Message{Type: "bench.overhead", Key: fmt.Sprint(n), Payload: []byte(Payload)})
		if err != nil {
			return err
		}
		d.QueueInsert(b, p)
		return tx.SendBatch(ctx, b).Close()
	}
}

// perTxMicros runs write(n) in one transaction after another for dur,
// n counting from 0, and returns the mean microseconds of one.
func (e Env) perTxMicros(ctx context.Context, dur time.Duration, write func(tx pgx.Tx, n int) error) (float64, error) {
	deadline := time.Now().Add(dur)
	n := 0
	began := time.Now()
	for ; time.Now().Before(deadline); n++ {
		if err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error { return write(tx, n) }); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(began).Microseconds()) / float64(n), nil
}
