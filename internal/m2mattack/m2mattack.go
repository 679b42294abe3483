// Package m2mattack is the list of bad requests every receiver of the HTTP
// machine-to-machine contract (docs/openapi.yaml) must refuse, each with
// the answer the contract gives it, so that transport/m2mhttp's Receiver
// and the `mensageria receive` daemon are held to the same cases. A
// receiver that passes them stores nothing for any of them.
//
// It imports nothing of the module, so the m2mhttp package's own tests can
// use it.
package m2mattack

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
)

// The problem types of the contract.
const (
	base           = "https://github.com/xadm/mensageria/problems/"
	Unauthorized   = base + "unauthorized"
	Method         = base + "method-not-allowed"
	MediaType      = base + "unsupported-media-type"
	TooLarge       = base + "body-too-large"
	TooMany        = base + "too-many-messages"
	Malformed      = base + "malformed-envelope"
	UnknownType    = base + "unknown-type"
	BatchMediaType = "application/vnd.mensageria.batch+json"
)

// Case is one bad request and its answer.
type Case struct {
	Name string
	// Method is the request's method; "" is POST.
	Method string
	// Header is set over a well-formed request's (Content-Type
	// application/json, an X-Request-Id, the token's Authorization); a ""
	// value removes that header.
	Header map[string]string
	Body   string
	// Status and Problem are the answer: its status code and the problem
	// document's type.
	Status  int
	Problem string
}

// Request is a case's method, headers and body with token as the accepted
// token, for a client to send.
func (c Case) Request(token string) (method string, header http.Header, body string) {
	method = c.Method
	if method == "" {
		method = http.MethodPost
	}
	header = http.Header{}
	header.Set("Content-Type", "application/json")
	header.Set("X-Request-Id", "attack-rid")
	header.Set("Authorization", "Bearer "+token)
	for k, v := range c.Header {
		if v == "" {
			header.Del(k)
		} else {
			header.Set(k, v)
		}
	}
	return method, header, c.Body
}

// Single returns the bad requests of one envelope. good is an envelope the
// receiver applies (as EncodeEnvelope writes it: compact, with "attempt":1),
// of type typ and natural key key; token is a token it accepts and maxBody
// its body limit in bytes.
func Single(good, typ, key, token string, maxBody int) []Case {
	bearer := "Bearer " + token
	withType := func(t string) string { return strings.Replace(good, `"type":"`+typ+`"`, `"type":"`+t+`"`, 1) }
	withKey := func(k string) string { return strings.Replace(good, `"key":"`+key+`"`, `"key":"`+k+`"`, 1) }
	return []Case{
		{Name: "no token", Header: map[string]string{"Authorization": ""}, Body: good, Status: 401, Problem: Unauthorized},
		{Name: "wrong token", Header: map[string]string{"Authorization": "Bearer nope"}, Body: good, Status: 401, Problem: Unauthorized},
		{Name: "token prefix", Header: map[string]string{"Authorization": bearer[:len(bearer)-1]}, Body: good, Status: 401, Problem: Unauthorized},
		{Name: "token with a suffix", Header: map[string]string{"Authorization": bearer + "x"}, Body: good, Status: 401, Problem: Unauthorized},
		{Name: "basic scheme", Header: map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(token))}, Body: good, Status: 401, Problem: Unauthorized},
		{Name: "not a POST", Method: http.MethodGet, Status: 405, Problem: Method},
		{Name: "PUT", Method: http.MethodPut, Body: good, Status: 405, Problem: Method},
		{Name: "not json media type", Header: map[string]string{"Content-Type": "text/plain"}, Body: good, Status: 415, Problem: MediaType},
		{Name: "no media type", Header: map[string]string{"Content-Type": ""}, Body: good, Status: 415, Problem: MediaType},
		{Name: "malformed json", Body: `{"id":`, Status: 400, Problem: Malformed},
		{Name: "empty body", Body: ``, Status: 400, Problem: Malformed},
		{Name: "not an object", Body: `[1,2]`, Status: 400, Problem: Malformed},
		{Name: "two documents", Body: good + good, Status: 400, Problem: Malformed},
		{Name: "missing key", Body: strings.Replace(good, `"key":"`+key+`",`, ``, 1), Status: 400, Problem: Malformed},
		{Name: "empty key", Body: withKey(""), Status: 400, Problem: Malformed},
		{Name: "key of 1001 bytes", Body: withKey(strings.Repeat("é", 500) + "x"), Status: 400, Problem: Malformed},
		{Name: "unpaired high surrogate in the key", Body: withKey(key + `\ud800`), Status: 400, Problem: Malformed},
		{Name: "unpaired low surrogate in the key", Body: withKey(key + `\udc00`), Status: 400, Problem: Malformed},
		{Name: "NUL in the key", Body: withKey(key + `\u0000`), Status: 400, Problem: Malformed},
		{Name: "mistyped attempt", Body: strings.Replace(good, `"attempt":1`, `"attempt":"1"`, 1), Status: 400, Problem: Malformed},
		{Name: "attempt zero", Body: strings.Replace(good, `"attempt":1`, `"attempt":0`, 1), Status: 400, Problem: Malformed},
		{Name: "mistyped id", Body: strings.Replace(good, `"id":"`, `"id":"x`, 1), Status: 400, Problem: Malformed},
		{Name: "unknown field", Body: strings.Replace(good, `"attempt":1`, `"attempt":1,"priority":9`, 1), Status: 400, Problem: Malformed},
		{Name: "field repeated", Body: strings.Replace(good, `"attempt":1`, `"attempt":1,"attempt":1`, 1), Status: 400, Problem: Malformed},
		{Name: "not UTF-8", Body: withKey(key + "\xff"), Status: 400, Problem: Malformed},
		{Name: "idempotency key differs", Header: map[string]string{"Idempotency-Key": "other"}, Body: good, Status: 400, Problem: Malformed},
		{Name: "oversize body", Body: good + strings.Repeat(" ", maxBody), Status: 413, Problem: TooLarge},
		{Name: "unknown type", Body: withType("invoice.paid.unknown"), Status: 422, Problem: UnknownType},
		// The zero time used to skip the staleness check and be stored
		// as now.
		{Name: "created_at of the zero time", Body: withField(good, "created_at", `"0001-01-01T00:00:00Z"`), Status: 400, Problem: Malformed},
		{Name: "created_at before the epoch", Body: withField(good, "created_at", `"1969-12-31T23:59:59Z"`), Status: 400, Problem: Malformed},
		// Stored, they broke payload->>'a' and payload::jsonb for SQL
		// appliers.
		{Name: "NUL in the payload", Body: withField(good, "payload", `{"a":"x\u0000"}`), Status: 400, Problem: Malformed},
		{Name: "NUL in a payload member name", Body: withField(good, "payload", `{"\u0000":1}`), Status: 400, Problem: Malformed},
		{Name: "unpaired surrogate in the payload", Body: withField(good, "payload", `{"a":"\ud800"}`), Status: 400, Problem: Malformed},
		{Name: "NUL in a header value", Body: withField(good, "headers", `{"h":"a\u0000"}`), Status: 400, Problem: Malformed},
		{Name: "unpaired surrogate in a header value", Body: withField(good, "headers", `{"h":"\udc00"}`), Status: 400, Problem: Malformed},
		// A map kept the last one.
		{Name: "header name repeated", Body: withField(good, "headers", `{"h":"1","h":"2"}`), Status: 400, Problem: Malformed},
		// The request id is echoed into problems and logs: required,
		// checked, and never quoted back unchecked.
		{Name: "no X-Request-Id", Header: map[string]string{"X-Request-Id": ""}, Body: good, Status: 400, Problem: Malformed},
		{Name: "X-Request-Id of 201 bytes", Header: map[string]string{"X-Request-Id": strings.Repeat("r", 201)}, Body: good, Status: 400, Problem: Malformed},
		{Name: "X-Request-Id not ASCII", Header: map[string]string{"X-Request-Id": "pedido-\u00e9"}, Body: good, Status: 400, Problem: Malformed},
	}
}

// withField returns the envelope good with one field's JSON value
// replaced by raw, as is (its escapes kept).
func withField(good, field, raw string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(good), &m); err != nil {
		panic("m2mattack: the good envelope is not a JSON object: " + err.Error())
	}
	m[field] = json.RawMessage(raw)
	b, err := json.Marshal(m)
	if err != nil {
		panic("m2mattack: " + err.Error())
	}
	return string(b)
}

// Batch returns the bad batch requests, refused whole. good is an envelope
// the receiver applies, token a token it accepts, maxBody and maxItems its
// limits (maxItems+1 envelopes must fit in maxBody for the "too many"
// case to be about the count).
func Batch(good, token string, maxBody, maxItems int) []Case {
	batch := func(envs ...string) string { return `{"messages":[` + strings.Join(envs, ",") + `]}` }
	ct := map[string]string{"Content-Type": BatchMediaType}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"Content-Type": BatchMediaType}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	many := make([]string, maxItems+1)
	for i := range many {
		many[i] = good
	}
	return []Case{
		{Name: "batch without a token", Header: with("Authorization", ""), Body: batch(good), Status: 401, Problem: Unauthorized},
		{Name: "batch with a wrong token", Header: with("Authorization", "Bearer old"), Body: batch(good), Status: 401, Problem: Unauthorized},
		{Name: "batch of another media type", Header: with("Content-Type", "application/vnd.other+json"), Body: batch(good), Status: 415, Problem: MediaType},
		{Name: "batch as application/json", Body: batch(good), Status: 400, Problem: Malformed},
		{Name: "batch of malformed json", Header: ct, Body: `{"messages":[` + good, Status: 400, Problem: Malformed},
		{Name: "batch not an object", Header: ct, Body: `[` + good + `]`, Status: 400, Problem: Malformed},
		{Name: "batch without messages", Header: ct, Body: `{"msgs":[` + good + `]}`, Status: 400, Problem: Malformed},
		{Name: "batch with messages twice", Header: ct, Body: `{"messages":[` + good + `],"messages":[` + good + `]}`, Status: 400, Problem: Malformed},
		{Name: "empty batch", Header: ct, Body: `{"messages":[]}`, Status: 400, Problem: Malformed},
		{Name: "batch with trailing data", Header: ct, Body: batch(good) + `x`, Status: 400, Problem: Malformed},
		{Name: "batch of too many", Header: ct, Body: batch(many...), Status: 413, Problem: TooMany},
		{Name: "oversize batch", Header: ct, Body: batch(good) + strings.Repeat(" ", maxBody), Status: 413, Problem: TooLarge},
		{Name: "batch without X-Request-Id", Header: with("X-Request-Id", ""), Body: batch(good), Status: 400, Problem: Malformed},
	}
}
