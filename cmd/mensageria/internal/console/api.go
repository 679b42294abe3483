package console

import (
	"bytes"
	"context"
	"encoding/hex"
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

	"github.com/xadm/mensageria/driver"
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

// DecodeAction decodes an action body into the driver's selection. It
// never selects nothing and never selects more than the body names: ids
// must be positive and distinct, and a whole type needs all: true as well
// as the type, so that a body that lost its ids cannot become "everything".
func DecodeAction(body io.Reader, discard bool) (driver.ReviveParams, error) {
	var a Action
	if err := decodeJSON(body, &a); err != nil {
		return driver.ReviveParams{}, err
	}
	if a.AllowDuplicate && discard {
		return driver.ReviveParams{}, badRequest("allow_duplicate is for a retry, not a discard")
	}
	switch {
	case len(a.IDs) > 0 && (a.Type != "" || a.All):
		return driver.ReviveParams{}, badRequest("select dead letters by ids or by type with all: true, not both")
	case len(a.IDs) > 0:
		if len(a.IDs) > maxActionIDs {
			return driver.ReviveParams{}, badRequest("at most %d ids per action (use type and all: true for more)", maxActionIDs)
		}
		seen := make(map[int64]bool, len(a.IDs))
		for _, id := range a.IDs {
			if id <= 0 {
				return driver.ReviveParams{}, badRequest("id %d is not a message id", id)
			}
			if seen[id] {
				return driver.ReviveParams{}, badRequest("id %d is listed twice", id)
			}
			seen[id] = true
		}
		return driver.ReviveParams{IDs: slices.Clone(a.IDs), Discard: discard, ClearMark: a.AllowDuplicate}, nil
	case a.Type != "" && a.All:
		if len(a.Type) > 200 {
			return driver.ReviveParams{}, badRequest("type is longer than 200 characters")
		}
		return driver.ReviveParams{Types: []string{a.Type}, Discard: discard, ClearMark: a.AllowDuplicate}, nil
	case a.Type != "":
		return driver.ReviveParams{}, badRequest("acting on every dead letter of a type needs all: true")
	}
	return driver.ReviveParams{}, badRequest("select dead letters: ids, or type with all: true")
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

// electionLease is what the console hands Driver.Elector: it only reads
// the holder, so the lease is never used to lead.
const electionLease = 30 * time.Second

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
	step := func(name string, began time.Time) {
		ov.Timings[name] = float64(time.Since(began).Microseconds()) / 1000
	}
	began := time.Now()
	snap, err := c.counts.get(ctx)
	if err != nil {
		return nil, err
	}
	step("counts", began)
	if snap.err != nil {
		ov.CountError = redact.Text(snap.err.Error())
		if snap.stats == nil {
			return nil, snap.err
		}
	}
	ov.CountedAt, ov.CountTookMs = snap.at.UTC(), float64(snap.took.Microseconds())/1000

	began = time.Now()
	catalog, err := c.opt.Driver.Owners(ctx, "")
	if err != nil {
		return nil, err
	}
	step("owners", began)
	began = time.Now()
	routes, err := c.opt.Driver.RouteStates(ctx, "")
	if err != nil {
		return nil, err
	}
	step("routes", began)

	types := newTypeViews(snap.stats, catalog, routes)
	began = time.Now()
	c.perMinute(ctx, ov, types)
	step("per_minute", began)
	began = time.Now()
	c.elections(ctx, ov, types.apps)
	step("elections", began)
	for _, q := range snap.inbox {
		iv := InboxView{Consumer: q.Consumer, Pending: q.Pending, Dead: q.Dead, OldestPendingSec: q.OldestPending.Seconds()}
		for _, o := range catalog {
			if o.Kind == driver.ResourceConsumer && o.Name == q.Consumer {
				iv.Owner = o.App
			}
		}
		ov.Inbox = append(ov.Inbox, iv)
	}
	for _, t := range types.order {
		v := types.byType[t]
		v.Actionable = !c.opt.ReadOnly && c.mayAct(v.Owner)
		ov.Types = append(ov.Types, *v)
	}
	return ov, nil
}

// typeViews are the page's type lines being assembled, and the apps that
// the catalog and the route states name.
type typeViews struct {
	byType map[string]*TypeView
	order  []string // sorted once assembled
	apps   map[string]bool
}

// newTypeViews assembles a line per type from the count, the catalog and
// the route states.
func newTypeViews(stats []driver.TypeStats, catalog []driver.Ownership, routes []driver.RouteState) *typeViews {
	tv := &typeViews{byType: map[string]*TypeView{}, apps: map[string]bool{}}
	for _, s := range stats {
		v := tv.add(s.Type)
		v.Pending, v.Scheduled, v.InFlight, v.Dead, v.DeliveredLastHr = s.Pending, s.Scheduled, s.InFlight, s.Dead, s.DeliveredLastHr
		v.OldestPendingSec = s.OldestPending.Seconds()
		v.InDoubt, v.OldestInDoubtSec = s.InDoubt, s.OldestInDoubt.Seconds()
	}
	// The owner comes from the catalog as it is now, not as it was at the
	// count; a type with no rows yet still gets its line.
	for _, o := range catalog {
		if o.App != "" {
			tv.apps[o.App] = true
		}
		if o.Kind == driver.ResourceType {
			tv.add(o.Name).Owner = o.App
		}
	}
	for _, rs := range routes {
		tv.apps[rs.App] = true
		v := tv.add(rs.Type)
		if v.Owner != "" && rs.App != v.Owner {
			continue // a former owner's record
		}
		rv := &RouteView{Name: redact.Text(rs.Route), State: rs.State, Since: rs.Since.UTC(), Failures: rs.Failures, LastError: redact.Text(rs.LastError), Recorded: rs.UpdatedAt.UTC()}
		if !rs.Until.IsZero() {
			u := rs.Until.UTC()
			rv.Until = &u
		}
		v.Route = rv
	}
	slices.Sort(tv.order)
	return tv
}

// add returns t's line, a new one the first time.
func (tv *typeViews) add(t string) *TypeView {
	if v, ok := tv.byType[t]; ok {
		return v
	}
	v := &TypeView{Type: t, PerMinute: make([]int64, chartMinutes)}
	tv.byType[t] = v
	tv.order = append(tv.order, t)
	return v
}

// perMinute sets the chart's minutes and, where the driver keeps them,
// each type's deliveries per minute; a failed read is one of the page's
// errors.
func (c *Console) perMinute(ctx context.Context, ov *Overview, types *typeViews) {
	now := time.Now().UTC().Truncate(time.Minute)
	for i := range chartMinutes {
		ov.Minutes = append(ov.Minutes, now.Add(time.Duration(i-chartMinutes+1)*time.Minute))
	}
	h, ok := c.opt.Driver.(driver.DeliveryHistory)
	if !ok || len(types.order) == 0 {
		return
	}
	mins, err := h.DeliveredPerMinute(ctx, types.order, chartMinutes*time.Minute)
	if err != nil {
		ov.Errors = append(ov.Errors, "deliveries per minute: "+redact.Text(err.Error()))
	}
	for _, m := range mins {
		i := chartMinutes - 1 - int(now.Sub(m.Minute.UTC().Truncate(time.Minute))/time.Minute)
		if v := types.byType[m.Type]; v != nil && i >= 0 && i < chartMinutes {
			v.PerMinute[i] += m.N
		}
	}
}

// elections adds a line per app, sorted, with its election's holder; a
// failed read is one of the page's errors.
func (c *Console) elections(ctx context.Context, ov *Overview, apps map[string]bool) {
	names := make([]string, 0, len(apps))
	for a := range apps {
		names = append(names, a)
	}
	slices.Sort(names)
	for _, a := range names {
		av := AppView{App: a}
		el, err := c.opt.Driver.Elector(a, electionLease)
		if err == nil {
			var l driver.Leader
			if l, err = el.Holder(ctx); err == nil {
				av.Holder, av.Epoch = l.Holder, l.Epoch
				if l.Holder != "" && !l.Since.IsZero() {
					s := l.Since.UTC()
					av.Since = &s
				}
			}
		}
		if err != nil {
			ov.Errors = append(ov.Errors, "election of "+a+": "+redact.Text(err.Error()))
		}
		ov.Apps = append(ov.Apps, av)
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

func uuidString(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func letterOf(j driver.Job, detail bool) Letter {
	l := Letter{
		ID: j.ID, MessageID: uuidString(j.MessageID), Type: j.Type, Key: j.Key, State: string(j.State),
		Attempts: j.Attempt, CreatedAt: j.CreatedAt.UTC(), Reason: redact.Text(j.LastError), Route: redact.Text(j.LastRoute), Owner: j.Owner,
	}
	if j.AttemptedAt != nil {
		at := j.AttemptedAt.UTC()
		l.AttemptedAt = &at
	}
	if detail {
		l.Payload = rawOrString(j.Payload)
		l.Headers = rawOrString(j.Headers)
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
	c.listOf(w, r, driver.StateDead, "dead letters")
}

// listOf answers one page of a type's rows in state (dead, or in doubt),
// on that type's part of the state's index.
func (c *Console) listOf(w http.ResponseWriter, r *http.Request, state driver.State, what string) {
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
	jobs, err := c.opt.Driver.ListMessages(r.Context(), driver.ListFilter{State: state, Types: []string{typ}, AfterID: after, Limit: int(limit) + 1})
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
		return
	}
	page := DeadPage{Type: typ, Letters: []Letter{}}
	if len(jobs) > int(limit) {
		jobs = jobs[:limit]
		page.NextAfter = jobs[len(jobs)-1].ID
	}
	for _, j := range jobs {
		page.Letters = append(page.Letters, letterOf(j, false))
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
	jobs, err := c.opt.Driver.ListMessages(r.Context(), driver.ListFilter{IDs: []int64{id}, Limit: 1})
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
		return
	}
	if len(jobs) == 0 {
		problem(w, r, http.StatusNotFound, "not_found", fmt.Sprintf("no message %d in the outbox (delivered and deleted, discarded, or never there)", id))
		return
	}
	l := letterOf(jobs[0], true)
	if amo, ok := c.opt.Driver.(driver.AtMostOnce); ok {
		recs, err := amo.Resolutions(r.Context(), [][16]byte{jobs[0].MessageID}, 20)
		if err != nil {
			problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
			return
		}
		l.Resolutions = resolutionViews(recs)
	}
	writeJSON(w, l)
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
		if refusal, err := c.outOfScope(r.Context(), p); err != nil {
			problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
			return
		} else if refusal != "" {
			problem(w, r, http.StatusForbidden, "other_app", refusal)
			return
		}
		var marked []int64
		if !discard {
			if marked, err = driver.MarkedDead(r.Context(), c.opt.Driver, p); err != nil {
				problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
				return
			}
			if len(marked) > 0 && !p.ClearMark {
				problem(w, r, http.StatusConflict, "at_most_once", fmt.Sprintf("%d dead letter(s) (%s) belong to at_most_once routes and their last attempt may have reached the receiver: "+
					"sending again may apply the effect twice; nothing changed. Check the receiver: if it does not have the effect, retry with allow_duplicate: true; if it does, discard them",
					len(marked), IDList(marked)))
				return
			}
		}
		n, err := c.opt.Driver.Revive(r.Context(), p)
		if err != nil {
			problem(w, r, http.StatusServiceUnavailable, "database", "the database did not answer: "+redact.Text(err.Error()))
			return
		}
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

// IDList names up to ten ids, in the console's messages and the
// command's.
func IDList(ids []int64) string {
	s := make([]string, 0, len(ids))
	for i, id := range ids {
		if i == 10 {
			s = append(s, "…")
			break
		}
		s = append(s, strconv.FormatInt(id, 10))
	}
	return strings.Join(s, ", ")
}

// mayAct reports whether the console acts on dead letters of a type owner
// owns.
func (c *Console) mayAct(owner string) bool {
	return len(c.opt.Apps) == 0 || (owner != "" && slices.Contains(c.opt.Apps, owner))
}

// outOfScope names the first selected dead letter, or type, that another
// app owns (Options.Apps), or returns "" when the console may act on all
// of them. Nothing is changed either way.
func (c *Console) outOfScope(ctx context.Context, p driver.ReviveParams) (string, error) {
	if len(c.opt.Apps) == 0 {
		return "", nil
	}
	scope := strings.Join(c.opt.Apps, ", ")
	owner := func(o string) string {
		if o == "" {
			return "no app owns it"
		}
		return "it is owned by app " + strconv.Quote(o)
	}
	if len(p.IDs) > 0 {
		jobs, err := c.opt.Driver.ListMessages(ctx, driver.ListFilter{IDs: p.IDs, Limit: len(p.IDs)})
		if err != nil {
			return "", err
		}
		for _, j := range jobs {
			if !c.mayAct(j.Owner) {
				return fmt.Sprintf("message %d (type %s) is not %s's: %s; nothing changed (the owning app's console acts on it, or one with all_apps: true)", j.ID, j.Type, scope, owner(j.Owner)), nil
			}
		}
		return "", nil
	}
	catalog, err := c.opt.Driver.Owners(ctx, "")
	if err != nil {
		return "", err
	}
	for _, t := range p.Types {
		o := ""
		for _, e := range catalog {
			if e.Kind == driver.ResourceType && e.Name == t {
				o = e.App
			}
		}
		if !c.mayAct(o) {
			return fmt.Sprintf("message type %q is not %s's: %s; nothing changed (the owning app's console acts on it, or one with all_apps: true)", t, scope, owner(o)), nil
		}
	}
	return "", nil
}
