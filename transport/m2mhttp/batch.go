package m2mhttp

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/uuid"
)

// Batch delivery: many envelopes in one request, one result per envelope.
//
//	POST <URL exactly as configured>
//	Content-Type: application/vnd.mensageria.batch+json
//
//	{"messages":[<envelope>, ...]}
//
// answered, when the request as a whole is acceptable, with
//
//	200 Content-Type: application/vnd.mensageria.batch+json
//
//	{"results":[{"id":"<uuid>","status":"applied"}, ...]}
//
// results[i] is the outcome of messages[i]; see BatchResult.
const (
	// ContentTypeBatch is the media type of a batch request and of its
	// 200 answer.
	ContentTypeBatch = "application/vnd.mensageria.batch+json"
	// DefaultMaxBatchItems is the receiver's default limit on the
	// envelopes of one batch request.
	DefaultMaxBatchItems = 1000
)

// Item statuses of a batch answer.
const (
	ItemApplied   = "applied"   // applied now: delivered
	ItemDuplicate = "duplicate" // applied by an earlier delivery: delivered
	ItemRefused   = "refused"   // malformed, unknown type, a conflict or refused by the effect: dead
	ItemStale     = "stale"     // older than the dedup window: dead
	ItemRetry     = "retry"     // not applied this time: retried
)

// BatchResult is the outcome of one envelope of a batch. Problem is set
// for every status but applied and duplicate, with the status code and
// type the same envelope would have got alone (refused: 400 malformed,
// 409 conflict, 422 unknown type or refused by the effect; stale: 409;
// retry: 500 or 503); RetryAfter, in seconds, when
// the receiver asks for a delay before the retry.
type BatchResult struct {
	ID         string   `json:"id,omitempty"`
	Status     string   `json:"status"`
	Problem    *Problem `json:"problem,omitempty"`
	RetryAfter int64    `json:"retry_after,omitempty"`
}

// BatchItem is one entry of a decoded batch: its envelope, or the reason
// it is refused on its own.
type BatchItem struct {
	Envelope *Envelope
	// Err is an *EnvelopeError when the entry is malformed.
	Err error
	// ID is the entry's "id" when it is a canonical UUID, even if the
	// entry is otherwise malformed, so the answer can name it.
	ID string
}

// BatchLimitError is returned by DecodeBatch for a batch of more than
// its limit of envelopes.
type BatchLimitError struct{ Max int }

func (e *BatchLimitError) Error() string {
	return fmt.Sprintf("batch: more than %d messages", e.Max)
}

// DecodeBatch parses a batch request body. The body itself is parsed
// strictly: valid UTF-8, one JSON object whose only field is "messages",
// an array of 1 to maxItems JSON values, nothing after the object; any
// other body is an *EnvelopeError (or a *BatchLimitError for too many
// messages) and the whole request is refused. Each entry is then decoded
// as DecodeEnvelope does, and an entry that fails is refused on its own
// (BatchItem.Err) without touching its neighbours.
func DecodeBatch(b []byte, maxItems int) ([]BatchItem, error) {
	bad := envelopeErr
	dec, err := openObject(b, "a batch must be a JSON object")
	if err != nil {
		return nil, err
	}
	var raws []json.RawMessage
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("", "not a JSON document: %v", jsonErr(err))
		}
		name, _ := tok.(string)
		if name != "messages" {
			return nil, bad(name, "unknown field")
		}
		if seen {
			return nil, bad(name, "field repeated")
		}
		seen = true
		tok, err = dec.Token()
		if err != nil {
			return nil, bad("", "not a JSON document: %v", jsonErr(err))
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return nil, bad("messages", "must be an array of envelopes")
		}
		for dec.More() {
			if len(raws) >= maxItems {
				return nil, &BatchLimitError{Max: maxItems}
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, bad("", "not a JSON document: %v", jsonErr(err))
			}
			raws = append(raws, v)
		}
		if _, err := dec.Token(); err != nil { // ]
			return nil, bad("", "not a JSON document: %v", jsonErr(err))
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, bad("", "not a JSON document: %v", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("", "data after the JSON object")
	}
	if !seen {
		return nil, bad("messages", "required field missing")
	}
	if len(raws) == 0 {
		return nil, bad("messages", "at least one message is required")
	}
	items := make([]BatchItem, len(raws))
	for i, raw := range raws {
		items[i].Envelope, items[i].Err = DecodeEnvelope(raw)
		if items[i].Err == nil {
			items[i].ID = items[i].Envelope.ID.String()
		} else {
			items[i].ID = idOf(raw)
		}
	}
	return items, nil
}

// idOf digs the id out of an entry that did not decode, when it has one
// in canonical form.
func idOf(raw json.RawMessage) string {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return ""
	}
	s, err := jsonString(m.ID)
	if err != nil || len(s) != 36 {
		return ""
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil {
		return ""
	}
	return id.String()
}

// EncodeBatch renders already encoded envelopes as a batch body.
func EncodeBatch(envelopes [][]byte) []byte {
	n := len(`{"messages":[]}`) + len(envelopes)
	for _, e := range envelopes {
		n += len(e)
	}
	out := make([]byte, 0, n)
	out = append(out, `{"messages":[`...)
	for i, e := range envelopes {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, "]}"...)
}

// batchAnswer is the body of a 200 answer to a batch.
type batchAnswer struct {
	Results []BatchResult `json:"results"`
}

// batchOverhead is what a batch adds around its envelopes.
const batchOverhead = len(`{"messages":[]}`)
