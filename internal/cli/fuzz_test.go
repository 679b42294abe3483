package cli

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// FuzzConfig: the decoder never panics, every rejection is a located
// config error, and every accepted config is complete.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    http: {url: http://h/, token: x}\n"))
	f.Add([]byte("database: ${X}\napp: a\nroutes: []\n"))
	f.Add([]byte("a: &x [1, *x]\n"))
	env := envOf("X", "sqlite:/tmp/f.db", "T", "tok")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("f.yaml", data, env)
		if err != nil {
			var ce *ConfigError
			var me multiError
			if !errors.As(err, &ce) && !errors.As(err, &me) {
				t.Fatalf("error %T is not a config error: %v", err, err)
			}
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c.App == "" || c.Database == "" || c.Schema == "" || len(c.Routes) == 0 {
			t.Fatalf("accepted an incomplete config: %+v", c)
		}
		for _, r := range c.Routes {
			n := 0
			for _, present := range []bool{r.HTTP != nil, r.Kafka != nil, r.NATS != nil} {
				if present {
					n++
				}
			}
			if r.Type == "" || n != 1 || (r.HTTP != nil && (r.HTTP.URL == "" || r.HTTP.Token == "" || r.HTTP.Timeout < 0)) ||
				(r.Kafka != nil && (len(r.Kafka.Brokers) == 0 || r.Kafka.Topic == "")) || (r.NATS != nil && r.NATS.Subject == "") {
				t.Fatalf("accepted a bad route: %+v", r)
			}
		}
	})
}

// FuzzPayloadArg: whatever parsePayloadArg accepts is one valid JSON
// document.
func FuzzPayloadArg(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `@p.json`, `@-`, `@`, ``, `[1,2`, ` "x" `, `@missing`, "{\"k\":\"\xff\"}"} {
		f.Add(s, []byte(`{"from":"file"}`))
	}
	f.Fuzz(func(t *testing.T, arg string, content []byte) {
		read := func(name string) ([]byte, error) {
			if name == "p.json" {
				return content, nil
			}
			return nil, fs.ErrNotExist
		}
		out, err := parsePayloadArg(arg, read, strings.NewReader(string(content)))
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("accepted invalid JSON %q from %q", out, arg)
		}
	})
}
