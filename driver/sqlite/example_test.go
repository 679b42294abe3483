package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

// openExampleDB opens a throwaway embedded database.
func openExampleDB() (*sqlite.Driver, func()) {
	dir, err := os.MkdirTemp("", "mensageria-example")
	if err != nil {
		panic(err)
	}
	drv, err := sqlite.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	if _, err := drv.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		panic(err)
	}
	return drv, func() { _ = drv.Close(); _ = os.RemoveAll(dir) }
}

// A sender enqueues inside its business transaction; the relay delivers
// the message through the Sender registered for its type.
func Example_outbox() {
	drv, done := openExampleDB()
	defer done()
	ctx := context.Background()

	delivered := make(chan *mensageria.Delivery, 1)
	reg := mensageria.NewRegistry()
	reg.MustRegister("pedido.criado", mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
		delivered <- d
		return nil
	}))
	client, err := mensageria.New(drv, &mensageria.Config{App: "pedidos", Registry: reg, PollInterval: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}

	// Start records that app "pedidos" owns "pedido.criado" and runs the
	// relay; another app registering the type would be refused.
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	defer client.Stop(ctx)

	tx, _ := drv.DB().BeginTx(ctx, nil)
	// ... the business write goes here, in tx ...
	if _, err := client.EnqueueTx(ctx, tx, mensageria.Message{Type: "pedido.criado", Key: "pedido-1234", Payload: []byte(`{"total":1999}`)}); err != nil {
		panic(err)
	}
	_ = tx.Commit()

	d := <-delivered
	fmt.Println(d.Type, d.Key, string(d.Payload), "attempt", d.Attempt)
	// Output: pedido.criado pedido-1234 {"total":1999} attempt 1
}

// Enqueueing a type the app has no Sender for fails at once and writes
// nothing: no orphan row that no relay would ever route.
func Example_failFast() {
	drv, done := openExampleDB()
	defer done()
	client, _ := mensageria.New(drv, &mensageria.Config{App: "pedidos", Registry: mensageria.NewRegistry()})

	_, err := client.Enqueue(context.Background(), mensageria.Message{Type: "fatura.emitida", Key: "f-1"})
	var nse *mensageria.NoSenderError
	fmt.Println(errors.As(err, &nse), nse.Type, errors.Is(err, mensageria.ErrNoSender))
	// Output: true fatura.emitida true
}

// The inbox applies each natural key once, in the same transaction as the
// effect, however many times the message arrives.
func Example_inbox() {
	drv, done := openExampleDB()
	defer done()
	ctx := context.Background()
	_, _ = drv.DB().Exec("CREATE TABLE closings (order_key TEXT PRIMARY KEY)")
	inbox, _ := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "faturamento"})

	msg := &mensageria.Delivery{Type: "pedido.encerrado", Key: "pedido-1234", CreatedAt: time.Now()}
	for range 3 { // the relay redelivers: lost ack, lease expiry, ...
		res, err := inbox.Apply(ctx, msg, func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, "INSERT INTO closings (order_key) VALUES (?)", d.Key)
			return err
		})
		fmt.Println("duplicate:", res.Duplicate, "err:", err)
	}
	var n int
	_ = drv.DB().QueryRow("SELECT count(*) FROM closings").Scan(&n)
	fmt.Println("closings:", n)
	// Output:
	// duplicate: false err: <nil>
	// duplicate: true err: <nil>
	// duplicate: true err: <nil>
	// closings: 1
}
