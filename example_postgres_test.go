package mensageria_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
)

// The README's "Use it", run: the order and its message commit in one
// transaction, and the relay hands the message to the type's Sender.
func ExampleClient_EnqueueTx_postgres() {
	pool, drv, done := openExampleDB()
	defer done()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id int PRIMARY KEY, total int)"); err != nil {
		panic(err)
	}

	delivered := make(chan *mensageria.Delivery, 1)
	reg := mensageria.NewRegistry().MustRegister("pedido.criado", mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
		delivered <- d // an m2mhttp.Sender in production
		return nil
	}))
	client, err := mensageria.New(drv, &mensageria.Config{App: "pedidos", Registry: reg})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(context.Background())

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx) // a no-op once committed
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (1234, 1999)"); err != nil {
		panic(err)
	}
	if _, err := client.EnqueueTx(ctx, tx, mensageria.Message{
		Type: "pedido.criado", Key: "pedido-1234", Payload: []byte(`{"id":1234,"total":1999}`),
	}); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	d := <-delivered
	fmt.Println(d.Type, d.Key, string(d.Payload), "attempt", d.Attempt)
	// Output: pedido.criado pedido-1234 {"id":1234,"total":1999} attempt 1
}

// The enqueue rides on the business write's own round trip: PrepareEnqueue
// validates the messages without the database, and the driver queues
// their insert into the caller's pgx.Batch.
func ExampleClient_PrepareEnqueue_postgres() {
	pool, drv, done := openExampleDB()
	defer done()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE orders (id int PRIMARY KEY, total int)"); err != nil {
		panic(err)
	}
	reg := mensageria.NewRegistry().MustRegister("pedido.criado", mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	client, err := mensageria.New(drv, &mensageria.Config{App: "pedidos", Registry: reg})
	if err != nil {
		panic(err)
	}
	// PrepareEnqueue cannot record the app's ownership of its types:
	// Register (or Start, or one Enqueue) does, once.
	if _, err := client.Register(ctx); err != nil {
		panic(err)
	}

	rows, ids, err := client.PrepareEnqueue(mensageria.Message{Type: "pedido.criado", Key: "pedido-1234", Payload: []byte(`{"id":1234}`)})
	if err != nil {
		panic(err) // *NoSenderError, *InvalidMessageError
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	b.Queue("INSERT INTO orders VALUES (1234, 1999)")
	drv.QueueInsert(b, rows)
	if err := postgres.EnqueueError(tx.SendBatch(ctx, b).Close()); err != nil {
		panic(err) // the typed refusals EnqueueTx returns
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	stats, err := drv.Stats(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(ids), "message enqueued;", stats[0].Type, "pending:", stats[0].Pending)
	// Output: 1 message enqueued; pedido.criado pending: 1
}

// An Inbox applies each natural key once, in the transaction of the
// effect, however many times the relay delivers the message.
func ExampleInbox_Apply_postgres() {
	pool, drv, done := openExampleDB()
	defer done()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE invoices (order_key text PRIMARY KEY)"); err != nil {
		panic(err)
	}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "faturamento"})
	if err != nil {
		panic(err)
	}
	invoice := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO invoices VALUES ($1)", d.Key)
		return err
	}

	d := &mensageria.Delivery{Type: "pedido.criado", Key: "pedido-1234", Payload: []byte(`{"id":1234}`), CreatedAt: time.Now()}
	for range 3 { // a lost answer, a lease that ran out: the same message again
		res, err := inbox.Apply(ctx, d, invoice)
		fmt.Println("duplicate:", res.Duplicate, "err:", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM invoices").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("invoices:", n)

	// The same key with another payload is a conflict, not a duplicate.
	other := *d
	other.Payload = []byte(`{"id":1234,"total":1}`)
	_, err = inbox.Apply(ctx, &other, invoice)
	fmt.Println("conflict:", errors.Is(err, mensageria.ErrConflict))
	// Output:
	// duplicate: false err: <nil>
	// duplicate: true err: <nil>
	// duplicate: true err: <nil>
	// invoices: 1
	// conflict: true
}

// deliveryLog is a hook: any value with one or more of the On* methods.
type deliveryLog struct{ done chan struct{} }

func (l deliveryLog) OnDelivery(ev mensageria.DeliveryEvent) {
	fmt.Println(ev.Type, ev.Key, "attempt", ev.Attempt, ev.Outcome)
	if ev.Outcome == mensageria.OutcomeDelivered {
		close(l.done)
	}
}

// A failed attempt is retried after its backoff; a hook hears of every
// attempt's outcome once it is recorded (metrics, traces, logs).
func ExampleOnDelivery_postgres() {
	_, drv, done := openExampleDB()
	defer done()
	ctx := context.Background()

	var attempts atomic.Int32
	flaky := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
		if attempts.Add(1) == 1 {
			return errors.New("503 from the receiver") // retried
		}
		return nil
	})
	log := deliveryLog{done: make(chan struct{})}
	client, err := mensageria.New(drv, &mensageria.Config{
		App:         "pedidos",
		Registry:    mensageria.NewRegistry().MustRegister("pedido.criado", flaky),
		Hooks:       []mensageria.Hook{log},
		BackoffBase: 10 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(context.Background())
	if _, err := client.Enqueue(ctx, mensageria.Message{Type: "pedido.criado", Key: "pedido-1234", Payload: []byte(`{}`)}); err != nil {
		panic(err)
	}
	<-log.done
	// Output:
	// pedido.criado pedido-1234 attempt 1 retry
	// pedido.criado pedido-1234 attempt 2 delivered
}
