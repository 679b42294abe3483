package m2mhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/m2mwire"
)

// Envelope is the JSON body of one delivery.
type Envelope struct {
	ID        uuid.UUID         `json:"id"`
	Type      string            `json:"type"`
	Key       string            `json:"key"`
	CreatedAt time.Time         `json:"created_at"`
	Attempt   int               `json:"attempt"`
	Payload   json.RawMessage   `json:"payload"`
	Headers   map[string]string `json:"headers"`
}

// Limits of the envelope's fields. They mirror what mensageria.Enqueue
// accepts, so anything the outbox can hold fits the wire.
const (
	maxTypeLen   = 200
	maxKeyLen    = 1000
	maxAttempt   = math.MaxInt32
	maxHeaders   = 64
	maxHeaderLen = 8 << 10
)

// EnvelopeError says which field of an envelope is wrong and why.
type EnvelopeError struct {
	Field  string // "" when the document as a whole is wrong
	Reason string
}

func (e *EnvelopeError) Error() string {
	if e.Field == "" {
		return "envelope: " + e.Reason
	}
	return "envelope: " + e.Field + ": " + e.Reason
}

var envelopeFields = map[string]bool{
	"id": true, "type": true, "key": true, "created_at": true,
	"attempt": true, "payload": true, "headers": true,
}

// headers is optional so that senders in other languages may leave it out
// when the message has none; everything else must be present.
var requiredFields = []string{"id", "type", "key", "created_at", "attempt", "payload"}

// DecodeEnvelope parses b strictly: one JSON object, valid UTF-8, no
// unknown or repeated fields, every required field present with its type,
// nothing after the object. Lenient decoding would let a sender's bug (a
// renamed field, a null key) be applied as an empty value and then deduped
// forever; refusing it makes the sender's message dead with a reason.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	raw, err := envelopeFieldsOf(b)
	if err != nil {
		return nil, err
	}
	return envelopeFrom(raw)
}

// envelopeFieldsOf reads b as one JSON object of envelope fields, each
// once, the required ones present, and nothing after it; the values are
// left undecoded.
func envelopeFieldsOf(b []byte) (map[string]json.RawMessage, error) {
	bad := envelopeErr
	dec, err := openObject(b, "must be a JSON object")
	if err != nil {
		return nil, err
	}
	raw := make(map[string]json.RawMessage, len(envelopeFields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("", "not a JSON document: %v", jsonErr(err))
		}
		name, _ := tok.(string) // inside an object, keys are strings
		if !envelopeFields[name] {
			return nil, bad(name, "unknown field")
		}
		if _, dup := raw[name]; dup {
			return nil, bad(name, "field repeated")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, bad("", "not a JSON document: %v", jsonErr(err))
		}
		raw[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, bad("", "not a JSON document: %v", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("", "data after the JSON object")
	}
	for _, f := range requiredFields {
		if _, ok := raw[f]; !ok {
			return nil, bad(f, "required field missing")
		}
	}
	return raw, nil
}

// envelopeFrom decodes and checks each field of an envelope read by
// envelopeFieldsOf.
func envelopeFrom(raw map[string]json.RawMessage) (*Envelope, error) {
	bad := envelopeErr
	var e Envelope
	s, err := jsonString(raw["id"])
	if err != nil {
		return nil, bad("id", "%v", err)
	}
	// uuid.Parse also takes braces, urn: and 32-hex forms; only the
	// canonical one is part of the contract.
	if len(s) != 36 {
		return nil, bad("id", "must be a UUID in its canonical 36-character form")
	}
	if e.ID, err = uuid.Parse(s); err != nil || e.ID == uuid.Nil {
		return nil, bad("id", "must be a non-nil UUID")
	}
	if e.Type, err = jsonString(raw["type"]); err != nil {
		return nil, bad("type", "%v", err)
	}
	if e.Type == "" || len(e.Type) > maxTypeLen || strings.ContainsRune(e.Type, 0) {
		return nil, bad("type", "must be 1-%d bytes, without NUL", maxTypeLen)
	}
	if e.Key, err = jsonString(raw["key"]); err != nil {
		return nil, bad("key", "%v", err)
	}
	if e.Key == "" || len(e.Key) > maxKeyLen || strings.ContainsRune(e.Key, 0) {
		// NUL: the inbox's text column cannot hold it, and a database
		// error would be answered 500 and retried until the sender gives
		// up.
		return nil, bad("key", "must be 1-%d bytes, without NUL", maxKeyLen)
	}
	if s, err = jsonString(raw["created_at"]); err != nil {
		return nil, bad("created_at", "%v", err)
	}
	if e.CreatedAt, err = m2mwire.ParseTime(s); err != nil {
		return nil, bad("created_at", "%v", err)
	}
	if e.CreatedAt.Before(MinCreatedAt) {
		// The zero time (0001-01-01T00:00:00Z) reads as "unknown" to the
		// inbox, which would skip the staleness check and store now.
		return nil, bad("created_at", "%s is out of range: from %s to 9999-12-31T23:59:59.999999999Z", s, MinCreatedAt.Format(time.RFC3339))
	}
	a := raw["attempt"]
	n, err := strconv.ParseInt(string(a), 10, 64)
	if err != nil || n < 1 || n > maxAttempt {
		return nil, bad("attempt", "must be an integer from 1 to %d", maxAttempt)
	}
	e.Attempt = int(n)
	e.Payload = raw["payload"]
	if err := storableText(e.Payload); err != nil {
		// An SQL applier reads the stored payload with payload->>'a' or
		// payload::jsonb, which fail on both for the whole row.
		return nil, bad("payload", "%v", err)
	}
	if h, ok := raw["headers"]; ok {
		if e.Headers, err = decodeHeaders(h); err != nil {
			return nil, bad("headers", "%v", err)
		}
	}
	return &e, nil
}

func jsonErr(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return err.Error()
}

// MinCreatedAt is the earliest created_at an envelope may carry: a
// message cannot be older than the Unix epoch, and the zero time of Go
// (year 1) is what a sender that never set it sends.
var MinCreatedAt = time.Unix(0, 0).UTC()

// errNUL refuses a string holding U+0000.
var errNUL = errors.New(`must not hold NUL (\u0000): PostgreSQL's text and jsonb cannot hold it, so payload->>'a' and payload::jsonb would fail on the stored row`)

// errLoneSurrogate refuses a string that has no exact UTF-8 form.
var errLoneSurrogate = errors.New(`must not hold an unpaired UTF-16 surrogate escape (a \ud800-\udbff not followed by a \udc00-\udfff, or one of those alone): it has no UTF-8 form, and reading it as U+FFFD would make different strings one`)

func jsonString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", errors.New("must be a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errors.New("must be a string")
	}
	if loneSurrogate(raw) {
		return "", errLoneSurrogate
	}
	return s, nil
}

// loneSurrogate reports whether the JSON text raw (already checked to be
// valid JSON) holds a \u escape of a UTF-16 surrogate that is not half of
// a pair. encoding/json decodes each such escape as U+FFFD, so keys that
// differ on the wire ("\ud800", "\udc00") would be deduplicated as one.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: a quote, a backslash, u, ...
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r, ok := hex4(raw[i+1:])
		if !ok {
			return false // not JSON; the decoder has refused it already
		}
		i += 4
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo, ok := hex4(raw[i+3:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
					i += 6
					continue
				}
			}
			return true
		}
	}
	return false
}

// storableText checks every string of the JSON text raw (valid JSON),
// member names included: no NUL and no unpaired surrogate escape. NUL can
// only be written escaped in JSON, so the escapes are all there is to
// read.
func storableText(raw []byte) error {
	if loneSurrogate(raw) {
		return errLoneSurrogate
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if i < len(raw) && raw[i] == 'u' {
			if r, ok := hex4(raw[i+1:]); ok && r == 0 {
				return errNUL
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func decodeHeaders(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("must be an object of strings")
	}
	if loneSurrogate(raw) { // in a name or a value
		return nil, errLoneSurrogate
	}
	// Read member by member: a map would keep the last of a repeated
	// name and drop the others without a word.
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, errors.New("must be an object of strings")
	}
	out := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errors.New("must be an object of strings")
		}
		k, _ := tok.(string) // inside an object, names are strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, errors.New("must be an object of strings")
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q repeated: a name appears once (names are compared exactly, case included)", truncate(k))
		}
		if len(out) == maxHeaders {
			return nil, fmt.Errorf("at most %d headers", maxHeaders)
		}
		s, err := jsonString(v)
		if err != nil {
			return nil, fmt.Errorf("%q must be a string", truncate(k))
		}
		if k == "" || len(k)+len(s) > maxHeaderLen {
			return nil, fmt.Errorf("names must be non-empty and a header at most %d bytes", maxHeaderLen)
		}
		if strings.ContainsRune(k, 0) || strings.ContainsRune(s, 0) {
			return nil, fmt.Errorf("%q: %w", truncate(k), errNUL)
		}
		out[k] = s
	}
	return out, nil
}

// Delivery returns the envelope as the inbox and effects see it.
func (e *Envelope) Delivery() *mensageria.Delivery {
	return &mensageria.Delivery{
		ID:        e.ID,
		Type:      e.Type,
		Key:       e.Key,
		Payload:   e.Payload,
		Headers:   e.Headers,
		CreatedAt: e.CreatedAt,
		Attempt:   e.Attempt,
	}
}

// EncodeEnvelope renders d as the wire envelope. A payload that is not
// valid JSON (a row inserted by hand, say) is an error no retry can fix.
func EncodeEnvelope(d *mensageria.Delivery) ([]byte, error) {
	payload := d.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	headers := d.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	var buf bytes.Buffer
	buf.Grow(len(payload) + 256)
	enc := json.NewEncoder(&buf)
	// The payload is the sender's document: leave its <, > and & alone.
	enc.SetEscapeHTML(false)
	err := enc.Encode(Envelope{
		ID:        d.ID,
		Type:      d.Type,
		Key:       d.Key,
		CreatedAt: d.CreatedAt.UTC(),
		Attempt:   d.Attempt,
		Payload:   payload,
		Headers:   headers,
	})
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func envelopeErr(field, format string, a ...any) error {
	return &EnvelopeError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// openObject checks that b is UTF-8 and starts a JSON object, and returns
// the decoder positioned inside it; notObject is the refusal otherwise.
func openObject(b []byte, notObject string) (*json.Decoder, error) {
	if !utf8.Valid(b) {
		return nil, envelopeErr("", "body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, envelopeErr("", "not a JSON document: %v", jsonErr(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, envelopeErr("", "%s", notObject)
	}
	return dec, nil
}
