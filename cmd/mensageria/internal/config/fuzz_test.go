package config

import (
	"errors"
	"slices"
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
	f.Add([]byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    http: {url: https://h/, token: ${T}, batch: true, max_batch_items: 5, tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /c.key}}\n"))
	f.Add([]byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    max_rate: 2.5\n    http: {url: http://h/, token: x}\nrelay: {route_pause: 1s, route_pause_max: 2s, route_failure_threshold: 3, retry_after_ceiling: 1m}\n"))
	f.Add([]byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    kafka: {brokers: [k:1], topic: t, tls: {}, sasl: {mechanism: scram-sha-256, user: u, password: ${T}}}\n  - type: u\n    nats: {url: tls://n:1, subject: s, user: u, password: p, tls: {ca_file: /ca}}\n"))
	f.Add(onceConfig)
	f.Add([]byte("database: sqlite:/x\napp: a\nroutes:\n  - type: t\n    delivery: at_most_once\n    http: {url: http://h/, token: x, not_applied: [503], reconcile: {url: 'http://h/{key}?t={type}', applied: [200, 204], not_applied: [404], timeout: 1s}}\nrelay: {reconcile_interval: 5s}\n"))
	env := envOf("X", "sqlite:/tmp/f.db", "T", "tok")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("f.yaml", data, env)
		if err != nil {
			checkRefusal(t, err)
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
			if r.MaxRate < 0 || r.MaxRate > 1e6 || r.MaxRate != r.MaxRate {
				t.Fatalf("accepted max_rate %v", r.MaxRate)
			}
			var tlss []*TLSConfig
			switch {
			case r.HTTP != nil:
				if r.HTTP.MaxBatchItems < 0 || r.HTTP.MaxBatchBytes < 0 || (!r.HTTP.Batch && (r.HTTP.MaxBatchItems != 0 || r.HTTP.MaxBatchBytes != 0)) ||
					(r.HTTP.TLS != nil && !strings.HasPrefix(r.HTTP.URL, "https://")) {
					t.Fatalf("accepted a bad http route: %+v", r.HTTP)
				}
				tlss = append(tlss, r.HTTP.TLS)
			case r.Kafka != nil:
				if s := r.Kafka.SASL; s != nil && (s.User == "" || s.Password == "" || !slices.Contains(saslMechanisms, s.Mechanism)) {
					t.Fatalf("accepted a bad sasl block: %+v", s)
				}
				tlss = append(tlss, r.Kafka.TLS)
			case r.NATS != nil:
				ways := 0
				for _, v := range []string{r.NATS.CredsFile, r.NATS.NkeyFile, r.NATS.User} {
					if v != "" {
						ways++
					}
				}
				if ways > 1 || (r.NATS.User != "") != (r.NATS.Password != "") {
					t.Fatalf("accepted bad nats credentials: %+v", r.NATS)
				}
				tlss = append(tlss, r.NATS.TLS)
			}
			for _, tc := range tlss {
				if tc != nil && (tc.CertFile == "") != (tc.KeyFile == "") {
					t.Fatalf("accepted a certificate without its key: %+v", tc)
				}
			}
		}
	})
}

// checkRefusal fails t unless err, a parser's refusal of the fuzzed file
// f.yaml, is a config error that names the file.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var ce *ConfigError
	var me MultiError
	if !errors.As(err, &ce) && !errors.As(err, &me) {
		t.Fatalf("error %T is not a config error: %v", err, err)
	}
	if !strings.HasPrefix(err.Error(), "f.yaml") {
		t.Fatalf("error does not name the file: %v", err)
	}
}
