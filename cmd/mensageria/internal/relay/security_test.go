package relay

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/testca"
)

// A tls: block's files are checked when they are read, each failure a
// *ConfigError naming the key and the file.
func TestTLSFilesChecked(t *testing.T) {
	ca := testca.New(t, "private")
	other := testca.New(t, "other")
	good := ca.Client(t, "relay")
	expired := ca.Issue(t, "old", false, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	future := ca.Issue(t, "early", false, time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour))
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := file("notpem.pem", "just text\n")
	brokenPEM := file("broken.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")

	tc, err := loadClientTLS(&config.TLSConfig{CAFile: ca.CAFile, CertFile: good.CertFile, KeyFile: good.KeyFile}, "m.yaml", time.Now())
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 {
		t.Fatalf("good files: %v %+v", err, tc)
	}
	if tc, err := loadClientTLS(&config.TLSConfig{}, "m.yaml", time.Now()); err != nil || tc.RootCAs != nil {
		t.Fatalf("an empty block (the system's CAs): %v", err)
	}
	cases := []struct {
		name  string
		tls   config.TLSConfig
		field string
		msg   string
	}{
		{"missing CA file", config.TLSConfig{CAFile: filepath.Join(dir, "nope.pem")}, "ca_file", "no such file"},
		{"CA file without PEM", config.TLSConfig{CAFile: notPEM}, "ca_file", "holds no PEM certificate"},
		{"CA file with a broken certificate", config.TLSConfig{CAFile: brokenPEM}, "ca_file", "certificate 1:"},
		{"missing cert file", config.TLSConfig{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: good.KeyFile}, "cert_file", "no such file"},
		{"missing key file", config.TLSConfig{CertFile: good.CertFile, KeyFile: filepath.Join(dir, "nope.key")}, "key_file", "no such file"},
		{"key of another certificate", config.TLSConfig{CertFile: good.CertFile, KeyFile: other.Client(t, "x").KeyFile}, "cert_file", "private key does not match public key"},
		{"cert file that is a key", config.TLSConfig{CertFile: good.KeyFile, KeyFile: good.KeyFile}, "cert_file", "failed to find"},
		{"expired client certificate", config.TLSConfig{CertFile: expired.CertFile, KeyFile: expired.KeyFile}, "cert_file", "expired on"},
		{"client certificate not valid yet", config.TLSConfig{CertFile: future.CertFile, KeyFile: future.KeyFile}, "cert_file", "is not valid before"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.tls.Field, tc.tls.Line = "routes[0].kafka.tls", 7
			_, err := loadClientTLS(&tc.tls, "m.yaml", time.Now())
			var ce *config.ConfigError
			if !errors.As(err, &ce) || ce.Field != "routes[0].kafka.tls."+tc.field || ce.Line != 7 || !strings.Contains(ce.Msg, tc.msg) || !strings.HasPrefix(err.Error(), "m.yaml:7: ") {
				t.Fatalf("got %v, want a config error on %s containing %q", err, tc.field, tc.msg)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("the message quotes the key: %v", err)
			}
		})
	}
}

// A NATS route's credentials files are read at start, and a bad one is
// named.
func TestNATSCredentialFilesChecked(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "relay.nk")
	if err := os.WriteFile(seed, []byte("not a seed at all SUAMsecret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "relay.creds")
	if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &config.Config{File: "m.yaml"}
	for _, tc := range []struct {
		n     config.NATSRoute
		field string
		msg   string
	}{
		{config.NATSRoute{NkeyFile: seed}, "nkey_file", "not an nkey seed file"},
		{config.NATSRoute{NkeyFile: filepath.Join(dir, "nope.nk")}, "nkey_file", "no such file"},
		{config.NATSRoute{CredsFile: creds}, "creds_file", "no \"BEGIN USER NKEY SEED\" section"},
		{config.NATSRoute{CredsFile: filepath.Join(dir, "nope.creds")}, "creds_file", "no such file"},
	} {
		tc.n.Field, tc.n.Line = "routes[2].nats", 12
		_, err := natsOpts(c, &tc.n)
		var ce *config.ConfigError
		if !errors.As(err, &ce) || ce.Field != "routes[2].nats."+tc.field || !strings.Contains(ce.Msg, tc.msg) {
			t.Errorf("%+v: got %v, want %s: ...%s", tc.n, err, tc.field, tc.msg)
		}
		if err != nil && strings.Contains(err.Error(), "SUAMsecret") {
			t.Errorf("the message quotes the seed: %v", err)
		}
	}
}
