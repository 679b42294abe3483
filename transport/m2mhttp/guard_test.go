package m2mhttp

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Wrong tokens are throttled as the console throttles wrong credentials:
// after a burst from one address every token from it is refused with a
// 429 problem and Retry-After until its bucket refills, while other
// addresses are served. They are logged a line per interval at most,
// counting the lines held back, and the token never appears in the logs.
func TestReceiverThrottlesAndLogsWrongTokens(t *testing.T) {
	f := newReceiverFixture(t, 0, nil)
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	f.rc.guard.Now, f.rc.wrongLog.Now = now, now
	const guess = "guess-0123456789-abcdef"
	wrong := map[string]string{"Authorization": "Bearer " + guess}
	for i := range wrongTokenBurst {
		if a := post(t, f.url, wrong, envelopeFor("k-1", time.Now(), `{}`)); a.status != http.StatusUnauthorized || a.problem.Type != ProblemUnauthorized {
			t.Fatalf("wrong token %d: %d %s", i, a.status, a.body)
		}
	}
	a := post(t, f.url, auth, envelopeFor("k-1", time.Now(), `{}`))
	if a.status != http.StatusTooManyRequests || a.problem.Type != ProblemTooManyAttempts || a.problem.Status != 429 || a.header.Get("Retry-After") == "" {
		t.Fatalf("the right token from a throttled address: %d %v %s", a.status, a.header, a.body)
	}
	// Another address is not held back by this one's guesses.
	req := httptest.NewRequest(http.MethodPost, "/m2m", strings.NewReader(envelopeFor("k-2", time.Now(), `{}`)))
	req.RemoteAddr = "192.0.2.7:4711"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "other-source")
	req.Header.Set("Authorization", "Bearer new-token")
	rec := httptest.NewRecorder()
	f.rc.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("another address: %d %s", rec.Code, rec.Body)
	}
	// A second later two tokens are back: one wrong, one right.
	clock = clock.Add(time.Second)
	if a := post(t, f.url, wrong, envelopeFor("k-3", time.Now(), `{}`)); a.status != http.StatusUnauthorized {
		t.Fatalf("after a second, a wrong token: %d %s", a.status, a.body)
	}
	if a := post(t, f.url, auth, envelopeFor("k-3", time.Now(), `{}`)); a.status != http.StatusOK {
		t.Fatalf("after a second, the right token: %d %s", a.status, a.body)
	}
	if n := f.rc.WrongTokens(); n != wrongTokenBurst+2 {
		t.Fatalf("WrongTokens() = %d, want %d", n, wrongTokenBurst+2)
	}
	// One line for the first burst; the next interval's first line
	// counts the ones held back.
	clock = clock.Add(wrongTokenLogEvery)
	post(t, f.url, wrong, envelopeFor("k-4", time.Now(), `{}`))
	logs := f.logs.String()
	if n := strings.Count(logs, "bearer token is not one of the receiver's"); n != 2 {
		t.Fatalf("%d log lines of wrong tokens, want 2:\n%s", n, logs)
	}
	if !strings.Contains(logs, `"refused_since_last_line":`+strconv.Itoa(wrongTokenBurst)) || !strings.Contains(logs, `"remote":"127.0.0.1"`) {
		t.Fatalf("the wrong-token lines do not count what they stand for or name the address:\n%s", logs)
	}
	if strings.Contains(logs, guess) {
		t.Fatalf("a wrong token was logged:\n%s", logs)
	}
}

// An X-Request-Id that is not one header of 1 to 200 printable ASCII bytes
// is refused, and never quoted back in the problem (nor logged).
func TestReceiverNeverEchoesAnUncheckedRequestID(t *testing.T) {
	f := newReceiverFixture(t, 0, nil)
	for _, ids := range [][]string{{"évil-id"}, {strings.Repeat("x", 201)}, {"rid-one", "rid-two"}} {
		h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer new-token"}, "X-Request-Id": ids}
		a := send(t, http.MethodPost, f.url, h, envelopeFor("k-1", time.Now(), `{}`))
		if a.status != http.StatusBadRequest || a.problem.Type != ProblemMalformed || a.problem.RequestID != "" {
			t.Fatalf("X-Request-Id %q: %d %s", ids, a.status, a.body)
		}
		for _, id := range ids {
			if strings.Contains(string(a.body), id) {
				t.Fatalf("X-Request-Id %q quoted back: %s", id, a.body)
			}
		}
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != 0 {
		t.Fatalf("%d messages applied without a valid request id", n)
	}
}

// In a batch, an envelope the contract refuses (a zero created_at, NUL in
// its payload, a header name repeated) is refused by itself with the 400
// problem, and its neighbours are applied.
func TestReceiverBatchRefusesTheContractsBadEnvelopesAlone(t *testing.T) {
	f := newReceiverFixture(t, 0, nil)
	good, _ := envelopeOf("order.closed", "k-good", time.Now())
	zero, _ := envelopeOf("order.closed", "k-zero", time.Time{})
	nul, _ := envelopeOf("order.closed", "k-nul", time.Now())
	nul = strings.Replace(nul, `"payload":{}`, `"payload":{"a":"\u0000"}`, 1)
	twice, _ := envelopeOf("order.closed", "k-twice", time.Now())
	twice = strings.Replace(twice, `"headers":{`, `"headers":{"h":"1","h":"2",`, 1)
	rs := batchResults(t, post(t, f.url, batchHeader, batchOf(zero, good, nul, twice)))
	for _, i := range []int{0, 2, 3} {
		if rs[i].Status != ItemRefused || rs[i].Problem == nil || rs[i].Problem.Status != http.StatusBadRequest || rs[i].Problem.Type != ProblemMalformed {
			t.Fatalf("result %d: %+v", i, rs[i])
		}
	}
	if rs[1].Status != ItemApplied {
		t.Fatalf("the good neighbour: %+v", rs[1])
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != 1 {
		t.Fatalf("%d effects, want the good one alone", n)
	}
}
