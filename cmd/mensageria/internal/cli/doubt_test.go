package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/mensageriatest"
)

// legacyAPI is a receiver that cannot be idempotent: every POST applies its
// effect. A key starting with "slow" is applied and then answered too late
// (the relay times out: in doubt); "gw" is refused by a gateway (503)
// before anything applies. GET /lancamentos/{key} says whether the effect
// exists.
type legacyAPI struct {
	mu      sync.Mutex
	effects map[string]int
	posts   map[string]int
	srv     *httptest.Server
}

func newLegacyAPI(t *testing.T) *legacyAPI {
	l := &legacyAPI{effects: map[string]int{}, posts: map[string]int{}}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet {
			key := strings.TrimPrefix(r.URL.Path, "/lancamentos/")
			l.mu.Lock()
			n := l.effects[key]
			l.mu.Unlock()
			if n > 0 {
				w.WriteHeader(http.StatusOK)
				return
			}
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		l.mu.Lock()
		l.posts[key]++
		first := l.posts[key] == 1
		l.mu.Unlock()
		if strings.HasPrefix(key, "gw") && first {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		l.mu.Lock()
		l.effects[key]++
		l.mu.Unlock()
		if strings.HasPrefix(key, "slow") && first {
			time.Sleep(1500 * time.Millisecond)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *legacyAPI) count(key string) (effects, posts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[key], l.posts[key]
}

func TestDoubtCommandsOnSQLite(t *testing.T) {
	l := newLegacyAPI(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	p := writeFile(t, fmt.Sprintf(`database: %s
app: integrador
routes:
  - type: lancamento.criado
    delivery: at_most_once
    http:
      url: %s/lancamentos
      token: ${TEST_TOKEN}
      timeout: 500ms
      payload_only: true
      not_applied: [503]
relay: {lease: 2s, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}
`, db, l.srv.URL))
	c := func(stdin string, args ...string) result {
		t.Helper()
		return run(t, stdin, tokEnv, append(args, "--config", p)...)
	}
	if r := c("", "migrate", "up"); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	if r := c("", "owners", "register"); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}
	if r := c("", "explain"); r.code != 0 || !strings.Contains(r.out, "at most once") || !strings.Contains(r.out, "in doubt") || !strings.Contains(r.out, "no reconcile probe") {
		t.Fatalf("explain: %+v", r)
	}
	for _, k := range []string{"ok-1", "slow-1", "slow-2", "gw-1"} {
		if r := c("", "enqueue", "-t", "lancamento.criado", "-k", k, "-p", `{"valor":1}`); r.code != 0 {
			t.Fatalf("enqueue %s: %+v", k, r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json"}, IO{Out: &out, Err: &errb, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	}()
	addr := waitAddr(t, &errb, done)
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		ty := status(t, c).typ("lancamento.criado")
		return ty.InDoubt == 2 && ty.DeliveredLastHr == 2 && ty.Pending == 0 && ty.InFlight == 0
	}, "2 in doubt, 2 delivered")
	if ty := status(t, c).typ("lancamento.criado"); ty.OldestInDoubtSec <= 0 {
		t.Fatalf("status: %+v, want the oldest doubt's age", ty)
	}
	if r := c("", "status"); !strings.Contains(r.out, "in doubt: lancamento.criado has 2 message(s)") {
		t.Fatalf("status text: %s", r.out)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`mensageria_outbox_in_doubt{app="integrador",owner="integrador",type="lancamento.criado"} 2`,
		`mensageria_outbox_oldest_in_doubt_seconds{app="integrador",owner="integrador",type="lancamento.criado"}`,
		`mensageria_deliveries_total{app="integrador",outcome="in_doubt",type="lancamento.criado"} 2`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	r := c("", "doubt", "list", "--json")
	var page DoubtPage
	err = json.Unmarshal([]byte(r.out), &page)
	doubts := page.Messages
	if err != nil || len(doubts) != 2 || doubts[0].AttemptedAt == nil || !strings.Contains(doubts[0].LastError, "in doubt") {
		t.Fatalf("doubt list: %v %+v", err, r)
	}
	byKey := map[string]int64{}
	for _, d := range doubts {
		byKey[d.Key] = d.ID
	}
	if r := c("", "doubt", "list"); !strings.Contains(r.out, "slow-1") || !strings.Contains(r.out, "ATTEMPTED") {
		t.Fatalf("doubt list text: %+v", r)
	}
	// The operator checked the legacy API: slow-1 is there; slow-2 was
	// cancelled there by hand and must be sent again.
	if r := c("", "doubt", "resolve", fmt.Sprint(byKey["slow-1"]), "--outcome", "delivered"); r.code != ExitUsage || !strings.Contains(r.err, "Reason") {
		t.Fatalf("resolve without a reason: %+v", r)
	}
	if r := c("", "doubt", "resolve", fmt.Sprint(byKey["slow-1"]), "--outcome", "maybe", "--reason", "x"); r.code != ExitUsage {
		t.Fatalf("resolve with an unknown outcome: %+v", r)
	}
	if r := c("", "doubt", "resolve", fmt.Sprint(byKey["slow-1"]), "--outcome", "delivered", "--reason", "seen in the legacy API, ticket 42", "--by", "ana"); r.code != 0 || !strings.Contains(r.out, "1 message(s) resolved delivered by ana") {
		t.Fatalf("resolve delivered: %+v", r)
	}
	if r := c("", "doubt", "resolve", fmt.Sprint(byKey["slow-1"]), "--outcome", "retry", "--reason", "again"); r.code != ExitFailure || !strings.Contains(r.err, "not in doubt") {
		t.Fatalf("resolving a resolved message: %+v", r)
	}
	if r := c("", "doubt", "show", fmt.Sprint(byKey["slow-1"])); r.code != 0 || !strings.Contains(r.out, "resolved    delivered by ana") || !strings.Contains(r.out, "ticket 42") {
		t.Fatalf("doubt show of a resolved message: %+v", r)
	}
	if r := c("", "doubt", "resolve", fmt.Sprint(byKey["slow-2"]), "--outcome", "retry", "--reason", "reverted in the legacy API"); r.code != 0 {
		t.Fatalf("resolve retry: %+v", r)
	}
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		ty := status(t, c).typ("lancamento.criado")
		return ty.InDoubt == 0 && ty.Pending == 0 && ty.DeliveredLastHr == 4
	}, "slow-2 sent again and delivered")
	for key, want := range map[string][2]int{"ok-1": {1, 1}, "slow-1": {1, 1}, "slow-2": {2, 2}, "gw-1": {1, 2}} { // slow-2 twice: the operator said the first was reverted by hand
		if e, n := l.count(key); e != want[0] || n != want[1] {
			t.Errorf("%s: %d effects of %d POSTs, want %d of %d", key, e, n, want[0], want[1])
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not stop")
	}
}
