package mensageria

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/m2mwire"
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

// A claimed row is the relay's outside input too: whatever its headers and
// created_at hold, unreadable never panics, and a row it passes is one the
// transports carry whole (headers that decode, a created_at RFC 3339 can
// write and the receivers read back), while a row it refuses is named by
// column.
func FuzzUnreadable(f *testing.F) {
	f.Add([]byte(`{"a":"b"}`), int64(1700000000), "")
	f.Add([]byte(`{"n":1}`), int64(0), "")
	f.Add([]byte(``), int64(-62135596800), "")
	f.Add([]byte(`null`), int64(253402300800), "message_id is not a UUID")
	f.Add([]byte(`[]`), int64(-1<<62), "created_at is infinity")
	f.Fuzz(func(t *testing.T, headers []byte, createdSec int64, driverSays string) {
		j := &driver.Job{Headers: headers, CreatedAt: time.Unix(createdSec, 0), Unreadable: driverSays}
		why := unreadable(j, toDelivery(j))
		if driverSays != "" && !strings.HasPrefix(why, driverSays) {
			t.Fatalf("unreadable = %q, dropped the driver's reason %q", why, driverSays)
		}
		if why == "" {
			if len(headers) > 0 {
				var h map[string]string
				if err := json.Unmarshal(headers, &h); err != nil {
					t.Fatalf("headers %q passed but do not decode: %v", headers, err)
				}
			}
			back, err := m2mwire.ParseTime(string(m2mwire.AppendTime(nil, j.CreatedAt)))
			if err != nil || !back.Equal(j.CreatedAt) {
				t.Fatalf("created_at %v passed but does not travel: %v", j.CreatedAt, err)
			}
			return
		}
		if !strings.Contains(why, "headers") && !strings.Contains(why, "created_at") && driverSays == "" {
			t.Fatalf("unreadable = %q names no column", why)
		}
	})
}
