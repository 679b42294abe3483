package httpguard

import (
	"net/http"
	"path"
	"reflect"
)

// Refuse writes one refusal in an endpoint's problem form: status, and a
// detail for a human.
type Refuse func(w http.ResponseWriter, r *http.Request, status int, detail string)

// redirectType is the type of the handler ServeMux hands out for its
// redirects (an unclean path, a subtree's missing slash).
var redirectType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// Routes serves mux, answering with refuse what mux would answer itself
// in text/plain or as a bare redirect: a path that is not in its clean
// form (//m2m, /a/../b) is refused with 404 rather than redirected (a
// relay never follows a redirect, and a client that does should learn
// the right URL, not be walked to it); a path mux has no pattern for is a
// 404, and one it has under other methods only a 405 with Allow.
func Routes(mux *http.ServeMux, refuse Refuse) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && p != CleanPath(p) {
			refuse(w, r, http.StatusNotFound, "the path is not in its clean form (no empty, . or .. segments); nothing is served there and no redirect is given")
			return
		}
		h, pattern := mux.Handler(r)
		if reflect.TypeOf(h) == redirectType {
			refuse(w, r, http.StatusNotFound, "no such path (the one with a trailing slash is served; no redirect is given)")
			return
		}
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// The mux's own 404 or 405: learn which, and its Allow, from
		// its handler (it writes nothing else) and answer in form.
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.code == http.StatusMethodNotAllowed {
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			refuse(w, r, http.StatusMethodNotAllowed, r.Method+" is not allowed here; allowed: "+allow)
			return
		}
		refuse(w, r, http.StatusNotFound, "no such path")
	})
}

// CleanPath is the form ServeMux redirects a path to: rooted, without
// empty, . or .. segments, its trailing slash kept.
func CleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// recorder keeps the status and headers of the mux's own refusal and
// drops its text/plain body.
type recorder struct {
	header http.Header
	code   int
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(code int) {
	if rec.code == 0 {
		rec.code = code
	}
}

func (rec *recorder) Write(b []byte) (int, error) {
	rec.WriteHeader(http.StatusOK)
	return len(b), nil
}
