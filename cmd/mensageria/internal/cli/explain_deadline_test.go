package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// explain prints, route by route, the deadline the relay really applies
// (the request timeout as applied: the config's, or the default shortened
// to the lease's delivery window; the window itself) and the guarantee map
// of the route's delivery mode: an at_most_once route gets the at-most-once
// map, never the at-least-once / effectively-once one.
func TestExplainDeadlinesAndAtMostOnceMap(t *testing.T) {
	p := writeFile(t, `database: sqlite:/tmp/unused.db
app: pedidos
routes:
  - type: lancamento.criado
    delivery: at_most_once
    http:
      url: http://legado/api
      token: x
      timeout: 1s
      reconcile: {url: 'http://legado/api/{key}'}
  - type: pedido.criado
    http: {url: http://faturamento/m2m, token: x}
  - type: pedido.enviado
    nats: {url: 'nats://n:4222', subject: pedidos.enviados}
relay: {lease: 2s}
`)
	r := run(t, "", nil, "explain", "--no-db", "--json", "--config", p)
	var out explainOut
	if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
		t.Fatalf("explain --json: %v %d %s %s", err, r.code, r.out, r.err)
	}
	once, least, nats := out.Routes[0], out.Routes[1], out.Routes[2]
	if once.Map.EndToEnd != "at-most-once" || once.Map.Hops[1].Level != "at-most-once" {
		t.Errorf("the at_most_once route's map: %+v", once.Map)
	}
	for _, h := range once.Map.Hops {
		if h.Level == "at-least-once" || h.Level == "effectively-once" {
			t.Errorf("the at_most_once route's hop %s -> %s says %s", h.From, h.To, h.Level)
		}
	}
	if least.Map.EndToEnd != "effectively-once" || least.Map.Hops[1].Level != "at-least-once" {
		t.Errorf("the at_least_once route's map: %+v", least.Map)
	}
	if out.Timing.DeliveryWindowSec != 1.5 || out.Timing.SettleMarginSec != 0.5 {
		t.Errorf("timing: window %v, margin %v; want 1.5 and 0.5 for a 2s lease", out.Timing.DeliveryWindowSec, out.Timing.SettleMarginSec)
	}
	for _, tc := range []struct {
		name           string
		d              explainDeadline
		timeout, probe float64
		dflt           bool
		says           string
	}{
		{"at most once", once.Deadline, 1, 1.5, false, "each request 1s (http.timeout)"},
		{"at least once", least.Deadline, 1.5, 0, true, "each request 1.5s (the default 10s, shortened to the delivery window)"},
		{"nats", nats.Deadline, 0, 0, false, "a claim's deliveries end 1.5s after it (the lease of 2s less the 500ms kept to settle them)"},
	} {
		if tc.d.RequestTimeoutSec != tc.timeout || tc.d.ProbeTimeoutSec != tc.probe || tc.d.RequestTimeoutDefault != tc.dflt ||
			tc.d.DeliveryWindowSec != 1.5 || !strings.Contains(tc.d.Text, tc.says) {
			t.Errorf("%s: deadline %+v, want timeout %v, probe %v, default %v, saying %q", tc.name, tc.d, tc.timeout, tc.probe, tc.dflt, tc.says)
		}
	}
	if !strings.Contains(once.Deadline.Text, "in doubt, never sent again") {
		t.Errorf("the at_most_once route's deadline does not say a cut send is in doubt: %q", once.Deadline.Text)
	}

	r = run(t, "", nil, "explain", "--no-db", "--config", p)
	text := r.out
	onceText := text[strings.Index(text, "route lancamento.criado"):strings.Index(text, "route pedido.criado")]
	for _, want := range []string{"deadline    each request 1s", "end to end  AT-MOST-ONCE", "in doubt", "reconcile probe"} {
		if !strings.Contains(onceText, want) {
			t.Errorf("explain's at_most_once route lacks %q:\n%s", want, onceText)
		}
	}
	for _, wrong := range []string{"EFFECTIVELY-ONCE", "at-least-once", "inbox stores"} {
		if strings.Contains(onceText, wrong) {
			t.Errorf("explain's at_most_once route says %q:\n%s", wrong, onceText)
		}
	}
	if !strings.Contains(text, "deadline       1.5s") {
		t.Errorf("explain's timing lacks the delivery window:\n%s", text)
	}
}

// The settings of issue 24 that were accepted and then failed at run time
// stop every command at once, exit 2, naming the key: a lease the election
// cannot hold, a timeout the lease's window cuts, max_concurrent 0.
func TestCommandsRefuseSettingsThatCannotWork(t *testing.T) {
	for _, tc := range []struct{ name, route, relay, field, says string }{
		{"lease of 600h", "{url: http://r/m, token: x}", "{lease: 600h}", "relay.lease", "holds its claimed messages"},
		{"timeout longer than the lease", "{url: http://r/m, token: x, timeout: 60s}", "{lease: 30s}", "routes[0].http.timeout", "every request would be cut at 27s"},
		{"max_concurrent 0", "{url: http://r/m, token: x, max_concurrent: 0}", "{}", "routes[0].http.max_concurrent", "at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "database: sqlite:"+t.TempDir()+"/m.db\napp: a\nroutes:\n  - type: t\n    http: "+tc.route+"\nrelay: "+tc.relay+"\n")
			for _, cmd := range [][]string{{"relay", "--listen", ""}, {"explain", "--no-db"}, {"status"}} {
				r := run(t, "", nil, append(cmd, "--config", p)...)
				if r.code != ExitUsage || !strings.Contains(r.err, tc.field+": ") || !strings.Contains(r.err, tc.says) {
					t.Errorf("%v: exit %d, stderr %q; want %d naming %s", cmd, r.code, r.err, ExitUsage, tc.field)
				}
			}
		})
	}
}
