package mensageria_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
)

// lazyDriver is a PostgreSQL driver on a pool that has not connected yet:
// what the Examples below do never reaches the database.
func lazyDriver() *postgres.Driver {
	pool, err := pgxpool.New(context.Background(), "postgres://app@db.internal/app")
	if err != nil {
		panic(err)
	}
	drv, err := postgres.New(pool, nil)
	if err != nil {
		panic(err)
	}
	return drv
}

// New validates the Config and fills its defaults without touching the
// database; a wrong field is a *ConfigError naming it, and every
// configuration error wraps ErrConfig.
func ExampleNew() {
	reg := mensageria.NewRegistry()
	_, err := mensageria.New(lazyDriver(), &mensageria.Config{App: "pedidos", Registry: reg, Lease: 600 * time.Hour})
	var ce *mensageria.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field, errors.Is(err, mensageria.ErrConfig))

	client, err := mensageria.New(lazyDriver(), &mensageria.Config{App: "pedidos", Registry: reg})
	if err != nil {
		panic(err)
	}
	cfg := client.Config()
	fmt.Println(cfg.Lease == mensageria.DefaultLease, cfg.BatchSize == mensageria.DefaultBatchSize, cfg.Election)
	// Output:
	// true Lease true
	// true true leader
}

// A claimed batch's deliveries have the lease less its settle margin; a
// Sender's own timeout must fit in that window (the command's config
// refuses an http timeout beyond it).
func ExampleDeliveryWindow() {
	for _, lease := range []time.Duration{mensageria.DefaultLease, 2 * time.Second} {
		fmt.Printf("lease %v: deliveries %v, settle margin %v\n", lease, mensageria.DeliveryWindow(lease), mensageria.SettleMargin(lease))
	}
	// Output:
	// lease 30s: deliveries 27s, settle margin 3s
	// lease 2s: deliveries 1.5s, settle margin 500ms
}

// The retry horizon is the longest a message keeps being retried by the
// relay's own backoff: a receiver's dedup window (an Inbox's Window, a
// broker's duplicate window) must outlast it, or a late retry passes as
// new.
func ExampleClient_RetryHorizon() {
	reg := mensageria.NewRegistry()
	client, err := mensageria.New(lazyDriver(), &mensageria.Config{App: "pedidos", Registry: reg, MaxAttempts: 5, BackoffBase: time.Second, BackoffMax: time.Minute})
	if err != nil {
		panic(err)
	}
	h := client.RetryHorizon()
	fmt.Println(h, h < mensageria.DefaultInboxWindow)
	// Output: 2m45s true
}

// Enqueue validates every message before anything is written: a type the
// app has no Sender for, or a message without a key, fails at once with a
// typed error, and no orphan row waits for a relay that would never route
// it.
func ExampleNoSenderError() {
	reg := mensageria.NewRegistry().MustRegister("pedido.criado", mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))
	client, err := mensageria.New(lazyDriver(), &mensageria.Config{App: "pedidos", Registry: reg})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	_, err = client.Enqueue(ctx, mensageria.Message{Type: "fatura.emitida", Key: "f-1", Payload: []byte(`{}`)})
	var nse *mensageria.NoSenderError
	fmt.Println(errors.As(err, &nse), nse.Type, errors.Is(err, mensageria.ErrNoSender))

	_, err = client.Enqueue(ctx, mensageria.Message{Type: "pedido.criado", Payload: []byte(`{}`)})
	var ime *mensageria.InvalidMessageError
	fmt.Println(errors.As(err, &ime), ime.Field, errors.Is(err, mensageria.ErrInvalidMessage))
	// Output:
	// true fatura.emitida true
	// true Key true
}
