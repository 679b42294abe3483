package console

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// lockedBuffer is a log destination the test reads while the console
// writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// eachDriver runs f on SQLite and on PostgreSQL.
func eachDriver(t *testing.T, f func(t *testing.T, d driver.Driver)) {
	t.Run("sqlite", func(t *testing.T) { f(t, sqliteDriver(t)) })
	t.Run("postgres", func(t *testing.T) {
		d, err := postgres.New(testdb.Pool(t), &postgres.Config{Schema: testdb.Schema(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			t.Fatal(err)
		}
		f(t, d)
	})
}

// killMarked leaves every due row of typ in doubt and resolves it dead:
// a dead letter that keeps its at-most-once mark.
func killMarked(t *testing.T, d driver.Driver, typ string) []int64 {
	t.Helper()
	ids := leaveInDoubt(t, d, typ, "no answer in 10s")
	res, err := d.(driver.AtMostOnce).Resolve(context.Background(), driver.ResolveParams{IDs: ids, Outcome: driver.ResolveDead, By: "test", Reason: "the ledger is down"})
	if err != nil || len(res.Resolved) != len(ids) {
		t.Fatalf("resolve dead: %+v %v", res, err)
	}
	return ids
}

// A console retry of a dead letter an at-most-once attempt marked used to
// answer "retried" while the row turned in doubt, never sent; it is now
// refused (409 at_most_once) unless allow_duplicate, which sends it again
// (mark cleared) and logs a warning naming the operator. Every retry and
// discard names its operator, and a failed login is logged without the
// credential.
func TestConsoleRetryOfAtMostOnceAndOperatorLog(t *testing.T) {
	eachDriver(t, func(t *testing.T, d driver.Driver) {
		own(t, d, "shop", "payment.captured", "order.placed")
		insert(t, d, "payment.captured", "pay-1")
		insert(t, d, "order.placed", "o-1")
		pay := killMarked(t, d, "payment.captured")
		order := kill(t, d, "order.placed", "refused")
		var logs lockedBuffer
		h := newHarness(t, d, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })

		// Failed logins are logged, the credential never.
		const wrongPassword = "not-the-password-x9"
		anon, _ := h.client(false)
		wantStatus(t, h.do(anon, "POST", "/api/login", `{"user":"mallory","password":"`+wrongPassword+`"}`, nil), 401)
		wantStatus(t, h.do(anon, "POST", "/api/login", `{"token":"wrong-token-guess-123456"}`, nil), 401)
		if l := logs.String(); !strings.Contains(l, `login refused`) || !strings.Contains(l, `mallory`) ||
			strings.Contains(l, wrongPassword) || strings.Contains(l, "wrong-token-guess") {
			t.Fatalf("failed logins logged as:\n%s", l)
		}

		cl, csrf := h.client(true)
		tok := map[string]string{csrfHeader: csrf}
		for _, body := range []string{fmt.Sprintf(`{"ids":[%d]}`, pay[0]), `{"type":"payment.captured","all":true}`} {
			p := wantProblem(t, h.do(cl, "POST", "/api/dead/retry", body, tok), 409, "at_most_once")
			if !strings.Contains(p.Detail, "may apply the effect twice; nothing changed") || !strings.Contains(p.Detail, "allow_duplicate") {
				t.Fatalf("refusal detail %q", p.Detail)
			}
		}
		if j := one(t, d, pay[0]); j.State != driver.StateDead || j.AttemptedAt == nil {
			t.Fatalf("a refused retry changed the row: %s", j.State)
		}
		wantProblem(t, h.do(cl, "POST", "/api/dead/discard", fmt.Sprintf(`{"ids":[%d],"allow_duplicate":true}`, pay[0]), tok), 400, "bad_request")

		wantStatus(t, h.do(cl, "POST", "/api/dead/retry", fmt.Sprintf(`{"ids":[%d],"allow_duplicate":true}`, pay[0]), tok), 200)
		if j := one(t, d, pay[0]); j.State != driver.StatePending || j.AttemptedAt != nil {
			t.Fatalf("after allow_duplicate the row is %s, marked %v: want pending, unmarked", j.State, j.AttemptedAt != nil)
		}
		wantStatus(t, h.do(cl, "POST", "/api/dead/discard", fmt.Sprintf(`{"ids":[%d]}`, order[0]), tok), 200)
		l := logs.String()
		for _, want := range []string{
			`msg="console: dead letters of at_most_once routes sent again`,
			`msg="console: dead letters retried" by="console (token)"`,
			`msg="console: dead letters discarded" by="console (token)"`,
		} {
			if !strings.Contains(l, want) {
				t.Fatalf("log lacks %s:\n%s", want, l)
			}
		}
		if strings.Contains(l, testToken) {
			t.Fatalf("the token is in the log:\n%s", l)
		}
	})
}

func one(t *testing.T, d driver.Driver, id int64) driver.Job {
	t.Helper()
	jobs, err := d.ListMessages(context.Background(), driver.ListFilter{IDs: []int64{id}, Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("row %d: %v %v", id, jobs, err)
	}
	return jobs[0]
}
