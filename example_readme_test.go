package mensageria_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// The README's "Use it", compiled here so that it cannot stop compiling
// (TestReadmeCodeIsCompiledCode checks the README shows exactly the
// marked region): a PostgreSQL driver, a registry with an HTTP route per
// type, the relay, and an enqueue inside the app's own transaction. It
// needs a database and a receiver, so it is compiled, not run;
// ExampleClient_EnqueueTx_postgres runs the same calls on the test
// database, and driver/sqlite's examples on an embedded one.
func Example_useIt() {
	if err := useIt(context.Background()); err != nil {
		fmt.Println(err)
	}
}

func useIt(ctx context.Context) error {
	// README:begin use-it
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	drv, err := postgres.New(pool, &postgres.Config{Schema: "mensageria"})
	if err != nil {
		return err
	}
	// Or apply `mensageria migrate sql` with your own migration tool.
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "pedidos"}); err != nil {
		return err
	}

	billing, err := m2mhttp.NewSender(m2mhttp.SenderConfig{
		URL:   "https://faturamento.internal/m2m",
		Token: os.Getenv("FATURAMENTO_TOKEN"),
	})
	if err != nil {
		return err
	}
	reg := mensageria.NewRegistry()
	reg.MustRegister("pedido.criado", billing)
	reg.MustRegister("pedido.status", billing, mensageria.Ordered())

	client, err := mensageria.New(drv, &mensageria.Config{App: "pedidos", Registry: reg})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil { // the relay
		return err
	}
	defer client.Stop(context.Background()) // drains gracefully

	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // a no-op once committed
	// … your business write in tx …
	if _, err := client.EnqueueTx(ctx, tx, mensageria.Message{
		Type: "pedido.criado", Key: "pedido-1234", Payload: json.RawMessage(`{"id":1234}`),
	}); err != nil {
		return err // *NoSenderError, *InvalidMessageError, or the database's error
	}
	return tx.Commit(ctx) // the business write and its message, or neither
	// README:end use-it
}
