package mensageria

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// Headers come from the outbox, where any language's plain INSERT may have
// put anything: decoding must never fail a delivery or panic.
func FuzzDecodeHeaders(f *testing.F) {
	for _, seed := range []string{`{}`, `{"X-Request-Id":"r-1","traceparent":"00-abc-def-01"}`, `{"a":1}`, `[]`, `null`, `"x"`, `{"a":"\u0000"}`, ``} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h := decodeHeaders(b)
		if h == nil {
			return
		}
		// What it returns is a faithful string map of valid JSON.
		var want map[string]string
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decoded %q from invalid input %q", h, b)
		}
		if len(h) != len(want) {
			t.Fatalf("decoded %d headers, input has %d", len(h), len(want))
		}
		for k, v := range h {
			if want[k] != v || !utf8.ValidString(k) {
				t.Fatalf("header %q=%q differs from input", k, v)
			}
		}
	})
}
