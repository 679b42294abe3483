package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/ops"
)

// EnvChromium names the browser the console's browser tests drive
// (default: chromium on the PATH, Debian's package, which
// scripts/chromium.sh installs).
const EnvChromium = "MENSAGERIA_CHROMIUM"

// browser starts a headless Chromium with no network beyond the loopback
// test server, or skips (fails under CI) when there is none.
func browser(t *testing.T, width, height int) context.Context {
	t.Helper()
	path := os.Getenv(EnvChromium)
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			testdb.Unavailable(t, "chromium (scripts/chromium.sh installs it)", err)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("no-proxy-server", true),
		// Nothing but the loopback test server resolves: the page must
		// need nothing from the network.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.WindowSize(width, height),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first run starts the browser, which lives as long as ctx: no
	// timeout on this one (chromedp.Run's rule); each wait has its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// waitFor polls a JavaScript condition until it holds, and on a timeout
// fails with what the page shows.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("body")))
		t.Fatalf("waiting for %s: %v\npage:\n%s", what, err, text)
	}
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// fetchJS runs a fetch in the page and returns "status code" of its answer.
func fetchJS(t *testing.T, ctx context.Context, js string) string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("fetch in the page: %v", err)
	}
	return out
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

const problemOf = `.then(async r => r.status + " " + (await r.json()).code)`

func cellIs(typ, class, want string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector('tr[data-type=%q] td.%s'); return !!e && e.textContent === %q; })()`, typ, class, want)
}

func pgDriver(t *testing.T) *postgres.Driver {
	t.Helper()
	d, err := postgres.New(testdb.Pool(t), &postgres.Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	return d
}

// The operator's path through the console in a real browser: refused
// without the token, logged in with it, a type's pending count following
// enqueues, a dead letter opened, retried and delivered, another
// discarded, and actions refused without the CSRF token.
func TestBrowserOperatorJourney(t *testing.T) {
	ctx := context.Background()
	d := pgDriver(t)
	var refusing atomic.Bool
	refusing.Store(true)
	reg := mensageria.NewRegistry()
	reg.MustRegister("order.placed", mensageria.SenderFunc(func(_ context.Context, m *mensageria.Delivery) error {
		if refusing.Load() {
			return mensageria.Permanent(errors.New("billing refused: customer c-42 unknown"))
		}
		return nil
	}))
	// An at-most-once route whose receiver times out: the attempt may have
	// reached it, so the message is left in doubt for an operator.
	var payments atomic.Int32
	reg.MustRegister("payment.captured", mensageria.SenderFunc(func(_ context.Context, m *mensageria.Delivery) error {
		payments.Add(1)
		return fmt.Errorf("legacy ledger: no answer in 10s: %w", context.DeadlineExceeded)
	}), mensageria.Mode(mensageria.AtMostOnce))
	shop, err := mensageria.New(d, &mensageria.Config{App: "shop", Registry: reg, MaxAttempts: 1, DeliveredRetention: time.Hour, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := shop.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shop.Stop(context.Background()) })
	if _, err := shop.Enqueue(ctx,
		mensageria.Message{Type: "order.placed", Key: "order-1", Payload: json.RawMessage(`{"order":1,"customer":"c-42"}`)},
		mensageria.Message{Type: "order.placed", Key: "order-2", Payload: json.RawMessage(`{"order":2,"customer":"c-42"}`)},
		mensageria.Message{Type: "payment.captured", Key: "pay-7", Payload: json.RawMessage(`{"payment":7,"cents":1250}`)},
	); err != nil {
		t.Fatal(err)
	}
	// A type of an app whose relay is not running: its rows stay pending.
	own(t, d, "billing", "invoice.issued")

	var dead []driver.Job
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		if dead, err = d.ListMessages(ctx, driver.ListFilter{State: driver.StateDead, Types: []string{"order.placed"}}); err != nil {
			t.Fatal(err)
		}
		return len(dead) >= 2
	}, "the refused messages to go dead, last %+v", &dead)
	byKey := map[string]int64{}
	for _, j := range dead {
		byKey[j.Key] = j.ID
	}
	var doubtful []driver.Job
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		if doubtful, err = d.ListMessages(ctx, driver.ListFilter{State: driver.StateInDoubt, Types: []string{"payment.captured"}}); err != nil {
			t.Fatal(err)
		}
		return len(doubtful) >= 1
	}, "the timed-out payment to go in doubt, last %+v", &doubtful)
	payID := doubtful[0].ID

	c, err := New(Options{Ops: ops.New(d, ops.AllApps()), Auth: Auth{Token: testToken}, MinRefresh: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); _ = c.Close() })

	b := browser(t, 1280, 900)
	run(t, b, "open the console", chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("#login-form")))

	// Without the token nothing is shown.
	if got := fetchJS(t, b, `fetch("/api/overview")`+problemOf); got != "401 unauthorized" {
		t.Fatalf("overview without logging in: %s", got)
	}
	if got := fetchJS(t, b, `fetch("/api/messages/`+fmt.Sprint(byKey["order-1"])+`")`+problemOf); got != "401 unauthorized" {
		t.Fatalf("a message without logging in: %s", got)
	}
	run(t, b, "log in with a wrong token",
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token-at-all"),
		chromedp.Click(chromedp.CSS("#login-submit")))
	waitFor(t, b, "the refusal", `document.getElementById("login-error").textContent.includes("wrong credentials")`)
	run(t, b, "log in", chromedp.SetValue(chromedp.CSS("#token"), testToken), chromedp.Click(chromedp.CSS("#login-submit")))
	waitFor(t, b, "the main page", `!document.getElementById("main").hidden`)

	// The election and the counts.
	waitFor(t, b, "shop's election holder", `(() => { const e = document.querySelector('tr[data-app="shop"] td.holder'); return !!e && e.textContent !== "no holder"; })()`)
	waitFor(t, b, "invoice.issued with nothing pending", cellIs("invoice.issued", "pending", "0"))
	insert(t, d, "invoice.issued", "inv-1", "inv-2", "inv-3")
	waitFor(t, b, "3 pending invoices", cellIs("invoice.issued", "pending", "3"))
	insert(t, d, "invoice.issued", "inv-4", "inv-5")
	waitFor(t, b, "5 pending invoices", cellIs("invoice.issued", "pending", "5"))
	waitFor(t, b, "2 dead orders", cellIs("order.placed", "dead", "2"))

	// Actions are refused without the CSRF token, even with the session.
	retryBody := fmt.Sprintf(`{"ids":[%d]}`, byKey["order-1"])
	if got := fetchJS(t, b, `fetch("/api/dead/retry", {method: "POST", headers: {"Content-Type": "application/json"}, body: '`+retryBody+`'})`+problemOf); got != "403 csrf_token_missing" {
		t.Fatalf("retry without the CSRF token: %s", got)
	}
	if got := fetchJS(t, b, `fetch("/api/dead/discard", {method: "POST", headers: {"Content-Type": "application/json", "X-CSRF-Token": "f00d"}, body: '`+retryBody+`'})`+problemOf); got != "403 csrf_token_invalid" {
		t.Fatalf("discard with a wrong CSRF token: %s", got)
	}

	// Open a dead letter: its reason and payload.
	run(t, b, "open the dead letters", chromedp.Click(chromedp.CSS(`tr[data-type="order.placed"] button.open-dead`)))
	row1 := fmt.Sprintf(`tr[data-id="%d"]`, byKey["order-1"])
	row2 := fmt.Sprintf(`tr[data-id="%d"]`, byKey["order-2"])
	run(t, b, "open order-1", chromedp.WaitVisible(chromedp.CSS(row1)), chromedp.Click(chromedp.CSS(row1+" button.open")))
	waitFor(t, b, "order-1's detail", `document.getElementById("detail-key").textContent === "order-1"`)
	reason := text(t, b, "#detail-reason")
	payload := text(t, b, "#detail-payload")
	if !strings.Contains(reason, "billing refused: customer c-42 unknown") || !strings.Contains(payload, `"order": 1`) {
		t.Fatalf("detail: reason %q payload %q", reason, payload)
	}

	// Retry it with the destination healthy again: it is delivered.
	refusing.Store(false)
	run(t, b, "retry order-1", chromedp.Click(chromedp.CSS("#retry-one")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	confirmText := text(t, b, "#confirm-text")
	run(t, b, "confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	if !strings.Contains(confirmText, fmt.Sprint(byKey["order-1"])) {
		t.Fatalf("the confirmation does not name the message: %q", confirmText)
	}
	waitFor(t, b, "order-1 delivered", `document.getElementById("detail-state").textContent === "delivered"`)
	waitFor(t, b, "one dead order left", cellIs("order.placed", "dead", "1"))

	// Discard the other: picked in the list, discarded in bulk, confirmed.
	run(t, b, "pick order-2", chromedp.Click(chromedp.CSS("#detail-close")), chromedp.Click(chromedp.CSS(row2+" input.pick")),
		chromedp.Click(chromedp.CSS("#discard-selected")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	waitFor(t, b, "order-2 gone from the list", `document.querySelector('`+row2+`') === null`)
	waitFor(t, b, "no dead orders", cellIs("order.placed", "dead", "0"))
	left, err := d.ListMessages(ctx, driver.ListFilter{IDs: []int64{byKey["order-1"], byKey["order-2"]}})
	if err != nil || len(left) != 1 || left[0].Key != "order-1" || left[0].State != driver.StateDelivered {
		t.Fatalf("after retry and discard: %+v %v", left, err)
	}

	// The payment in doubt: marked on its type's line, listed, opened.
	waitFor(t, b, "one payment in doubt, marked", `(() => { const r = document.querySelector('tr[data-type="payment.captured"]'); return !!r && r.classList.contains("in-doubt") && r.querySelector("button.open-doubt").textContent === "1"; })()`)
	resolveBody := fmt.Sprintf(`{"ids":[%d],"outcome":"delivered","reason":"x"}`, payID)
	if got := fetchJS(t, b, `fetch("/api/doubt/resolve", {method: "POST", headers: {"Content-Type": "application/json"}, body: '`+resolveBody+`'})`+problemOf); got != "403 csrf_token_missing" {
		t.Fatalf("resolve without the CSRF token: %s", got)
	}
	payRow := fmt.Sprintf(`#doubts tr[data-id="%d"]`, payID)
	run(t, b, "open the messages in doubt", chromedp.Click(chromedp.CSS(`tr[data-type="payment.captured"] button.open-doubt`)),
		chromedp.WaitVisible(chromedp.CSS(payRow)), chromedp.Click(chromedp.CSS(payRow+" button.open")))
	waitFor(t, b, "pay-7's detail", `document.getElementById("detail-key").textContent === "pay-7" && document.getElementById("detail-state").textContent === "in_doubt"`)
	if reason, payload := text(t, b, "#detail-reason"), text(t, b, "#detail-payload"); !strings.Contains(reason, "no answer in 10s") || !strings.Contains(payload, `"cents": 1250`) {
		t.Fatalf("doubt detail: reason %q payload %q", reason, payload)
	}
	// The operator checked the ledger: it has the payment. Confirm needs a
	// reason before it can be pressed.
	run(t, b, "resolve pay-7 delivered", chromedp.Click(chromedp.CSS("#resolve-delivered-one")), chromedp.WaitVisible(chromedp.CSS("#confirm-reason")))
	waitFor(t, b, "confirm disabled without a reason", `document.getElementById("confirm-ok").disabled`)
	const why = "ledger shows payment 7 captured at 03:12"
	run(t, b, "give the reason", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), why))
	waitFor(t, b, "confirm enabled with a reason", `!document.getElementById("confirm-ok").disabled`)
	run(t, b, "confirm the resolution", chromedp.Click(chromedp.CSS("#confirm-ok")))
	waitFor(t, b, "nothing in doubt", `(() => { const r = document.querySelector('tr[data-type="payment.captured"]'); return !!r && !r.classList.contains("in-doubt") && r.querySelector("td.in-doubt").textContent === "0"; })()`)
	amo := driver.AtMostOnce(d)
	recs, err := amo.Resolutions(ctx, [][16]byte{doubtful[0].MessageID}, 10)
	if err != nil || len(recs) != 1 || recs[0].Outcome != driver.ResolveDelivered || recs[0].By != tokenOperator || recs[0].Reason != why || recs[0].OutboxID != payID {
		t.Fatalf("the recorded resolution: %+v %v", recs, err)
	}
	if n := payments.Load(); n != 1 {
		t.Fatalf("the at-most-once receiver got %d requests, want 1", n)
	}

	// Logged out, the page is refused again.
	run(t, b, "log out", chromedp.Click(chromedp.CSS("#logout")))
	waitFor(t, b, "the login form", `!document.getElementById("login").hidden`)
	if got := fetchJS(t, b, `fetch("/api/overview")`+problemOf); got != "401 unauthorized" {
		t.Fatalf("overview after logging out: %s", got)
	}
}

// What the server sends is shown as it is: a type or a key holding a
// bidi override (U+202E), a zero-width space or another invisible
// character is rendered with the code point spelled out, in the table,
// the detail and the confirmation dialog, so "order.<U+202E>decalp"
// cannot read as another type's name. And a retry of a dead letter an
// at-most-once attempt marked asks a second time, saying why, before it
// is sent again.
func TestBrowserShowsInvisibleCharactersAndAsksBeforeADuplicate(t *testing.T) {
	d := pgDriver(t)
	const sneaky = "order.\u202edecalp" // reads "order.placed" when rendered live
	own(t, d, "shop", sneaky, "payment.captured")
	insert(t, d, sneaky, "k\u200b-1")
	kill(t, d, sneaky, "refused")
	insert(t, d, "payment.captured", "pay-9")
	pay := killMarked(t, d, "payment.captured")

	c, err := New(Options{Ops: ops.New(d, ops.AllApps()), Auth: Auth{Token: testToken}, MinRefresh: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); _ = c.Close() })
	b := browser(t, 1280, 900)
	run(t, b, "open the console", chromedp.Navigate(srv.URL), chromedp.WaitVisible(chromedp.CSS("#login-form")))
	run(t, b, "log in", chromedp.SetValue(chromedp.CSS("#token"), testToken), chromedp.Click(chromedp.CSS("#login-submit")))
	waitFor(t, b, "the main page", `!document.getElementById("main").hidden`)

	shown := "order.⟨U+202E⟩decalp"
	// The selector names the type by a JavaScript string built from its
	// code points, as the attribute holds it.
	row := `[...document.querySelectorAll("#types tr")].find((r) => r.dataset.type === "order.\u202edecalp")`
	waitFor(t, b, "the type spelled out", `(() => { const r = `+row+`; return !!r && r.querySelector("td.type").textContent === "`+shown+`"; })()`)
	waitFor(t, b, "its dead letter", `(() => { const r = `+row+`; const e = r && r.querySelector("button.open-dead"); if (e) e.click(); return !!e; })()`)
	waitFor(t, b, "the key spelled out", `document.getElementById("letters").textContent.includes("k⟨U+200B⟩-1")`)
	if got := text(t, b, "#dead-type"); got != shown {
		t.Fatalf("dead letters header shows %q, want %q", got, shown)
	}
	run(t, b, "retry every dead letter of the type", chromedp.Click(chromedp.CSS("#retry-all")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	if got := text(t, b, "#confirm-text"); !strings.Contains(got, shown) || strings.ContainsRune(got, '\u202e') {
		t.Fatalf("the confirmation shows %q, want the type spelled out as %q", got, shown)
	}
	run(t, b, "cancel", chromedp.Click(chromedp.CSS("#confirm-cancel")))

	// The at-most-once dead letter: the first confirmation, the refusal's
	// reason in a second one, and only then sent again.
	run(t, b, "close the list", chromedp.Click(chromedp.CSS("#dead-close")))
	waitFor(t, b, "the payment's dead letter", cellIs("payment.captured", "dead", "1"))
	run(t, b, "open the payment's dead letters", chromedp.Click(chromedp.CSS(`tr[data-type="payment.captured"] button.open-dead`)))
	payRow := fmt.Sprintf(`#letters tr[data-id="%d"]`, pay[0])
	run(t, b, "open it", chromedp.WaitVisible(chromedp.CSS(payRow)), chromedp.Click(chromedp.CSS(payRow+" button.open")))
	waitFor(t, b, "its detail", `document.getElementById("detail-key").textContent === "pay-9"`)
	run(t, b, "retry it", chromedp.Click(chromedp.CSS("#retry-one")), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), chromedp.Click(chromedp.CSS("#confirm-ok")))
	waitFor(t, b, "the second confirmation", `document.getElementById("confirm").open && document.getElementById("confirm-text").textContent.includes("may apply the effect twice")`)
	if j := one(t, d, pay[0]); j.State != driver.StateDead {
		t.Fatalf("before the second confirmation the row is %s", j.State)
	}
	run(t, b, "confirm the duplicate risk", chromedp.Click(chromedp.CSS("#confirm-ok")))
	waitFor(t, b, "the retry done", `document.getElementById("notice").textContent.includes("retried 1 dead letter")`)
	if j := one(t, d, pay[0]); j.State != driver.StatePending || j.AttemptedAt != nil {
		t.Fatalf("after the second confirmation the row is %s, marked %v", j.State, j.AttemptedAt != nil)
	}
}
