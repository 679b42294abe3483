// Command http-two-apps runs two applications that talk machine to machine
// over HTTP through one shared PostgreSQL schema:
//
//   - "orders" closes orders and, in the same transaction, enqueues an
//     "order.closed" message for billing;
//   - "billing" receives it through its inbox, issues an invoice and, in
//     that same inbox transaction, enqueues "invoice.issued" back to
//     orders, which marks the order invoiced.
//
// Each app registers only its own type and its own inbox, and its Client
// records them as the app's in the schema's ownership catalog when it
// starts: each relay claims only its own rows of the shared outbox and
// purges only its own inbox's records, and an app that routed the other's
// type by mistake would fail to start. Both run in this one process for
// the sake of a single `go run`; they share nothing but the database and
// the wire.
//
//	go run ./examples/http-two-apps -dsn postgres://postgres@127.0.0.1:5432/test?sslmode=disable
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL both apps share")
	schema := flag.String("schema", "mensageria_example", "the shared mensageria schema (the example's tables go there too)")
	n := flag.Int("n", 10, "orders to close")
	flag.Parse()
	if err := run(*dsn, *schema, *n); err != nil {
		log.Fatal(err)
	}
}

// app is one application: its relay, and the HTTP endpoint it receives on.
type app struct {
	client *mensageria.Client
	srv    *http.Server
}

// The two messages' payloads.
type (
	orderClosed struct {
		Order string `json:"order"`
		Total string `json:"total"`
	}
	invoiceIssued struct {
		Order   string `json:"order"`
		Invoice string `json:"invoice"`
	}
)

func run(dsn, schema string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(m2mhttp.NewLogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))

	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	drv, err := prepareSchema(ctx, pool, dsn, schema)
	if err != nil {
		return err
	}

	// Listeners first: each app must know the other's URL.
	ordersLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	billingLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ordersURL := "http://" + ordersLn.Addr().String() + "/m2m/invoices"
	billingURL := "http://" + billingLn.Addr().String() + "/m2m/orders"

	billing, err := startBilling(ctx, drv, logger, schema, billingLn, ordersURL)
	if err != nil {
		return err
	}
	defer billing.stop()
	orders, err := startOrders(ctx, drv, logger, schema, ordersLn, billingURL)
	if err != nil {
		return err
	}
	defer orders.stop()

	if err := closeOrders(ctx, pool, orders, schema, n); err != nil {
		return err
	}
	if err := awaitInvoices(ctx, pool, schema); err != nil {
		return err
	}
	return printOrders(ctx, pool, schema)
}

// prepareSchema migrates the shared schema and (re)creates the example's
// own tables in it.
func prepareSchema(ctx context.Context, pool *pgxpool.Pool, dsn, schema string) (*postgres.Driver, error) {
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	// One app owns the schema's migrations (the first to migrate it up is
	// recorded); the other would use driver.MigrateCheck.
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "orders"}); err != nil {
		return nil, fmt.Errorf("migrate (is PostgreSQL up at %s?): %w", dsn, err)
	}
	if _, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS `+schema+`.example_orders (id text PRIMARY KEY, total numeric NOT NULL, invoice text);
		CREATE TABLE IF NOT EXISTS `+schema+`.example_invoices (id text PRIMARY KEY, order_id text UNIQUE NOT NULL, total numeric NOT NULL);
		TRUNCATE `+schema+`.example_orders, `+schema+`.example_invoices`); err != nil {
		return nil, err
	}
	return drv, nil
}

// startBilling starts billing: it receives order.closed on ln and sends
// invoice.issued to orders at ordersURL.
func startBilling(ctx context.Context, drv *postgres.Driver, logger *slog.Logger, schema string, ln net.Listener, ordersURL string) (*app, error) {
	var billing *app
	var err error
	billing, err = newApp(ctx, drv, logger, "billing", "invoice.issued", ordersURL, "token-to-orders", "token-to-billing", ln,
		"order.closed", func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			var m orderClosed
			if err := json.Unmarshal(d.Payload, &m); err != nil {
				return mensageria.Permanent(fmt.Errorf("payload: %w", err))
			}
			invoice := "INV-" + m.Order
			ptx := tx.Raw().(pgx.Tx)
			if _, err := ptx.Exec(ctx, `INSERT INTO `+schema+`.example_invoices (id, order_id, total) VALUES ($1, $2, $3)`, invoice, m.Order, m.Total); err != nil {
				return err
			}
			m2mhttp.Logger(ctx).InfoContext(ctx, "invoice issued", "invoice", invoice)
			// The reply commits with the invoice and the dedup record.
			body, _ := json.Marshal(invoiceIssued{Order: m.Order, Invoice: invoice})
			_, err := billing.client.EnqueueTx(ctx, ptx, mensageria.Message{Type: "invoice.issued", Key: invoice, Payload: body,
				Headers: map[string]string{mensageria.HeaderRequestID: m2mhttp.RequestID(ctx)}})
			return err
		})
	return billing, err
}

// startOrders starts orders: it sends order.closed to billing at
// billingURL and receives invoice.issued on ln.
func startOrders(ctx context.Context, drv *postgres.Driver, logger *slog.Logger, schema string, ln net.Listener, billingURL string) (*app, error) {
	return newApp(ctx, drv, logger, "orders", "order.closed", billingURL, "token-to-billing", "token-to-orders", ln,
		"invoice.issued", func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			var m invoiceIssued
			if err := json.Unmarshal(d.Payload, &m); err != nil {
				return mensageria.Permanent(fmt.Errorf("payload: %w", err))
			}
			_, err := tx.Raw().(pgx.Tx).Exec(ctx, `UPDATE `+schema+`.example_orders SET invoice = $2 WHERE id = $1`, m.Order, m.Invoice)
			return err
		})
}

// closeOrders runs the business transaction of orders n times: close the
// order and enqueue its message together, or neither.
func closeOrders(ctx context.Context, pool *pgxpool.Pool, orders *app, schema string, n int) error {
	for i := range n {
		id := fmt.Sprintf("ORD-%03d", i+1)
		total := fmt.Sprintf("%d.50", 10+i)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.example_orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
				return err
			}
			body, _ := json.Marshal(orderClosed{Order: id, Total: total})
			_, err := orders.client.EnqueueTx(ctx, tx, mensageria.Message{Type: "order.closed", Key: id, Payload: body})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// awaitInvoices returns once every order has its invoice: the round trip
// orders → billing → orders is done.
func awaitInvoices(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	for {
		var left int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.example_orders WHERE invoice IS NULL`).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d orders still without an invoice: %w", left, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// printOrders prints every order with its invoice.
func printOrders(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	rows, err := pool.Query(ctx, `SELECT o.id, o.total, o.invoice FROM `+schema+`.example_orders o ORDER BY o.id`)
	if err != nil {
		return err
	}
	fmt.Println("order     total   invoice")
	for rows.Next() {
		var id, total, invoice string
		if err := rows.Scan(&id, &total, &invoice); err != nil {
			return err
		}
		fmt.Printf("%-9s %7s %s\n", id, total, invoice)
	}
	return rows.Err()
}

// newApp starts one application: a relay that sends sendType to peerURL,
// and a receiver on ln that applies recvType through its inbox.
func newApp(ctx context.Context, drv *postgres.Driver, logger *slog.Logger, name, sendType, peerURL, peerToken, ownToken string,
	ln net.Listener, recvType string, effect mensageria.Effect) (*app, error) {
	sender, err := m2mhttp.NewSender(m2mhttp.SenderConfig{URL: peerURL, Token: peerToken})
	if err != nil {
		return nil, err
	}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: name + "." + recvType})
	if err != nil {
		return nil, err
	}
	reg := mensageria.NewRegistry().MustRegister(sendType, sender)
	if err := reg.RegisterInbox(inbox); err != nil {
		return nil, err
	}
	client, err := mensageria.New(drv, &mensageria.Config{
		App:      name,
		Registry: reg,
		Logger:   logger.With("app", name),
	})
	if err != nil {
		return nil, err
	}
	rc, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{
		Tokens:   []string{ownToken},
		Handlers: map[string]m2mhttp.Handler{recvType: {Inbox: inbox, Effect: effect}},
		Logger:   logger.With("app", name),
	})
	if err != nil {
		return nil, err
	}
	a := &app{client: client, srv: &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serve", "app", name, "err", err)
		}
	}()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *app) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.client.Stop(ctx)
	_ = a.srv.Shutdown(ctx)
}
