package m2mhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/redact"
)

// SenderConfig configures one destination.
type SenderConfig struct {
	// URL receives the POST exactly as written: no path is appended.
	// Required; http or https.
	URL string
	// Token is sent as "Authorization: Bearer <Token>". Required: the
	// receiver refuses anonymous deliveries.
	Token string
	// Timeout bounds one request, from dial to the end of the response.
	// Default DefaultTimeout (10s), or the relay's delivery window when
	// that is shorter (mensageria.DeliveryWindow of its Lease). An explicit
	// Timeout longer than that window fails Client.Start: the relay would
	// cut every request at the window whatever the Timeout said.
	Timeout time.Duration
	// MaxConcurrent bounds the requests in flight to this destination, so
	// one slow receiver cannot take every relay slot's connection. Default
	// 16.
	MaxConcurrent int
	// Client is the HTTP client to use. Default: one whose transport keeps
	// MaxConcurrent idle connections alive for reuse. Redirects are never
	// followed, whichever client: a 3xx is reported as a permanent error,
	// because re-POSTing a message to wherever a Location points would
	// hand the bearer token and payload to an address nobody configured.
	Client *http.Client
	// MaxBatchItems bounds the envelopes of one batch request sent by a
	// BatchSender; a larger SendBatch is split into several requests, sent
	// concurrently. It must not exceed the receiver's MaxBatchItems.
	// Default 100 (the relay's default BatchSize). Unused by NewSender.
	MaxBatchItems int
	// MaxBatchBytes bounds the body of one batch request sent by a
	// BatchSender, splitting a SendBatch as MaxBatchItems does; it must not
	// exceed the receiver's MaxBodyBytes. An envelope larger than it on
	// its own travels alone. Default 1 MiB (the receiver's default).
	// Unused by NewSender.
	MaxBatchBytes int
	// NotApplied lists the statuses that prove the receiver did not apply
	// the request, such as a 503 from a gateway in front of it that
	// answers before forwarding. On an at-most-once route
	// (mensageria.Mode(mensageria.AtMostOnce)) they are retried as usual
	// (mensageria.NotSent); any other answer but 2xx or a 3xx/4xx refusal
	// leaves the message in doubt. Each must be 300..599. Default none.
	NotApplied []int
	// PayloadOnly POSTs the message's payload itself as the body instead
	// of the mensageria envelope, for a receiver that is not a mensageria
	// Receiver (a legacy API behind an at-most-once route). The message
	// id travels as X-Request-Id (unless a header overrides it), its key
	// as Idempotency-Key, its type as X-Mensageria-Type; its other headers
	// (but traceparent) are not sent. Unused by NewBatchSender.
	PayloadOnly bool
}

// DefaultTimeout is SenderConfig.Timeout's and ProbeConfig.Timeout's
// default, when the relay's delivery window is not shorter.
const DefaultTimeout = 10 * time.Second

// HeaderMessageType carries the message type of a PayloadOnly request.
const HeaderMessageType = "X-Mensageria-Type"

// Sender delivers messages of one route to one HTTP receiver. It
// implements mensageria.Sender and is safe for concurrent use.
//
// It does not implement mensageria.BatchSender, so the relay hands it one
// message at a time, each in its own request; NewBatchSender returns a
// *BatchSender that carries a claimed batch in one request instead.
//
// net/http itself re-sends a request once when a reused keep-alive
// connection turns out dead before any answer byte (it does so for
// requests carrying Idempotency-Key); that is one more at-least-once
// redelivery, absorbed by the receiver's inbox, and the relay does not
// count it as an attempt.
type Sender struct {
	url string
	// shown is url as errors quote it (redact.URL), and secrets what it
	// carries, masked wherever the answer repeats it: a receiver's or a
	// gateway's error page may echo the query string it was sent.
	shown   string
	secrets *redact.Secrets
	dest    string
	auth    string
	client  *http.Client
	sem     chan struct{}
	// timeout bounds one request; kept off http.Client.Timeout so that a
	// caller's Client with its own Timeout keeps it. UseRelaySettings may
	// shorten a default one to the relay's delivery window.
	timeout     *requestTimeout
	notApplied  map[int]bool
	payloadOnly bool
}

// NewSender validates cfg and returns its Sender.
func NewSender(cfg SenderConfig) (*Sender, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &mensageria.ConfigError{Field: "URL", Reason: fmt.Sprintf("%q is not an absolute http(s) URL", redact.URL(cfg.URL))}
	}
	if u.User != nil {
		return nil, &mensageria.ConfigError{Field: "URL", Reason: "must not carry credentials; use Token"}
	}
	if cfg.Token == "" || !validHeaderValue(cfg.Token) {
		return nil, &mensageria.ConfigError{Field: "Token", Reason: "required, printable ASCII"}
	}
	explicit := cfg.Timeout != 0
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 0 {
		return nil, &mensageria.ConfigError{Field: "Timeout", Reason: "must not be negative"}
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = 16
	}
	if cfg.MaxConcurrent < 0 {
		return nil, &mensageria.ConfigError{Field: "MaxConcurrent", Reason: "must be at least 1"}
	}
	notApplied := map[int]bool{}
	for _, st := range cfg.NotApplied {
		if st < 300 || st > 599 {
			return nil, &mensageria.ConfigError{Field: "NotApplied", Reason: fmt.Sprintf("%d is not a status that refuses a request (300..599)", st)}
		}
		notApplied[st] = true
	}
	var c http.Client
	if cfg.Client != nil {
		c = *cfg.Client
	} else {
		c.Transport = newTransport(cfg.MaxConcurrent)
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Sender{
		url:     cfg.URL,
		shown:   redact.URL(cfg.URL),
		secrets: redact.SecretsOf(cfg.URL),
		dest:    "http " + redact.URL(cfg.URL),
		auth:    "Bearer " + cfg.Token,
		client:  &c,
		sem:     make(chan struct{}, cfg.MaxConcurrent),
		timeout: newRequestTimeout("Timeout", cfg.Timeout, explicit),

		notApplied:  notApplied,
		payloadOnly: cfg.PayloadOnly,
	}, nil
}

// Destination implements mensageria.DestinationNamer: "http " and the URL
// as redact.URL shows it (its query string, which some gateways take a
// key in, is "?…"). A BatchSender names the same receiver.
func (s *Sender) Destination() string { return s.dest }

// newTransport keeps as many idle connections as requests may be in
// flight: the default of 2 per host would close and redial most of them
// under load.
func newTransport(maxConns int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxConns * 2
	t.MaxIdleConnsPerHost = maxConns
	t.MaxConnsPerHost = maxConns
	t.IdleConnTimeout = 90 * time.Second
	return t
}

// Send POSTs one envelope (or, PayloadOnly, the payload) and classifies
// the answer (see the package doc).
//
// On an at-most-once route (d.AtMostOnce) it also says which failures
// prove the request never reached the receiver, wrapping them with
// mensageria.NotSent: no request slot came free, or the request's
// headers were never written (no connection: refused, DNS, TLS, a dial
// timeout), or a status listed in NotApplied. Anything else after the
// headers were written (a timeout, a reset, a cut connection, a 5xx) may
// have applied the effect, and the relay leaves the message in doubt.
// net/http then re-sends nothing that may have been processed: the
// Idempotency-Key header, which makes it treat a POST as replayable, is
// set in a form its check does not see (header names are
// case-insensitive on the wire), so it retries only a request it knows
// was never written (HTTP/1.1) or that the server refused unprocessed
// (HTTP/2 REFUSED_STREAM and GOAWAY); see docs/adr/0015 for HTTP/2's
// retry after a peer's PROTOCOL_ERROR, the one window left.
//
// No error shows a secret of the URL: it is quoted as redact.URL shows it,
// and what the URL carries is masked in the receiver's answer too.
func (s *Sender) Send(ctx context.Context, d *mensageria.Delivery) error {
	return s.secrets.Error(s.send(ctx, d))
}

func (s *Sender) send(ctx context.Context, d *mensageria.Delivery) error {
	body, err := s.body(d)
	if err != nil {
		return mensageria.Permanent(err)
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		// Every request slot to this destination stayed busy: it is slow.
		return notSentIf(d.AtMostOnce, mensageria.Unavailable(fmt.Errorf("POST %s: waiting for one of the %d requests in flight to it: %w", s.shown, cap(s.sem), ctx.Err())))
	}
	defer func() { <-s.sem }()

	limit := s.timeout.limit(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.timeout.get())
	defer cancel()
	var wrote atomic.Bool
	if d.AtMostOnce {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return mensageria.Permanent(fmt.Errorf("build request: %w", err))
	}
	h := req.Header
	h.Set(headerContentType, contentTypeJSON)
	h.Set("Accept", contentTypeJSON+", "+contentTypeProblem)
	h.Set(headerAuthorization, s.auth)
	h.Set(mensageria.HeaderRequestID, requestIDOf(d))
	if s.payloadOnly {
		h.Set(HeaderMessageType, headerSafe(d.Type))
	}
	// The key in the body is authoritative; the header is a convenience
	// for proxies and logs, so a key that cannot be a header value is
	// simply not repeated there.
	if validHeaderValue(d.Key) {
		if d.AtMostOnce {
			h[idempotencyKeyWire] = []string{d.Key}
		} else {
			h.Set(headerIdempotencyKey, d.Key)
		}
	}
	if tp := d.Headers[mensageria.HeaderTraceparent]; tp != "" && validHeaderValue(tp) {
		h.Set(mensageria.HeaderTraceparent, tp)
	}

	resp, err := s.client.Do(req)
	if err != nil {
		return notSentIf(d.AtMostOnce && !wrote.Load(), s.transportError(ctx, limit, err))
	}
	defer resp.Body.Close()
	err = classify(resp, time.Now())
	return notSentIf(d.AtMostOnce && s.notApplied[resp.StatusCode], err)
}

// UseRelaySettings implements mensageria.RelayAware: Client.Start calls it
// before the first claim. A Timeout left to its default is shortened to
// the relay's delivery window when that is shorter; an explicit one longer
// than the window is refused (a *mensageria.ConfigError naming Timeout),
// since the relay would cut every request there. A BatchSender, which
// embeds its Sender, does the same.
func (s *Sender) UseRelaySettings(rs mensageria.RelaySettings) error {
	return s.timeout.fit(rs)
}

// idempotencyKeyWire is Idempotency-Key as net/http's replay check does
// not look it up (it looks for the canonical form only); receivers read
// header names case-insensitively.
const idempotencyKeyWire = "idempotency-key"

func notSentIf(cond bool, err error) error {
	if cond && err != nil {
		return mensageria.NotSent(err)
	}
	return err
}

func (s *Sender) body(d *mensageria.Delivery) ([]byte, error) {
	if !s.payloadOnly {
		return EncodeEnvelope(d)
	}
	if len(d.Payload) == 0 {
		return []byte("{}"), nil
	}
	return d.Payload, nil
}

func headerSafe(v string) string {
	if validHeaderValue(v) {
		return v
	}
	return url.PathEscape(v)
}

// transportError is a request that got no HTTP answer: a refused or reset
// connection, a DNS failure, a TLS handshake refused, a timeout. Each is
// about the destination, not the message (docs/openapi.yaml).
// limit says which deadline a timeout is (requestTimeout.limit).
func (s *Sender) transportError(ctx context.Context, limit string, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return mensageria.Unavailable(fmt.Errorf("POST %s: no answer %s: %w", s.shown, limit, err))
	}
	return mensageria.Unavailable(fmt.Errorf("POST %s: %w", s.shown, unwrapURLError(err)))
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func requestIDOf(d *mensageria.Delivery) string {
	if id := d.Headers[mensageria.HeaderRequestID]; id != "" && validRequestID(id) {
		return id
	}
	return d.ID.String()
}

// StatusError is the error of a delivery the receiver refused or could not
// take; the relay records its text as the message's last error.
type StatusError struct {
	StatusCode int
	// Problem is the receiver's problem document, when it sent one.
	Problem *Problem
	// Text is the start of a body that was not a problem document.
	Text     string
	Location string // of a redirect
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "http %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	switch {
	case e.StatusCode >= 300 && e.StatusCode < 400:
		b.WriteString(": redirect not followed")
		if e.Location != "" {
			fmt.Fprintf(&b, " (Location: %s)", e.Location)
		}
	case e.Problem != nil:
		if e.Problem.Title != "" {
			b.WriteString(": " + e.Problem.Title)
		}
		if e.Problem.Detail != "" {
			b.WriteString(": " + e.Problem.Detail)
		}
		if e.Problem.RequestID != "" {
			b.WriteString(" (request " + e.Problem.RequestID + ")")
		}
	case e.Text != "":
		b.WriteString(": " + e.Text)
	}
	return b.String()
}

// Retryable reports whether the status is one the Sender retries rather
// than parks as dead: the destination-level ones (DestinationStatus) and
// 425 Too Early.
func Retryable(status int) bool {
	return status == http.StatusTooEarly || DestinationStatus(status)
}

// DestinationStatus reports whether a status is about the destination
// rather than the message: 5xx, 408, 429, and 401 and 407, which a wrong
// or rotated credential gives every message alike. The Sender marks those
// mensageria.Unavailable, so the relay pauses the route instead of
// spending the messages' attempts (a rotated token no longer turns the
// backlog into dead letters).
func DestinationStatus(status int) bool {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusProxyAuthRequired,
		status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
		return true
	}
	return false
}

// classify turns a response into the relay's outcome: nil (delivered), an
// error about the destination (Unavailable, with the receiver's
// Retry-After), another retryable error, or a permanent error.
func classify(resp *http.Response, now time.Time) error {
	st := resp.StatusCode
	if st >= 200 && st < 300 {
		// Drain a little so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProblemBodyBytes))
		return nil
	}
	se := &StatusError{StatusCode: st}
	if st >= 300 && st < 400 {
		se.Location = truncate(redact.URL(resp.Header.Get("Location")))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProblemBodyBytes))
		return mensageria.Permanent(se)
	}
	readReason(resp, se)
	if Retryable(st) {
		var err error = se
		if d, ok := parseRetryAfter(resp.Header.Get(headerRetryAfter), now); ok {
			err = mensageria.RetryAfter(se, d)
		}
		if DestinationStatus(st) {
			err = mensageria.Unavailable(err)
		}
		return err
	}
	// 1xx cannot reach here (the client handles them), so what is left is
	// 4xx and unassigned codes: the receiver understood and refused, and
	// the same request would be refused again.
	return mensageria.Permanent(se)
}

func readReason(resp *http.Response, se *StatusError) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBodyBytes))
	reasonFrom(resp.Header.Get(headerContentType), b, se)
}

// reasonFrom reads a refusal's body, a problem document or text, into se.
func reasonFrom(contentType string, b []byte, se *StatusError) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == contentTypeProblem || mt == contentTypeJSON {
		var p Problem
		if json.Unmarshal(b, &p) == nil && (p.Title != "" || p.Detail != "") {
			p.Title, p.Detail, p.RequestID = truncate(p.Title), truncate(p.Detail), truncate(p.RequestID)
			se.Problem = &p
			return
		}
	}
	se.Text = truncate(strings.TrimSpace(string(b)))
}

// truncate keeps a peer's text from filling the outbox's last_error, and
// keeps it storable: control characters (NUL above all, which PostgreSQL
// text refuses) become spaces, invalid UTF-8 becomes U+FFFD, and the cut
// falls between runes.
func truncate(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxReasonFromPeerLength {
		cut := maxReasonFromPeerLength
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// maxRetryAfter bounds a peer's Retry-After: a year, not centuries.
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
// A date in the past means "now", which still leaves the relay's backoff.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}

// validHeaderValue accepts visible ASCII and inner spaces: what every
// proxy passes through unchanged.
func validHeaderValue(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' || len(s) > maxHeaderLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

func validRequestID(s string) bool { return len(s) <= 200 && validHeaderValue(s) }

var (
	_ mensageria.Sender           = (*Sender)(nil)
	_ mensageria.DestinationNamer = (*Sender)(nil)
)
