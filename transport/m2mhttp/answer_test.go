package m2mhttp

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
)

// What a receiver answers ends up in the outbox's last_error and in the
// relay's retry schedule: it must be storable text of bounded length, and a
// delay of at most maxRetryAfter, whatever the receiver sent.

// maxStoredReason bounds an error built from a peer's answer: the prefix
// and the fields the sender adds, plus the peer's text cut at
// maxReasonFromPeerLength in up to three places (title, detail, request
// id).
const maxStoredReason = 3*(maxReasonFromPeerLength+len("…")) + 400

func checkStorable(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	if !utf8.ValidString(msg) || strings.ContainsRune(msg, 0) || len(msg) > maxStoredReason {
		t.Fatalf("error not storable as last_error (%d bytes, valid UTF-8 %v): %q", len(msg), utf8.ValidString(msg), msg)
	}
	if d, ok := mensageria.RetryAfterOf(err); ok && (d < 0 || d > maxRetryAfter) {
		t.Fatalf("retry after %v, outside 0..%v", d, maxRetryAfter)
	}
}

func TestTruncateCutsBetweenRunes(t *testing.T) {
	long := strings.Repeat("é", maxReasonFromPeerLength) // two bytes each
	got := truncate(long)
	if !utf8.ValidString(got) || !strings.HasSuffix(got, "…") || len(got) > maxReasonFromPeerLength+len("…") {
		t.Fatalf("truncate gave %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := truncate("a\x00b\xffc"); got != "a b\uFFFDc" {
		t.Fatalf("truncate(NUL, invalid byte) = %q", got)
	}
}

func TestParseRetryAfterIsBounded(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"120":                           2 * time.Minute,
		"99999999999":                   maxRetryAfter,
		"Fri, 31 Dec 9999 23:59:59 GMT": maxRetryAfter,
		"Mon, 30 Nov 2026 12:01:00 GMT": time.Minute,
		"Sun, 29 Nov 2026 12:00:00 GMT": 0,
	} {
		if d, ok := parseRetryAfter(v, now); !ok || d != want {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", v, d, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "soon", "1.5"} {
		if _, ok := parseRetryAfter(v, now); ok {
			t.Errorf("parseRetryAfter(%q) accepted", v)
		}
	}
}

func FuzzDecodeBatchAnswer(f *testing.F) {
	f.Add([]byte(`{"results":[{"id":"","status":"applied"}]}`), uint8(1))
	f.Add([]byte(`{"results":[{"status":"retry","retry_after":99999999999,"problem":{"status":503,"title":"busy"}},{"status":"refused","problem":{"status":418,"detail":"\u0000"}}]}`), uint8(2))
	f.Add([]byte(`{"results":[{"status":"nope"}]}`), uint8(1))
	f.Add([]byte(`[]`), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, n uint8) {
		ds := make([]*mensageria.Delivery, int(n%8)+1)
		for i := range ds {
			ds[i] = &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: "t", Key: "k", Attempt: 1}
		}
		errs, err := decodeBatchAnswer(b, ds)
		if err != nil {
			checkStorable(t, err)
			return
		}
		if len(errs) != len(ds) {
			t.Fatalf("%d outcomes for %d deliveries", len(errs), len(ds))
		}
		for _, e := range errs {
			checkStorable(t, e)
		}
	})
}

func FuzzReasonFrom(f *testing.F) {
	f.Add("application/problem+json", []byte(`{"title":"refused","detail":"no such order","status":422}`))
	f.Add("text/plain; charset=utf-8", []byte("\x00\xff"+strings.Repeat("é", 400)))
	f.Add("application/json", []byte(`{"title":""}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		se := &StatusError{StatusCode: 422}
		reasonFrom(contentType, body, se)
		checkStorable(t, se)
	})
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, v := range []string{"0", "120", "-5", "Fri, 31 Dec 9999 23:59:59 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", " 7 "} {
		f.Add(v)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d, ok := parseRetryAfter(v, now); ok && (d < 0 || d > maxRetryAfter) {
			t.Fatalf("parseRetryAfter(%q) = %v", v, d)
		}
	})
}
