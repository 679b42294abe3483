package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzReceiveConfig: the decoder of a receive config never panics, every
// rejection is a located config error, and every accepted config is
// complete and within its rules.
func FuzzReceiveConfig(f *testing.F) {
	f.Add([]byte(goodReceive))
	f.Add([]byte("database: sqlite:/x\napp: a\nreceive: {tokens: [t-0123456789abcdef], path: /m2m, tls: {cert_file: c, key_file: k}}\nconsumers: [{name: c, types: [t], window: 1h}]\n"))
	f.Add([]byte("database: ${X}\napp: a\nreceive: {tokens_file: /f, tokens_check: off, read_timeout: 1s, write_timeout: 2s}\nconsumers: [{name: c, types: [a, b]}]\n"))
	f.Add([]byte("a: &x [1, *x]\n"))
	env := envOf("X", "sqlite:/tmp/f.db", "M2M_TOKEN", "tok-0123456789abcdef")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseReceiveConfig("f.yaml", data, env)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if c.App == "" || c.Database == "" || c.Schema == "" || c.Listen == "" || !strings.HasPrefix(c.Path, "/") ||
			(len(c.Tokens) == 0 && c.TokensFile == "") || len(c.Consumers) == 0 || c.MaxBodyBytes < 1 || c.MaxInFlight < 1 ||
			c.WriteTimeout <= c.ReadTimeout || c.ReadHeaderTimeout > c.ReadTimeout || c.ReadHeaderTimeout <= 0 ||
			c.NotifyInterval <= 0 || c.PurgeInterval <= 0 || c.ShutdownTimeout <= 0 || c.IdleTimeout <= 0 {
			t.Fatalf("accepted an incomplete config: %+v", c)
		}
		for _, tok := range c.Tokens {
			if badToken(tok) != "" {
				t.Fatalf("accepted token %q", tok)
			}
		}
		if c.TLS != nil && (c.TLS.CertFile == "" || c.TLS.KeyFile == "") {
			t.Fatalf("accepted TLS without its files: %+v", c.TLS)
		}
		seen := map[string]bool{}
		for _, k := range c.Consumers {
			if k.Name == "" || len(k.Name) > 200 || len(k.Types) == 0 || k.Window <= 0 {
				t.Fatalf("accepted a bad consumer: %+v", k)
			}
			for _, typ := range k.Types {
				if typ == "" || len(typ) > 200 || seen[typ] {
					t.Fatalf("accepted type %q twice or out of bounds", typ)
				}
				seen[typ] = true
			}
		}
	})
}

// FuzzParseTokens: a tokens file never panics its reader; what it accepts
// are whole tokens, each a valid bearer token, each once.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("# comment\nold-token-0123456789\r\nnew-token-0123456789\n\n"))
	f.Add([]byte("a b\n"))
	f.Add([]byte("\xff\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		toks, err := ParseTokens("f", data)
		if err != nil {
			var te *TokensFileError
			if !errors.As(err, &te) {
				t.Fatalf("error %T is not a *TokensFileError: %v", err, err)
			}
			return
		}
		seen := map[string]bool{}
		for _, tok := range toks {
			if badToken(tok) != "" || seen[tok] || !strings.Contains(string(data), tok) {
				t.Fatalf("accepted token %q of %q", tok, data)
			}
			seen[tok] = true
		}
	})
}
