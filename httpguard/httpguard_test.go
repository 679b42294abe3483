package httpguard

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A source's bucket empties after burst failures and refills at rate;
// other sources keep theirs; a source that failed nothing is never
// blocked.
func TestThrottleIsPerSource(t *testing.T) {
	th := NewThrottle(3, 2)
	clock := time.Unix(1_800_000_000, 0)
	th.Now = func() time.Time { return clock }
	for range 3 {
		if _, blocked := th.Blocked("a"); blocked {
			t.Fatal("blocked before its burst")
		}
		th.Failed("a")
	}
	wait, blocked := th.Blocked("a")
	if !blocked || wait <= 0 || wait > time.Second {
		t.Fatalf("after its burst: blocked %v for %v", blocked, wait)
	}
	if _, blocked := th.Blocked("b"); blocked {
		t.Fatal("another source is blocked by a's failures")
	}
	clock = clock.Add(500 * time.Millisecond)
	if _, blocked := th.Blocked("a"); blocked {
		t.Fatal("still blocked after a token refilled")
	}
}

// Past MaxSources the buckets that refilled are dropped, and the rest
// share one bucket: the map stays bounded and a flood of sources is still
// throttled.
func TestThrottleStaysBounded(t *testing.T) {
	th := NewThrottle(1, 1)
	clock := time.Unix(1_800_000_000, 0)
	th.Now = func() time.Time { return clock }
	for i := range MaxSources + 10 {
		th.Failed("s" + itoa(i))
	}
	if n := len(th.buckets); n > MaxSources {
		t.Fatalf("%d buckets kept, bound %d", n, MaxSources)
	}
	if _, blocked := th.Blocked("s" + itoa(MaxSources+5)); !blocked {
		t.Fatal("a source past the bound is not throttled")
	}
	clock = clock.Add(time.Minute)
	th.Failed("late")
	if n := len(th.buckets); n != 1 {
		t.Fatalf("%d buckets after every other refilled, want 1", n)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// The sampler lets the first line through, holds the rest of the
// interval back, and the next line counts them.
func TestSampler(t *testing.T) {
	s := NewSampler(10 * time.Second)
	clock := time.Unix(1_800_000_000, 0)
	s.Now = func() time.Time { return clock }
	if held, ok := s.Allow(); !ok || held != 0 {
		t.Fatalf("first: %d %v", held, ok)
	}
	for range 5 {
		if _, ok := s.Allow(); ok {
			t.Fatal("a line within the interval let through")
		}
	}
	clock = clock.Add(10 * time.Second)
	if held, ok := s.Allow(); !ok || held != 5 {
		t.Fatalf("next interval: %d %v, want 5 held", held, ok)
	}
}

type testProblem struct {
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func newRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("POST /m2m", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("taken")) })
	mux.HandleFunc("GET /assets/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("asset")) })
	return Routes(mux, func(w http.ResponseWriter, _ *http.Request, status int, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(testProblem{Status: status, Detail: detail})
	})
}

// What ServeMux answers by itself comes out as the endpoint's problem:
// no redirect, no text/plain.
func TestRoutesRefuseWhatTheMuxWouldAnswer(t *testing.T) {
	h := newRoutes()
	for _, c := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"POST", "/m2m", 200, "taken"},
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/assets/app.js", 200, "asset"},
		{"POST", "//m2m", 404, ""},
		{"POST", "/m2m/", 404, ""},
		{"POST", "/a/../m2m", 404, ""},
		{"POST", "/./m2m", 404, ""},
		{"GET", "/assets", 404, ""},
		{"GET", "/nope", 404, ""},
		{"GET", "/m2m", 405, ""},
		{"PUT", "/healthz", 405, ""},
	} {
		r := httptest.NewRequest(c.method, "http://x/", nil)
		r.URL = &url.URL{Path: c.path}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, rec.Code, rec.Body, c.status)
			continue
		}
		if c.body != "" {
			if rec.Body.String() != c.body {
				t.Errorf("%s %s: %q", c.method, c.path, rec.Body)
			}
			continue
		}
		var p testProblem
		if rec.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Status != c.status || p.Detail == "" {
			t.Errorf("%s %s: %q %s, not a problem", c.method, c.path, rec.Header().Get("Content-Type"), rec.Body)
		}
		if c.status == 405 && rec.Header().Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
}

// FuzzRoutes: whatever the method and path, the answer is a registered
// handler's (for a clean path) or a problem, never a redirect and never
// the mux's text/plain.
func FuzzRoutes(f *testing.F) {
	for _, s := range []string{"/m2m", "//m2m", "/a/../m2m", "/assets", "/assets/x", "/%2e%2e/m2m", "/m2m%2F", "", "m2m", "/healthz/"} {
		f.Add("POST", s)
		f.Add("GET", s)
	}
	f.Add("CONNECT", "/m2m")
	h := newRoutes()
	f.Fuzz(func(t *testing.T, method, rawPath string) {
		if method == "" || strings.ContainsAny(method, " \t\r\n/") {
			return
		}
		u, err := url.Parse("http://x" + rawPath)
		if err != nil || !strings.HasPrefix(rawPath, "/") {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "http://x/", nil)
		r.Method, r.URL = method, u
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		switch ct := rec.Header().Get("Content-Type"); {
		case rec.Code >= 300 && rec.Code < 400:
			t.Fatalf("%s %q: a redirect %d to %q", method, rawPath, rec.Code, rec.Header().Get("Location"))
		case rec.Code == 200:
			if p := u.EscapedPath(); p != CleanPath(p) {
				t.Fatalf("%s %q: served an unclean path", method, rawPath)
			}
		case ct != "application/problem+json":
			t.Fatalf("%s %q: %d in %q: %s", method, rawPath, rec.Code, ct, rec.Body)
		}
	})
}
