package config

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
)

const goodReceive = `database: postgres://app@db:5432/app
app: faturamento
receive:
  tokens: ["${M2M_TOKEN}"]
consumers:
  - name: fat.pedidos
    types: [pedido.criado, pedido.cancelado]
  - name: fat.clientes
    types: [cliente.novo]
    window: 48h
`

func TestParseReceiveConfigDefaults(t *testing.T) {
	c, err := ParseReceiveConfig("r.yaml", []byte(goodReceive), envOf("M2M_TOKEN", "s3cret-0123456789"))
	if err != nil {
		t.Fatal(err)
	}
	want := ReceiveConfig{
		Database: "postgres://app@db:5432/app", Schema: "mensageria", App: "faturamento",
		Listen: ":8080", Path: "/", Tokens: []string{"s3cret-0123456789"}, TokensCheck: 5 * time.Second,
		MaxBodyBytes: 1 << 20, MaxInFlight: 64,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, ShutdownTimeout: 30 * time.Second,
		NotifyInterval: 10 * time.Millisecond, PurgeInterval: time.Minute,
	}
	got := *c
	got.Consumers = nil
	if !equalReceive(got, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if len(c.Consumers) != 2 || c.Consumers[0].Window != mensageria.DefaultInboxWindow || c.Consumers[1].Window != 48*time.Hour ||
		!slices.Equal(c.Consumers[0].Types, []string{"pedido.criado", "pedido.cancelado"}) || c.Consumers[1].Line != 8 {
		t.Fatalf("consumers %+v", c.Consumers)
	}
	if k, ok := c.ConsumerOf("cliente.novo"); !ok || k.Name != "fat.clientes" {
		t.Fatalf("ConsumerOf = %+v %v", k, ok)
	}
	if _, ok := c.ConsumerOf("other"); ok {
		t.Fatal("ConsumerOf found a type no consumer takes")
	}
}

func equalReceive(a, b ReceiveConfig) bool {
	return a.Database == b.Database && a.Schema == b.Schema && a.App == b.App && a.Listen == b.Listen && a.Path == b.Path &&
		slices.Equal(a.Tokens, b.Tokens) && a.TokensFile == b.TokensFile && a.TokensCheck == b.TokensCheck && (a.TLS == nil) == (b.TLS == nil) &&
		a.MaxBodyBytes == b.MaxBodyBytes && a.MaxBatchItems == b.MaxBatchItems && a.MaxInFlight == b.MaxInFlight &&
		a.ReadHeaderTimeout == b.ReadHeaderTimeout && a.ReadTimeout == b.ReadTimeout && a.WriteTimeout == b.WriteTimeout &&
		a.IdleTimeout == b.IdleTimeout && a.ShutdownTimeout == b.ShutdownTimeout && a.NotifyInterval == b.NotifyInterval && a.PurgeInterval == b.PurgeInterval
}

// Every mistake is named with its line and field, never absorbed.
func TestParseReceiveConfigErrors(t *testing.T) {
	head := "database: sqlite:/tmp/a.db\napp: a\n"
	one := "consumers:\n  - {name: c, types: [t]}\n"
	cases := []struct {
		name, yaml, field, msg string
		line                   int
	}{
		{"no database", "app: a\nreceive: {tokens: [x-0123456789abcdef]}\n" + one, "database", "required", 1},
		{"bad app", "database: sqlite:/tmp/a.db\napp: 'a b'\nreceive: {tokens: [x-0123456789abcdef]}\n" + one, "app", "letters", 2},
		{"no tokens", head + one, "receive.tokens", "tokens_file", 1},
		{"empty token", head + "receive: {tokens: ['${EMPTY}']}\n" + one, "receive.tokens[0]", "empty", 3},
		{"token with a space", head + "receive: {tokens: ['a b']}\n" + one, "receive.tokens[0]", "without spaces", 3},
		// A one-character token used to be accepted.
		{"one-character token", head + "receive: {tokens: [k]}\n" + one, "receive.tokens[0]", "at least 16 characters", 3},
		{"token of 15 characters", head + "receive: {tokens: [x-0123456789abcdef, 0123456789abcde]}\n" + one, "receive.tokens[1]", "at least 16 characters", 3},
		{"bad listen", head + "receive: {tokens: [x-0123456789abcdef], listen: nope}\n" + one, "receive.listen", "host:port", 3},
		{"path without slash", head + "receive: {tokens: [x-0123456789abcdef], path: m2m}\n" + one, "receive.path", "starting with /", 3},
		{"path on a probe", head + "receive: {tokens: [x-0123456789abcdef], path: /metrics}\n" + one, "receive.path", "probe", 3},
		{"path with a wildcard", head + "receive: {tokens: [x-0123456789abcdef], path: '/{x}'}\n" + one, "receive.path", "URL path", 3},
		{"bad tokens_check", head + "receive: {tokens: [x-0123456789abcdef], tokens_check: soon}\n" + one, "receive.tokens_check", "off", 3},
		{"tls without key", head + "receive:\n  tokens: [x-0123456789abcdef]\n  tls: {cert_file: c.pem}\n" + one, "receive.tls.key_file", "required", 5},
		{"zero body", head + "receive: {tokens: [x-0123456789abcdef], max_body_bytes: 0}\n" + one, "receive.max_body_bytes", "0 must be at least 1024", 3},
		{"body under an envelope", head + "receive: {tokens: [x-0123456789abcdef], max_body_bytes: 200}\n" + one, "receive.max_body_bytes", "200 must be at least 1024", 3},
		{"zero in flight", head + "receive: {tokens: [x-0123456789abcdef], max_in_flight: 0}\n" + one, "receive.max_in_flight", "at least 1", 3},
		{"zero batch items", head + "receive: {tokens: [x-0123456789abcdef], max_batch_items: 0}\n" + one, "receive.max_batch_items", "at least 1", 3},
		{"bad duration", head + "receive: {tokens: [x-0123456789abcdef], read_timeout: 5}\n" + one, "receive.read_timeout", "not a duration", 3},
		{"write not after read", head + "receive: {tokens: [x-0123456789abcdef], read_timeout: 1m, write_timeout: 30s}\n" + one, "receive.write_timeout", "longer than read_timeout", 3},
		{"header after read", head + "receive: {tokens: [x-0123456789abcdef], read_timeout: 2s, read_header_timeout: 3s, write_timeout: 5s}\n" + one, "receive.read_header_timeout", "longer than read_timeout", 3},
		{"unknown key", head + "receive: {tokens: [x-0123456789abcdef], tokenz: [y]}\n" + one, "receive.tokenz", "unknown key", 3},
		{"no consumers", head + "receive: {tokens: [x-0123456789abcdef]}\n", "consumers", "at least one consumer", 1},
		{"consumer without types", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {name: c}\n", "consumers[0].types", "required", 5},
		{"consumer without name", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {types: [t]}\n", "consumers[0].name", "required", 5},
		{"consumer twice", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {name: c, types: [t]}\n  - {name: c, types: [u]}\n", "consumers[1].name", "already", 6},
		{"type twice", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {name: c, types: [t]}\n  - {name: d, types: [u, t]}\n", "consumers[1].types[1]", "one consumer", 6},
		{"long type", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {name: c, types: [" + strings.Repeat("t", 201) + "]}\n", "consumers[0].types[0]", "200 bytes", 5},
		{"bad window", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {name: c, types: [t], window: -1h}\n", "consumers[0].window", "positive", 5},
		{"unknown consumer key", head + "receive: {tokens: [x-0123456789abcdef]}\nconsumers:\n  - {name: c, types: [t], dedup: id}\n", "consumers[0].dedup", "unknown key", 5},
		{"relay config", "database: sqlite:/tmp/a.db\napp: a\nroutes: []\n", "routes", "unknown key", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseReceiveConfig("r.yaml", []byte(c.yaml), envOf("EMPTY", ""))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if ce.Field != c.field || ce.Line != c.line || !strings.Contains(ce.Msg, c.msg) {
				t.Fatalf("got %s (field %q line %d), want field %q line %d with %q", ce, ce.Field, ce.Line, c.field, c.line, c.msg)
			}
		})
	}
}

// The annotated receive example in docs/config.md is a valid config that
// means what its comments say.
func TestDocumentedReceiveExample(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "\n## Receive\n")
	_, rest, ok2 := strings.Cut(rest, "```yaml\n")
	example, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/config.md has no yaml example under ## Receive")
	}
	c, err := ParseReceiveConfig("docs/config.md", []byte(example), envOf("M2M_TOKEN", "tok-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:8443" || c.Path != "/m2m" || !slices.Equal(c.Tokens, []string{"tok-0123456789abcdef"}) || c.TokensFile == "" || c.TokensCheck != 5*time.Second ||
		c.TLS == nil || c.TLS.ClientCAFile == "" || c.MaxBodyBytes != 1<<20 || c.MaxBatchItems != 1000 || c.MaxInFlight != 64 ||
		c.ReadTimeout != 30*time.Second || c.WriteTimeout != time.Minute || c.NotifyInterval != 10*time.Millisecond {
		t.Fatalf("receive block %+v %+v", c, c.TLS)
	}
	if len(c.Consumers) != 1 || c.Consumers[0].Window != 168*time.Hour || len(c.Consumers[0].Types) != 2 {
		t.Fatalf("consumers %+v", c.Consumers)
	}
}

func TestParseTokens(t *testing.T) {
	got, err := ParseTokens("f", []byte("# rotation of 2026-12\n  new-token-0123456789  \r\n\nold-token-0123456789\nnew-token-0123456789\n"))
	if err != nil || !slices.Equal(got, []string{"new-token-0123456789", "old-token-0123456789"}) {
		t.Fatalf("ParseTokens = %q, %v", got, err)
	}
	if got, err := ParseTokens("f", []byte("\n# none yet\n")); err != nil || len(got) != 0 {
		t.Fatalf("an empty file = %q, %v", got, err)
	}
	for _, bad := range []string{"two tokens\n", "ok-0123456789abcdef\nbad\x01\n", "short-token\n", "caf\xc3\xa9\n", strings.Repeat("x", MaxTokensFile+1)} {
		var te *TokensFileError
		if _, err := ParseTokens("f", []byte(bad)); !errors.As(err, &te) {
			t.Errorf("ParseTokens(%.20q) = %v, want a *TokensFileError", bad, err)
		}
	}
	_, err = ParseTokens("f", []byte("ok-0123456789abcdef\nnot ok\n"))
	if te := (*TokensFileError)(nil); !errors.As(err, &te) || te.Line != 2 {
		t.Fatalf("the bad line is not named: %v", err)
	}
}
