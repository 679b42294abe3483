// Package console is the operator's web console (`mensageria console`,
// docs/adr/0017-web-console.md): per app and type the owner, the counts,
// the oldest age, deliveries per minute and the route's health; each
// app's election holder; the dead letters, with retry and discard; the
// messages in doubt of at-most-once routes, with resolve.
//
// Everything it shows is behind authentication (a token or basic auth),
// every action needs the session's CSRF token and passes the standard
// library's cross-origin check, a read-only console refuses every action,
// and every refusal is an RFC 9457 problem response. The page and its
// script are embedded; nothing is built to run it.
//
// It reads and acts through the ops package only. The one costly
// statement, the per-type counts (ops.Ops.ReadCounts), is never run by a
// page load: the console keeps the last counts and recounts in the
// background, at most once per Options.MinRefresh and never more often
// than ten times the last count took, so a million pending rows cost the
// database one scan every few seconds however many operators look.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/httpguard"
	"github.com/xadm/mensageria/ops"
)

//go:embed assets
var assets embed.FS

// ConfigError names an option New refuses.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string {
	return "mensageria/console: " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, mensageria.ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == mensageria.ErrConfig }

// Auth is who may use the console: the holder of Token, or of User and
// Password (HTTP basic credentials). At least one must be set.
type Auth struct {
	Token    string
	User     string
	Password string
}

// Options configure a console.
type Options struct {
	// Ops are the operator's verbs over the outbox the console shows;
	// their scope does not matter: the console reads every app's and
	// acts within Apps.
	Ops  *ops.Ops
	Auth Auth
	// ReadOnly refuses every action (retry, discard): the console only
	// shows.
	ReadOnly bool
	// Apps are the apps whose dead letters the console retries and
	// discards, as the dead commands act on their config's app only; a
	// letter of a type another app owns (or none) is refused, naming the
	// owner. Empty acts on every app's (the dead commands' --all-apps).
	// The console shows every app either way.
	Apps []string
	// SecureCookie marks the session cookie Secure (sent over HTTPS only)
	// even when the console itself is served over plain HTTP behind a TLS
	// proxy; a request that arrives over TLS gets it regardless.
	SecureCookie bool
	// MinRefresh is the shortest time between two recounts of the
	// per-type counts; 0 means one second.
	MinRefresh time.Duration
	// SessionTTL is how long a login lasts; 0 means 12 hours.
	SessionTTL time.Duration
	Logger     *slog.Logger
}

// Console is an http.Handler. Close stops its background recount.
type Console struct {
	opt    Options
	mux    http.Handler // the routes, refusing as problems what ServeMux would answer itself
	key    []byte       // signs CSRF tokens; random per process
	cop    *http.CrossOriginProtection
	static fs.FS // the assets directory
	counts *counter
	guard  *httpguard.Throttle // failed credentials, one bucket for the console (key "")

	// scoped is the operator's verbs within the console's apps
	// (Options.Apps; every app's without): what its actions may touch.
	scoped *ops.Ops
	// every is the verbs over every app: the console shows every app's
	// types and messages, and acts only within scoped.
	every *ops.Ops

	mu       sync.Mutex
	sessions map[string]sessionEntry // session id → its expiry and who logged in

	ctx    context.Context
	cancel context.CancelFunc
}

// New checks opt and returns a console. It starts the first count at once,
// so that the first page does not wait for it.
func New(opt Options) (*Console, error) {
	if opt.Ops == nil {
		return nil, &ConfigError{Field: "Ops", Reason: "required"}
	}
	a := opt.Auth
	if a.Token == "" && a.User == "" && a.Password == "" {
		return nil, &ConfigError{Field: "Auth", Reason: "a token or a user and password is required: the console shows nothing to anonymous clients"}
	}
	if (a.User == "") != (a.Password == "") {
		return nil, &ConfigError{Field: "Auth", Reason: "basic auth needs both a user and a password"}
	}
	if strings.Contains(a.User, ":") {
		return nil, &ConfigError{Field: "Auth.User", Reason: "a basic auth user cannot contain ':'"}
	}
	if a.Token != "" && len(a.Token) < 16 {
		return nil, &ConfigError{Field: "Auth.Token", Reason: "at least 16 characters"}
	}
	if a.Password != "" && len(a.Password) < 12 {
		return nil, &ConfigError{Field: "Auth.Password", Reason: "at least 12 characters"}
	}
	if opt.MinRefresh < 0 || opt.SessionTTL < 0 {
		return nil, &ConfigError{Field: "MinRefresh", Reason: "cannot be negative"}
	}
	if opt.MinRefresh == 0 {
		opt.MinRefresh = time.Second
	}
	if opt.SessionTTL == 0 {
		opt.SessionTTL = 12 * time.Hour
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Console{
		opt: opt, key: key, cop: http.NewCrossOriginProtection(),
		static:   sub,
		sessions: map[string]sessionEntry{},
		ctx:      ctx, cancel: cancel,
		scoped: opt.Ops.In(ops.ForApps(opt.Apps...)),
		every:  opt.Ops.In(ops.AllApps()),
	}
	c.counts = newCounter(ctx, c.every, opt.MinRefresh, opt.Logger)
	c.guard = httpguard.NewThrottle(20, 2)
	c.routes()
	return c, nil
}

// Close stops the background recount.
func (c *Console) Close() error {
	c.cancel()
	c.counts.wait()
	return nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.serveStatic)
	m.HandleFunc("GET /assets/", c.serveStatic)
	m.HandleFunc("POST /api/login", c.login)
	m.HandleFunc("POST /api/logout", c.authed(c.action(c.logout, false)))
	m.HandleFunc("GET /api/session", c.authed(c.session))
	m.HandleFunc("GET /api/overview", c.authed(c.overview))
	m.HandleFunc("GET /api/dead", c.authed(c.deadList))
	m.HandleFunc("GET /api/messages/{id}", c.authed(c.message))
	m.HandleFunc("POST /api/dead/retry", c.authed(c.action(c.revive(false), true)))
	m.HandleFunc("POST /api/dead/discard", c.authed(c.action(c.revive(true), true)))
	m.HandleFunc("GET /api/doubt", c.authed(c.doubtList))
	m.HandleFunc("POST /api/doubt/resolve", c.authed(c.action(c.resolve, true)))
	m.HandleFunc("POST /api/routes/pause", c.authed(c.action(c.pauseRoute, true)))
	m.HandleFunc("POST /api/routes/resume", c.authed(c.action(c.resumeRoute, true)))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The mux sends a known path under a wrong method to the
		// catch-all; answer it as what it is.
		if allow := otherMethod(m, r); allow != "" {
			w.Header().Set("Allow", allow)
			problem(w, r, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path)
			return
		}
		problem(w, r, http.StatusNotFound, "not_found", "no such page or API: "+r.URL.Path)
	})
	// What the mux would answer itself (the redirect of an unclean path
	// or of a subtree without its slash) is refused as a problem too.
	c.mux = httpguard.Routes(m, func(w http.ResponseWriter, r *http.Request, status int, detail string) {
		code := "not_found"
		if status == http.StatusMethodNotAllowed {
			code = "method_not_allowed"
		}
		problem(w, r, status, code, detail)
	})
}

// ServeHTTP sets the headers every answer carries and routes the request.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// otherMethod returns the method a path the catch-all got is known under,
// "" when it is unknown under every method.
func otherMethod(m *http.ServeMux, r *http.Request) string {
	if _, pattern := m.Handler(r); pattern != "/" {
		return ""
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		if method == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, p := m.Handler(probe); p != "/" && p != "" {
			return method
		}
	}
	return ""
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/assets/")
	if r.URL.Path == "/" {
		name = "index.html"
	}
	if _, err := fs.Stat(c.static, name); err != nil || name == "" || strings.Contains(name, "/") {
		problem(w, r, http.StatusNotFound, "not_found", "no such page or API: "+r.URL.Path)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	// ServeFileFS would refuse a range it cannot serve (416) or a failed
	// precondition (412) in text/plain or with no body; the assets are
	// small, so they are served whole, and only the revalidation headers
	// (304) are honoured.
	for _, h := range []string{"Range", "If-Range", "If-Match", "If-Unmodified-Since"} {
		r.Header.Del(h)
	}
	http.ServeFileFS(w, r, c.static, name)
}

// principal is who a request is: a session (cookie) or the holder of a
// credential sent in the Authorization header.
type principal struct {
	id      string // "s:<session>" or "h:<digest of the header>"
	session string // the session id, "" for header credentials
	// by names the operator in the record of a resolution (By): the basic
	// auth user name, or tokenOperator for the token's holder.
	by string
}

// tokenOperator is the By of a decision taken by the holder of the
// console's token: the token names nobody, and is never recorded itself.
const tokenOperator = "console (token)"

// sessionEntry is one login.
type sessionEntry struct {
	expires time.Time
	by      string
}

const cookieName = "mensageria_console"

// authed refuses a request without valid credentials and passes the
// principal on.
func (c *Console) authed(next func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" && c.refuseGuessing(w, r) {
			return
		}
		p, ok := c.identify(r)
		if !ok {
			if r.Header.Get("Authorization") != "" {
				c.guard.Failed("")
				c.opt.Logger.Warn("console: credentials refused: wrong credentials", "with", triedWith(r), "remote", r.RemoteAddr)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="mensageria console"`)
			problem(w, r, http.StatusUnauthorized, "unauthorized", "log in with the console's token or user and password")
			return
		}
		next(w, r, p)
	}
}

// refuseGuessing answers 429 while the failed credentials throttle is
// empty.
func (c *Console) refuseGuessing(w http.ResponseWriter, r *http.Request) bool {
	wait, blocked := c.guard.Blocked("")
	if !blocked {
		return false
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	problem(w, r, http.StatusTooManyRequests, "too_many_attempts", "too many wrong credentials: the console refuses credentials for a while")
	return true
}

// triedWith names what a refused Authorization header tried, for the
// log: the basic auth user, or the scheme; never the secret.
func triedWith(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok {
		return "user " + strconv.Quote(u)
	}
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if len(scheme) > 20 {
		scheme = scheme[:20]
	}
	return strconv.QuoteToASCII(strings.ToLower(scheme))
}

func (c *Console) identify(r *http.Request) (principal, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		if !c.credentialOK(h) {
			return principal{}, false
		}
		d := sha256.Sum256([]byte(h))
		by := tokenOperator
		if u, _, ok := r.BasicAuth(); ok {
			by = u
		}
		return principal{id: "h:" + hex.EncodeToString(d[:]), by: by}, true
	}
	ck, err := r.Cookie(cookieName)
	if err != nil || len(ck.Value) != 64 {
		return principal{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.sessions[ck.Value]
	if !ok {
		return principal{}, false
	}
	if time.Now().After(e.expires) {
		delete(c.sessions, ck.Value)
		return principal{}, false
	}
	return principal{id: "s:" + ck.Value, session: ck.Value, by: e.by}, true
}

// credentialOK checks an Authorization header against the configured
// credentials, in constant time per credential.
func (c *Console) credentialOK(h string) bool {
	scheme, rest, _ := strings.Cut(h, " ")
	rest = strings.TrimSpace(rest)
	a := c.opt.Auth
	switch strings.ToLower(scheme) {
	case "bearer":
		return a.Token != "" && equal(rest, a.Token)
	case "basic":
		if a.User == "" {
			return false
		}
		r := &http.Request{Header: http.Header{"Authorization": {h}}}
		u, pw, ok := r.BasicAuth()
		return ok && equal(u, a.User) && equal(pw, a.Password)
	}
	return false
}

func equal(got, want string) bool {
	g := sha256.Sum256([]byte(got))
	w := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// csrfToken is the token a principal sends with each action: a MAC of who
// it is under the process's key, so it cannot be guessed, is not the
// session cookie, and dies with the session.
func (c *Console) csrfToken(p principal) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("csrf\x00" + p.id))
	return hex.EncodeToString(m.Sum(nil))
}

const csrfHeader = "X-CSRF-Token"

// action guards a state-changing request: the cross-origin check, the
// CSRF token, and (when mutates) the read-only mode.
func (c *Console) action(next func(http.ResponseWriter, *http.Request, principal), mutates bool) func(http.ResponseWriter, *http.Request, principal) {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		if err := c.cop.Check(r); err != nil {
			problem(w, r, http.StatusForbidden, "cross_origin", "a cross-origin request cannot act on the console")
			return
		}
		got := r.Header.Get(csrfHeader)
		if got == "" {
			problem(w, r, http.StatusForbidden, "csrf_token_missing", "every action needs the "+csrfHeader+" header from GET /api/session")
			return
		}
		if !hmac.Equal([]byte(got), []byte(c.csrfToken(p))) {
			problem(w, r, http.StatusForbidden, "csrf_token_invalid", "the "+csrfHeader+" header is not this session's token")
			return
		}
		if mutates && c.opt.ReadOnly {
			problem(w, r, http.StatusForbidden, "read_only", "this console is read-only: retry, discard, resolve, pause and resume are refused")
			return
		}
		next(w, r, p)
	}
}

func (c *Console) newSession(by string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.sessions { // bounded by the logins of one TTL
		if now.After(e.expires) {
			delete(c.sessions, k)
		}
	}
	c.sessions[id] = sessionEntry{expires: now.Add(c.opt.SessionTTL), by: by}
	return id, nil
}
