package receive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// What `mensageria receive` re-reads without a restart: the tokens file
// (on SIGHUP, and when its content changes) and the TLS files (on SIGHUP).
// A reload that fails changes nothing: the daemon goes on with what it had.

// credentials holds what the daemon accepts: the Receiver's tokens and the
// TLS material, and reloads them.
type credentials struct {
	cfg *config.ReceiveConfig
	rc  *m2mhttp.Receiver
	log *slog.Logger
	// reloaded counts reloads by result ("ok", "error").
	reloaded func(result string)

	mu      sync.Mutex
	fileSum [sha256.Size]byte // the tokens file content in force
	lastErr string            // the last refusal logged, so a lasting one is logged once

	tls atomic.Pointer[tls.Config]
}

// tokens reads the tokens in force: the config's own and the file's. It
// returns the file's digest, to tell a change from the same content.
func (c *credentials) tokens() ([]string, [sha256.Size]byte, error) {
	out := slices.Clone(c.cfg.Tokens)
	var sum [sha256.Size]byte
	if c.cfg.TokensFile != "" {
		b, err := readBounded(c.cfg.TokensFile, config.MaxTokensFile)
		if err != nil {
			return nil, sum, &config.TokensFileError{File: c.cfg.TokensFile, Reason: err.Error()}
		}
		sum = sha256.Sum256(b)
		fromFile, err := config.ParseTokens(c.cfg.TokensFile, b)
		if err != nil {
			return nil, sum, err
		}
		for _, t := range fromFile {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 {
		return nil, sum, &config.TokensFileError{File: c.cfg.TokensFile, Reason: "it holds no token, and receive.tokens none: every request would be refused"}
	}
	return out, sum, nil
}

// reloadTokens applies the tokens file again: always when forced (SIGHUP),
// else only when its content changed.
func (c *credentials) reloadTokens(force bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	toks, sum, err := c.tokens()
	if err == nil && !force && sum == c.fileSum {
		c.lastErr = ""
		return
	}
	if err == nil {
		err = c.rc.SetTokens(toks)
	}
	if err != nil {
		c.reloaded("error")
		if msg := err.Error(); force || msg != c.lastErr {
			c.lastErr = msg
			c.log.Error("token reload refused; the tokens in force stay", "err", err, "tokens", c.rc.Tokens())
		}
		return
	}
	c.fileSum, c.lastErr = sum, ""
	c.reloaded("ok")
	c.log.Info("tokens reloaded", "tokens", len(toks), "file", c.cfg.TokensFile)
}

// loadTLS reads the TLS files into a server config.
func loadTLS(t *config.ReceiveTLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cert_file %s, key_file %s: %w", t.CertFile, t.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if t.ClientCAFile != "" {
		pem, err := readBounded(t.ClientCAFile, 4<<20)
		if err != nil {
			return nil, fmt.Errorf("tls: client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client_ca_file %s holds no PEM certificate", t.ClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// reloadTLS reads the TLS files again; connections from then on use them.
func (c *credentials) reloadTLS() {
	if c.cfg.TLS == nil {
		return
	}
	cfg, err := loadTLS(c.cfg.TLS)
	if err != nil {
		c.reloaded("error")
		c.log.Error("TLS reload refused; the certificates in force stay", "err", err)
		return
	}
	c.tls.Store(cfg)
	c.reloaded("ok")
	c.log.Info("TLS certificates reloaded", "cert_file", c.cfg.TLS.CertFile)
}

// serverTLS is the listener's config: each handshake takes the material in
// force.
func (c *credentials) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return c.tls.Load(), nil
		},
	}
}

// watch reloads on each signal of hup, and the tokens file every
// TokensCheck, until ctx ends.
func (c *credentials) watch(ctx context.Context, hup <-chan os.Signal) {
	var tick <-chan time.Time
	if c.cfg.TokensFile != "" && c.cfg.TokensCheck > 0 {
		t := time.NewTicker(c.cfg.TokensCheck)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			c.log.Info("SIGHUP: reloading tokens and certificates")
			c.reloadTokens(true)
			c.reloadTLS()
		case <-tick:
			c.reloadTokens(false)
		}
	}
}

// readBounded reads a whole file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return buf.Bytes(), nil
}
