package config

import (
	"strings"
	"testing"
)

// A route's destination and security in words, as explain and the relay's
// logs show them: names and paths, never a secret a URL carries.
func TestRouteDestinationAndSecurity(t *testing.T) {
	tls := &TLSConfig{CAFile: "ca.pem", CertFile: "relay.pem", KeyFile: "relay-key.pem"}
	for _, tc := range []struct {
		name                  string
		route                 Route
		destination, security string
	}{
		{"plain http", Route{Transport: "http", HTTP: &HTTPRoute{URL: "http://faturamento:8080/m2m"}},
			"POST http://faturamento:8080/m2m", "plaintext HTTP; bearer token"},
		{"https, system CAs", Route{Transport: "http", HTTP: &HTTPRoute{URL: "https://faturamento/m2m"}},
			"POST https://faturamento/m2m", "TLS, system CAs; bearer token"},
		{"https, client certificate", Route{Transport: "http", HTTP: &HTTPRoute{URL: "https://faturamento/m2m", TLS: tls}},
			"POST https://faturamento/m2m", "TLS, CA ca.pem, client certificate relay.pem; bearer token"},
		{"kafka, plaintext", Route{Transport: "kafka", Kafka: &KafkaRoute{Topic: "pedidos", Brokers: []string{"k1:9092", "k2:9092"}}},
			"topic pedidos on k1:9092,k2:9092", "plaintext"},
		{"kafka, transactional, TLS and SASL", Route{Transport: "kafka", Kafka: &KafkaRoute{Topic: "pedidos", Brokers: []string{"k1:9093"}, TransactionalID: "relay-1",
			TLS: &TLSConfig{CAFile: "ca.pem"}, SASL: &SASLConfig{Mechanism: "SCRAM-SHA-512", User: "relay", Password: "pw-not-shown"}}},
			"topic pedidos on k1:9093 (transactional id relay-1)", "TLS, CA ca.pem, SASL SCRAM-SHA-512 as relay"},
		{"nats, tls:// and no credentials", Route{Transport: "nats", NATS: &NATSRoute{URL: "tls://nats:4222", Subject: "pedidos.criado", Stream: "PEDIDOS"}},
			"subject pedidos.criado on tls://nats:4222 (stream PEDIDOS)", "TLS, system CAs; no credentials"},
		{"nats, user", Route{Transport: "nats", NATS: &NATSRoute{URL: "nats://nats:4222", Subject: "pedidos.criado", User: "relay", Password: "pw-not-shown"}},
			"subject pedidos.criado on nats://nats:4222", "user relay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.route.Destination(); got != tc.destination {
				t.Errorf("Destination() = %q, want %q", got, tc.destination)
			}
			if got := tc.route.Security(); got != tc.security {
				t.Errorf("Security() = %q, want %q", got, tc.security)
			}
		})
	}
	// Credentials in a URL are not shown.
	r := Route{Transport: "nats", NATS: &NATSRoute{URL: "nats://relay:s3cret-pw@nats:4222", Subject: "s"}}
	if d := r.Destination(); strings.Contains(d, "s3cret-pw") || !strings.Contains(d, "nats:4222") {
		t.Errorf("Destination() = %q: the URL's password shown, or its host lost", d)
	}
}
