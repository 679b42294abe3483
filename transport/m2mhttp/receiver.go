package m2mhttp

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/httpguard"
)

// Handler applies the messages of one type: Effect runs through Inbox, in
// one transaction with the dedup record.
//
// The inbox answers first: a message older than its window is 409 stale,
// and a message whose dedup key was applied by another message with a
// different payload is 409 conflict (mensageria.ErrConflict: the sender
// parks it as dead, naming the first message; Receiver.Conflicts counts
// them). Then the effect's error decides the answer: nil → 200 applied;
// mensageria.Permanent(err) → 422 (the sender parks the message as dead
// with err as reason); mensageria.RetryAfter(err, d) → 503 with
// Retry-After; any other error → 500, retried. A panic is a 500 too. In a
// batch the same outcomes become the envelope's result: applied, refused,
// retry (with retry_after), retry; the envelopes of one type in a batch
// run through Inbox.ApplyBatch, so one failing effect makes the effects
// before it run again, in a transaction without it.
type Handler struct {
	Inbox  *mensageria.Inbox
	Effect mensageria.Effect
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Tokens are the accepted bearer tokens; any one of them is valid, so
	// a new token can be rolled out to senders before the old one is
	// dropped (SetTokens changes them on a running Receiver). At least one
	// is required. Wrong tokens are throttled per client address as the
	// console throttles credentials: after 20 of them every token from
	// that address is refused with 429 (too-many-attempts) until it earns
	// 2 tries a second again; they are logged a line per 10 seconds at
	// most, never with the token, and counted (WrongTokens).
	Tokens []string
	// Handlers maps each message type this receiver takes to its Handler.
	// A type not listed is refused with 422 (a permanent refusal: the
	// sender parks the message as dead rather than retry it forever).
	Handlers map[string]Handler
	// MaxBodyBytes bounds a request body; larger ones get 413. Default
	// 1 MiB.
	MaxBodyBytes int64
	// MaxInFlight bounds the requests being applied at once (a batch
	// counts as one: it is applied in one transaction per type); beyond
	// it the receiver sheds load with 503 and Retry-After instead of
	// queueing until the senders time out. Default 0: no bound.
	MaxInFlight int
	// MaxBatchItems bounds the envelopes of one batch request; a larger
	// batch is refused whole with 413. Default DefaultMaxBatchItems
	// (1000). MaxBodyBytes applies to a batch as to a single envelope.
	MaxBatchItems int
	// Logger receives the receiver's logs, each with the request id.
	// Default slog.Default().
	Logger *slog.Logger
	// LogPayloads adds the message payload to the logs of failed
	// deliveries. Default false: payloads may carry personal data. The
	// bearer token is never logged.
	LogPayloads bool
	// OnOutcome, when set, is told the outcome of every message of a type
	// in Handlers once its transaction has ended (committed, for
	// OutcomeApplied): its type and one of the Outcome... values; for a
	// batch, once per envelope. A request refused before any message is
	// applied (401, 413, 415, a malformed body, an unknown type) reports
	// nothing. It runs on the request's goroutine, before the answer is
	// written, and must be quick.
	OnOutcome func(typ, outcome string)
}

// The outcomes OnOutcome reports.
const (
	OutcomeApplied   = "applied"   // applied now, committed
	OutcomeDuplicate = "duplicate" // applied before: nothing ran
	OutcomeConflict  = "conflict"  // the dedup key was applied with another payload: refused, nothing ran
	OutcomeStale     = "stale"     // older than the dedup window: refused
	OutcomeRefused   = "refused"   // refused by its effect (Permanent, an invalid message)
	OutcomeRetry     = "retry"     // not applied this time: the sender retries
)

// Receiver is the http.Handler of one receiving endpoint.
type Receiver struct {
	tokens   atomic.Pointer[[][sha256.Size]byte]
	handlers map[string]Handler
	maxBody  int64
	maxBatch int
	inflight chan struct{}
	log      *slog.Logger
	payloads bool
	observe  func(typ, outcome string)

	conflicts atomic.Int64

	// Wrong tokens: throttled per source, logged a line per interval.
	guard      *httpguard.Throttle
	wrongLog   *httpguard.Sampler
	wrongToken atomic.Int64
}

// The wrong-token throttle, as the console's: per source, a burst of 20
// wrong tokens, then 2 a second.
const (
	wrongTokenBurst = 20
	wrongTokenRate  = 2
	// wrongTokenLogEvery spaces the log lines of wrong tokens; each says
	// how many it stands for.
	wrongTokenLogEvery = 10 * time.Second
)

// WrongTokens counts the requests refused for a bearer token that is not
// one of the receiver's (401 with a token, or 429 once its source is
// throttled) since the receiver was made. A sender stuck on a rotated-out
// token, or someone guessing.
func (rc *Receiver) WrongTokens() int64 { return rc.wrongToken.Load() }

// Conflicts counts the messages refused as conflicts (409, or a batch
// result refused with the conflict problem) since the receiver was made:
// a dedup key already applied by a message with another payload. Each one
// is a sender's bug or two senders disagreeing about a key, worth an
// alert; the message is dead at its sender.
func (rc *Receiver) Conflicts() int64 { return rc.conflicts.Load() }

// NewReceiver validates cfg and returns its Receiver.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if len(cfg.Tokens) == 0 {
		return nil, &mensageria.ConfigError{Field: "Tokens", Reason: "at least one bearer token is required"}
	}
	rc := &Receiver{handlers: make(map[string]Handler, len(cfg.Handlers)), maxBody: cfg.MaxBodyBytes, payloads: cfg.LogPayloads, observe: cfg.OnOutcome,
		guard: httpguard.NewThrottle(wrongTokenBurst, wrongTokenRate), wrongLog: httpguard.NewSampler(wrongTokenLogEvery)}
	if err := rc.SetTokens(cfg.Tokens); err != nil {
		return nil, err
	}
	if len(cfg.Handlers) == 0 {
		return nil, &mensageria.ConfigError{Field: "Handlers", Reason: "at least one message type is required"}
	}
	for typ, h := range cfg.Handlers {
		if typ == "" || h.Inbox == nil || h.Effect == nil {
			return nil, &mensageria.ConfigError{Field: "Handlers", Reason: fmt.Sprintf("type %q needs a name, an Inbox and an Effect", typ)}
		}
		rc.handlers[typ] = h
	}
	if rc.maxBody == 0 {
		rc.maxBody = 1 << 20
	}
	if rc.maxBody < 0 {
		return nil, &mensageria.ConfigError{Field: "MaxBodyBytes", Reason: "must not be negative"}
	}
	rc.maxBatch = cfg.MaxBatchItems
	if rc.maxBatch == 0 {
		rc.maxBatch = DefaultMaxBatchItems
	}
	if rc.maxBatch < 0 {
		return nil, &mensageria.ConfigError{Field: "MaxBatchItems", Reason: "must not be negative"}
	}
	if cfg.MaxInFlight < 0 {
		return nil, &mensageria.ConfigError{Field: "MaxInFlight", Reason: "must not be negative"}
	}
	if cfg.MaxInFlight > 0 {
		rc.inflight = make(chan struct{}, cfg.MaxInFlight)
	}
	l := cfg.Logger
	if l == nil {
		l = slog.Default()
	}
	// Not wrapped with NewLogHandler: the receiver's own lines carry the
	// request id as an attribute already.
	rc.log = l
	return rc, nil
}

// SetTokens replaces the accepted bearer tokens, for a rotation without a
// restart: requests from then on are checked against the new set, and a
// request already past its check is not affected. The set is validated as
// NewReceiver validates Tokens; when it is refused, the tokens in force
// stay as they were.
func (rc *Receiver) SetTokens(tokens []string) error {
	if len(tokens) == 0 {
		return &mensageria.ConfigError{Field: "Tokens", Reason: "at least one bearer token is required"}
	}
	digests := make([][sha256.Size]byte, 0, len(tokens))
	for i, t := range tokens {
		if t == "" || !validHeaderValue(t) {
			return &mensageria.ConfigError{Field: "Tokens", Reason: fmt.Sprintf("token %d must be non-empty printable ASCII", i)}
		}
		// Comparing digests keeps the comparison constant-time in the
		// token's length too, which subtle.ConstantTimeCompare is not.
		digests = append(digests, sha256.Sum256([]byte(t)))
	}
	rc.tokens.Store(&digests)
	return nil
}

// Tokens returns how many bearer tokens are accepted now.
func (rc *Receiver) Tokens() int { return len(*rc.tokens.Load()) }

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyLogger
)

// RequestID returns the request id the Receiver put into the context of
// the effect it runs: for one envelope the request's X-Request-Id (which
// the contract requires, and a Sender sets to the message's own
// X-Request-Id header, else its id); for an envelope of a batch its own
// X-Request-Id header, else its id.
func RequestID(ctx context.Context) string {
	s, _ := ctx.Value(keyRequestID).(string)
	return s
}

// Logger returns the receiver's logger for the message being applied, with
// its request id, type, key and id attached; slog.Default() outside one.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(keyLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// NewLogHandler wraps h so that every record logged with a context the
// Receiver made (logger.InfoContext(ctx, ...)) carries "request_id". Wrap
// the application's own handler with it to correlate its logs with the
// sender's.
func NewLogHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(*logHandler); ok {
		return h
	}
	return &logHandler{Handler: h}
}

type logHandler struct {
	slog.Handler
	// hasID: the logger was built With a request_id already (the one
	// Logger returns is), so adding it again would print it twice.
	hasID bool
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" && !h.hasID {
		dup := false
		r.Attrs(func(a slog.Attr) bool {
			dup = a.Key == "request_id"
			return !dup
		})
		if !dup {
			r = r.Clone()
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	has := h.hasID
	for _, a := range as {
		has = has || a.Key == "request_id"
	}
	return &logHandler{h.Handler.WithAttrs(as), has}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h.Handler.WithGroup(name), h.hasID}
}

// panicError carries a recovered panic out of the effect, so that the
// inbox transaction rolls back through its ordinary error path.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("effect panicked: %v", e.value) }

// ServeHTTP takes one envelope (application/json) or a batch of them
// (application/vnd.mensageria.batch+json). See docs/openapi.yaml for every
// answer.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Only a checked request id is ever echoed or logged; readRequest
	// refuses the request without one.
	reqID := ""
	if ids := r.Header.Values(mensageria.HeaderRequestID); len(ids) == 1 && validRequestID(ids[0]) {
		reqID = ids[0]
	}
	refuse := func(status int, typ, title, detail string, retryAfter time.Duration) {
		writeProblem(w, Problem{Type: typ, Title: title, Status: status, Detail: detail, RequestID: reqID}, retryAfter)
	}
	defer func() {
		// The effect's panics are caught inside the transaction; this
		// catches the rest (a driver, a hook) so the sender still gets a
		// retryable answer instead of a reset connection.
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			rc.log.Error("receiver panicked", "request_id", reqID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			refuse(http.StatusInternalServerError, ProblemInternal, "Internal error", "the receiver failed; the message was not applied", 0)
		}
	}()

	mt, body, ok := rc.readRequest(w, r, reqID, refuse)
	if !ok {
		return
	}
	if mt == ContentTypeBatch {
		rc.serveBatch(w, r, body, reqID, refuse)
		return
	}
	env, err := DecodeEnvelope(body)
	if err != nil {
		refuse(http.StatusBadRequest, ProblemMalformed, "Malformed envelope", err.Error(), 0)
		return
	}
	if ik := r.Header.Get(headerIdempotencyKey); ik != "" && ik != env.Key {
		refuse(http.StatusBadRequest, ProblemMalformed, "Malformed envelope", "the Idempotency-Key header differs from the envelope's key", 0)
		return
	}
	h, ok := rc.handlers[env.Type]
	if !ok {
		refuse(http.StatusUnprocessableEntity, ProblemUnknownType, "Unknown message type", fmt.Sprintf("this receiver takes no messages of type %q", truncate(env.Type)), 0)
		return
	}
	release, admitted := rc.admit(refuse)
	if !admitted {
		return
	}
	defer release()
	rc.applyOne(w, r, h, env, reqID, refuse)
}

// readRequest checks a request's method, token, request id, media type
// and size, and reads its body. It answers the request itself, and
// returns ok false, when it refuses it. reqID is the request's
// X-Request-Id when it is valid, else "".
func (rc *Receiver) readRequest(w http.ResponseWriter, r *http.Request, reqID string, refuse func(int, string, string, string, time.Duration)) (mediaType string, body []byte, ok bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(http.StatusMethodNotAllowed, ProblemMethod, "Method not allowed", "deliveries are POSTed", 0)
		return "", nil, false
	}
	if !rc.checkToken(w, r, reqID, refuse) {
		return "", nil, false
	}
	if reqID == "" {
		// Never quoted back: it may hold anything.
		refuse(http.StatusBadRequest, ProblemMalformed, "Malformed request", "one X-Request-Id header is required, 1 to 200 bytes of printable ASCII", 0)
		return "", nil, false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get(headerContentType))
	if err != nil || (mt != contentTypeJSON && mt != ContentTypeBatch) {
		refuse(http.StatusUnsupportedMediaType, ProblemMediaType, "Unsupported media type", "an envelope is sent as application/json, a batch as "+ContentTypeBatch, 0)
		return "", nil, false
	}
	if r.ContentLength > rc.maxBody {
		refuse(http.StatusRequestEntityTooLarge, ProblemTooLarge, "Body too large", fmt.Sprintf("the limit is %d bytes", rc.maxBody), 0)
		return "", nil, false
	}
	body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, rc.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			refuse(http.StatusRequestEntityTooLarge, ProblemTooLarge, "Body too large", fmt.Sprintf("the limit is %d bytes", rc.maxBody), 0)
			return "", nil, false
		}
		// The sender went away or the stream broke: nobody may read this,
		// but a retryable answer is right if someone does.
		refuse(http.StatusServiceUnavailable, ProblemUnavailable, "Unavailable", "the body could not be read", 0)
		return "", nil, false
	}
	return mt, body, true
}

// applyOne applies a single envelope through its handler's inbox and
// answers with the outcome.
func (rc *Receiver) applyOne(w http.ResponseWriter, r *http.Request, h Handler, env *Envelope, reqID string, refuse func(int, string, string, string, time.Duration)) {
	log := rc.log.With("request_id", reqID, "type", env.Type, "key", env.Key, "id", env.ID.String(), "attempt", env.Attempt)
	ctx := context.WithValue(r.Context(), keyRequestID, reqID)
	ctx = context.WithValue(ctx, keyLogger, log)
	d := env.Delivery()
	res, err := h.Inbox.Apply(ctx, d, guard(h.Effect))
	rc.report(env.Type, res, err)
	if err == nil {
		w.Header().Set(headerContentType, contentTypeJSON)
		w.WriteHeader(http.StatusOK)
		if res.Duplicate {
			log.DebugContext(ctx, "duplicate delivery absorbed", "first_id", res.FirstID.String())
			_, _ = w.Write(bodyDuplicate)
		} else {
			log.DebugContext(ctx, "message applied")
			_, _ = w.Write(bodyApplied)
		}
		return
	}
	p, ra, _ := rc.failure(ctx, log, err, r.Context().Err() != nil, env.Payload)
	refuse(p.Status, p.Type, p.Title, p.Detail, ra)
}

// failure logs why a message was not applied and returns the answer: the
// problem, the Retry-After to send with it, and the status of the message
// in a batch answer.
func (rc *Receiver) failure(ctx context.Context, log *slog.Logger, err error, gone bool, payload []byte) (Problem, time.Duration, string) {
	if rc.payloads {
		log = log.With("payload", string(payload))
	}
	var (
		pe *panicError
		ce *mensageria.ConflictError
	)
	switch {
	case errors.As(err, &pe):
		log.ErrorContext(ctx, "effect panicked; rolled back", "panic", fmt.Sprint(pe.value), "stack", string(pe.stack))
		return Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError, Detail: "the effect failed; the message was not applied"}, 0, ItemRetry
	case errors.Is(err, mensageria.ErrStale):
		log.WarnContext(ctx, "stale message refused", "err", err)
		return Problem{Type: ProblemStale, Title: "Message older than the dedup window", Status: http.StatusConflict, Detail: err.Error()}, 0, ItemStale
	case errors.Is(err, mensageria.ErrConflict):
		rc.conflicts.Add(1)
		detail := err.Error()
		if errors.As(err, &ce) {
			// The ids first: a sender keeps the start of a long detail.
			log = log.With("first_id", ce.FirstID.String())
			detail = fmt.Sprintf("message %s conflicts with message %s, applied first under the same dedup key with another payload; this one is refused, not absorbed as a duplicate (key %q)", ce.ID, ce.FirstID, ce.Key)
		}
		log.WarnContext(ctx, "conflicting message refused: its dedup key was applied with another payload", "err", err)
		return Problem{Type: ProblemConflict, Title: "Conflicting message under an applied dedup key", Status: http.StatusConflict, Detail: detail}, 0, ItemRefused
	case mensageria.IsPermanent(err), errors.Is(err, mensageria.ErrInvalidMessage):
		log.WarnContext(ctx, "message refused by its effect", "err", err)
		return Problem{Type: ProblemRefused, Title: "Message refused", Status: http.StatusUnprocessableEntity, Detail: strings.TrimPrefix(err.Error(), "permanent: ")}, 0, ItemRefused
	case gone:
		log.InfoContext(ctx, "sender went away before the message was applied", "err", err)
		return Problem{Type: ProblemUnavailable, Title: "Unavailable", Status: http.StatusServiceUnavailable, Detail: "the request ended before the message was applied"}, 0, ItemRetry
	}
	log.ErrorContext(ctx, "effect failed; rolled back", "err", err)
	if d, ok := mensageria.RetryAfterOf(err); ok {
		return Problem{Type: ProblemUnavailable, Title: "Unavailable", Status: http.StatusServiceUnavailable, Detail: "the message was not applied; retry later"}, max(d, time.Second), ItemRetry
	}
	// The error text may hold SQL or internals: it stays in the log.
	return Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError, Detail: "the effect failed; the message was not applied"}, 0, ItemRetry
}

// report tells OnOutcome what became of one message.
func (rc *Receiver) report(typ string, res mensageria.ApplyResult, err error) {
	if rc.observe == nil {
		return
	}
	rc.observe(typ, outcomeOf(res, err))
}

func outcomeOf(res mensageria.ApplyResult, err error) string {
	var pe *panicError
	switch {
	case err == nil && res.Duplicate:
		return OutcomeDuplicate
	case err == nil:
		return OutcomeApplied
	case errors.As(err, &pe):
		return OutcomeRetry
	case errors.Is(err, mensageria.ErrStale):
		return OutcomeStale
	case errors.Is(err, mensageria.ErrConflict):
		return OutcomeConflict
	case mensageria.IsPermanent(err), errors.Is(err, mensageria.ErrInvalidMessage):
		return OutcomeRefused
	}
	return OutcomeRetry
}

func guard(effect mensageria.Effect) mensageria.Effect {
	return func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = &panicError{value: p, stack: debug.Stack()}
			}
		}()
		return effect(ctx, tx, d)
	}
}

// checkToken refuses a request without a valid bearer token (401), and
// one with a token from a source that sent too many wrong ones lately
// (429 until its bucket refills, whatever the token: an answer that told
// a right token from a wrong one would let the guessing go on). Wrong
// tokens are logged, a line per interval at most, without the token.
func (rc *Receiver) checkToken(w http.ResponseWriter, r *http.Request, reqID string, refuse func(int, string, string, string, time.Duration)) bool {
	header := r.Header.Get(headerAuthorization)
	source := sourceOf(r)
	if header != "" {
		if wait, blocked := rc.guard.Blocked(source); blocked {
			rc.wrongToken.Add(1)
			refuse(http.StatusTooManyRequests, ProblemTooManyAttempts, "Too many wrong tokens", "too many wrong bearer tokens from this address: every token is refused for a while", max(wait, time.Second))
			return false
		}
	}
	if rc.authorized(header) {
		return true
	}
	errParam := ""
	if header != "" {
		errParam = `, error="invalid_token"`
		rc.guard.Failed(source)
		rc.wrongToken.Add(1)
		if held, ok := rc.wrongLog.Allow(); ok {
			rc.log.Warn("request refused: its bearer token is not one of the receiver's (a sender on a rotated-out token, or a guess)",
				"remote", source, "request_id", reqID, "refused_since_last_line", held)
		}
	}
	w.Header().Set(headerWWWAuthenticate, `Bearer realm="mensageria"`+errParam)
	refuse(http.StatusUnauthorized, ProblemUnauthorized, "Unauthorized", "a valid bearer token is required", 0)
	return false
}

// sourceOf is the throttle's key of a request: its peer's address without
// the port. Behind a proxy every sender is the proxy, and shares one
// bucket.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// authorized checks the bearer token against every configured one without
// stopping at a match, so the time taken does not tell which matched.
func (rc *Receiver) authorized(header string) bool {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	match := 0
	tokens := *rc.tokens.Load()
	for i := range tokens {
		match |= subtle.ConstantTimeCompare(sum[:], tokens[i][:])
	}
	return match == 1
}

// admit takes one of the MaxInFlight slots, or answers 503 with a
// Retry-After: a receiver out of capacity sheds load rather than queue it.
// The caller releases the slot when its transaction is over.
func (rc *Receiver) admit(refuse func(int, string, string, string, time.Duration)) (release func(), ok bool) {
	if rc.inflight == nil {
		return func() {}, true
	}
	select {
	case rc.inflight <- struct{}{}:
		return func() { <-rc.inflight }, true
	default:
		refuse(http.StatusServiceUnavailable, ProblemOverloaded, "Overloaded", "too many messages in flight; retry later", time.Second)
		return nil, false
	}
}
