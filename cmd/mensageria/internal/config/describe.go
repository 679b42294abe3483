package config

import "strings"

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
