package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// leaveInDoubt claims every due row of typ, marks the attempt (as an
// at-most-once route does before sending) and settles it in doubt with
// reason, as a relay whose receiver timed out does.
func leaveInDoubt(t *testing.T, d driver.Driver, typ, reason string) []int64 {
	t.Helper()
	ctx := context.Background()
	amo := d.(driver.AtMostOnce)
	jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{typ}, Limit: 1000, Lease: time.Minute, Token: 9})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	marked, err := amo.Mark(ctx, driver.MarkParams{Token: 9, IDs: ids})
	if err != nil || len(marked) != len(ids) {
		t.Fatalf("mark %v: %v %v", ids, marked, err)
	}
	p := driver.SettleParams{Token: 9}
	for _, id := range ids {
		p.InDoubt = append(p.InDoubt, driver.Doubt{ID: id, Error: reason, Route: "shop → http https://user:hunter2secret@billing.example/m2m", ProbeAfter: time.Hour})
	}
	if _, err := d.Settle(ctx, p); err != nil {
		t.Fatal(err)
	}
	return ids
}

func overviewOf(t *testing.T, h *harness, cl *http.Client) map[string]TypeView {
	t.Helper()
	var ov Overview
	res := h.do(cl, "GET", "/api/overview", "", nil)
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&ov) != nil {
		t.Fatalf("overview: %d", res.StatusCode)
	}
	out := map[string]TypeView{}
	for _, v := range ov.Types {
		out[v.Type] = v
	}
	return out
}

func resolveBody(outcome, reason string, ids ...int64) string {
	b, _ := json.Marshal(ResolveRequest{IDs: ids, Outcome: outcome, Reason: reason})
	return string(b)
}

// The overview counts a type's messages in doubt and the oldest one's age;
// the list and the detail show them with the reason (redacted), the
// attempt and, once decided, who decided what and why.
func TestMessagesInDoubtAreShownAndResolved(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	insert(t, d, "order.placed", "k1", "k2", "k3")
	ids := leaveInDoubt(t, d, "order.placed", "timeout after 10s: the receiver may have it")
	h := newHarness(t, d, nil)
	cl, csrf := h.client(true)

	// The age is the database clock's, at millisecond resolution on
	// SQLite: a count in the first millisecond says 0.
	var v TypeView
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		v = overviewOf(t, h, cl)["order.placed"]
		return v.InDoubt == 3 && v.OldestInDoubtSec > 0 && v.Pending == 0 && v.InFlight == 0
	}, "an overview line of 3 in doubt with an age and none pending, last %+v", &v)
	var page DeadPage
	res := h.do(cl, "GET", "/api/doubt?type=order.placed&limit=2", "", nil)
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&page) != nil || len(page.Letters) != 2 || page.NextAfter != page.Letters[1].ID {
		t.Fatalf("first page: %d %+v", res.StatusCode, page)
	}
	l := page.Letters[0]
	if l.State != "in_doubt" || l.AttemptedAt == nil || l.Attempts != 1 || !strings.Contains(l.Reason, "timeout after 10s") || strings.Contains(l.Route, "hunter2") || l.Payload != nil {
		t.Fatalf("listed %+v", l)
	}
	res = h.do(cl, "GET", fmt.Sprintf("/api/doubt?type=order.placed&after=%d", page.NextAfter), "", nil)
	page = DeadPage{}
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&page) != nil || len(page.Letters) != 1 || page.NextAfter != 0 {
		t.Fatalf("last page: %d %+v", res.StatusCode, page)
	}

	tok := map[string]string{csrfHeader: csrf}
	var rr ResolveResult
	res = h.do(cl, "POST", "/api/doubt/resolve", resolveBody("retry", "billing's log has no order k1", ids[0]), tok)
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&rr) != nil || len(rr.Resolved) != 1 || rr.Resolved[0] != ids[0] || rr.By != tokenOperator {
		t.Fatalf("resolve: %d %+v", res.StatusCode, rr)
	}
	var m Letter
	res = h.do(cl, "GET", fmt.Sprintf("/api/messages/%d", ids[0]), "", nil)
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&m) != nil {
		t.Fatalf("detail: %d", res.StatusCode)
	}
	if m.State != "pending" || len(m.Resolutions) != 1 || m.Resolutions[0].Outcome != "retry" || m.Resolutions[0].By != tokenOperator || m.Resolutions[0].Reason != "billing's log has no order k1" {
		t.Fatalf("after retry: %+v", m)
	}

	// Basic auth records the user; a selection of two resolves both, and
	// an id no longer in doubt is named, not changed.
	basic := map[string]string{"Authorization": "Basic " + basicOf("ops", "correct horse battery")}
	fresh, _ := h.client(false)
	var s SessionInfo
	if res := h.do(fresh, "GET", "/api/session", "", basic); res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&s) != nil || s.Operator != "ops" {
		t.Fatalf("session over basic auth: %+v", s)
	}
	basic[csrfHeader] = s.CSRF
	res = h.do(fresh, "POST", "/api/doubt/resolve", resolveBody("dead", "the customer cancelled", ids[0], ids[1], ids[2]), basic)
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&rr) != nil || len(rr.Resolved) != 2 || len(rr.NotInDoubt) != 1 || rr.NotInDoubt[0] != ids[0] || rr.By != "ops" {
		t.Fatalf("resolve a selection: %d %+v", res.StatusCode, rr)
	}
	recs, err := d.Resolutions(context.Background(), nil, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("resolutions %+v %v", recs, err)
	}
	for _, r := range recs[:2] {
		if r.By != "ops" || r.Outcome != driver.ResolveDead || r.Reason != "the customer cancelled" {
			t.Fatalf("recorded %+v", r)
		}
	}
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		v = overviewOf(t, h, cl)["order.placed"]
		return v.InDoubt == 0
	}, "the overview to count no message in doubt, last %+v", &v)
}

// Resolving is an action like retry and discard: refused without the CSRF
// token or across origins, by a read-only console, for another app's
// messages, without a reason, and for bad ids, each as a problem, and
// nothing changes.
func TestResolveIsGuardedAsTheDeadLetterActions(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	own(t, d, "billing", "invoice.issued")
	insert(t, d, "order.placed", "o1")
	insert(t, d, "invoice.issued", "i1")
	mine := leaveInDoubt(t, d, "order.placed", "timeout")
	theirs := leaveInDoubt(t, d, "invoice.issued", "timeout")
	h := newHarness(t, d, func(o *Options) { o.Apps = []string{"shop"} })
	cl, csrf := h.client(true)
	_, otherCSRF := h.client(true)
	tok := map[string]string{csrfHeader: csrf}
	good := resolveBody("delivered", "billing has it", mine[0])

	wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", good, nil), 403, "csrf_token_missing")
	wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", good, map[string]string{csrfHeader: otherCSRF}), 403, "csrf_token_invalid")
	wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", good, map[string]string{csrfHeader: csrf, "Sec-Fetch-Site": "cross-site"}), 403, "cross_origin")
	anon, _ := h.client(false)
	wantProblem(t, h.do(anon, "POST", "/api/doubt/resolve", good, tok), 401, "unauthorized")
	wantProblem(t, h.do(anon, "GET", "/api/doubt?type=order.placed", "", nil), 401, "unauthorized")

	p := wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", resolveBody("delivered", "billing has it", mine[0], theirs[0]), tok), 403, "other_app")
	if !strings.Contains(p.Detail, `"billing"`) || !strings.Contains(p.Detail, "nothing changed") {
		t.Fatalf("other app's: %q", p.Detail)
	}
	for _, body := range []string{
		resolveBody("delivered", "", mine[0]),
		resolveBody("delivered", "   ", mine[0]),
		resolveBody("maybe", "r", mine[0]),
		resolveBody("delivered", "r"),
		resolveBody("delivered", "r", 0),
		resolveBody("delivered", "r", -3),
		resolveBody("delivered", "r", mine[0], mine[0]),
		`{"ids":[1],"outcome":"delivered","reason":"r","by":"someone else"}`,
		`{"ids":["x"],"outcome":"delivered","reason":"r"}`,
		`{"type":"order.placed","all":true,"outcome":"delivered","reason":"r"}`,
		resolveBody("delivered", strings.Repeat("r", maxReason+1), mine[0]),
	} {
		wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", body, tok), 400, "bad_request")
	}
	wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", good, map[string]string{csrfHeader: csrf, "Content-Type": "text/plain"}), 415, "unsupported_media_type")
	for _, q := range []string{"", "?type=order.placed&after=-1", "?type=order.placed&limit=0", "?type=order.placed&limit=x"} {
		wantProblem(t, h.do(cl, "GET", "/api/doubt"+q, "", nil), 400, "bad_request")
	}
	wantProblem(t, h.do(cl, "GET", "/api/doubt/resolve", "", nil), 405, "method_not_allowed")

	ro := newHarness(t, d, func(o *Options) { o.ReadOnly = true })
	rcl, rcsrf := ro.client(true)
	wantProblem(t, ro.do(rcl, "POST", "/api/doubt/resolve", good, map[string]string{csrfHeader: rcsrf}), 403, "read_only")

	jobs, _ := d.ListMessages(context.Background(), driver.ListFilter{IDs: []int64{mine[0], theirs[0]}})
	if len(jobs) != 2 || jobs[0].State != driver.StateInDoubt || jobs[1].State != driver.StateInDoubt {
		t.Fatalf("refused resolutions changed rows: %+v", jobs)
	}
	if recs, err := d.Resolutions(context.Background(), nil, 10); err != nil || len(recs) != 0 {
		t.Fatalf("refused resolutions were recorded: %+v %v", recs, err)
	}
	// Within scope, with the token and a reason, it is done.
	wantStatus(t, h.do(cl, "POST", "/api/doubt/resolve", good, tok), 200)
	if jobs, _ := d.ListMessages(context.Background(), driver.ListFilter{IDs: mine}); len(jobs) != 0 {
		t.Fatalf("resolved delivered, still in the outbox: %+v", jobs)
	}
}

func basicOf(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// plainDriver hides every optional interface of the driver it wraps, as a
// third-party driver without at-most-once support has none.
type plainDriver struct{ driver.Driver }

// A driver that keeps no messages in doubt answers the doubt API with a
// problem naming that, and the overview still loads.
func TestDoubtWithoutAtMostOnceIsAProblem(t *testing.T) {
	d := sqliteDriver(t)
	h := newHarness(t, plainDriver{d}, nil)
	cl, csrf := h.client(true)
	wantProblem(t, h.do(cl, "GET", "/api/doubt?type=order.placed", "", nil), 501, "no_at_most_once")
	wantProblem(t, h.do(cl, "POST", "/api/doubt/resolve", resolveBody("dead", "r", 1), map[string]string{csrfHeader: csrf}), 501, "no_at_most_once")
	wantStatus(t, h.do(cl, "GET", "/api/overview", "", nil), 200)
}
