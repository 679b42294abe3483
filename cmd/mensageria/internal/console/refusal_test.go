package console

import (
	"net/http"
	"testing"
)

// What Go's ServeMux answers by itself (a redirect to the clean form of a
// path, to a subtree's trailing slash) is refused as a problem like every
// other refusal of the console, and never redirected; the page itself
// stays HTML.
func TestTheMuxsOwnAnswersAreProblems(t *testing.T) {
	h := newHarness(t, sqliteDriver(t), nil)
	cl, _ := h.client(true)
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, c := range []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "//api/overview", 404, "not_found"},
		{"GET", "/api/./overview", 404, "not_found"},
		{"GET", "/assets/../api/overview", 404, "not_found"},
		{"GET", "/assets", 404, "not_found"},
		{"POST", "//api/login", 404, "not_found"},
		{"PUT", "/api/session", 405, "method_not_allowed"},
	} {
		wantProblem(t, h.do(cl, c.method, c.path, "", nil), c.status, c.code)
	}
	// A range or a precondition ServeFileFS would refuse in text/plain:
	// the page is served whole.
	for _, hdr := range []map[string]string{{"Range": "bytes=999999-"}, {"If-Match": `"nope"`}, {"If-Unmodified-Since": "Mon, 02 Jan 2006 15:04:05 GMT"}} {
		res := h.do(cl, "GET", "/", "", hdr)
		if res.StatusCode != 200 {
			t.Fatalf("GET / with %v: %d", hdr, res.StatusCode)
		}
		readAll(res)
	}
	res := h.do(cl, "GET", "/", "", nil)
	if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/html; charset=utf-8" {
		t.Fatalf("the page: %d %q", res.StatusCode, ct)
	}
	readAll(res)
}
