package console

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/ops"
)

// An operator pauses a type from the page, giving a reason the page asks
// for, sees who paused it, and resumes it: each step recorded in the
// database with the logged-in operator's name.
func TestBrowserPausesAndResumesARoute(t *testing.T) {
	ctx := context.Background()
	d := pgDriver(t)
	own(t, d, "billing", "invoice.issued")
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
	waitFor(t, b, "the pause button", `!!document.querySelector('tr[data-type="invoice.issued"] button.pause-route')`)

	run(t, b, "pause invoice.issued", chromedp.Click(chromedp.CSS(`tr[data-type="invoice.issued"] button.pause-route`)), chromedp.WaitVisible(chromedp.CSS("#confirm-reason")))
	run(t, b, "give the reason", chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "billing upgrades until 14:00"), chromedp.Click(chromedp.CSS("#confirm-ok")))
	waitFor(t, b, "the pause shown", `(() => { const e = document.querySelector('tr[data-type="invoice.issued"] .paused-by'); return !!e && e.textContent.includes("paused by"); })()`)

	pauses, err := d.RoutePauses(ctx, "")
	if err != nil || len(pauses) != 1 || pauses[0].Type != "invoice.issued" || pauses[0].App != "billing" || pauses[0].Reason != "billing upgrades until 14:00" || pauses[0].PausedBy == "" {
		t.Fatalf("the database holds %+v, %v; want invoice.issued paused for billing with the reason and an operator", pauses, err)
	}

	waitFor(t, b, "the resume button", `!!document.querySelector('tr[data-type="invoice.issued"] button.resume-route')`)
	run(t, b, "resume invoice.issued", chromedp.Click(chromedp.CSS(`tr[data-type="invoice.issued"] button.resume-route`)), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")))
	run(t, b, "confirm", chromedp.Click(chromedp.CSS("#confirm-ok")))
	waitFor(t, b, "the pause gone", `!document.querySelector('tr[data-type="invoice.issued"] .paused-by') && !!document.querySelector('tr[data-type="invoice.issued"] button.pause-route')`)
	if pauses, err := d.RoutePauses(ctx, ""); err != nil || len(pauses) != 0 {
		t.Fatalf("after the resume the database holds %+v, %v", pauses, err)
	}
	var _ driver.RoutePauser = d
}
