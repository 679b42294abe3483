package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xadm/mensageria/ops"
	"github.com/xadm/mensageria/redact"
)

// Problem is an RFC 9457 problem document, the body of every refusal.
// Code is this console's own name for the problem, stable for scripts.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code"`
}

func problem(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Instance: r.URL.Path, Code: code,
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// maxBody bounds every request body the console reads.
const maxBody = 64 << 10

// ErrBadRequest is wrapped by every error of the request decoders.
var ErrBadRequest = errors.New("mensageria/console: bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadRequest}, args...)...)
}

// decodeJSON reads exactly one JSON object with only known fields.
func decodeJSON(body io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	if err != nil {
		return badRequest("reading the body: %v", err)
	}
	if len(b) > maxBody {
		return badRequest("the body is larger than %d bytes", maxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the body is not the JSON object expected: %v", err)
	}
	if dec.More() {
		return badRequest("the body holds more than one JSON value")
	}
	return nil
}

// Login is the body of POST /api/login: a token, or a user and password.
type Login struct {
	Token    string `json:"token,omitempty"`
	User     string `json:"user,omitempty"`
	Password string `json:"password,omitempty"`
}

// DecodeLogin decodes and checks the shape of a login body.
func DecodeLogin(body io.Reader) (Login, error) {
	var l Login
	if err := decodeJSON(body, &l); err != nil {
		return Login{}, err
	}
	switch {
	case l.Token != "" && (l.User != "" || l.Password != ""):
		return Login{}, badRequest("send a token or a user and password, not both")
	case l.Token == "" && (l.User == "" || l.Password == ""):
		return Login{}, badRequest("a token, or a user and a password, is required")
	}
	return l, nil
}

// Action is the body of POST /api/dead/retry and /api/dead/discard: some
// dead letters by id, or (All) every dead letter of one Type.
type Action struct {
	IDs  []int64 `json:"ids,omitempty"`
	Type string  `json:"type,omitempty"`
	All  bool    `json:"all,omitempty"`
	// AllowDuplicate retries dead letters of at_most_once routes whose
	// last attempt may have reached the receiver too (their mark cleared,
	// sent again: an effect applied may apply twice). Without it such a
	// retry is refused, 409 at_most_once. Retry only.
	AllowDuplicate bool `json:"allow_duplicate,omitempty"`
}

// maxActionIDs bounds one action by ids; bulk beyond it is "all of a type".
const maxActionIDs = 1000

// DecodeAction decodes an action body into the dead letters it selects
// (discard says the action is a discard, which allows no duplicate). It
// never selects nothing and never selects more than the body names: ids
// must be positive and distinct, and a whole type needs all: true as well
// as the type, so that a body that lost its ids cannot become "everything".
func DecodeAction(body io.Reader, discard bool) (ops.Selection, error) {
	var a Action
	if err := decodeJSON(body, &a); err != nil {
		return ops.Selection{}, err
	}
	if a.AllowDuplicate && discard {
		return ops.Selection{}, badRequest("allow_duplicate is for a retry, not a discard")
	}
	switch {
	case len(a.IDs) > 0 && (a.Type != "" || a.All):
		return ops.Selection{}, badRequest("select dead letters by ids or by type with all: true, not both")
	case len(a.IDs) > 0:
		if len(a.IDs) > maxActionIDs {
			return ops.Selection{}, badRequest("at most %d ids per action (use type and all: true for more)", maxActionIDs)
		}
		seen := make(map[int64]bool, len(a.IDs))
		for _, id := range a.IDs {
			if id <= 0 {
				return ops.Selection{}, badRequest("id %d is not a message id", id)
			}
			if seen[id] {
				return ops.Selection{}, badRequest("id %d is listed twice", id)
			}
			seen[id] = true
		}
		return ops.Selection{IDs: slices.Clone(a.IDs), AllowDuplicate: a.AllowDuplicate}, nil
	case a.Type != "" && a.All:
		if len(a.Type) > 200 {
			return ops.Selection{}, badRequest("type is longer than 200 characters")
		}
		return ops.Selection{Types: []string{a.Type}, AllowDuplicate: a.AllowDuplicate}, nil
	case a.Type != "":
		return ops.Selection{}, badRequest("acting on every dead letter of a type needs all: true")
	}
	return ops.Selection{}, badRequest("select dead letters: ids, or type with all: true")
}

func jsonBody(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// SessionInfo is what GET /api/session and POST /api/login answer.
type SessionInfo struct {
	CSRF     string `json:"csrf"`
	ReadOnly bool   `json:"read_only"`
	// Operator is the name a resolution of messages in doubt is recorded
	// under (By).
	Operator string `json:"operator"`
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	// A login from another site would log the operator's browser into a
	// console of the attacker's choosing (login CSRF).
	if err := c.cop.Check(r); err != nil {
		problem(w, r, http.StatusForbidden, "cross_origin", "a cross-origin request cannot log in")
		return
	}
	if !jsonBody(r) {
		problem(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the login as application/json")
		return
	}
	l, err := DecodeLogin(r.Body)
	if err != nil {
		problem(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if c.refuseGuessing(w, r) {
		return
	}
	a := c.opt.Auth
	ok := false
	if l.Token != "" {
		ok = a.Token != "" && equal(l.Token, a.Token)
	} else {
		ok = a.User != "" && equal(l.User, a.User) && equal(l.Password, a.Password)
	}
	if !ok {
		c.guard.Failed("")
		// Who tried, as far as the request says: the user name sent (a
		// token names nobody), never the password or the token.
		tried := "token"
		if l.Token == "" {
			tried = "user " + strconv.Quote(l.User)
		}
		c.opt.Logger.Warn("console: login refused: wrong credentials", "with", tried, "remote", r.RemoteAddr)
		problem(w, r, http.StatusUnauthorized, "unauthorized", "wrong credentials")
		return
	}
	c.opt.Logger.Info("console: login", "by", byOf(l), "remote", r.RemoteAddr)
	by := byOf(l)
	id, err := c.newSession(by)
	if err != nil {
		problem(w, r, http.StatusInternalServerError, "internal", "cannot make a session")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.opt.SecureCookie || r.TLS != nil,
		MaxAge: int(c.opt.SessionTTL / time.Second),
	})
	writeJSON(w, SessionInfo{CSRF: c.csrfToken(principal{id: "s:" + id, session: id}), ReadOnly: c.opt.ReadOnly, Operator: by})
}

// byOf is the operator a login names: its user, or the token's holder.
func byOf(l Login) string {
	if l.Token == "" {
		return l.User
	}
	return tokenOperator
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, p principal) {
	if p.session != "" {
		c.mu.Lock()
		delete(c.sessions, p.session)
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

func (c *Console) session(w http.ResponseWriter, _ *http.Request, p principal) {
	writeJSON(w, SessionInfo{CSRF: c.csrfToken(p), ReadOnly: c.opt.ReadOnly, Operator: p.by})
}

// Overview is the main page's data.
type Overview struct {
	At time.Time `json:"at"`
	// CountedAt is when the counts were taken (see the package doc);
	// CountError is the last recount's failure, when it failed.
	CountedAt   time.Time  `json:"counted_at"`
	CountTookMs float64    `json:"count_took_ms"`
	CountError  string     `json:"count_error,omitempty"`
	ReadOnly    bool       `json:"read_only"`
	Apps        []AppView  `json:"apps"`
	Types       []TypeView `json:"types"`
	// Inbox is the receive daemon's inbox queue per consumer (absent on a
	// schema without one).
	Inbox   []InboxView        `json:"inbox,omitempty"`
	Minutes []time.Time        `json:"minutes"` // the start of each PerMinute bucket, oldest first
	Errors  []string           `json:"errors,omitempty"`
	Timings map[string]float64 `json:"timings_ms"`
}

// AppView is one app and its election.
type AppView struct {
	App    string     `json:"app"`
	Holder string     `json:"holder"` // "" when no relay of the app holds it
	Epoch  int64      `json:"epoch"`
	Since  *time.Time `json:"since,omitempty"`
}

// TypeView is one message type's line.
type TypeView struct {
	Type    string `json:"type"`
	Owner   string `json:"owner"`
	Pending int64  `json:"pending"`
	// Scheduled counts messages not due yet (a NotBefore in the future)
	// and never attempted; Pending and OldestPendingSec leave them out.
	Scheduled        int64   `json:"scheduled"`
	InFlight         int64   `json:"in_flight"`
	Dead             int64   `json:"dead"`
	DeliveredLastHr  int64   `json:"delivered_last_hour"`
	OldestPendingSec float64 `json:"oldest_pending_seconds"`
	// InDoubt and OldestInDoubtSec are the type's messages in doubt (an
	// at-most-once route's attempt whose outcome is unknown, ADR 0015):
	// an operator must resolve them, nothing else moves them on.
	InDoubt          int64   `json:"in_doubt"`
	OldestInDoubtSec float64 `json:"oldest_in_doubt_seconds"`
	PerMinute        []int64 `json:"per_minute"`
	// Actionable says whether this console retries and discards the
	// type's dead letters (not read-only, and its owner among
	// Options.Apps).
	Actionable bool       `json:"actionable"`
	Route      *RouteView `json:"route,omitempty"`
	// Paused is an operator's pause of the type (POST /api/routes/pause,
	// 'mensageria routes pause'); absent when it is not paused.
	Paused *PauseView `json:"paused,omitempty"`
}

// InboxView is one consumer's inbox queue: deliveries accepted by
// 'mensageria receive' that its app has not applied yet, and the ones it
// parked as dead.
type InboxView struct {
	Consumer         string  `json:"consumer"`
	Owner            string  `json:"owner"`
	Pending          int64   `json:"pending"`
	Dead             int64   `json:"dead"`
	OldestPendingSec float64 `json:"oldest_pending_seconds"`
}

// RouteView is a route's health as its relay last recorded it.
type RouteView struct {
	Name      string     `json:"name"`
	State     string     `json:"state"`
	Since     time.Time  `json:"since"`
	Until     *time.Time `json:"until,omitempty"`
	Failures  int        `json:"failures"`
	LastError string     `json:"last_error,omitempty"`
	Recorded  time.Time  `json:"recorded"`
}

const chartMinutes = 60

func (c *Console) overview(w http.ResponseWriter, r *http.Request, _ principal) {
	ov, err := c.Overview(r.Context())
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
		return
	}
	writeJSON(w, ov)
}

// Overview assembles the main page: the kept counts, and the catalog,
// route states, election holders and per-minute deliveries read now (each
// a small table or an index range; none reads the outbox).
func (c *Console) Overview(ctx context.Context) (*Overview, error) {
	ov := &Overview{At: time.Now().UTC(), ReadOnly: c.opt.ReadOnly, Timings: map[string]float64{}}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	began := time.Now()
	snap, err := c.counts.get(ctx)
	if err != nil {
		return nil, err
	}
	ov.Timings["counts"] = ms(time.Since(began))
	if snap.err != nil {
		ov.CountError = redact.Text(snap.err.Error())
		if snap.counted == nil {
			return nil, snap.err
		}
	}
	ov.CountedAt, ov.CountTookMs = snap.at.UTC(), ms(snap.took)

	st, err := c.every.Status(ctx, ops.StatusParams{Counted: snap.counted, AllElections: true})
	if err != nil {
		return nil, err
	}
	for _, step := range []string{"owners", "routes", "elections"} {
		ov.Timings[step] = ms(st.Timings[step])
	}
	scope := c.scoped.Scope()
	views := map[string]*TypeView{}
	names := make([]string, 0, len(st.Types))
	for _, t := range st.Types {
		v := &TypeView{Type: t.Type, Owner: t.Owner, Pending: t.Pending, Scheduled: t.Scheduled, InFlight: t.InFlight, Dead: t.Dead, DeliveredLastHr: t.DeliveredLastHour,
			OldestPendingSec: t.OldestPending.Seconds(), InDoubt: t.InDoubt, OldestInDoubtSec: t.OldestInDoubt.Seconds(),
			PerMinute: make([]int64, chartMinutes), Actionable: !c.opt.ReadOnly && scope.Has(t.Owner), Route: routeView(t.Route), Paused: pauseView(t.Paused)}
		views[t.Type] = v
		names = append(names, t.Type)
	}
	began = time.Now()
	c.perMinute(ctx, ov, names, views)
	ov.Timings["per_minute"] = ms(time.Since(began))
	for _, e := range st.Elections {
		av := AppView{App: e.App, Holder: e.Leader.Holder, Epoch: e.Leader.Epoch}
		if e.Err != nil {
			av = AppView{App: e.App}
			ov.Errors = append(ov.Errors, "election of "+e.App+": "+redact.Text(e.Err.Error()))
		} else if l := e.Leader; l.Holder != "" && !l.Since.IsZero() {
			s := l.Since.UTC()
			av.Since = &s
		}
		ov.Apps = append(ov.Apps, av)
	}
	for _, q := range st.Inbox {
		ov.Inbox = append(ov.Inbox, InboxView{Consumer: q.Consumer, Owner: q.Owner, Pending: q.Pending, Dead: q.Dead, OldestPendingSec: q.OldestPending.Seconds()})
	}
	for _, t := range names {
		ov.Types = append(ov.Types, *views[t])
	}
	return ov, nil
}

func routeView(r *ops.Route) *RouteView {
	if r == nil {
		return nil
	}
	rv := &RouteView{Name: r.Name, State: r.State, Since: r.Since, Failures: r.Failures, LastError: r.LastError, Recorded: r.Recorded}
	if !r.Until.IsZero() {
		u := r.Until
		rv.Until = &u
	}
	return rv
}

// perMinute sets the chart's minutes and, where the driver keeps them,
// each type's deliveries per minute; a failed read is one of the page's
// errors.
func (c *Console) perMinute(ctx context.Context, ov *Overview, types []string, views map[string]*TypeView) {
	now := time.Now().UTC().Truncate(time.Minute)
	for i := range chartMinutes {
		ov.Minutes = append(ov.Minutes, now.Add(time.Duration(i-chartMinutes+1)*time.Minute))
	}
	if len(types) == 0 {
		return
	}
	mins, _, err := c.every.DeliveredPerMinute(ctx, types, chartMinutes*time.Minute)
	if err != nil {
		ov.Errors = append(ov.Errors, "deliveries per minute: "+redact.Text(err.Error()))
	}
	for _, m := range mins {
		i := chartMinutes - 1 - int(now.Sub(m.Minute.UTC().Truncate(time.Minute))/time.Minute)
		if v := views[m.Type]; v != nil && i >= 0 && i < chartMinutes {
			v.PerMinute[i] += m.N
		}
	}
}

// Letter is a dead letter in the list.
type Letter struct {
	ID        int64     `json:"id"`
	MessageID string    `json:"message_id"`
	Type      string    `json:"type"`
	Key       string    `json:"key"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	Reason    string    `json:"reason"`
	Route     string    `json:"route,omitempty"`
	Owner     string    `json:"owner"`
	// AttemptedAt is when the attempt of a message in doubt began.
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	// Payload and Headers are in the detail only.
	Payload json.RawMessage `json:"payload,omitempty"`
	Headers json.RawMessage `json:"headers,omitempty"`
	// Resolutions are the decisions recorded about the message while it
	// was in doubt, newest first (detail only, on a backend that keeps
	// messages in doubt).
	Resolutions []ResolutionView `json:"resolutions,omitempty"`
}

// DeadPage is one page of a type's dead letters (GET /api/dead), or of its
// messages in doubt (GET /api/doubt).
type DeadPage struct {
	Type    string   `json:"type"`
	Letters []Letter `json:"letters"`
	// NextAfter is the after= of the next page; 0 on the last.
	NextAfter int64 `json:"next_after,omitempty"`
}

func letterOf(m ops.Message, detail bool) Letter {
	l := Letter{
		ID: m.ID, MessageID: m.MessageID, Type: m.Type, Key: m.Key, State: string(m.State),
		Attempts: m.Attempts, CreatedAt: m.CreatedAt, Reason: m.LastError, Route: m.LastRoute, Owner: m.Owner, AttemptedAt: m.AttemptedAt,
	}
	if detail {
		l.Payload = rawOrString(m.Payload)
		l.Headers = rawOrString(m.Headers)
		if m.Resolutions != nil {
			l.Resolutions = resolutionViews(m.Resolutions)
		}
	}
	return l
}

// rawOrString passes a stored JSON document through as it is, and anything
// else as a JSON string, so the page never parses a broken document.
func rawOrString(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

const maxPage = 500

func (c *Console) deadList(w http.ResponseWriter, r *http.Request, _ principal) {
	c.listOf(w, r, ops.StateDead, "dead letters")
}

// listOf answers one page of a type's rows in state (dead, or in doubt),
// on that type's part of the state's index.
func (c *Console) listOf(w http.ResponseWriter, r *http.Request, state ops.State, what string) {
	q := r.URL.Query()
	typ := q.Get("type")
	if typ == "" {
		problem(w, r, http.StatusBadRequest, "bad_request", "type= is required: "+what+" are listed one type at a time, on that type's part of the index")
		return
	}
	after, err := queryInt(q.Get("after"), 0)
	if err != nil || after < 0 {
		problem(w, r, http.StatusBadRequest, "bad_request", "after= must be a message id (a non-negative integer)")
		return
	}
	limit, err := queryInt(q.Get("limit"), 50)
	if err != nil || limit < 1 || limit > maxPage {
		problem(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit= must be between 1 and %d", maxPage))
		return
	}
	list := c.every.DeadLetters
	if state == ops.StateInDoubt {
		list = c.every.InDoubt
	}
	p, err := list(r.Context(), ops.ListParams{Types: []string{typ}, After: after, Limit: int(limit)})
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
		return
	}
	page := DeadPage{Type: typ, Letters: []Letter{}, NextAfter: p.NextAfter}
	for _, m := range p.Messages {
		page.Letters = append(page.Letters, letterOf(m, false))
	}
	writeJSON(w, page)
}

func queryInt(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

func (c *Console) message(w http.ResponseWriter, r *http.Request, _ principal) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		problem(w, r, http.StatusBadRequest, "bad_request", "the message id must be a positive integer")
		return
	}
	m, err := c.every.Show(r.Context(), id)
	if errors.Is(err, ops.ErrNotFound) {
		problem(w, r, http.StatusNotFound, "not_found", fmt.Sprintf("no message %d in the outbox (delivered and deleted, discarded, or never there)", id))
		return
	}
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
		return
	}
	writeJSON(w, letterOf(*m, true))
}

// ActionResult is what an action answers.
type ActionResult struct {
	// Changed counts the dead letters retried or discarded; a selected id
	// that was no longer dead (retried or discarded already) is not one.
	Changed int `json:"changed"`
}

func (c *Console) revive(discard bool) func(http.ResponseWriter, *http.Request, principal) {
	verb := "retried"
	if discard {
		verb = "discarded"
	}
	return func(w http.ResponseWriter, r *http.Request, who principal) {
		if !jsonBody(r) {
			problem(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the action as application/json")
			return
		}
		p, err := DecodeAction(r.Body, discard)
		if err != nil {
			problem(w, r, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		o := c.scoped
		plan := o.PlanRetry
		if discard {
			plan = o.PlanDiscard
		}
		pl, err := plan(r.Context(), p)
		if err != nil {
			c.refused(w, r, err)
			return
		}
		res, err := o.Apply(r.Context(), pl)
		if err != nil {
			c.refused(w, r, err)
			return
		}
		n, marked := res.Changed, res.Marked
		c.counts.invalidate()
		// The operator is who the console knows: the user of a login or
		// of basic auth, or the token's holder; never a credential.
		attrs := []any{"by", who.by, "changed", n, "ids", p.IDs, "types", p.Types}
		if len(marked) > 0 {
			attrs = append(attrs, "allow_duplicate", marked)
			c.opt.Logger.Warn("console: dead letters of at_most_once routes sent again; an effect their receiver applied will apply twice", attrs...)
		}
		c.opt.Logger.Info("console: dead letters "+verb, attrs...)
		writeJSON(w, ActionResult{Changed: n})
	}
}

// refused answers ops' refusals as the console's problems: another app's
// message or type is 403 other_app, a retry of dead letters that may
// reach their receiver twice 409 at_most_once; anything else is the
// database's.
func (c *Console) refused(w http.ResponseWriter, r *http.Request, err error) {
	var oos *ops.OutOfScopeError
	var amo *ops.AtMostOnceError
	switch {
	case errors.As(err, &oos):
		owner := "no app owns it"
		if oos.Owner != "" {
			owner = "it is owned by app " + strconv.Quote(oos.Owner)
		}
		what := fmt.Sprintf("message type %q", oos.Type)
		if oos.ID != 0 {
			what = fmt.Sprintf("message %d (type %s)", oos.ID, oos.Type)
		}
		problem(w, r, http.StatusForbidden, "other_app", fmt.Sprintf("%s is not %s's: %s; nothing changed (the owning app's console acts on it, or one with all_apps: true)", what, strings.Join(oos.Apps, ", "), owner))
	case errors.As(err, &amo):
		problem(w, r, http.StatusConflict, "at_most_once", fmt.Sprintf("%d dead letter(s) (%s) belong to at_most_once routes and their last attempt may have reached the receiver: "+
			"sending again may apply the effect twice; nothing changed. Check the receiver: if it does not have the effect, retry with allow_duplicate: true; if it does, discard them",
			len(amo.IDs), ops.IDList(amo.IDs)))
	case errors.Is(err, ops.ErrInvalidDecision):
		problem(w, r, http.StatusBadRequest, "bad_request", err.Error())
	default:
		problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
	}
}
