package relay

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
)

// loadClientTLS reads a tls: block's files into a client TLS config. Every
// failure is a *ConfigError naming the key and the file, never the files'
// contents.
func loadClientTLS(t *config.TLSConfig, file string, now time.Time) (*tls.Config, error) {
	bad := func(key, format string, args ...any) error {
		return &config.ConfigError{File: file, Line: t.Line, Field: t.Field + "." + key, Msg: fmt.Sprintf(format, args...)}
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, bad("ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		n, err := appendCerts(pool, b)
		if err != nil {
			return nil, bad("ca_file", "%s: %v", t.CAFile, err)
		}
		if n == 0 {
			return nil, bad("ca_file", "%s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		for key, path := range map[string]string{"cert_file": t.CertFile, "key_file": t.KeyFile} {
			if _, err := os.Stat(path); err != nil {
				return nil, bad(key, "%v", err)
			}
		}
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// crypto/tls names what is wrong (no certificate, a key that
			// does not match) without quoting the key.
			return nil, bad("cert_file", "%s with key_file %s: %v", t.CertFile, t.KeyFile, err)
		}
		leaf := pair.Leaf
		if leaf == nil {
			if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
				return nil, bad("cert_file", "%s: %v", t.CertFile, err)
			}
		}
		if now.After(leaf.NotAfter) {
			return nil, bad("cert_file", "%s: the client certificate (%s) expired on %s", t.CertFile, leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(leaf.NotBefore) {
			return nil, bad("cert_file", "%s: the client certificate (%s) is not valid before %s", t.CertFile, leaf.Subject, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// appendCerts adds every CERTIFICATE block of a PEM bundle, and refuses a
// bundle with a block that does not parse instead of skipping it, as
// x509.CertPool.AppendCertsFromPEM would.
func appendCerts(pool *x509.CertPool, b []byte) (int, error) {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return n, fmt.Errorf("certificate %d: %v", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
}

// saslMechanism is the franz-go SASL mechanism of a sasl: block.
func saslMechanism(s *config.SASLConfig) sasl.Mechanism {
	switch s.Mechanism {
	case "PLAIN":
		return plain.Auth{User: s.User, Pass: s.Password.Reveal()}.AsMechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.User, Pass: s.Password.Reveal()}.AsSha512Mechanism()
	}
	return scram.Auth{User: s.User, Pass: s.Password.Reveal()}.AsSha256Mechanism()
}

// kafkaOpts are the client options of a Kafka route's security blocks.
func kafkaOpts(c *config.Config, k *config.KafkaRoute) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if k.TLS != nil {
		tc, err := loadClientTLS(k.TLS, c.File, time.Now())
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if k.SASL != nil {
		opts = append(opts, kgo.SASL(saslMechanism(k.SASL)))
	}
	return opts, nil
}

// natsOpts are the connection options of a NATS route's security keys.
func natsOpts(c *config.Config, n *config.NATSRoute) ([]natsgo.Option, error) {
	var opts []natsgo.Option
	if n.TLS != nil {
		tc, err := loadClientTLS(n.TLS, c.File, time.Now())
		if err != nil {
			return nil, err
		}
		opts = append(opts, natsgo.Secure(tc))
	}
	field := func(key string) *config.ConfigError {
		return &config.ConfigError{File: c.File, Line: n.Line, Field: n.Field + "." + key}
	}
	switch {
	case n.CredsFile != "":
		// nats.go reads the file at each connect; read it once now, so
		// that a missing or malformed file stops the start with its name.
		if err := checkCreds(n.CredsFile); err != nil {
			e := field("creds_file")
			e.Msg = err.Error()
			return nil, e
		}
		opts = append(opts, natsgo.UserCredentials(n.CredsFile))
	case n.NkeyFile != "":
		o, err := natsgo.NkeyOptionFromSeed(n.NkeyFile)
		if err != nil {
			e := field("nkey_file")
			e.Msg = fmt.Sprintf("%s: %v", n.NkeyFile, nkeyReason(err))
			return nil, e
		}
		opts = append(opts, o)
	case n.User != "":
		opts = append(opts, natsgo.UserInfo(n.User, n.Password.Reveal()))
	}
	return opts, nil
}

// nkeyReason keeps nats.go's reason and drops anything that could echo the
// seed.
func nkeyReason(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return errors.New("not an nkey seed file (a line starting with SU, as 'nk -gen user' writes)")
}

// checkCreds verifies a credentials file holds a user JWT and an nkey
// seed, the two sections nats.go needs.
func checkCreds(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %v", path, pe.Err)
		}
		return err
	}
	s := string(b)
	for _, want := range []string{"-----BEGIN NATS USER JWT-----", "-----BEGIN USER NKEY SEED-----"} {
		if !strings.Contains(s, want) {
			return fmt.Errorf("%s is not a NATS credentials file: no %q section ('nsc generate creds' writes one)", path, strings.Trim(want, "-"))
		}
	}
	return nil
}

// httpClient is the client of an https route with a tls: block, tuned as
// m2mhttp's own default client is: as many idle connections kept as
// requests may be in flight.
func httpClient(tc *tls.Config, maxConcurrent int) *http.Client {
	if maxConcurrent <= 0 {
		maxConcurrent = 16 // m2mhttp's default MaxConcurrent
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = maxConcurrent * 2
	t.MaxIdleConnsPerHost = maxConcurrent
	t.MaxConnsPerHost = maxConcurrent
	t.IdleConnTimeout = 90 * time.Second
	t.TLSClientConfig = tc
	return &http.Client{Transport: t}
}

// DestinationError is a destination that refused the relay's TLS or
// credentials at start: a configuration to fix, not an outage to wait out.
type DestinationError struct {
	Type        string // the route's message type
	Line        int
	Destination string // where, without secrets
	Reason      string // what failed, in the operator's words
	Err         error  // the underlying error
}

func (e *DestinationError) Error() string {
	return fmt.Sprintf("route %s (line %d): %s: %s: %v", e.Type, e.Line, e.Destination, e.Reason, e.Err)
}

func (e *DestinationError) Unwrap() error { return e.Err }

// probeTimeout bounds each start check.
const probeTimeout = 10 * time.Second

// checkHTTPS opens a connection to an https route's receiver with the
// route's TLS and sends a HEAD request (a receiver answers it 405, and no
// message travels): a refused certificate, either way, is a
// DestinationError; an unreachable receiver is only logged.
func checkHTTPS(ctx context.Context, r config.Route, client *http.Client, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, r.HTTP.URL, nil)
	if err != nil {
		return err
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err == nil {
		_ = resp.Body.Close()
		log.Info("TLS checked", "type", r.Type, "destination", r.Destination(), "tls", r.HTTP.TLS.DescribeHTTPS())
		return nil
	}
	if reason, ok := tlsRefusal(err, r.HTTP.TLS); ok {
		return &DestinationError{Type: r.Type, Line: r.Line, Destination: r.Destination(), Reason: reason, Err: unwrapURL(err)}
	}
	log.Warn("receiver unreachable at start; its messages wait and are retried", "type", r.Type, "destination", r.Destination(), "err", unwrapURL(err))
	return nil
}

// unwrapURL drops net/http's "Head \"url\":" prefix: the route is named
// already.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// tlsRefusal tells a TLS failure (the relay's config or the server's
// certificate is wrong) from the rest, and says which in the operator's
// words.
func tlsRefusal(err error, t *config.TLSConfig) (string, bool) {
	ca := "the system's CAs (set tls.ca_file to the CA that signed it)"
	if t != nil && t.CAFile != "" {
		ca = "ca_file " + t.CAFile
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	var ve *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &ua):
		return "the server's certificate is not signed by a CA in " + ca, true
	case errors.As(err, &he):
		return "the server's certificate is not valid for this host name", true
	case errors.As(err, &ci):
		return "the server's certificate is not valid", true
	case errors.As(err, &ve):
		return "the server's certificate did not verify against " + ca, true
	case errors.As(err, &rh):
		return "the server does not speak TLS on this port", true
	case errors.As(err, &op) && op.Op == "remote error":
		if t == nil || t.CertFile == "" {
			return "the server refused the TLS handshake; it may require a client certificate (tls.cert_file and tls.key_file)", true
		}
		return "the server refused the TLS handshake; it does not accept the client certificate " + t.CertFile, true
	}
	return "", false
}

// kafkaRefusal says whether a Kafka error is the cluster refusing the
// route's TLS or SASL, and how. eofTwice is set when the probe's
// connection was closed without an answer twice in a row: with SASL
// configured, that is how a broker refuses the credentials after the
// handshake (kfake does so, and so does Kafka when it gives no error code).
func kafkaRefusal(err error, k *config.KafkaRoute, eofTwice bool) (string, bool) {
	if reason, ok := tlsRefusal(err, k.TLS); ok {
		return reason, true
	}
	mech := "SASL"
	if k.SASL != nil {
		mech = "SASL " + k.SASL.Mechanism + " as user " + k.SASL.User
	}
	var first *kgo.ErrFirstReadEOF
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return mech + " refused by the broker (wrong user or password)", true
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return mech + ": the broker does not enable this mechanism", true
	case errors.Is(err, kerr.IllegalSaslState):
		return mech + ": the broker is not in a state to authenticate", true
	case errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TopicAuthorizationFailed):
		return "the cluster does not authorize this client", true
	case errors.As(err, &first):
		// franz-go's guess names TLS or SASL; say which key to add.
		switch msg := first.Error(); {
		case k.TLS == nil && strings.Contains(msg, "TLS"):
			return "the broker closed the connection at once: it probably requires TLS (add a tls: block)", true
		case k.SASL == nil && strings.Contains(msg, "SASL"):
			return "the broker closed the connection at once: it probably requires SASL (add a sasl: block)", true
		}
		return "the broker closed the connection at once (TLS or SASL refused)", true
	case eofTwice && k.SASL != nil && errors.Is(err, io.EOF):
		return mech + " refused by the broker: it closed the connection during authentication (wrong user, password or mechanism)", true
	}
	return "", false
}

// checkKafka asks the route's cluster for its metadata with the route's
// TLS and SASL, on a client of its own: refused credentials are a
// DestinationError; an unreachable cluster is only logged.
func checkKafka(ctx context.Context, r config.Route, opts []kgo.Opt, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	ping := func() error {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(r.Kafka.Brokers...)}, opts...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		return cl.Ping(ctx)
	}
	err := ping()
	eofTwice := false
	if errors.Is(err, io.EOF) {
		// One closed connection may be the network; a second one on a
		// fresh client is the broker's answer.
		err = ping()
		eofTwice = errors.Is(err, io.EOF)
	}
	if err == nil {
		log.Info("Kafka reached", "type", r.Type, "destination", r.Destination(), "security", r.Kafka.Describe())
		return nil
	}
	if reason, ok := kafkaRefusal(err, r.Kafka, eofTwice); ok {
		return &DestinationError{Type: r.Type, Line: r.Line, Destination: r.Destination(), Reason: reason, Err: err}
	}
	// The route's Sender checks its topic at Start and says it once, at
	// warning level, when the cluster does not answer.
	log.Debug("Kafka unreachable at start; its messages wait and are retried", "type", r.Type, "destination", r.Destination(), "err", err)
	return nil
}

// natsRefusal tells a NATS connect error that is the server refusing the
// route's TLS or credentials.
func natsRefusal(err error, n *config.NATSRoute) (string, bool) {
	if reason, ok := tlsRefusal(err, n.TLS); ok {
		return reason, true
	}
	who := "anonymous connections"
	switch {
	case n.CredsFile != "":
		who = "the credentials " + n.CredsFile
	case n.NkeyFile != "":
		who = "the nkey " + n.NkeyFile
	case n.User != "":
		who = "user " + n.User
	}
	switch {
	case errors.Is(err, natsgo.ErrAuthorization), errors.Is(err, natsgo.ErrAuthExpired), errors.Is(err, natsgo.ErrAuthRevoked),
		strings.Contains(strings.ToLower(err.Error()), "authorization violation"):
		return "the server refused " + who, true
	case errors.Is(err, natsgo.ErrSecureConnRequired):
		return "the server requires TLS (a tls:// URL or a tls: block)", true
	case errors.Is(err, natsgo.ErrSecureConnWanted):
		return "the server does not offer TLS", true
	case errors.Is(err, natsgo.ErrNkeysNotSupported):
		return "the server does not support nkeys", true
	}
	return "", false
}
