package m2mhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem document, the body of every refusal.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// RequestID lets an operator find the receiver's log lines.
	RequestID string `json:"request_id,omitempty"`
}

// ProblemTypeBase prefixes the type URI of each problem this package
// returns; the suffixes are listed in docs/openapi.yaml.
const ProblemTypeBase = "https://github.com/xadm/mensageria/problems/"

// Problem types, one per distinct refusal a sender may want to branch on.
const (
	ProblemUnauthorized     = ProblemTypeBase + "unauthorized"
	ProblemTooManyAttempts  = ProblemTypeBase + "too-many-attempts"
	ProblemMethod           = ProblemTypeBase + "method-not-allowed"
	ProblemNotFound         = ProblemTypeBase + "not-found"
	ProblemMediaType        = ProblemTypeBase + "unsupported-media-type"
	ProblemTooLarge         = ProblemTypeBase + "body-too-large"
	ProblemTooManyMessages  = ProblemTypeBase + "too-many-messages"
	ProblemMalformed        = ProblemTypeBase + "malformed-envelope"
	ProblemUnknownType      = ProblemTypeBase + "unknown-type"
	ProblemRefused          = ProblemTypeBase + "refused"
	ProblemStale            = ProblemTypeBase + "stale"
	ProblemConflict         = ProblemTypeBase + "conflict"
	ProblemOverloaded       = ProblemTypeBase + "overloaded"
	ProblemUnavailable      = ProblemTypeBase + "unavailable"
	ProblemInternal         = ProblemTypeBase + "internal"
	contentTypeProblem      = "application/problem+json"
	contentTypeJSON         = "application/json"
	headerRetryAfter        = "Retry-After"
	headerIdempotencyKey    = "Idempotency-Key"
	headerAuthorization     = "Authorization"
	headerWWWAuthenticate   = "WWW-Authenticate"
	headerContentType       = "Content-Type"
	maxProblemBodyBytes     = 64 << 10
	maxReasonFromPeerLength = 500
)

func writeProblem(w http.ResponseWriter, p Problem, retryAfter time.Duration) {
	h := w.Header()
	h.Set(headerContentType, contentTypeProblem)
	// The contract promises Retry-After on every 429 and 503, so senders
	// in other languages can rely on it.
	if retryAfter <= 0 && (p.Status == http.StatusServiceUnavailable || p.Status == http.StatusTooManyRequests) {
		retryAfter = time.Second
	}
	if retryAfter > 0 {
		secs := int64((retryAfter + time.Second - 1) / time.Second)
		h.Set(headerRetryAfter, strconv.FormatInt(secs, 10))
	}
	b, _ := json.Marshal(p) // strings and an int always marshal
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// Status is the body of a 200 answer.
type Status struct {
	Status string `json:"status"` // "applied" or "duplicate"
}

var (
	bodyApplied   = []byte(`{"status":"applied"}`)
	bodyDuplicate = []byte(`{"status":"duplicate"}`)
)
