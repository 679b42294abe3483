package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
)

const goodConfig = `# the issue's own example
database: postgres://app:${DB_PASSWORD}@127.0.0.1:5432/app
schema: mensageria
app: pedidos
routes:
  - type: pedido.criado
    http: {url: http://127.0.0.1:8081/m2m/pedido.criado, token: ${FATURAMENTO_TOKEN}, timeout: 5s}
    ordering: key
  - type: pedido.cancelado
    http:
      url: https://faturamento.internal/m2m
      token: t2
      max_concurrent: ${MAXC}
relay: {batch: 100, concurrency: 16, lease: 30s, max_attempts: 20, election: leader}
`

func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

var fullEnv = envOf("DB_PASSWORD", "s3cr3t", "FATURAMENTO_TOKEN", "tok, with: {yaml} chars", "MAXC", "4")

func TestParseConfigGood(t *testing.T) {
	c, err := ParseConfig("m.yaml", []byte(goodConfig), fullEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.App != "pedidos" || c.Schema != "mensageria" || c.Backend() != "postgres" {
		t.Fatalf("top level: %+v", c)
	}
	if !strings.Contains(c.Database, "s3cr3t") {
		t.Fatalf("database not expanded: %q", c.Database)
	}
	if len(c.Routes) != 2 {
		t.Fatalf("routes: %+v", c.Routes)
	}
	r := c.Routes[0]
	if r.Type != "pedido.criado" || !r.Ordered || r.HTTP.Timeout != 5*time.Second || r.Line != 6 {
		t.Fatalf("route 0: %+v %+v", r, r.HTTP)
	}
	// A secret with YAML syntax in it stays one value: expansion happens
	// after parsing.
	if r.HTTP.Token != "tok, with: {yaml} chars" {
		t.Fatalf("token: %q", r.HTTP.Token)
	}
	if c.Routes[1].HTTP.MaxConcurrent != 4 || c.Routes[1].Ordered {
		t.Fatalf("route 1: %+v", c.Routes[1].HTTP)
	}
	want := mensageria.Config{BatchSize: 100, Concurrency: 16, Lease: 30 * time.Second, MaxAttempts: 20, Election: mensageria.ElectionLeader}
	if !reflect.DeepEqual(c.Relay, want) {
		t.Fatalf("relay: %+v", c.Relay)
	}
}

func TestParseConfigDefaultsAndSQLite(t *testing.T) {
	c, err := ParseConfig("m.yaml", []byte("database: sqlite:/tmp/x.db\napp: a\nroutes:\n  - type: t\n    http: {url: 'http://h/p', token: x}\nrelay: {election: none, poll_only: true}\n"), envOf())
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend() != "sqlite" || c.SQLitePath() != "/tmp/x.db" || c.Schema != "mensageria" || c.Relay.Election != mensageria.ElectionNone || !c.Relay.PollOnly {
		t.Fatalf("%+v", c)
	}
}

func TestParseConfigKafkaAndNATS(t *testing.T) {
	in := `database: sqlite:/tmp/x.db
app: a
routes:
  - type: a.kafka
    kafka: {brokers: ["${KAFKA}", "k3:9092"], topic: pedidos, transactional_id: "mensageria-relay-a"}
    ordering: key
  - type: a.nats
    nats:
      url: nats://127.0.0.1:4222
      subject: pedidos.criados
      stream: PEDIDOS
`
	c, err := ParseConfig("m.yaml", []byte(in), envOf("KAFKA", "k1:9092, k2:9092"))
	if err != nil {
		t.Fatal(err)
	}
	k, n := c.Routes[0], c.Routes[1]
	if k.Transport != "kafka" || strings.Join(k.Kafka.Brokers, ",") != "k1:9092,k2:9092,k3:9092" || k.Kafka.Topic != "pedidos" || !k.Ordered ||
		k.Kafka.TransactionalID != "mensageria-relay-a" {
		t.Fatalf("kafka route: %+v %+v", k, k.Kafka)
	}
	if n.Transport != "nats" || n.NATS.Subject != "pedidos.criados" || n.NATS.Stream != "PEDIDOS" {
		t.Fatalf("nats route: %+v %+v", n, n.NATS)
	}
}

// The production keys: batch delivery, TLS, SASL and NATS credentials,
// every path and secret from the environment.
func TestParseConfigSecurity(t *testing.T) {
	in := `database: sqlite:/tmp/x.db
app: a
routes:
  - type: a.http
    http:
      url: https://billing.internal/m2m
      token: ${TOKEN}
      batch: true
      max_batch_items: ${ITEMS}
      max_batch_bytes: 262144
      tls: {ca_file: "${CERTS}/ca.pem", cert_file: "${CERTS}/client.pem", key_file: "${CERTS}/client.key"}
  - type: a.kafka
    kafka:
      brokers: [k1:9093]
      topic: t
      tls: {}
      sasl: {mechanism: scram-sha-512, user: relay, password: "${KAFKA_PASSWORD}"}
  - type: a.nats
    nats: {url: 'tls://n:4222', subject: s, user: relay, password: "${NATS_PASSWORD}", tls: {ca_file: /etc/ca.pem}}
  - type: a.nkey
    nats: {url: 'nats://n:4222', subject: s2, nkey_file: /etc/relay.nk}
`
	c, err := ParseConfig("m.yaml", []byte(in), envOf("TOKEN", "tok", "ITEMS", "50", "CERTS", "/etc/certs", "KAFKA_PASSWORD", "kpw-secret", "NATS_PASSWORD", "npw-secret"))
	if err != nil {
		t.Fatal(err)
	}
	h := c.Routes[0].HTTP
	if !h.Batch || h.MaxBatchItems != 50 || h.MaxBatchBytes != 262144 || h.TLS == nil ||
		*h.TLS != (TLSConfig{CAFile: "/etc/certs/ca.pem", CertFile: "/etc/certs/client.pem", KeyFile: "/etc/certs/client.key", Field: "routes[0].http.tls", Line: 11}) {
		t.Fatalf("http: %+v %+v", h, h.TLS)
	}
	k := c.Routes[1].Kafka
	if k.TLS == nil || k.TLS.CAFile != "" || k.SASL == nil || k.SASL.Mechanism != "SCRAM-SHA-512" || k.SASL.User != "relay" || k.SASL.Password.Reveal() != "kpw-secret" {
		t.Fatalf("kafka: %+v %+v %+v", k, k.TLS, k.SASL)
	}
	n := c.Routes[2].NATS
	if n.User != "relay" || n.Password.Reveal() != "npw-secret" || n.TLS == nil || n.TLS.CAFile != "/etc/ca.pem" {
		t.Fatalf("nats: %+v", n)
	}
	if c.Routes[3].NATS.NkeyFile != "/etc/relay.nk" {
		t.Fatalf("nkey: %+v", c.Routes[3].NATS)
	}
	// Printed any way, the config shows no secret.
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", c, *h, *k.SASL, n.Password), fmt.Sprint(*n)} {
		for _, secret := range []string{"tok", "kpw-secret", "npw-secret"} {
			if strings.Contains(s, secret) {
				t.Fatalf("%q shows up in %s", secret, s)
			}
		}
	}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "sasl", k.SASL, "password", n.Password, "route", c.Routes[0])
	js, _ := json.Marshal(c)
	for _, s := range []string{logged.String(), string(js)} {
		if strings.Contains(s, "kpw-secret") || strings.Contains(s, "npw-secret") || strings.Contains(s, `"tok"`) {
			t.Fatalf("a secret shows up in %s", s)
		}
	}
}

// max_rate and the breaker's figures reach the library: the route's
// MaxRate (the registry's route option, relay's TestRegistryOfTheConfig),
// the relay's effective config.
func TestParseConfigFlowControl(t *testing.T) {
	in := `database: sqlite:/tmp/x.db
app: a
routes:
  - type: lento
    max_rate: ${RATE}
    http: {url: http://h/, token: x}
  - type: livre
    http: {url: http://h/, token: x}
relay: {route_failure_threshold: 3, route_pause: 2s, route_pause_max: 30s, retry_after_ceiling: 15m}
`
	c, err := ParseConfig("m.yaml", []byte(in), envOf("RATE", "2.5"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Routes[0].MaxRate != 2.5 || c.Routes[1].MaxRate != 0 {
		t.Fatalf("max_rate: %+v", c.Routes)
	}
	e := c.Effective()
	if e.RouteFailureThreshold != 3 || e.RoutePause != 2*time.Second || e.RoutePauseMax != 30*time.Second || e.RetryAfterCeiling != 15*time.Minute {
		t.Fatalf("effective: %+v", e)
	}
	// Without the keys, the library's defaults.
	d, err := ParseConfig("m.yaml", []byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    http: {url: http://h/, token: x}\n"), envOf())
	if err != nil {
		t.Fatal(err)
	}
	if e := d.Effective(); e.RouteFailureThreshold != mensageria.DefaultRouteFailureThreshold || e.RoutePause != mensageria.DefaultRoutePause ||
		e.RoutePauseMax != mensageria.DefaultRoutePauseMax || e.RetryAfterCeiling != mensageria.DefaultRetryAfterCeiling {
		t.Fatalf("defaults: %+v", e)
	}
}

func TestParseConfigDollarEscape(t *testing.T) {
	c, err := ParseConfig("m.yaml", []byte("database: sqlite:/tmp/x.db\napp: a\nroutes:\n  - type: t\n    http: {url: 'http://h/p', token: 'a$$b$${NOT}'}\n"), envOf())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Routes[0].HTTP.Token.Reveal(); got != "a$b${NOT}" {
		t.Fatalf("token %q", got)
	}
}

// Every mistake names the field and the line it is on.
func TestParseConfigErrors(t *testing.T) {
	base := func(routes string) string {
		return "database: sqlite:/tmp/x.db\napp: pedidos\n" + routes
	}
	route := "routes:\n  - type: pedido.criado\n    http: {url: http://h:1/m, token: x, timeout: 5s}\n"
	cases := []struct {
		name, yaml string
		line       int
		field      string
		msg        string
	}{
		{"unknown top-level key", base(route) + "relays: {batch: 1}\n", 6, "relays", `unknown key "relays"`},
		{"unknown key in route", base("routes:\n  - type: t\n    htp: {url: http://h/, token: x}\n"), 5, "routes[0].htp", `unknown key "htp"`},
		{"unknown key in http", base("routes:\n  - type: t\n    http:\n      url: http://h/\n      tokn: x\n"), 7, "routes[0].http.tokn", `unknown key "tokn" (known keys here: url, token, timeout, max_concurrent, batch, max_batch_items, max_batch_bytes, tls, not_applied, payload_only, reconcile)`},
		{"unknown key in tls", base("routes:\n  - type: t\n    http:\n      url: https://h/\n      token: x\n      tls: {ca: /x}\n"), 8, "routes[0].http.tls.ca", `unknown key "ca" (known keys here: ca_file, cert_file, key_file)`},
		{"unknown key in sasl", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl: {mechanism: PLAIN, username: u}\n"), 8, "routes[0].kafka.sasl.username", `unknown key "username" (known keys here: mechanism, user, password)`},
		{"bad batch bool", base("routes:\n  - type: t\n    http: {url: http://h/, token: x, batch: yes please}\n"), 5, "routes[0].http.batch", "not true or false"},
		{"batch items without batch", base("routes:\n  - type: t\n    http: {url: http://h/, token: x, max_batch_items: 50}\n"), 5, "routes[0].http.max_batch_items", "only applies with batch: true"},
		{"batch items zero", base("routes:\n  - type: t\n    http: {url: http://h/, token: x, batch: true, max_batch_items: 0}\n"), 5, "routes[0].http.max_batch_items", "at least 1"},
		{"batch bytes tiny", base("routes:\n  - type: t\n    http: {url: http://h/, token: x, batch: true, max_batch_bytes: 10}\n"), 5, "routes[0].http.max_batch_bytes", "at least 1024"},
		{"tls on http", base("routes:\n  - type: t\n    http:\n      url: http://h/\n      token: x\n      tls: {ca_file: /ca.pem}\n"), 8, "routes[0].http.tls", "needs an https:// URL"},
		{"cert without key", base("routes:\n  - type: t\n    http:\n      url: https://h/\n      token: x\n      tls: {cert_file: /c.pem}\n"), 8, "routes[0].http.tls.cert_file", "needs key_file too"},
		{"key without cert", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      tls: {key_file: /k.pem}\n"), 8, "routes[0].kafka.tls.key_file", "needs cert_file too"},
		{"empty ca file", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      tls: {ca_file: ''}\n"), 8, "routes[0].kafka.tls.ca_file", "empty"},
		{"tls file from a missing env var", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      tls: {ca_file: '${NO_CA}'}\n"), 8, "routes[0].kafka.tls.ca_file", "environment variable NO_CA is not set"},
		{"tls not a mapping", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      tls: true\n"), 8, "routes[0].kafka.tls", "expected a mapping"},
		{"sasl unknown mechanism", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl: {mechanism: GSSAPI, user: u, password: p}\n"), 8, "routes[0].kafka.sasl.mechanism", `"GSSAPI" is not supported: use one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{"sasl no mechanism", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl: {user: u, password: p}\n"), 8, "routes[0].kafka.sasl.mechanism", "required"},
		{"sasl no user", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl: {mechanism: PLAIN, password: p}\n"), 8, "routes[0].kafka.sasl.user", "required"},
		{"sasl no password", base("routes:\n  - type: t\n    kafka:\n      brokers: [k:9092]\n      topic: t\n      sasl: {mechanism: SCRAM-SHA-512, user: u}\n"), 8, "routes[0].kafka.sasl.password", "required"},
		{"nats two ways to authenticate", base("routes:\n  - type: t\n    nats: {url: 'nats://n:4222', subject: s, creds_file: /a.creds, nkey_file: /n.nk}\n"), 5, "routes[0].nats.nkey_file", "creds_file and nkey_file: give one way"},
		{"nats user without password", base("routes:\n  - type: t\n    nats: {url: 'nats://n:4222', subject: s, user: u}\n"), 5, "routes[0].nats.password", "required with user"},
		{"nats password without user", base("routes:\n  - type: t\n    nats: {url: 'nats://n:4222', subject: s, password: p}\n"), 5, "routes[0].nats.password", "needs user too"},
		{"nats credentials in the URL", base("routes:\n  - type: t\n    nats: {url: 'nats://u:hunter2@n:4222', subject: s}\n"), 5, "routes[0].nats.url", "must not carry credentials"},
		{"http credentials in the URL", base("routes:\n  - type: t\n    http: {url: 'https://u:hunter2@h/', token: x}\n"), 5, "routes[0].http.url", "must not carry credentials"},
		{"max_rate not a number", base("routes:\n  - type: t\n    max_rate: fast\n    http: {url: http://h/, token: x}\n"), 5, "routes[0].max_rate", `"fast" is not a number of messages per second`},
		{"max_rate zero", base("routes:\n  - type: t\n    max_rate: 0\n    http: {url: http://h/, token: x}\n"), 5, "routes[0].max_rate", "must be positive"},
		{"max_rate negative", base("routes:\n  - type: t\n    max_rate: -3\n    http: {url: http://h/, token: x}\n"), 5, "routes[0].max_rate", "must be positive"},
		{"max_rate infinite", base("routes:\n  - type: t\n    max_rate: .inf\n    http: {url: http://h/, token: x}\n"), 5, "routes[0].max_rate", "not a number of messages per second"},
		{"route_failure_threshold zero", base(route) + "relay: {route_failure_threshold: 0}\n", 6, "relay.route_failure_threshold", "at least 1"},
		{"route_pause_max below route_pause", base(route) + "relay: {route_pause: 10s, route_pause_max: 5s}\n", 6, "relay.route_pause_max", "at least relay.route_pause (10s)"},
		{"retry_after_ceiling below a second", base(route) + "relay: {retry_after_ceiling: 500ms}\n", 6, "relay.retry_after_ceiling", "at least 1s"},
		{"token not ASCII", base("routes:\n  - type: t\n    http: {url: 'https://h/', token: \"t\\u00e9\"}\n"), 5, "routes[0].http.token", "printable ASCII"},
		{"unknown key in relay", base(route) + "relay:\n  batch: 10\n  leese: 3s\n", 8, "relay.leese", `unknown key "leese"`},
		{"no routes key", base(""), 1, "routes", "no routes"},
		{"empty routes", base("routes: []\n"), 3, "routes", "no routes"},
		{"bad URL", base("routes:\n  - type: t\n    http: {url: 'ftp://h/x', token: x}\n"), 5, "routes[0].http.url", `"ftp://h/x" is not an absolute http:// or https:// URL`},
		{"relative URL", base("routes:\n  - type: t\n    http: {url: /m2m/x, token: x}\n"), 5, "routes[0].http.url", "not an absolute"},
		{"missing token", base("routes:\n  - type: t\n    http: {url: http://h/}\n"), 5, "routes[0].http.token", "required"},
		{"missing URL", base("routes:\n  - type: t\n    http: {token: x}\n"), 5, "routes[0].http.url", "required"},
		{"bad duration", base("routes:\n  - type: t\n    http: {url: http://h/, token: x, timeout: 5 seconds}\n"), 5, "routes[0].http.timeout", `"5 seconds" is not a duration`},
		{"bad relay duration", base(route) + "relay:\n  lease: 30\n", 7, "relay.lease", `"30" is not a duration`},
		{"negative duration", base(route) + "relay: {lease: -1s}\n", 6, "relay.lease", "must be positive"},
		{"missing env var", base("routes:\n  - type: t\n    http: {url: http://h/, token: '${NOPE_TOKEN}'}\n"), 5, "routes[0].http.token", "environment variable NOPE_TOKEN is not set"},
		{"missing env var unquoted in flow", base("routes:\n  - type: t\n    http: {url: http://h/, token: ${NOPE_TOKEN}}\n"), 5, "routes[0].http.token", "environment variable NOPE_TOKEN is not set"},
		{"missing env var in database", "database: ${NO_DB_URL}\napp: a\n" + route, 1, "database", "environment variable NO_DB_URL is not set"},
		{"bad env reference", base("routes:\n  - type: t\n    http:\n      url: http://h/\n      token: '${1X}'\n"), 7, "routes[0].http.token", "not a valid environment variable reference"},
		{"unknown election", base(route) + "relay: {election: raft}\n", 6, "relay.election", `unknown election "raft"`},
		{"bad int", base(route) + "relay:\n  batch: lots\n", 7, "relay.batch", `"lots" is not a whole number`},
		{"batch out of library range", base(route) + "relay:\n  batch: 20000\n", 7, "relay.batch", "1..10000"},
		{"zero concurrency", base(route) + "relay: {concurrency: 0}\n", 6, "relay.concurrency", "at least 1"},
		{"bad bool", base(route) + "relay: {poll_only: maybe}\n", 6, "relay.poll_only", "not true or false"},
		{"no transport", base("routes:\n  - type: t\n    ordering: key\n"), 4, "routes[0]", "has no transport"},
		{"two transports", base("routes:\n  - type: t\n    http: {url: http://h/, token: x}\n    kafka: {brokers: [k:9092], topic: t}\n"), 6, "routes[0].kafka", "has http and kafka: one transport per route"},
		{"kafka no brokers", base("routes:\n  - type: t\n    kafka: {topic: t}\n"), 5, "routes[0].kafka.brokers", "required"},
		{"kafka bad broker", base("routes:\n  - type: t\n    kafka:\n      brokers: [k9092]\n      topic: t\n"), 6, "routes[0].kafka.brokers[0]", `"k9092" is not host:port`},
		{"kafka brokers not a list", base("routes:\n  - type: t\n    kafka:\n      brokers: k:9092\n      topic: t\n"), 6, "routes[0].kafka.brokers", "expected a list"},
		{"kafka no topic", base("routes:\n  - type: t\n    kafka: {brokers: [k:9092]}\n"), 5, "routes[0].kafka.topic", "required"},
		{"transactional id with election none", base("routes:\n  - type: t\n    kafka: {brokers: [k:9092], topic: t, transactional_id: x}\n") + "relay: {election: none}\n", 5, "routes[0].kafka.transactional_id", "needs relay.election: leader"},
		{"transactional id shared", base("routes:\n  - type: t\n    kafka: {brokers: [k:9092], topic: t, transactional_id: x}\n  - type: u\n    kafka: {brokers: [k:9092], topic: u, transactional_id: x}\n"), 7, "routes[1].kafka.transactional_id", `"x" is already used by routes[0]`},
		{"nats bad url", base("routes:\n  - type: t\n    nats: {url: 'http://n:4222', subject: s}\n"), 5, "routes[0].nats.url", "not a nats://"},
		{"nats wildcard subject", base("routes:\n  - type: t\n    nats: {url: 'nats://n:4222', subject: 'a.*'}\n"), 5, "routes[0].nats.subject", "no spaces or wildcards"},
		{"no type", base("routes:\n  - http: {url: http://h/, token: x}\n"), 4, "routes[0].type", "required"},
		{"duplicate type", base(route + "  - type: pedido.criado\n    http: {url: http://h/, token: x}\n"), 6, "routes[1].type", "already routed by routes[0]"},
		{"bad ordering", base("routes:\n  - type: t\n    ordering: fifo\n    http: {url: http://h/, token: x}\n"), 5, "routes[0].ordering", `unknown ordering "fifo"`},
		{"no database", "app: a\n" + route, 1, "database", "required"},
		{"bad database scheme", "database: oracle://x/y\napp: a\n" + route, 1, "database", "unsupported database"},
		{"bad schema", base(route) + "schema: Bad-Name\n", 6, "schema", "lower-case SQL identifier"},
		{"no app", "database: sqlite:/x\n" + route, 1, "app", "required"},
		{"bad app", "database: sqlite:/x\napp: '-x'\n" + route, 2, "app", "must be 1-100"},
		{"routes not a list", base("routes: {type: t}\n"), 3, "routes", "routes must be a list"},
		{"scalar where mapping", base("routes:\n  - type: t\n    http: http://h/\n"), 5, "routes[0].http", "expected a mapping"},
		{"syntax error", base("routes:\n  - type: [t\n"), 3, "", "did not find expected"},
		{"duplicate key", base(route) + "app: again\n", 6, "", `"app" already defined`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("m.yaml", []byte(tc.yaml), envOf())
			if err == nil {
				t.Fatalf("no error for:\n%s", tc.yaml)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v is not a *ConfigError", err, err)
			}
			if !errors.Is(err, mensageria.ErrConfig) {
				t.Fatalf("error %v is not mensageria.ErrConfig", err)
			}
			if ce.Line != tc.line || ce.Field != tc.field || !strings.Contains(ce.Msg, tc.msg) {
				t.Fatalf("got line %d field %q msg %q (%v)\nwant line %d field %q msg containing %q", ce.Line, ce.Field, ce.Msg, err, tc.line, tc.field, tc.msg)
			}
			want := "m.yaml:"
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("message %q does not start with %q", err, want)
			}
		})
	}
}

func TestParseConfigEmptyAndMultiDoc(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "- a\n- b\n", "database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    http: {url: http://h/, token: x}\n---\napp: b\n"} {
		if _, err := ParseConfig("m.yaml", []byte(in), envOf()); err == nil {
			t.Errorf("no error for %q", in)
		} else if !errors.Is(err, mensageria.ErrConfig) {
			t.Errorf("%q: %v is not mensageria.ErrConfig", in, err)
		}
	}
}

// The annotated examples in docs/config.md are valid configs that mean
// what their comments say.
func TestDocumentedConfigExample(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	// The relay's examples; the receive daemon's, after them, has a test of
	// its own.
	relayPart, _, _ := strings.Cut(string(doc), "\n## Receive")
	var examples []string
	for rest := relayPart; ; {
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		var ex string
		ex, rest, _ = strings.Cut(rest, "```")
		examples = append(examples, ex)
	}
	if len(examples) != 3 {
		t.Fatalf("docs/config.md has %d yaml examples, want the full one, the at-most-once one and the production one", len(examples))
	}
	env := envOf("FATURAMENTO_TOKEN", "tok", "KAFKA_BROKERS", "k1:9092,k2:9092", "CERT_DIR", "/etc/certs", "KAFKA_PASSWORD", "pw")
	c, err := ParseConfig("docs/config.md", []byte(examples[0]), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Routes) != 3 || c.Routes[0].HTTP == nil || c.Routes[1].Kafka == nil || c.Routes[2].NATS == nil {
		t.Fatalf("routes: %+v", c.Routes)
	}
	k := c.Routes[1]
	if !k.Ordered || len(k.Kafka.Brokers) != 2 || k.Kafka.TransactionalID == "" || c.Relay.Election != mensageria.ElectionLeader || k.MaxRate != 200 {
		t.Fatalf("kafka route %+v %+v, election %v", k, k.Kafka, c.Relay.Election)
	}
	if h := c.Routes[0].HTTP; h.Timeout != 10*time.Second || h.MaxConcurrent != 16 || h.Token != "tok" || !h.Batch || h.TLS == nil || h.TLS.CAFile == "" {
		t.Fatalf("http route %+v", h)
	}
	// The relay block states the library's defaults.
	if e, d := c.Effective(), (&Config{App: "a"}).Effective(); e.BatchSize != d.BatchSize || e.Concurrency != d.Concurrency || e.Lease != d.Lease ||
		e.MaxAttempts != d.MaxAttempts || e.PollInterval != d.PollInterval || e.BackoffBase != d.BackoffBase || e.BackoffMax != d.BackoffMax ||
		e.RouteFailureThreshold != d.RouteFailureThreshold || e.RoutePause != d.RoutePause || e.RoutePauseMax != d.RoutePauseMax || e.RetryAfterCeiling != d.RetryAfterCeiling {
		t.Fatalf("the example's relay block %+v differs from the defaults %+v", e, d)
	}
	// The at-most-once example: routes and relay, completed here.
	once, err := ParseConfig("docs/config.md", []byte("database: sqlite:/x\napp: a\n"+examples[1]), envOf("LEGACY_TOKEN", "leg"))
	if err != nil {
		t.Fatal(err)
	}
	if r := once.Routes[0]; r.Delivery != mensageria.AtMostOnce || !r.HTTP.PayloadOnly || len(r.HTTP.NotApplied) != 1 || r.HTTP.NotApplied[0] != 503 ||
		r.HTTP.Reconcile == nil || r.HTTP.Reconcile.Token.Reveal() != "leg" || r.HTTP.Reconcile.Timeout != 5*time.Second ||
		len(r.HTTP.Reconcile.Applied) != 1 || r.HTTP.Reconcile.Applied[0] != 200 || len(r.HTTP.Reconcile.NotApplied) != 1 || r.HTTP.Reconcile.NotApplied[0] != 404 {
		t.Fatalf("at-most-once route: %+v %+v", r, r.HTTP)
	}
	if e, d := once.Effective(), (&Config{App: "a"}).Effective(); e.ReconcileInterval != d.ReconcileInterval {
		t.Fatalf("the example's reconcile_interval %s is not the default %s it says", e.ReconcileInterval, d.ReconcileInterval)
	}
	// The production example: only routes, so it is completed here.
	prod, err := ParseConfig("docs/config.md", []byte("database: sqlite:/x\napp: a\n"+examples[2]), env)
	if err != nil {
		t.Fatal(err)
	}
	h, kf, n := prod.Routes[0].HTTP, prod.Routes[1].Kafka, prod.Routes[2].NATS
	if h.TLS == nil || h.TLS.CAFile != "/etc/certs/faturamento-ca.pem" || h.TLS.CertFile == "" || h.TLS.KeyFile == "" ||
		kf.TLS == nil || kf.TLS.CAFile != "" || kf.SASL == nil || kf.SASL.Mechanism != "SCRAM-SHA-512" || kf.SASL.Password.Reveal() != "pw" ||
		n.TLS == nil || n.CredsFile == "" {
		t.Fatalf("production routes: %+v %+v %+v", h, kf, n)
	}
}

// election: advisory, the former name of leader, still runs as leader, with
// one warning located at the key; leader and none warn of nothing.
func TestElectionAdvisoryIsADeprecatedAliasOfLeader(t *testing.T) {
	const head = "database: sqlite:/tmp/x.db\napp: a\nroutes:\n  - type: t\n    http: {url: 'http://h/p', token: x}\nrelay:\n  election: "
	c, err := ParseConfig("m.yaml", []byte(head+"advisory\n"), envOf())
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay.Election != mensageria.ElectionLeader {
		t.Errorf("election advisory = %q, want %q", c.Relay.Election, mensageria.ElectionLeader)
	}
	if len(c.Warnings) != 1 || !strings.HasPrefix(c.Warnings[0], "m.yaml:7: relay.election: ") || !strings.Contains(c.Warnings[0], "election: leader") {
		t.Errorf("warnings = %q, want one at m.yaml:7 naming election: leader", c.Warnings)
	}
	for _, v := range []string{"leader", "none"} {
		c, err := ParseConfig("m.yaml", []byte(head+v+"\n"), envOf())
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Warnings) != 0 {
			t.Errorf("election %s: warnings %q, want none", v, c.Warnings)
		}
	}
}

// A file with several mistakes reports each, and the joined error is still
// mensageria.ErrConfig.
func TestSeveralConfigErrorsAreErrConfig(t *testing.T) {
	_, err := ParseConfig("m.yaml", []byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    http: {url: http://h/, token: x}\nrelay: {batch: [1], lease: [2]}\n"), envOf())
	var m MultiError
	if !errors.As(err, &m) || len(m) < 2 {
		t.Fatalf("got %T %v, want several located errors", err, err)
	}
	if !errors.Is(err, mensageria.ErrConfig) {
		t.Errorf("%v is not mensageria.ErrConfig", err)
	}
}

// Settings that cannot work are refused at parse, each with the YAML path
// and why: an explicit 0 where 0 cannot work, a lease the election cannot
// hold, a timeout the lease's delivery window would cut, pairs that
// contradict each other. An unset key takes its documented default (the
// http timeout's is 10s, or the delivery window when shorter).
func TestParseConfigRefusesWhatCannotWork(t *testing.T) {
	head := "database: sqlite:/tmp/x.db\napp: pedidos\nroutes:\n  - type: t\n"
	httpRoute := func(extra string) string { return head + "    http: {url: http://h/, token: x" + extra + "}\n" }
	once := head + "    delivery: at_most_once\n    http: {url: http://h/, token: x, reconcile: {url: 'http://h/{key}', timeout: %s}}\n"
	for _, tc := range []struct {
		name, yaml string
		field      string // "" : accepted
		msg        string
	}{
		{"max_concurrent 0", httpRoute(", max_concurrent: 0"), "routes[0].http.max_concurrent", "0 must be at least 1"},
		{"max_concurrent negative", httpRoute(", max_concurrent: -4"), "routes[0].http.max_concurrent", "at least 1"},
		{"batch 0", httpRoute("") + "relay: {batch: 0}\n", "relay.batch", "at least 1"},
		{"timeout 0", httpRoute(", timeout: 0s"), "routes[0].http.timeout", "must be positive"},
		{"timeout longer than the lease", httpRoute(", timeout: 60s") + "relay: {lease: 30s}\n", "routes[0].http.timeout",
			"1m0s is longer than the 27s a claimed batch's deliveries may take (relay.lease 30s less the 3s the relay keeps to settle them)"},
		{"timeout inside the settle margin", httpRoute(", timeout: 29s"), "routes[0].http.timeout", "the default relay.lease of 30s"},
		{"timeout the whole window", httpRoute(", timeout: 27s"), "", ""},
		{"timeout beside a short lease", httpRoute(", timeout: 2s") + "relay: {lease: 2s}\n", "routes[0].http.timeout", "every request would be cut at 1.5s"},
		{"default timeout beside a short lease", httpRoute("") + "relay: {lease: 2s}\n", "", ""},
		{"probe timeout beyond the window", fmt.Sprintf(once, "5s") + "relay: {lease: 5s}\n", "routes[0].http.reconcile.timeout", "longer than the 4.5s"},
		{"probe timeout inside the window", fmt.Sprintf(once, "4s") + "relay: {lease: 5s}\n", "", ""},
		{"lease of 600h", httpRoute("") + "relay: {lease: 600h, poll_interval: 1s}\n", "relay.lease", "holds its claimed messages"},
		{"lease under a second", httpRoute("") + "relay: {lease: 500ms}\n", "relay.lease", "at least 1s"},
		{"lease at the bound", httpRoute("") + "relay: {lease: 1h}\n", "", ""},
		{"max_attempts 0", httpRoute("") + "relay: {max_attempts: 0}\n", "relay.max_attempts", "at least 1"},
		{"max_attempts beyond 32 bits", httpRoute("") + "relay: {max_attempts: 3000000000}\n", "relay.max_attempts", "32-bit"},
		{"poll longer than the lease", httpRoute("") + "relay: {lease: 5s, poll_interval: 10s}\n", "relay.poll_interval", "longer than the relay.lease (5s)"},
		{"backoff base over the default max", httpRoute("") + "relay: {backoff_base: 20m}\n", "relay.backoff_max", "10m0s must be at least relay.backoff_base (20m0s)"},
		{"route pause over the default max", httpRoute("") + "relay: {route_pause: 2m}\n", "relay.route_pause_max", "at least relay.route_pause (2m0s)"},
		{"reconcile interval 0", httpRoute("") + "relay: {reconcile_interval: 0s}\n", "relay.reconcile_interval", "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("m.yaml", []byte(tc.yaml), envOf())
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if r := c.Routes[0].HTTP; r.Timeout == 0 && c.RequestTimeout(r) != min(10*time.Second, c.DeliveryWindow()) {
					t.Fatalf("the default timeout is %s with a window of %s", c.RequestTimeout(r), c.DeliveryWindow())
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(ce.Msg, tc.msg) || !errors.Is(err, mensageria.ErrConfig) {
				t.Fatalf("got %v\nwant field %q saying %q", err, tc.field, tc.msg)
			}
		})
	}
}
