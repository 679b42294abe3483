// Package testca is a private certificate authority for the command's
// tests: the PEM files a config points at (a CA bundle, a server's or a
// client's certificate and key) and the tls.Configs of the tests' own
// servers and clients. The cli and relay tests share it.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a private certificate authority made for one test, with the PEM
// files a config points at.
type CA struct {
	// Cert is the CA's certificate.
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// Dir holds every file the CA wrote.
	Dir string
	// CAFile is the CA's certificate, the bundle a client trusts.
	CAFile string
	pool   *x509.CertPool
}

// New makes a CA named name whose files live in a directory of t's.
func New(t *testing.T, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, Dir: t.TempDir(), pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	ca.CAFile = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *CA) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.Dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Issued is a certificate the CA signed: the files, the pair and its
// serial number (unique in the test binary).
type Issued struct {
	CertFile, KeyFile string
	Pair              tls.Certificate
	Serial            int64
}

var serial atomic.Int64

// Issue signs a certificate for a server (valid for 127.0.0.1 and
// localhost) or a client, valid from notBefore to notAfter.
func (ca *CA) Issue(t *testing.T, cn string, server bool, notBefore, notAfter time.Time) Issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn := serial.Add(1) + 1
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(sn),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	out := Issued{CertFile: ca.write(t, cn+".pem", "CERTIFICATE", der), KeyFile: ca.write(t, cn+".key", "PRIVATE KEY", kb), Serial: sn}
	if out.Pair, err = tls.LoadX509KeyPair(out.CertFile, out.KeyFile); err != nil {
		t.Fatal(err)
	}
	return out
}

// Leaf issues a certificate for cn, a server's when server, valid for a
// day.
func (ca *CA) Leaf(t *testing.T, cn string, server bool) Issued {
	return ca.Issue(t, cn, server, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// Server issues the server certificate, valid for a day.
func (ca *CA) Server(t *testing.T) Issued { return ca.Leaf(t, "server", true) }

// Client issues a client certificate for cn, valid for a day.
func (ca *CA) Client(t *testing.T, cn string) Issued { return ca.Leaf(t, cn, false) }

// ServerTLS is a server config with the CA's server certificate; with
// clientCA set, it requires a client certificate that CA signed.
func (ca *CA) ServerTLS(t *testing.T, clientCA *CA) *tls.Config {
	c := &tls.Config{Certificates: []tls.Certificate{ca.Server(t).Pair}, MinVersion: tls.VersionTLS12}
	if clientCA != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = clientCA.pool
	}
	return c
}

// HTTPClient is an HTTPS client trusting the CA, presenting cert (none
// when nil).
func (ca *CA) HTTPClient(cert *Issued) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(cert)}, Timeout: 20 * time.Second}
}

// ClientTLS is what a test's own client (a consumer) uses.
func (ca *CA) ClientTLS(cert *Issued) *tls.Config {
	c := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.Pair}
	}
	return c
}
