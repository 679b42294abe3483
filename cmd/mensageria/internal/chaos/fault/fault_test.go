package fault

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoseAnswerBreaksTheConnection(t *testing.T) {
	var applied atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied.Store(true)
		LoseAnswer(w)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got an answer, status %d", resp.StatusCode)
	}
	if !applied.Load() {
		t.Fatal("the handler did not run")
	}
}

func TestRefuse(t *testing.T) {
	for _, tt := range []struct {
		status     int
		retryAfter time.Duration
		header     string
		want       string
	}{
		{http.StatusUnauthorized, 0, "WWW-Authenticate", `Bearer error="invalid_token"`},
		{http.StatusServiceUnavailable, 1500 * time.Millisecond, "Retry-After", "2"},
		{http.StatusServiceUnavailable, 0, "Retry-After", ""},
	} {
		rec := httptest.NewRecorder()
		Refuse(rec, tt.status, "injected outage", tt.retryAfter)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != tt.status || rec.Header().Get(tt.header) != tt.want || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%d: status %d, %s %q, headers %v", tt.status, rec.Code, tt.header, rec.Header().Get(tt.header), rec.Header())
		}
		if !strings.Contains(string(body), `"detail":"injected outage"`) || !strings.Contains(string(body), `"status":`) {
			t.Errorf("%d: body %s", tt.status, body)
		}
	}
}
