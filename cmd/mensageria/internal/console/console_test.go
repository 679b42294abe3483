package console

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/ops"
)

const testToken = "console-token-0123456789"

// sqliteDriver is a migrated SQLite outbox in a temporary file.
func sqliteDriver(t *testing.T) *sqlite.Driver {
	t.Helper()
	d, err := sqlite.Open(filepath.Join(t.TempDir(), "console.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	return d
}

func own(t *testing.T, d driver.Driver, app string, types ...string) {
	t.Helper()
	var rs []driver.Resource
	for _, typ := range types {
		rs = append(rs, driver.Resource{Kind: driver.ResourceType, Name: typ})
	}
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: app, Resources: rs}); err != nil {
		t.Fatal(err)
	}
}

func insert(t *testing.T, d driver.Driver, typ string, keys ...string) {
	t.Helper()
	var rows []driver.InsertRow
	for i, k := range keys {
		var id [16]byte
		_, _ = rand.Read(id[:])
		_ = i
		rows = append(rows, driver.InsertRow{MessageID: id, Type: typ, Key: k, Payload: []byte(`{"key":"` + k + `"}`)})
	}
	if err := d.Insert(context.Background(), driver.InsertParams{Rows: rows}); err != nil {
		t.Fatal(err)
	}
}

// kill claims every due row of typ and settles it dead with reason.
func kill(t *testing.T, d driver.Driver, typ, reason string) []int64 {
	t.Helper()
	ctx := context.Background()
	jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{typ}, Limit: 1000, Lease: time.Minute, Token: 7})
	if err != nil {
		t.Fatal(err)
	}
	p := driver.SettleParams{Token: 7}
	var ids []int64
	for _, j := range jobs {
		p.Dead = append(p.Dead, driver.Failure{ID: j.ID, Error: reason, Route: "shop → http https://user:hunter2secret@billing.example/m2m"})
		ids = append(ids, j.ID)
	}
	if _, err := d.Settle(ctx, p); err != nil {
		t.Fatal(err)
	}
	return ids
}

type harness struct {
	t   *testing.T
	c   *Console
	srv *httptest.Server
	drv driver.Driver
}

func newHarness(t *testing.T, d driver.Driver, mutate func(*Options)) *harness {
	t.Helper()
	opt := Options{Ops: ops.New(d, ops.AllApps()), Auth: Auth{Token: testToken, User: "ops", Password: "correct horse battery"}, MinRefresh: time.Millisecond}
	if mutate != nil {
		mutate(&opt)
	}
	c, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); _ = c.Close() })
	return &harness{t: t, c: c, srv: srv, drv: d}
}

// client is a cookie-keeping client, logged in when login is true.
func (h *harness) client(login bool) (*http.Client, string) {
	h.t.Helper()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar}
	if !login {
		return cl, ""
	}
	res := h.do(cl, "POST", "/api/login", `{"token":"`+testToken+`"}`, nil)
	if res.StatusCode != 200 {
		h.t.Fatalf("login: %d %s", res.StatusCode, readAll(res))
	}
	var s SessionInfo
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil || s.CSRF == "" {
		h.t.Fatalf("login answer: %+v %v", s, err)
	}
	return cl, s.CSRF
}

func (h *harness) do(cl *http.Client, method, path, body string, hdr map[string]string) *http.Response {
	h.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := cl.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { res.Body.Close() })
	return res
}

func readAll(res *http.Response) string {
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// wantProblem checks that res is an RFC 9457 problem with status and code.
func wantProblem(t *testing.T, res *http.Response, status int, code string) Problem {
	t.Helper()
	body := readAll(res)
	if res.StatusCode != status {
		t.Fatalf("%s %s: status %d, want %d: %s", res.Request.Method, res.Request.URL.Path, res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%s: Content-Type %q, want application/problem+json", res.Request.URL.Path, ct)
	}
	var p Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Status != status || p.Code != code || p.Title != http.StatusText(status) || p.Type == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want status %d code %q with a title and a detail", p, status, code)
	}
	return p
}

func TestNewRefusesAConsoleWithoutCredentials(t *testing.T) {
	d := sqliteDriver(t)
	for name, a := range map[string]Auth{
		"none":          {},
		"user only":     {User: "ops"},
		"password only": {Password: "correct horse battery"},
		"short token":   {Token: "abc"},
		"short pass":    {User: "ops", Password: "short"},
		"colon user":    {User: "o:ps", Password: "correct horse battery"},
	} {
		_, err := New(Options{Ops: ops.New(d, ops.AllApps()), Auth: a})
		var ce *ConfigError
		if !errors.Is(err, mensageria.ErrConfig) || !errors.As(err, &ce) || ce.Field == "" {
			t.Errorf("%s: New = %v, want a *ConfigError", name, err)
		}
	}
	if _, err := New(Options{Auth: Auth{Token: testToken}}); !errors.Is(err, mensageria.ErrConfig) {
		t.Errorf("no driver: %v", err)
	}
}

// Nothing the console knows is shown without credentials, and every
// refusal is a problem document.
func TestEverythingIsRefusedWithoutCredentials(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	insert(t, d, "order.placed", "k1")
	ids := kill(t, d, "order.placed", "refused")
	h := newHarness(t, d, nil)
	anon, _ := h.client(false)
	paths := []string{"/api/overview", "/api/session", "/api/dead?type=order.placed", fmt.Sprintf("/api/messages/%d", ids[0])}
	for _, p := range paths {
		for name, auth := range map[string]string{
			"none": "", "wrong bearer": "Bearer " + testToken + "x", "wrong basic": "Basic b3BzOndyb25n",
			"token as basic": "Basic " + testToken, "empty bearer": "Bearer ",
		} {
			res := h.do(anon, "GET", p, "", map[string]string{"Authorization": auth})
			wantProblem(t, res, 401, "unauthorized")
			if name == "none" && res.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: no WWW-Authenticate", p)
			}
		}
	}
	for _, p := range []string{"/api/dead/retry", "/api/dead/discard", "/api/logout"} {
		wantProblem(t, h.do(anon, "POST", p, fmt.Sprintf(`{"ids":[%d]}`, ids[0]), nil), 401, "unauthorized")
	}
	// A forged cookie is no session.
	forged := h.do(anon, "GET", "/api/overview", "", map[string]string{"Cookie": cookieName + "=" + strings.Repeat("a", 64)})
	wantProblem(t, forged, 401, "unauthorized")
	// The row is still dead: nothing acted.
	jobs, err := d.ListMessages(context.Background(), driver.ListFilter{IDs: ids})
	if err != nil || len(jobs) != 1 || jobs[0].State != driver.StateDead {
		t.Fatalf("after refused actions: %+v %v", jobs, err)
	}
	// Wrong logins.
	for _, body := range []string{`{"token":"nope-nope-nope-nope"}`, `{"user":"ops","password":"wrong password"}`} {
		wantProblem(t, h.do(anon, "POST", "/api/login", body, nil), 401, "unauthorized")
	}
	for _, body := range []string{`{}`, `{"token":"` + testToken + `","user":"ops"}`, `{"token":1}`, `{"tok":"x"}`, `[]`, `{"token":"a"}{"token":"b"}`, strings.Repeat(" ", maxBody+1)} {
		wantProblem(t, h.do(anon, "POST", "/api/login", body, nil), 400, "bad_request")
	}
	wantProblem(t, h.do(anon, "POST", "/api/login", `{"token":"`+testToken+`"}`, map[string]string{"Content-Type": "text/plain"}), 415, "unsupported_media_type")
}

func TestBothCredentialKindsLogIn(t *testing.T) {
	d := sqliteDriver(t)
	h := newHarness(t, d, nil)
	cl, _ := h.client(false)
	for _, body := range []string{`{"token":"` + testToken + `"}`, `{"user":"ops","password":"correct horse battery"}`} {
		if res := h.do(cl, "POST", "/api/login", body, nil); res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", body, res.StatusCode, readAll(res))
		}
	}
	for _, auth := range []string{"Bearer " + testToken, "Basic b3BzOmNvcnJlY3QgaG9yc2UgYmF0dGVyeQ=="} {
		fresh, _ := h.client(false)
		if res := h.do(fresh, "GET", "/api/overview", "", map[string]string{"Authorization": auth}); res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", auth, res.StatusCode, readAll(res))
		}
	}
}

// Every action needs the session's CSRF token and a same-origin request.
func TestActionsNeedTheCSRFToken(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	insert(t, d, "order.placed", "k1", "k2")
	ids := kill(t, d, "order.placed", "refused")
	h := newHarness(t, d, nil)
	cl, csrf := h.client(true)
	other, otherCSRF := h.client(true)
	_ = other
	body := fmt.Sprintf(`{"ids":[%d]}`, ids[0])
	for _, p := range []string{"/api/dead/retry", "/api/dead/discard"} {
		wantProblem(t, h.do(cl, "POST", p, body, nil), 403, "csrf_token_missing")
		wantProblem(t, h.do(cl, "POST", p, body, map[string]string{csrfHeader: "00" + csrf[2:]}), 403, "csrf_token_invalid")
		// Another session's token is not this one's.
		wantProblem(t, h.do(cl, "POST", p, body, map[string]string{csrfHeader: otherCSRF}), 403, "csrf_token_invalid")
		// A cross-site request is refused even with the token.
		wantProblem(t, h.do(cl, "POST", p, body, map[string]string{csrfHeader: csrf, "Sec-Fetch-Site": "cross-site"}), 403, "cross_origin")
		wantProblem(t, h.do(cl, "POST", p, body, map[string]string{csrfHeader: csrf, "Origin": "https://evil.example"}), 403, "cross_origin")
	}
	// A header-authenticated client gets its own token from /api/session.
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	fresh, _ := h.client(false)
	wantProblem(t, h.do(fresh, "POST", "/api/dead/retry", body, bearer), 403, "csrf_token_missing")
	wantProblem(t, h.do(fresh, "POST", "/api/login", `{"token":"`+testToken+`"}`, map[string]string{"Sec-Fetch-Site": "cross-site"}), 403, "cross_origin")

	jobs, _ := d.ListMessages(context.Background(), driver.ListFilter{IDs: ids})
	if len(jobs) != 2 || jobs[0].State != driver.StateDead || jobs[1].State != driver.StateDead {
		t.Fatalf("refused actions changed rows: %+v", jobs)
	}
	// With the token the action runs: one retried, one discarded.
	res := h.do(cl, "POST", "/api/dead/retry", body, map[string]string{csrfHeader: csrf})
	var ar ActionResult
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&ar) != nil || ar.Changed != 1 {
		t.Fatalf("retry: %d %+v", res.StatusCode, ar)
	}
	// The same id again changes nothing: it is no longer dead.
	res = h.do(cl, "POST", "/api/dead/retry", body, map[string]string{csrfHeader: csrf})
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&ar) != nil || ar.Changed != 0 {
		t.Fatalf("retry twice: %d %+v", res.StatusCode, ar)
	}
	res = h.do(cl, "POST", "/api/dead/discard", fmt.Sprintf(`{"ids":[%d]}`, ids[1]), map[string]string{csrfHeader: csrf})
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&ar) != nil || ar.Changed != 1 {
		t.Fatalf("discard: %d %+v", res.StatusCode, ar)
	}
	jobs, _ = d.ListMessages(context.Background(), driver.ListFilter{IDs: ids})
	if len(jobs) != 1 || jobs[0].ID != ids[0] || jobs[0].State != driver.StatePending {
		t.Fatalf("after retry and discard: %+v", jobs)
	}
	// The session's token dies with the session.
	wantStatus(t, h.do(cl, "POST", "/api/logout", "", map[string]string{csrfHeader: csrf}), 204)
	wantProblem(t, h.do(cl, "POST", "/api/dead/retry", body, map[string]string{csrfHeader: csrf}), 401, "unauthorized")
}

func wantStatus(t *testing.T, res *http.Response, status int) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("%s %s: %d, want %d: %s", res.Request.Method, res.Request.URL.Path, res.StatusCode, status, readAll(res))
	}
}

func TestReadOnlyRefusesEveryAction(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	insert(t, d, "order.placed", "k1")
	ids := kill(t, d, "order.placed", "refused")
	h := newHarness(t, d, func(o *Options) { o.ReadOnly = true })
	cl, csrf := h.client(true)
	for _, p := range []string{"/api/dead/retry", "/api/dead/discard"} {
		for _, body := range []string{fmt.Sprintf(`{"ids":[%d]}`, ids[0]), `{"type":"order.placed","all":true}`} {
			wantProblem(t, h.do(cl, "POST", p, body, map[string]string{csrfHeader: csrf}), 403, "read_only")
		}
	}
	for _, p := range []string{"/api/routes/pause", "/api/routes/resume"} {
		wantProblem(t, h.do(cl, "POST", p, `{"type":"order.placed","reason":"upgrade"}`, map[string]string{csrfHeader: csrf}), 403, "read_only")
		wantProblem(t, h.do(cl, "POST", p, `{"type":"order.placed","reason":"upgrade"}`, nil), 403, "csrf_token_missing")
	}
	if pauses, err := d.RoutePauses(context.Background(), ""); err != nil || len(pauses) != 0 {
		t.Fatalf("a read-only console paused %+v, %v", pauses, err)
	}
	var ov Overview
	res := h.do(cl, "GET", "/api/overview", "", nil)
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&ov) != nil || !ov.ReadOnly {
		t.Fatalf("overview: %d %+v", res.StatusCode, ov)
	}
	jobs, _ := d.ListMessages(context.Background(), driver.ListFilter{IDs: ids})
	if len(jobs) != 1 || jobs[0].State != driver.StateDead {
		t.Fatalf("read-only console changed a row: %+v", jobs)
	}
}

func TestBadRequestsAreProblems(t *testing.T) {
	d := sqliteDriver(t)
	h := newHarness(t, d, nil)
	cl, csrf := h.client(true)
	tok := map[string]string{csrfHeader: csrf}
	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/api/dead", "", 400, "bad_request"},
		{"GET", "/api/dead?type=x&after=-1", "", 400, "bad_request"},
		{"GET", "/api/dead?type=x&after=abc", "", 400, "bad_request"},
		{"GET", "/api/dead?type=x&limit=0", "", 400, "bad_request"},
		{"GET", "/api/dead?type=x&limit=501", "", 400, "bad_request"},
		{"GET", "/api/messages/0", "", 400, "bad_request"},
		{"GET", "/api/messages/abc", "", 400, "bad_request"},
		{"GET", "/api/messages/99999999999999999999", "", 400, "bad_request"},
		{"GET", "/api/messages/424242", "", 404, "not_found"},
		{"GET", "/api/nope", "", 404, "not_found"},
		{"GET", "/nope.html", "", 404, "not_found"},
		{"DELETE", "/api/overview", "", 405, "method_not_allowed"},
		{"GET", "/api/dead/retry", "", 405, "method_not_allowed"},
		{"POST", "/api/dead/retry", `{}`, 400, "bad_request"},
		{"POST", "/api/dead/retry", `{"ids":[]}`, 400, "bad_request"},
		{"POST", "/api/dead/retry", `{"ids":[0]}`, 400, "bad_request"},
		{"POST", "/api/dead/retry", `{"ids":[1,1]}`, 400, "bad_request"},
		{"POST", "/api/dead/retry", `{"ids":[1],"type":"x"}`, 400, "bad_request"},
		{"POST", "/api/dead/retry", `{"type":"x"}`, 400, "bad_request"},
		{"POST", "/api/dead/discard", `{"all":true}`, 400, "bad_request"},
		{"POST", "/api/dead/discard", `{"ids":"1"}`, 400, "bad_request"},
		{"POST", "/api/dead/discard", `{"ids":[1],"extra":1}`, 400, "bad_request"},
		{"POST", "/api/dead/discard", `not json`, 400, "bad_request"},
	} {
		wantProblem(t, h.do(cl, c.method, c.path, c.body, tok), c.status, c.code)
	}
	wantProblem(t, h.do(cl, "POST", "/api/dead/retry", `{"ids":[1]}`, map[string]string{csrfHeader: csrf, "Content-Type": "text/plain"}), 415, "unsupported_media_type")
	if allow := h.do(cl, "DELETE", "/api/overview", "", nil).Header.Get("Allow"); allow != "GET" {
		t.Fatalf("405 Allow %q, want GET", allow)
	}
}

// The overview shows each type's counts, owner and route, and each app's
// election; it never shows a secret a route name or a reason quotes.
func TestOverviewShowsCountsRoutesAndElections(t *testing.T) {
	d := sqliteDriver(t)
	ctx := context.Background()
	own(t, d, "shop", "order.placed", "order.idle")
	own(t, d, "billing", "invoice.issued")
	insert(t, d, "order.placed", "a", "b", "c")
	kill(t, d, "order.placed", "destination said 400 at https://svc:s3cr3tpass@billing.example/x")
	insert(t, d, "order.placed", "d", "e")
	insert(t, d, "invoice.issued", "i1")
	if err := d.SetRouteStates(ctx, driver.RouteStatesParams{App: "shop", States: []driver.RouteState{{
		Type: "order.placed", App: "shop", Route: "shop → http https://user:hunter2secret@billing.example/m2m", State: "paused",
		Since: time.Now(), Until: time.Now().Add(time.Minute), Failures: 3, LastError: "dial https://user:hunter2secret@billing.example: refused",
	}}}); err != nil {
		t.Fatal(err)
	}
	el, err := d.Elector("shop", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, leader, err := el.Acquire(ctx); err != nil || !leader {
		t.Fatalf("acquire: %v %v", leader, err)
	}
	h := newHarness(t, d, nil)
	cl, _ := h.client(true)
	res := h.do(cl, "GET", "/api/overview", "", nil)
	body := readAll(res)
	for _, secret := range []string{"hunter2secret", "s3cr3tpass", testToken, "correct horse"} {
		if strings.Contains(body, secret) {
			t.Fatalf("overview shows a secret %q: %s", secret, body)
		}
	}
	var ov Overview
	if err := json.Unmarshal([]byte(body), &ov); err != nil {
		t.Fatal(err)
	}
	got := map[string]TypeView{}
	for _, v := range ov.Types {
		got[v.Type] = v
	}
	op := got["order.placed"]
	if op.Owner != "shop" || op.Pending != 2 || op.Dead != 3 || op.Route == nil || op.Route.State != "paused" || op.Route.Failures != 3 || op.Route.Until == nil || len(op.PerMinute) != chartMinutes {
		t.Fatalf("order.placed: %+v route %+v", op, op.Route)
	}
	if !strings.Contains(op.Route.Name, "xxxxx@billing.example") {
		t.Fatalf("route name %q: the credentials should be masked, the host kept", op.Route.Name)
	}
	if v := got["order.idle"]; v.Owner != "shop" || v.Pending != 0 {
		t.Fatalf("a type with no rows: %+v", v)
	}
	if v := got["invoice.issued"]; v.Owner != "billing" || v.Pending != 1 || v.Route != nil {
		t.Fatalf("invoice.issued: %+v", v)
	}
	apps := map[string]AppView{}
	for _, a := range ov.Apps {
		apps[a.App] = a
	}
	if a := apps["shop"]; a.Holder == "" || a.Epoch < 1 || a.Since == nil {
		t.Fatalf("shop's election: %+v", a)
	}
	if a, ok := apps["billing"]; !ok || a.Holder != "" {
		t.Fatalf("billing's election (no relay): %+v %v", a, ok)
	}
	// The dead letters, and one in detail with its payload; the reasons
	// are masked too.
	var page DeadPage
	res = h.do(cl, "GET", "/api/dead?type=order.placed&limit=2", "", nil)
	body = readAll(res)
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Letters) != 2 || page.NextAfter == 0 {
		t.Fatalf("first page: %s %v", body, err)
	}
	if strings.Contains(body, "s3cr3tpass") || !strings.Contains(page.Letters[0].Reason, "destination said 400") {
		t.Fatalf("reason: %q", page.Letters[0].Reason)
	}
	res = h.do(cl, "GET", fmt.Sprintf("/api/dead?type=order.placed&limit=2&after=%d", page.NextAfter), "", nil)
	var rest DeadPage
	if err := json.NewDecoder(res.Body).Decode(&rest); err != nil || len(rest.Letters) != 1 || rest.NextAfter != 0 || rest.Letters[0].ID <= page.NextAfter {
		t.Fatalf("second page: %+v %v", rest, err)
	}
	var m Letter
	res = h.do(cl, "GET", fmt.Sprintf("/api/messages/%d", rest.Letters[0].ID), "", nil)
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil || m.State != "dead" || string(m.Payload) != `{"key":"c"}` || m.Key != "c" {
		t.Fatalf("detail: %+v %v", m, err)
	}
}

// An action's effect shows on the next look, not after the refresh
// interval; and the counts follow enqueues.
func TestCountsFollowEnqueuesAndActions(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	h := newHarness(t, d, nil)
	cl, csrf := h.client(true)
	pending := func(want int64) {
		t.Helper()
		var ov Overview
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			ov = Overview{}
			res := h.do(cl, "GET", "/api/overview", "", nil)
			_ = json.NewDecoder(res.Body).Decode(&ov)
			for _, v := range ov.Types {
				if v.Type == "order.placed" && v.Pending == want {
					return true
				}
			}
			return false
		}, "pending to become %d, last %+v", want, &ov.Types)
	}
	pending(0)
	insert(t, d, "order.placed", "a", "b")
	pending(2)
	kill(t, d, "order.placed", "no")
	pending(0)
	wantStatus(t, h.do(cl, "POST", "/api/dead/retry", `{"type":"order.placed","all":true}`, map[string]string{csrfHeader: csrf}), 200)
	pending(2)
}

func TestPageAndAssetsAreServedWithAStrictPolicy(t *testing.T) {
	h := newHarness(t, sqliteDriver(t), nil)
	cl, _ := h.client(false)
	for _, p := range []string{"/", "/assets/app.js", "/assets/style.css"} {
		res := h.do(cl, "GET", p, "", nil)
		body := readAll(res)
		if res.StatusCode != 200 || len(body) < 100 {
			t.Fatalf("%s: %d", p, res.StatusCode)
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || res.Header.Get("X-Frame-Options") != "DENY" {
			t.Fatalf("%s: CSP %q", p, csp)
		}
		if strings.Contains(body, testToken) {
			t.Fatalf("%s shows the token", p)
		}
	}
}

// A console acting for some apps retries and discards only their dead
// letters, as the dead commands do: another app's are refused, naming the
// owner, and nothing of the request changes.
func TestActionsStayWithinTheConsolesApps(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	own(t, d, "billing", "invoice.issued")
	insert(t, d, "order.placed", "o1")
	insert(t, d, "invoice.issued", "i1")
	mine := kill(t, d, "order.placed", "no")
	theirs := kill(t, d, "invoice.issued", "no")
	h := newHarness(t, d, func(o *Options) { o.Apps = []string{"shop"} })
	cl, csrf := h.client(true)
	tok := map[string]string{csrfHeader: csrf}
	for _, c := range []struct{ path, body string }{
		{"/api/dead/retry", fmt.Sprintf(`{"ids":[%d]}`, theirs[0])},
		{"/api/dead/discard", fmt.Sprintf(`{"ids":[%d,%d]}`, mine[0], theirs[0])},
		{"/api/dead/discard", `{"type":"invoice.issued","all":true}`},
		{"/api/dead/retry", `{"type":"nobodys.type","all":true}`},
	} {
		p := wantProblem(t, h.do(cl, "POST", c.path, c.body, tok), 403, "other_app")
		if !strings.Contains(p.Detail, "nothing changed") || (strings.Contains(c.body, "invoice") || strings.Contains(c.body, fmt.Sprint(theirs[0]))) && !strings.Contains(p.Detail, `"billing"`) {
			t.Fatalf("%s %s: detail %q", c.path, c.body, p.Detail)
		}
	}
	jobs, _ := d.ListMessages(context.Background(), driver.ListFilter{IDs: []int64{mine[0], theirs[0]}})
	if len(jobs) != 2 || jobs[0].State != driver.StateDead || jobs[1].State != driver.StateDead {
		t.Fatalf("refused actions changed rows: %+v", jobs)
	}
	var ov Overview
	_ = json.NewDecoder(h.do(cl, "GET", "/api/overview", "", nil).Body).Decode(&ov)
	for _, v := range ov.Types {
		if v.Actionable != (v.Type == "order.placed") {
			t.Fatalf("%s actionable %v", v.Type, v.Actionable)
		}
	}
	wantStatus(t, h.do(cl, "POST", "/api/dead/discard", fmt.Sprintf(`{"ids":[%d]}`, mine[0]), tok), 200)
	wantStatus(t, h.do(cl, "POST", "/api/dead/retry", `{"type":"order.placed","all":true}`, tok), 200)
}

// Guessing is bounded: after a burst of wrong credentials every
// credential is refused with 429 until the bucket refills, whichever way
// it is sent.
func TestWrongCredentialsAreThrottled(t *testing.T) {
	h := newHarness(t, sqliteDriver(t), nil)
	clock := time.Unix(1_800_000_000, 0)
	h.c.guard.Now = func() time.Time { return clock }
	cl, _ := h.client(false)
	wrong := `{"token":"a-wrong-token-0000000"}`
	for range 20 {
		wantProblem(t, h.do(cl, "POST", "/api/login", wrong, nil), 401, "unauthorized")
	}
	res := h.do(cl, "POST", "/api/login", `{"token":"`+testToken+`"}`, nil)
	wantProblem(t, res, 429, "too_many_attempts")
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	wantProblem(t, h.do(cl, "GET", "/api/overview", "", map[string]string{"Authorization": "Bearer " + testToken}), 429, "too_many_attempts")
	// A second later two tries are back: one wrong, one right.
	clock = clock.Add(time.Second)
	wantProblem(t, h.do(cl, "GET", "/api/overview", "", map[string]string{"Authorization": "Bearer nope"}), 401, "unauthorized")
	wantStatus(t, h.do(cl, "POST", "/api/login", `{"token":"`+testToken+`"}`, nil), 200)
	// A session already made is not throttled.
	wantStatus(t, h.do(cl, "GET", "/api/overview", "", nil), 200)
}

// A database that stops answering is a 503 problem on every page, and the
// kept counts are not shown as if the rest were known.
func TestDatabaseDownIsAProblem(t *testing.T) {
	d := sqliteDriver(t)
	own(t, d, "shop", "order.placed")
	h := newHarness(t, d, nil)
	cl, csrf := h.client(true)
	wantStatus(t, h.do(cl, "GET", "/api/overview", "", nil), 200)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/overview", "/api/dead?type=order.placed", "/api/messages/1"} {
		wantProblem(t, h.do(cl, "GET", p, "", nil), 503, "database")
	}
	wantProblem(t, h.do(cl, "POST", "/api/dead/retry", `{"ids":[1]}`, map[string]string{csrfHeader: csrf}), 503, "database")
}

// The receive daemon's inbox queue shows per consumer, with its owner.
func TestOverviewShowsTheInboxQueue(t *testing.T) {
	d := sqliteDriver(t)
	ctx := context.Background()
	if _, err := d.Register(ctx, driver.RegisterParams{App: "billing", Resources: []driver.Resource{{Kind: driver.ResourceConsumer, Name: "billing-orders", Window: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, k := range []string{"a", "b"} {
		err := d.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
			var mid [16]byte
			_, _ = rand.Read(mid[:])
			id, err := tx.(driver.InboxQueueTx).QueueInbox(ctx, driver.QueuedDelivery{Consumer: "billing-orders", Type: "order.placed", Key: k, MessageID: mid, Payload: []byte(`{}`)})
			ids = append(ids, id)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := d.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		return tx.(driver.InboxQueueTx).InboxDead(ctx, ids[0], "no such customer")
	}); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, d, nil)
	cl, _ := h.client(true)
	var ov Overview
	if err := json.NewDecoder(h.do(cl, "GET", "/api/overview", "", nil).Body).Decode(&ov); err != nil {
		t.Fatal(err)
	}
	if len(ov.Inbox) != 1 || ov.Inbox[0] != (InboxView{Consumer: "billing-orders", Owner: "billing", Pending: 1, Dead: 1, OldestPendingSec: ov.Inbox[0].OldestPendingSec}) {
		t.Fatalf("inbox %+v", ov.Inbox)
	}
}

// The session cookie is out of scripts' reach and never sent cross-site;
// Secure when asked (behind a TLS proxy); and a session ends at its TTL.
func TestSessionCookie(t *testing.T) {
	h := newHarness(t, sqliteDriver(t), func(o *Options) { o.SecureCookie = true; o.SessionTTL = time.Millisecond })
	cl, _ := h.client(false)
	res := h.do(cl, "POST", "/api/login", `{"token":"`+testToken+`"}`, nil)
	wantStatus(t, res, 200)
	var ck *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode || len(ck.Value) != 64 || ck.Path != "/" {
		t.Fatalf("cookie %+v", ck)
	}
	// The cookie is Secure, so the jar keeps it off plain HTTP: send it by
	// hand, until the session's millisecond has passed.
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		r := h.do(cl, "GET", "/api/session", "", map[string]string{"Cookie": cookieName + "=" + ck.Value})
		if r.StatusCode != 401 {
			return false
		}
		wantProblem(t, r, 401, "unauthorized")
		return true
	}, "the session to end with its TTL")
}

// countingDriver counts the calls of Stats, the one statement that reads
// every pending row.
type countingDriver struct {
	driver.Driver
	mu    sync.Mutex
	stats int
}

func (c *countingDriver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	c.mu.Lock()
	c.stats++
	c.mu.Unlock()
	return c.Driver.Stats(ctx)
}

func (c *countingDriver) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// A page load never counts the outbox: many loads within the refresh
// interval cost one count, and an action costs one more at the next look.
func TestPageLoadsDoNotCount(t *testing.T) {
	base := sqliteDriver(t)
	own(t, base, "shop", "order.placed")
	insert(t, base, "order.placed", "a")
	kill(t, base, "order.placed", "no")
	d := &countingDriver{Driver: base}
	h := newHarness(t, d, func(o *Options) { o.MinRefresh = time.Hour })
	cl, csrf := h.client(true)
	for range 25 {
		wantStatus(t, h.do(cl, "GET", "/api/overview", "", nil), 200)
	}
	if n := d.calls(); n != 1 {
		t.Fatalf("25 page loads counted %d times, want the one count of the start", n)
	}
	wantStatus(t, h.do(cl, "POST", "/api/dead/retry", `{"type":"order.placed","all":true}`, map[string]string{csrfHeader: csrf}), 200)
	// The next look starts one recount and answers with the kept counts;
	// the recount lands for a later look.
	var ov Overview
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		ov = Overview{}
		_ = json.NewDecoder(h.do(cl, "GET", "/api/overview", "", nil).Body).Decode(&ov)
		return len(ov.Types) == 1 && ov.Types[0].Pending == 1 && ov.Types[0].Dead == 0
	}, "the retry to show, last %+v", &ov.Types)
	for range 10 {
		wantStatus(t, h.do(cl, "GET", "/api/overview", "", nil), 200)
	}
	if n := d.calls(); n != 2 {
		t.Fatalf("an action and the loads after it counted %d times in all, want 2", n)
	}
}
