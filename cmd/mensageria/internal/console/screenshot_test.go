package console

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/ops"
)

// EnvScreenshot names the file TestBrowserScreenshot writes the main page
// to; docs/console.png is made with
//
//	MENSAGERIA_CONSOLE_SCREENSHOT=$PWD/docs/console.png go test -run TestBrowserScreenshot ./internal/console/
const EnvScreenshot = "MENSAGERIA_CONSOLE_SCREENSHOT"

// seedShowcase fills d with what an operator's morning looks like: three
// apps, a backlog, dead letters, messages in doubt, a paused route and an
// hour of deliveries.
func seedShowcase(t *testing.T, d *sqlite.Driver) {
	t.Helper()
	ctx := context.Background()
	apps := map[string][]string{
		"pedidos":   {"pedido.criado", "pedido.pago", "pedido.cancelado", "pagamento.capturado"},
		"billing":   {"fatura.emitida", "fatura.vencida"},
		"logistica": {"envio.despachado", "envio.entregue"},
	}
	for app, types := range apps {
		own(t, d, app, types...)
	}
	backlog := map[string]int{"pedido.criado": 42, "pedido.pago": 7, "fatura.emitida": 318, "envio.despachado": 3}
	for typ, n := range backlog {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", typ, i)
		}
		insert(t, d, typ, keys...)
	}
	insert(t, d, "fatura.vencida", "f-1", "f-2", "f-3", "f-4", "f-5")
	kill(t, d, "fatura.vencida", "destination answered 422: invoice already settled")
	insert(t, d, "pedido.cancelado", "p-77")
	kill(t, d, "pedido.cancelado", "permanent: order p-77 unknown to billing")
	// Two payments on an at-most-once route whose receiver timed out, in
	// doubt since 7 minutes.
	insert(t, d, "pagamento.capturado", "pg-1", "pg-2")
	leaveInDoubt(t, d, "pagamento.capturado", "legacy ledger: no answer in 10s")
	if _, err := d.DB().Exec("UPDATE mensageria_outbox SET attempted_at = attempted_at - ? WHERE type = ?", (7*time.Minute + 12*time.Second).Microseconds(), "pagamento.capturado"); err != nil {
		t.Fatal(err)
	}
	// Ages as a backlog has them: the paused route's oldest waits since it
	// paused.
	for typ, ago := range map[string]time.Duration{"fatura.emitida": 12*time.Minute + 31*time.Second, "pedido.criado": 4 * time.Second, "pedido.pago": 1500 * time.Millisecond, "envio.despachado": 800 * time.Millisecond} {
		if _, err := d.DB().Exec("UPDATE mensageria_outbox SET created_at = created_at - ? * (1 + id % 2) / 2 WHERE type = ?", ago.Microseconds(), typ); err != nil {
			t.Fatal(err)
		}
	}
	// The receive daemon's queue of billing's consumer: a backlog and one
	// it parked.
	if _, err := d.Register(ctx, driver.RegisterParams{App: "billing", Resources: []driver.Resource{{Kind: driver.ResourceConsumer, Name: "billing.pedidos", Window: 24 * time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		err := d.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
			var mid [16]byte
			copy(mid[:], fmt.Sprintf("showcase-%07d", i))
			id, err := tx.(driver.InboxQueueTx).QueueInbox(ctx, driver.QueuedDelivery{Consumer: "billing.pedidos", Type: "pedido.criado", Key: fmt.Sprint("p-", i), MessageID: mid, Payload: []byte(`{}`)})
			if err == nil && i == 0 {
				err = tx.(driver.InboxQueueTx).InboxDead(ctx, id, "customer unknown")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().Truncate(time.Minute)
	for i, typ := range []string{"pedido.criado", "pedido.pago", "fatura.emitida", "envio.despachado", "envio.entregue"} {
		for m := range 60 {
			n := 20 + (m*7+i*13)%30
			if typ == "fatura.emitida" && m < 12 {
				n = 0 // the paused route: nothing for the last quarter hour
			}
			if n > 0 {
				if _, err := d.DB().Exec("INSERT INTO mensageria_delivered_counts (type, minute, n) VALUES (?, ?, ?)", typ, now.Add(-time.Duration(m)*time.Minute).UnixMicro(), n); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for app, types := range apps {
		var states []driver.RouteState
		for _, typ := range types {
			st := driver.RouteState{Type: typ, App: app, Route: app + " → http https://" + app + ".internal/m2m", State: "flowing", Since: now.Add(-3 * time.Hour)}
			if typ == "fatura.emitida" {
				st.State, st.Failures, st.Since, st.Until, st.LastError = "paused", 6, now.Add(-12*time.Minute), time.Now().Add(40*time.Second), "503 Service Unavailable"
			}
			states = append(states, st)
		}
		if err := d.SetRouteStates(ctx, driver.RouteStatesParams{App: app, States: states, Replace: true}); err != nil {
			t.Fatal(err)
		}
		if app == "logistica" {
			continue // its relay is down: no holder
		}
		el, err := d.Elector(app, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := el.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The main page as an operator sees it, rendered by Chromium: the paused
// route and the app without a holder show, and the image is the page.
func TestBrowserScreenshot(t *testing.T) {
	d := sqliteDriver(t)
	seedShowcase(t, d)
	c, err := New(Options{Ops: ops.New(d, ops.AllApps()), Auth: Auth{Token: testToken}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); _ = c.Close() })
	b := browser(t, 1280, 800)
	run(t, b, "log in", chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("#login-form")),
		chromedp.SetValue(chromedp.CSS("#token"), testToken), chromedp.Click(chromedp.CSS("#login-submit")))
	waitFor(t, b, "the paused route", `(() => { const e = document.querySelector('tr[data-type="fatura.emitida"] td.route'); return !!e && e.textContent.startsWith("paused"); })()`)
	waitFor(t, b, "two payments in doubt", `(() => { const e = document.querySelector('tr[data-type="pagamento.capturado"].in-doubt button.open-doubt'); return !!e && e.textContent === "2"; })()`)
	waitFor(t, b, "logistica without a holder", `(() => { const e = document.querySelector('tr[data-app="logistica"] td.holder'); return !!e && e.textContent === "no holder"; })()`)
	run(t, b, "open the dead letters", chromedp.Click(chromedp.CSS(`tr[data-type="fatura.vencida"] button.open-dead`)))
	waitFor(t, b, "five dead invoices", `document.querySelectorAll("#letters tr[data-id]").length === 5`)
	shot, err := chromedp.Run(b, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	if w := img.Bounds().Dx(); w != 1280 {
		t.Fatalf("screenshot %d wide, want the window's 1280", w)
	}
	out := os.Getenv(EnvScreenshot)
	if out == "" {
		out = filepath.Join(t.TempDir(), "console.png")
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("main page: %s (%dx%d)", out, img.Bounds().Dx(), img.Bounds().Dy())
}
