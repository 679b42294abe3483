package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/transport/m2mhttp"
)

// Every refusal of the daemon is a problem document, those Go's ServeMux
// would make itself too: an unclean path such as //m2m is refused, never
// redirected (a bare 307 the relay parks as "redirect not followed"), and
// the mux's 404 and 405, on the deliveries' server and on the health
// server, are problems instead of text/plain.
func TestReceiveRefusesAsProblemsWhatTheMuxWouldAnswer(t *testing.T) {
	eachReceiveBackend(t, func(t *testing.T, b *rbackend) {
		d := startReceiveWithHealth(t, receiveConfig(t, b, "  path: /m2m\n  tokens: [tok-0123456789abcdef]", "1h"))
		noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		good, _ := envelope(t, "pedido.criado", "p-1", `{}`, time.Now())
		base, health := "http://"+d.addr, "http://"+d.health
		for _, c := range []struct {
			method, url string
			status      int
			problem     string
		}{
			{"POST", base + "//m2m", 404, m2mhttp.ProblemNotFound},
			{"POST", base + "/x/../m2m", 404, m2mhttp.ProblemNotFound},
			{"POST", base + "/./m2m", 404, m2mhttp.ProblemNotFound},
			{"POST", base + "/m2m/", 404, m2mhttp.ProblemNotFound},
			{"POST", base + "/healthz", 405, m2mhttp.ProblemMethod},
			{"GET", base + "//healthz", 404, m2mhttp.ProblemNotFound},
			{"POST", health + "/readyz", 405, m2mhttp.ProblemMethod},
			{"DELETE", health + "/metrics", 405, m2mhttp.ProblemMethod},
			{"GET", health + "/nope", 404, m2mhttp.ProblemNotFound},
			{"GET", health + "//readyz", 404, m2mhttp.ProblemNotFound},
		} {
			h := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer tok-0123456789abcdef"}, "X-Request-Id": {"door"}}
			a := sendTo(t, noRedirects, c.method, c.url, h, good)
			if a.status != c.status || a.header.Get("Content-Type") != "application/problem+json" || a.problem.Type != c.problem || a.problem.Status != c.status {
				t.Errorf("%s %s: %d %q %s; want a %d %s problem", c.method, c.url, a.status, a.header.Get("Content-Type"), a.body, c.status, c.problem)
			}
			if c.status == 405 && a.header.Get("Allow") == "" {
				t.Errorf("%s %s: 405 without Allow", c.method, c.url)
			}
		}
		if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue"); n != 0 {
			t.Fatalf("refused requests stored %d rows", n)
		}
		if a := sendTo(t, noRedirects, "GET", health+"/healthz", http.Header{}, ""); a.status != 200 {
			t.Fatalf("healthz: %d %s", a.status, a.body)
		}
	})
}

// The same message id with another payload is a conflict, as the same key
// under another id is (ADR 0026): answering duplicate would tell the
// sender that a payload was applied that never was. With its own payload
// it stays a duplicate. A wrong token is counted and logged without the
// token.
func TestReceiveSameIDOtherPayloadConflicts(t *testing.T) {
	eachReceiveBackend(t, func(t *testing.T, b *rbackend) {
		d := startReceiveWithHealth(t, receiveConfig(t, b, "  path: /m2m\n  tokens: [tok-0123456789abcdef]", "1h"))
		const tok = "tok-0123456789abcdef"
		first, _ := envelope(t, "pedido.criado", "p-1", `{"total":10}`, time.Now())
		if a := deliver(t, d.url, tok, first); a.status != 200 || a.body != `{"status":"applied"}` {
			t.Fatalf("first: %d %s", a.status, a.body)
		}
		if a := deliver(t, d.url, tok, strings.Replace(first, `"attempt":1`, `"attempt":2`, 1)); a.status != 200 || a.body != `{"status":"duplicate"}` {
			t.Fatalf("redelivery: %d %s", a.status, a.body)
		}
		changed := strings.Replace(first, `{"total":10}`, `{"total":99}`, 1)
		if a := deliver(t, d.url, tok, changed); a.status != 409 || a.problem.Type != m2mhttp.ProblemConflict {
			t.Fatalf("the same id with another payload: %d %s; want a 409 conflict", a.status, a.body)
		}
		if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE CAST(payload AS TEXT) LIKE '%99%'"); n != 0 {
			t.Fatalf("the changed payload was stored %d times", n)
		}

		const wrong = "wrong-token-never-logged"
		if a := deliver(t, d.url, wrong, first); a.status != 401 {
			t.Fatalf("wrong token: %d %s", a.status, a.body)
		}
		m := metricsOf(t, "http://"+d.health+"/metrics")
		for _, want := range []string{`mensageria_receive_wrong_tokens_total{app="faturamento"} 1`, `mensageria_receive_conflicts_total{app="faturamento"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		logs := d.logs.String()
		if !strings.Contains(logs, "bearer token is not one of the receiver's") || strings.Contains(logs, wrong) {
			t.Fatalf("the wrong token is not logged, or logged with the token:\n%s", logs)
		}
	})
}
