package config

import (
	"strings"

	"github.com/xadm/mensageria/redact"
)

// What a block configures, in words, for explain and the daemons' logs:
// paths and names, never a secret or a file's contents.

// Describe says what the tls: block configures: paths, never contents; ""
// for no block.
func (t *TLSConfig) Describe() string {
	if t == nil {
		return ""
	}
	parts := []string{"TLS"}
	if t.CAFile != "" {
		parts = append(parts, "CA "+t.CAFile)
	} else {
		parts = append(parts, "system CAs")
	}
	if t.CertFile != "" {
		parts = append(parts, "client certificate "+t.CertFile)
	}
	return strings.Join(parts, ", ")
}

// Describe names the sasl: block's mechanism and user; "" for no block.
func (s *SASLConfig) Describe() string {
	if s == nil {
		return ""
	}
	return "SASL " + s.Mechanism + " as " + s.User
}

// Describe says how the route secures its connection: its TLS and the one
// way it authenticates.
func (n *NATSRoute) Describe() string {
	var parts []string
	if d := n.TLS.Describe(); d != "" {
		parts = append(parts, d)
	}
	switch {
	case n.CredsFile != "":
		parts = append(parts, "credentials "+n.CredsFile)
	case n.NkeyFile != "":
		parts = append(parts, "nkey "+n.NkeyFile)
	case n.User != "":
		parts = append(parts, "user "+n.User)
	}
	return strings.Join(parts, ", ")
}

// DescribeHTTPS says what an https connection with this tls: block uses:
// with no block, TLS with the system's CAs.
func (t *TLSConfig) DescribeHTTPS() string {
	if t == nil {
		return "TLS, system CAs"
	}
	return t.Describe()
}

// Describe says how a Kafka route secures its connection: its TLS and its
// SASL, or "plaintext".
func (k *KafkaRoute) Describe() string {
	var parts []string
	if d := k.TLS.Describe(); d != "" {
		parts = append(parts, d)
	}
	if d := k.SASL.Describe(); d != "" {
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		return "plaintext"
	}
	return strings.Join(parts, ", ")
}

// Destination says where the route delivers: the URL, topic or subject
// and its servers, with no secret a URL may carry.
func (r Route) Destination() string {
	switch r.Transport {
	case "http":
		// A query string may carry a gateway's key: it is not shown.
		return "POST " + redact.URL(r.HTTP.URL)
	case "kafka":
		d := "topic " + r.Kafka.Topic + " on " + strings.Join(r.Kafka.Brokers, ",")
		if r.Kafka.TransactionalID != "" {
			d += " (transactional id " + r.Kafka.TransactionalID + ")"
		}
		return d
	case "nats":
		d := "subject " + r.NATS.Subject + " on " + redact.URL(r.NATS.URL)
		if r.NATS.Stream != "" {
			d += " (stream " + r.NATS.Stream + ")"
		}
		return d
	}
	return r.Transport
}

// Security says what protects the route's connection.
func (r Route) Security() string {
	switch r.Transport {
	case "http":
		if strings.HasPrefix(r.HTTP.URL, "https://") {
			return r.HTTP.TLS.DescribeHTTPS() + "; bearer token"
		}
		return "plaintext HTTP; bearer token"
	case "kafka":
		return r.Kafka.Describe()
	case "nats":
		d := r.NATS.Describe()
		if d == "" {
			d = "no credentials"
		}
		if strings.HasPrefix(r.NATS.URL, "tls://") && r.NATS.TLS == nil {
			d = "TLS, system CAs; " + d
		}
		return d
	}
	return ""
}
