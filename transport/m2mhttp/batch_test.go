package m2mhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestDecodeBatch(t *testing.T) {
	bad := strings.Replace(goodEnvelope, `"attempt":2`, `"attempt":0`, 1)
	items, err := DecodeBatch([]byte(`{"messages":[`+goodEnvelope+`,`+bad+`,7,{"id":"x"}]}`), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 4 {
		t.Fatalf("%d items", len(items))
	}
	if items[0].Err != nil || items[0].Envelope == nil || items[0].ID != "0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90" {
		t.Errorf("good item: %+v", items[0])
	}
	var ee *EnvelopeError
	if !errors.As(items[1].Err, &ee) || ee.Field != "attempt" || items[1].ID != "0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90" {
		t.Errorf("bad item: %+v", items[1])
	}
	for _, it := range items[2:] {
		if !errors.As(it.Err, &ee) || it.ID != "" || it.Envelope != nil {
			t.Errorf("malformed item: %+v", it)
		}
	}

	for _, c := range []struct{ name, body, field string }{
		{"empty", ``, ""},
		{"not json", `hello`, ""},
		{"array", `[` + goodEnvelope + `]`, ""},
		{"null", `null`, ""},
		{"no messages", `{}`, "messages"},
		{"messages null", `{"messages":null}`, "messages"},
		{"messages object", `{"messages":{}}`, "messages"},
		{"empty messages", `{"messages":[]}`, "messages"},
		{"unknown field", `{"messages":[` + goodEnvelope + `],"x":1}`, "x"},
		{"repeated field", `{"messages":[` + goodEnvelope + `],"messages":[]}`, "messages"},
		{"truncated", `{"messages":[` + goodEnvelope, ""},
		{"broken item", `{"messages":[{"id":]}`, ""},
		{"missing comma", `{"messages":[1 2]}`, ""},
		{"trailing data", `{"messages":[` + goodEnvelope + `]}{}`, ""},
		{"invalid utf-8", `{"messages":["\xff"]}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			items, err := DecodeBatch([]byte(c.body), 10)
			if !errors.As(err, &ee) || ee.Field != c.field {
				t.Fatalf("got %+v, %v; want an EnvelopeError on %q", items, err, c.field)
			}
		})
	}
	var le *BatchLimitError
	if _, err := DecodeBatch([]byte(`{"messages":[1,2,3]}`), 2); !errors.As(err, &le) || le.Max != 2 {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := DecodeBatch([]byte(`{"messages":[1,2]}`), 2); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}

// FuzzDecodeBatch: the batch decoder never panics; a body it refuses is
// refused with an *EnvelopeError or *BatchLimitError; a body it accepts
// holds 1 to max entries, each an envelope that keeps its invariants or
// an *EnvelopeError, and the accepted envelopes survive a round trip
// through the encoders unchanged.
func FuzzDecodeBatch(f *testing.F) {
	const max = 8
	bad := strings.Replace(goodEnvelope, `"attempt":2`, `"attempt":0`, 1)
	f.Add([]byte(`{"messages":[` + goodEnvelope + `]}`))
	f.Add([]byte(`{"messages":[` + goodEnvelope + `,` + bad + `,7,null,"x",[],{}]}`))
	f.Add([]byte(`{"messages":[]}`))
	f.Add([]byte(`{"messages":[1,2,3,4,5,6,7,8,9]}`))
	f.Add([]byte(`{"messages":[{"id":"0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90"}],"messages":[]}`))
	f.Add([]byte(`{"messages":[{"id":"0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90","type":"t","key":"k","created_at":"2026-01-01T00:00:00Z","attempt":1,"payload":null}]}`))
	lone := strings.Replace(goodEnvelope, `"key":"order-1"`, `"key":"order-\ud800"`, 1)
	low := strings.Replace(goodEnvelope, `"key":"order-1"`, `"key":"order-\udc00"`, 1)
	pair := strings.Replace(goodEnvelope, `"key":"order-1"`, `"key":"order-\ud800\udc00"`, 1)
	f.Add([]byte(`{"messages":[` + lone + `,` + low + `,` + pair + `]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		items, err := DecodeBatch(b, max)
		if err != nil {
			var ee *EnvelopeError
			var le *BatchLimitError
			if !errors.As(err, &ee) && !errors.As(err, &le) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if len(items) == 0 || len(items) > max {
			t.Fatalf("accepted %d items", len(items))
		}
		var raws struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(b, &raws); err != nil || len(raws.Messages) != len(items) {
			t.Fatalf("accepted %q: %v", b, err)
		}
		var good [][]byte
		var envs []*Envelope
		for i, it := range items {
			if it.ID != "" {
				if id, err := uuid.Parse(it.ID); err != nil || id == uuid.Nil || id.String() != it.ID {
					t.Fatalf("item %d: id %q is not a canonical UUID", i, it.ID)
				}
			}
			if it.Err != nil {
				var ee *EnvelopeError
				if it.Envelope != nil || !errors.As(it.Err, &ee) {
					t.Fatalf("item %d: %+v", i, it)
				}
				continue
			}
			e := it.Envelope
			if e == nil || e.ID == uuid.Nil || e.Type == "" || e.Key == "" || e.Attempt < 1 || !json.Valid(e.Payload) || it.ID != e.ID.String() {
				t.Fatalf("item %d: accepted an envelope breaking its invariants: %+v", i, it)
			}
			checkLossless(t, raws.Messages[i], e)
			enc, err := EncodeEnvelope(e.Delivery())
			if err != nil {
				t.Fatalf("cannot re-encode accepted envelope %d of %q: %v", i, b, err)
			}
			good = append(good, enc)
			envs = append(envs, e)
		}
		if len(good) == 0 {
			return
		}
		again, err := DecodeBatch(EncodeBatch(good), max)
		if err != nil || len(again) != len(good) {
			t.Fatalf("re-encoded batch rejected: %v", err)
		}
		for i, it := range again {
			e, e2 := envs[i], it.Envelope
			if it.Err != nil {
				t.Fatalf("re-encoded envelope %d rejected: %v", i, it.Err)
			}
			var p1, p2 bytes.Buffer
			_ = json.Compact(&p1, e.Payload)
			_ = json.Compact(&p2, e2.Payload)
			if e2.ID != e.ID || e2.Type != e.Type || e2.Key != e.Key || e2.Attempt != e.Attempt ||
				!e2.CreatedAt.Equal(e.CreatedAt) || p1.String() != p2.String() || len(e2.Headers) != len(e.Headers) {
				t.Fatalf("round trip changed envelope %d:\n%+v\n%+v", i, e, e2)
			}
			for k, v := range e.Headers {
				if e2.Headers[k] != v {
					t.Fatalf("header %q changed: %q -> %q", k, v, e2.Headers[k])
				}
			}
		}
	})
}
