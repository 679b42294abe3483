package m2mhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
)

const goodEnvelope = `{"id":"0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90","type":"order.closed","key":"order-1","created_at":"2026-11-30T12:00:00.123456Z","attempt":2,"payload":{"n":1,"s":"<&>"},"headers":{"X-Request-Id":"r-1"}}`

func TestEnvelopeRoundTrip(t *testing.T) {
	d := &mensageria.Delivery{
		ID:        uuid.Must(uuid.NewV7()),
		Type:      "order.closed",
		Key:       "pedido/ção 1",
		Payload:   json.RawMessage(`{"a":[1,2,{"b":"<x>&"}]}`),
		Headers:   map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		CreatedAt: time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.FixedZone("BRT", -3*3600)),
		Attempt:   3,
	}
	b, err := EncodeEnvelope(d)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"<x>&"`)) {
		t.Errorf("payload was HTML-escaped: %s", b)
	}
	e, err := DecodeEnvelope(b)
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	got := e.Delivery()
	if got.ID != d.ID || got.Type != d.Type || got.Key != d.Key || got.Attempt != d.Attempt ||
		!got.CreatedAt.Equal(d.CreatedAt) || !reflect.DeepEqual(got.Headers, d.Headers) || string(got.Payload) != string(d.Payload) {
		t.Fatalf("round trip changed the delivery:\n got %+v\nwant %+v", got, d)
	}
	// No payload and no headers still make a valid envelope.
	b, err = EncodeEnvelope(&mensageria.Delivery{ID: d.ID, Type: "t", Key: "k", Attempt: 1, CreatedAt: d.CreatedAt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeEnvelope(b); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if _, err := EncodeEnvelope(&mensageria.Delivery{ID: d.ID, Type: "t", Key: "k", Attempt: 1, Payload: json.RawMessage(`{nope`)}); err == nil {
		t.Fatal("a payload that is not JSON must not encode")
	}
}

func TestDecodeEnvelopeRejects(t *testing.T) {
	with := func(field, value string) string { // replace one field's value
		var m map[string]json.RawMessage
		_ = json.Unmarshal([]byte(goodEnvelope), &m)
		if value == "" {
			delete(m, field)
		} else {
			m[field] = json.RawMessage(value)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct{ name, body, field string }{
		{"empty", ``, ""},
		{"not json", `hello`, ""},
		{"truncated", goodEnvelope[:40], ""},
		{"array", `[` + goodEnvelope + `]`, ""},
		{"null", `null`, ""},
		{"trailing data", goodEnvelope + `{}`, ""},
		{"invalid utf-8", strings.Replace(goodEnvelope, "order-1", "order-\xff", 1), ""},
		{"unknown field", strings.Replace(goodEnvelope, `"attempt"`, `"extra":1,"attempt"`, 1), "extra"},
		{"repeated field", strings.Replace(goodEnvelope, `"attempt":2`, `"attempt":2,"attempt":3`, 1), "attempt"},
		{"field case differs", strings.Replace(goodEnvelope, `"type"`, `"Type"`, 1), "Type"},
		{"missing id", with("id", ""), "id"},
		{"missing type", with("type", ""), "type"},
		{"missing key", with("key", ""), "key"},
		{"missing created_at", with("created_at", ""), "created_at"},
		{"missing attempt", with("attempt", ""), "attempt"},
		{"missing payload", with("payload", ""), "payload"},
		{"id number", with("id", `12`), "id"},
		{"id not uuid", with("id", `"not-a-uuid"`), "id"},
		{"id braces", with("id", `"{0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90}"`), "id"},
		{"id nil", with("id", `"00000000-0000-0000-0000-000000000000"`), "id"},
		{"type null", with("type", `null`), "type"},
		{"type empty", with("type", `""`), "type"},
		{"type number", with("type", `7`), "type"},
		{"type too long", with("type", `"`+strings.Repeat("t", 201)+`"`), "type"},
		{"key empty", with("key", `""`), "key"},
		{"key with NUL", with("key", `"a\u0000b"`), "key"},
		{"type with NUL", with("type", `"t\u0000"`), "type"},
		{"key array", with("key", `["k"]`), "key"},
		{"created_at not a date", with("created_at", `"yesterday"`), "created_at"},
		{"created_at no zone", with("created_at", `"2026-11-30T12:00:00"`), "created_at"},
		{"created_at number", with("created_at", `1764504000`), "created_at"},
		{"attempt zero", with("attempt", `0`), "attempt"},
		{"attempt fraction", with("attempt", `1.5`), "attempt"},
		{"attempt exponent", with("attempt", `1e0`), "attempt"},
		{"attempt string", with("attempt", `"1"`), "attempt"},
		{"attempt huge", with("attempt", `99999999999`), "attempt"},
		{"headers array", with("headers", `["a"]`), "headers"},
		{"headers null", with("headers", `null`), "headers"},
		{"header value number", with("headers", `{"a":1}`), "headers"},
		{"header value null", with("headers", `{"a":null}`), "headers"},
		{"header empty name", with("headers", `{"":"x"}`), "headers"},
		// Unpaired surrogates have no UTF-8 form; encoding/json would
		// read each as U+FFFD, and these keys would all be one.
		{"key lone high surrogate", with("key", `"order-\ud800"`), "key"},
		{"key lone low surrogate", with("key", `"order-\udc00"`), "key"},
		{"key high surrogate then a letter", with("key", `"\ud800x"`), "key"},
		{"key high surrogate at the end", with("key", `"x\uD83D"`), "key"},
		{"key two high surrogates", with("key", `"\ud800\ud800\udc00"`), "key"},
		{"key low before high", with("key", `"\ude00\ud83d"`), "key"},
		{"key high then an escape", with("key", `"\ud83d\n"`), "key"},
		{"type lone surrogate", with("type", `"order.\udfff"`), "type"},
		{"header value lone surrogate", with("headers", `{"a":"\ud800"}`), "headers"},
		{"header name lone surrogate", with("headers", `{"\udc00":"x"}`), "headers"},
		// The zero time used to skip the staleness check and be stored
		// as now; nothing is older than the Unix epoch.
		{"created_at zero time", with("created_at", `"0001-01-01T00:00:00Z"`), "created_at"},
		{"created_at before the epoch", with("created_at", `"1969-12-31T23:59:59.999999999Z"`), "created_at"},
		{"created_at before the epoch in its zone", with("created_at", `"1970-01-01T00:30:00+01:00"`), "created_at"},
		// What an SQL applier could not read back: payload->>'a' and
		// payload::jsonb fail on NUL and on an unpaired surrogate.
		{"payload NUL", with("payload", `{"a":"x\u0000y"}`), "payload"},
		{"payload NUL in a member name", with("payload", `{"\u0000":1}`), "payload"},
		{"payload NUL in an array", with("payload", `["ok",["\u0000"]]`), "payload"},
		{"payload NUL string", with("payload", `"\u0000"`), "payload"},
		{"payload lone high surrogate", with("payload", `{"a":"\ud800"}`), "payload"},
		{"payload lone low surrogate", with("payload", `{"a":"x\uDC00"}`), "payload"},
		{"payload surrogate in a member name", with("payload", `{"\ud83d":1}`), "payload"},
		{"header value NUL", with("headers", `{"a":"\u0000"}`), "headers"},
		{"header name NUL", with("headers", `{"a\u0000":"x"}`), "headers"},
		// A map would keep the last of a repeated name.
		{"header name repeated", with("headers", `{"X-Request-Id":"r-1","X-Request-Id":"r-2"}`), "headers"},
		{"header name repeated in another spelling", with("headers", `{"a":"1","\u0061":"2"}`), "headers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := DecodeEnvelope([]byte(c.body))
			var ee *EnvelopeError
			if !errors.As(err, &ee) {
				t.Fatalf("decoded %q as %+v, err %v; want an EnvelopeError", c.body, e, err)
			}
			if ee.Field != c.field {
				t.Errorf("error %q names field %q, want %q", err, ee.Field, c.field)
			}
		})
	}
	if _, err := DecodeEnvelope([]byte(with("headers", ""))); err != nil {
		t.Errorf("headers is optional: %v", err)
	}
	if _, err := DecodeEnvelope([]byte(with("payload", `null`))); err != nil {
		t.Errorf("any JSON payload is accepted: %v", err)
	}
	// A pair is one character; an escaped backslash before "u" is text;
	// U+FFFD itself, written or escaped, is a character like any other.
	for raw, key := range map[string]string{
		`"\ud83d\ude00"`:    "\U0001F600",
		`"\uD83D\uDE00!"`:   "\U0001F600!",
		`"\\ud800"`:         `\ud800`,
		`"a\\\ud83d\ude00"`: `a\` + "\U0001F600",
		`"\ufffd"`:          "\ufffd",
		"\"\xef\xbf\xbd\"":  "\ufffd",
	} {
		e, err := DecodeEnvelope([]byte(with("key", raw)))
		if err != nil || e.Key != key {
			t.Errorf("key %s: %+v, %v; want %q", raw, e, err, key)
		}
	}
}

// The edges of what TestDecodeEnvelopeRejects refuses are accepted: the
// epoch itself, a backslash before "u0000" (an escaped backslash, not a
// NUL), U+FFFD and a surrogate pair in a payload, header names that
// differ in case only (names are compared exactly).
func TestDecodeEnvelopeAcceptsTheEdges(t *testing.T) {
	with := func(field, value string) string {
		var m map[string]json.RawMessage
		_ = json.Unmarshal([]byte(goodEnvelope), &m)
		m[field] = json.RawMessage(value)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, body := range []string{
		with("created_at", `"1970-01-01T00:00:00Z"`),
		with("created_at", `"1969-12-31T21:00:00-03:00"`),
		with("created_at", `"9999-12-31T23:59:59.999999999Z"`),
		with("payload", `{"a":"\\u0000","\\u0000":"\ufffd\ud83d\ude00"}`),
		with("payload", `null`),
		with("headers", `{"X-Request-Id":"r-1","x-request-id":"r-2"}`),
	} {
		if _, err := DecodeEnvelope([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// FuzzDecodeEnvelope: the decoder never panics, and whatever it accepts
// survives a round trip through the encoder unchanged.
// The strings it accepts are exactly what the JSON text says, as a
// receiver in a UTF-16 language reads them: no unpaired surrogate turned
// into U+FFFD.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(goodEnvelope))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90","type":"t","key":"k","created_at":"2026-01-01T00:00:00Z","attempt":1,"payload":null}`))
	for _, key := range []string{`\ud800`, `\udc00`, `\ud83d\ude00`, `\\ud800`, `x\ud800\\udc00`, `\ufffd`, `\uDBFF\uDFFF`} {
		f.Add([]byte(`{"id":"0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90","type":"t","key":"` + key + `","created_at":"2026-01-01T00:00:00Z","attempt":1,"payload":null,"headers":{"h` + key + `":"` + key + `"}}`))
	}
	for _, edge := range [][3]string{ // payload, created_at, headers
		{`{"a":"\u0000"}`, `2026-01-01T00:00:00Z`, `{}`},
		{`["\\u0000"]`, `2026-01-01T00:00:00Z`, `{}`},
		{`{"\ud800":1}`, `2026-01-01T00:00:00Z`, `{}`},
		{`{}`, `2026-01-01T00:00:00Z`, `{"a":"1","a":"2"}`},
		{`{}`, `2026-01-01T00:00:00Z`, `{"a":"1","A":"2"}`},
		{`{}`, `0001-01-01T00:00:00Z`, `{}`},
		{`{}`, `1970-01-01T00:00:00Z`, `{}`},
	} {
		f.Add([]byte(`{"id":"0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90","type":"t","key":"k","attempt":1,"payload":` + edge[0] + `,"created_at":"` + edge[1] + `","headers":` + edge[2] + `}`))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEnvelope(b)
		if err != nil {
			var ee *EnvelopeError
			if !errors.As(err, &ee) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if e.ID == uuid.Nil || e.Type == "" || e.Key == "" || e.Attempt < 1 || !json.Valid(e.Payload) {
			t.Fatalf("accepted an envelope breaking its invariants: %+v", e)
		}
		checkLossless(t, b, e)
		if e.CreatedAt.Before(MinCreatedAt) {
			t.Fatalf("accepted created_at %v, before %v", e.CreatedAt, MinCreatedAt)
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(b, &raw)
		for _, field := range []string{"payload", "headers"} {
			for _, lit := range stringLiterals(raw[field]) {
				if u := utf16Of(lit); slices.Contains(u, 0) || !slices.Equal(utf16.Encode(utf16.Decode(u)), u) {
					t.Fatalf("%s string %s holds NUL or an unpaired surrogate and was accepted", field, lit)
				}
			}
		}
		if h := raw["headers"]; h != nil && len(stringLiterals(h)) != 2*len(e.Headers) {
			t.Fatalf("headers %s: %d names kept, a name repeated was accepted", h, len(e.Headers))
		}
		enc, err := EncodeEnvelope(e.Delivery())
		if err != nil {
			t.Fatalf("cannot re-encode accepted envelope %q: %v", b, err)
		}
		e2, err := DecodeEnvelope(enc)
		if err != nil {
			t.Fatalf("re-encoded envelope %s rejected: %v", enc, err)
		}
		var p1, p2 bytes.Buffer
		_ = json.Compact(&p1, e.Payload)
		_ = json.Compact(&p2, e2.Payload)
		if e2.ID != e.ID || e2.Type != e.Type || e2.Key != e.Key || e2.Attempt != e.Attempt ||
			!e2.CreatedAt.Equal(e.CreatedAt) || p1.String() != p2.String() || len(e2.Headers) != len(e.Headers) {
			t.Fatalf("round trip changed the envelope:\n%+v\n%+v", e, e2)
		}
		for k, v := range e.Headers {
			if e2.Headers[k] != v {
				t.Fatalf("header %q changed: %q -> %q", k, v, e2.Headers[k])
			}
		}
	})
}

// checkLossless compares the type, key and headers of an accepted
// envelope with its JSON text, unescaped into UTF-16 code units by hand.
func checkLossless(t *testing.T, b []byte, e *Envelope) {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("accepted %q, which is not a JSON object: %v", b, err)
	}
	for field, got := range map[string]string{"type": e.Type, "key": e.Key} {
		units := utf16Of(raw[field])
		if !slices.Equal(utf16.Encode([]rune(got)), units) {
			t.Fatalf("%s %s decoded as %q: not what the text says", field, raw[field], got)
		}
	}
	for _, lit := range stringLiterals(raw["headers"]) {
		if u := utf16Of(lit); !slices.Equal(utf16.Encode(utf16.Decode(u)), u) {
			t.Fatalf("header string %s holds an unpaired surrogate and was accepted", lit)
		}
	}
}

// utf16Of unescapes one JSON string literal, quotes included, into the
// UTF-16 code units it denotes, unpaired surrogates kept as they are.
func utf16Of(lit []byte) []uint16 {
	s := string(lit[1 : len(lit)-1])
	var out []uint16
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			r, n := utf8.DecodeRuneInString(s[i:])
			out = utf16.AppendRune(out, r)
			i += n
			continue
		}
		if s[i+1] == 'u' {
			v, _ := strconv.ParseUint(s[i+2:i+6], 16, 16)
			out = append(out, uint16(v))
			i += 6
			continue
		}
		out = append(out, uint16(strings.NewReplacer(`"`, `"`, `\\`, `\\`, `/`, `/`, "b", "\b", "f", "\f", "n", "\n", "r", "\r", "t", "\t").Replace(s[i+1 : i+2])[0]))
		i += 2
	}
	return out
}

// stringLiterals returns every string literal of the JSON text raw.
func stringLiterals(raw []byte) [][]byte {
	var out [][]byte
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue
		}
		j := i + 1
		for raw[j] != '"' {
			if raw[j] == '\\' {
				j++
			}
			j++
		}
		out = append(out, raw[i:j+1])
		i = j
	}
	return out
}
