package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/redact"
)

// ReceiveConfig is a validated config file of `mensageria receive`
// (docs/config.md, "Receive").
type ReceiveConfig struct {
	// Database is a postgres:// (or postgresql://) URL, a mysql:// (or
	// mariadb://) URL, or sqlite:PATH:
	// the receiving app's database, where the inbox queue lives.
	Database string
	Schema   string
	// App owns the consumers in the ownership catalog.
	App string

	Listen string
	// Path is where deliveries are POSTed; "/" takes every path but the
	// probes'.
	Path string
	// Tokens are fixed for the life of the process; TokensFile holds more,
	// re-read on SIGHUP and, every TokensCheck (0: never), when it changed.
	Tokens      []string
	TokensFile  string
	TokensCheck time.Duration
	TLS         *ReceiveTLS // nil: plain HTTP

	MaxBodyBytes  int64
	MaxBatchItems int
	MaxInFlight   int

	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration

	// NotifyInterval is the least time between two notifications of one
	// consumer (PostgreSQL).
	NotifyInterval time.Duration
	PurgeInterval  time.Duration

	Consumers []ReceiveConsumer
}

// ReceiveTLS is the receive.tls block: files read at start and on SIGHUP.
type ReceiveTLS struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, makes a client certificate that chains to
	// one of its CAs a condition of every connection.
	ClientCAFile string
}

// ReceiveConsumer is one consumer: the types it takes and its dedup window.
type ReceiveConsumer struct {
	Name   string
	Types  []string
	Window time.Duration
	Line   int
}

// Defaults of the receive: block (docs/config.md).
const (
	defaultReceiveListen        = ":8080"
	defaultTokensCheck          = 5 * time.Second
	defaultReceiveMaxBody       = 1 << 20
	defaultReceiveMaxInFlight   = 64
	defaultReadHeaderTimeout    = 5 * time.Second
	defaultReadTimeout          = 30 * time.Second
	defaultWriteTimeout         = 60 * time.Second
	defaultIdleTimeout          = 120 * time.Second
	defaultReceiveShutdown      = 30 * time.Second
	defaultNotifyInterval       = 10 * time.Millisecond
	defaultReceivePurgeInterval = time.Minute
)

// ProbePaths are served by the daemon itself, never taken as deliveries:
// receive.path may not be one of them.
var ProbePaths = []string{"/healthz", "/readyz", "/metrics"}

// ConsumerOf returns the consumer that takes typ.
func (c *ReceiveConfig) ConsumerOf(typ string) (ReceiveConsumer, bool) {
	for _, k := range c.Consumers {
		for _, t := range k.Types {
			if t == typ {
				return k, true
			}
		}
	}
	return ReceiveConsumer{}, false
}

type rawReceiveFile struct {
	Database  string        `yaml:"database"`
	Schema    string        `yaml:"schema"`
	App       string        `yaml:"app"`
	Receive   *rawReceive   `yaml:"receive"`
	Consumers []rawConsumer `yaml:"consumers"`
}

type rawReceive struct {
	Listen            string        `yaml:"listen"`
	Path              string        `yaml:"path"`
	Tokens            []string      `yaml:"tokens"`
	TokensFile        string        `yaml:"tokens_file"`
	TokensCheck       string        `yaml:"tokens_check"`
	TLS               *rawServerTLS `yaml:"tls"`
	MaxBodyBytes      string        `yaml:"max_body_bytes"`
	MaxBatchItems     string        `yaml:"max_batch_items"`
	MaxInFlight       string        `yaml:"max_in_flight"`
	ReadHeaderTimeout string        `yaml:"read_header_timeout"`
	ReadTimeout       string        `yaml:"read_timeout"`
	WriteTimeout      string        `yaml:"write_timeout"`
	IdleTimeout       string        `yaml:"idle_timeout"`
	ShutdownTimeout   string        `yaml:"shutdown_timeout"`
	NotifyInterval    string        `yaml:"notify_interval"`
	PurgeInterval     string        `yaml:"purge_interval"`
}

type rawServerTLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

type rawConsumer struct {
	Name   string   `yaml:"name"`
	Types  []string `yaml:"types"`
	Window string   `yaml:"window"`
}

func init() {
	// Unknown keys are reported with the keys known in their block.
	sections["rawReceiveFile"] = reflect.TypeFor[rawReceiveFile]()
	sections["rawReceive"] = reflect.TypeFor[rawReceive]()
	sections["rawServerTLS"] = reflect.TypeFor[rawServerTLS]()
	sections["rawConsumer"] = reflect.TypeFor[rawConsumer]()
}

// LoadReceiveConfig reads and validates a receive config file; env looks
// variables up (os.LookupEnv when nil). Files the config names (tokens,
// certificates) are not read here but when the daemon starts.
func LoadReceiveConfig(path string, env func(string) (string, bool)) (*ReceiveConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{File: path, Msg: err.Error()}
	}
	return ParseReceiveConfig(path, b, env)
}

// IsReceive tells a receive daemon's config file (its bytes) from a
// relay's by its top-level keys: consumers: or receive:, and no routes:.
// A file it cannot parse is left to the relay config's parser, which says
// why.
func IsReceive(data []byte) bool {
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, routes := top["routes"]
	_, consumers := top["consumers"]
	_, receive := top["receive"]
	return !routes && (consumers || receive)
}

// FromReceive is the config an operator command (status, migrate, owners,
// dead, doubt) reads from a receive daemon's file: its database, schema
// and app, no routes, and the receive config itself in Receive.
func FromReceive(file string, rc *ReceiveConfig) *Config {
	return &Config{File: file, Database: rc.Database, Schema: rc.Schema, App: rc.App, Receive: rc}
}

// ParseReceiveConfig decodes and validates the bytes of a receive config
// file named name.
func ParseReceiveConfig(name string, data []byte, env func(string) (string, bool)) (*ReceiveConfig, error) {
	var raw rawReceiveFile
	p, err := decodeConfigFile(name, data, env, &raw, "database, app and consumers", "database:, app:, receive:, consumers:")
	if err != nil {
		return nil, err
	}
	return p.buildReceive(&raw)
}

func (p *parser) buildReceive(raw *rawReceiveFile) (*ReceiveConfig, error) {
	c := &ReceiveConfig{}
	var err error
	do := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	str := func(dst *string, v string, path ...any) {
		do(func() (e error) { *dst, e = p.expand(v, path...); return })
	}
	str(&c.Database, raw.Database, "database")
	str(&c.Schema, raw.Schema, "schema")
	str(&c.App, raw.App, "app")
	do(func() error { return p.checkDatabase(c.Database) })
	do(func() error {
		if c.Schema == "" {
			c.Schema = "mensageria"
		} else if !schemaName.MatchString(c.Schema) {
			return p.errAt([]any{"schema"}, "%q must be a lower-case SQL identifier (a-z, 0-9, _; at most 63)", c.Schema)
		}
		if c.App == "" {
			return p.errAt([]any{"app"}, "required: the name of the receiving application (it owns the consumers)")
		}
		if _, nerr := mensageria.New(nopDriver{}, &mensageria.Config{App: c.App}); nerr != nil {
			var ce *mensageria.ConfigError
			if errors.As(nerr, &ce) {
				return p.errAt([]any{"app"}, "%s", ce.Reason)
			}
			return &ConfigError{File: p.name, Msg: nerr.Error()}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r := raw.Receive
	if r == nil {
		r = &rawReceive{}
	}
	if err := p.receiveBlock(r, c); err != nil {
		return nil, err
	}
	if err := p.consumers(raw.Consumers, c); err != nil {
		return nil, err
	}
	return c, nil
}

// checkDatabase applies the relay config's rules to the database URL.
func (p *parser) checkDatabase(db string) error {
	switch {
	case db == "":
		return p.errAt([]any{"database"}, "required: a postgres://user@host/db URL, a mysql://user@host/db URL or sqlite:/path/file.db (the receiving app's database)")
	case strings.HasPrefix(db, "sqlite:"):
		if strings.TrimPrefix(db, "sqlite:") == "" {
			return p.errAt([]any{"database"}, "sqlite: needs a file path, e.g. sqlite:/var/lib/app/app.db")
		}
	case IsMySQL(db):
		if why := checkMySQLURL(db); why != "" {
			return p.errAt([]any{"database"}, "%s", why)
		}
	case strings.HasPrefix(db, "postgres://"), strings.HasPrefix(db, "postgresql://"):
		if u, perr := url.Parse(db); perr != nil || u.Host == "" {
			return p.errAt([]any{"database"}, "not a valid PostgreSQL URL (postgres://user:password@host:5432/db)")
		}
	default:
		return p.errAt([]any{"database"}, "unsupported database %q: use postgres://..., mysql://... (or mariadb://...) or sqlite:/path/file.db", redact.Text(redact.URL(db)))
	}
	return nil
}

// receiveKey is the path of a key of the receive: block.
func receiveKey(k string, more ...any) []any { return append([]any{"receive", k}, more...) }

func (p *parser) receiveBlock(r *rawReceive, c *ReceiveConfig) error {
	var err error
	do := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	dur := func(dst *time.Duration, v string, def time.Duration, key string) {
		do(func() error {
			d, e := p.duration(v, receiveKey(key)...)
			if d == 0 {
				d = def
			}
			*dst = d
			return e
		})
	}
	p.receiveAddress(r, c, do)
	p.receiveTokens(r, c, do)
	p.receiveTLS(r, c, do)
	do(func() error {
		// Under 1 KiB not even one envelope with its id, type, key and
		// time fits; a sender's batch bytes cannot go lower either.
		n, e := p.int(r.MaxBodyBytes, 1024, receiveKey("max_body_bytes")...)
		c.MaxBodyBytes = int64(n)
		if n == 0 {
			c.MaxBodyBytes = defaultReceiveMaxBody
		}
		return e
	})
	do(func() (e error) {
		c.MaxBatchItems, e = p.int(r.MaxBatchItems, 1, receiveKey("max_batch_items")...)
		return
	})
	do(func() error {
		n, e := p.int(r.MaxInFlight, 1, receiveKey("max_in_flight")...)
		c.MaxInFlight = n
		if n == 0 {
			c.MaxInFlight = defaultReceiveMaxInFlight
		}
		return e
	})
	dur(&c.ReadHeaderTimeout, r.ReadHeaderTimeout, defaultReadHeaderTimeout, "read_header_timeout")
	dur(&c.ReadTimeout, r.ReadTimeout, defaultReadTimeout, "read_timeout")
	dur(&c.WriteTimeout, r.WriteTimeout, defaultWriteTimeout, "write_timeout")
	dur(&c.IdleTimeout, r.IdleTimeout, defaultIdleTimeout, "idle_timeout")
	dur(&c.ShutdownTimeout, r.ShutdownTimeout, defaultReceiveShutdown, "shutdown_timeout")
	dur(&c.NotifyInterval, r.NotifyInterval, defaultNotifyInterval, "notify_interval")
	dur(&c.PurgeInterval, r.PurgeInterval, defaultReceivePurgeInterval, "purge_interval")
	do(func() error {
		switch {
		case c.WriteTimeout <= c.ReadTimeout:
			return p.errAt(receiveKey("write_timeout"), "%s must be longer than read_timeout (%s): it runs from the end of the headers to the end of the answer, the body's reading included", c.WriteTimeout, c.ReadTimeout)
		case c.ReadHeaderTimeout > c.ReadTimeout:
			return p.errAt(receiveKey("read_header_timeout"), "%s is longer than read_timeout (%s), which bounds the headers too", c.ReadHeaderTimeout, c.ReadTimeout)
		}
		return nil
	})
	return err
}

// receiveAddress reads listen and path.
func (p *parser) receiveAddress(r *rawReceive, c *ReceiveConfig, do func(func() error)) {
	do(func() (e error) {
		if c.Listen, e = p.expand(r.Listen, receiveKey("listen")...); e != nil {
			return e
		}
		if c.Listen == "" {
			c.Listen = defaultReceiveListen
		}
		if _, _, serr := net.SplitHostPort(c.Listen); serr != nil {
			return p.errAt(receiveKey("listen"), "%q is not host:port (:8080 listens on every address)", c.Listen)
		}
		return nil
	})
	do(func() (e error) {
		if c.Path, e = p.expand(r.Path, receiveKey("path")...); e != nil {
			return e
		}
		switch {
		case c.Path == "":
			c.Path = "/"
		case !strings.HasPrefix(c.Path, "/") || strings.ContainsAny(c.Path, "?#{} \t") || !isPrintableASCII(c.Path):
			return p.errAt(receiveKey("path"), "%q must be a URL path starting with / (no query, no spaces)", c.Path)
		}
		for _, pp := range ProbePaths {
			if c.Path == pp {
				return p.errAt(receiveKey("path"), "%s is the daemon's own probe; deliveries need another path", pp)
			}
		}
		return nil
	})
}

// receiveTokens reads the Bearer tokens senders present: tokens,
// tokens_file and how often the file is read again.
func (p *parser) receiveTokens(r *rawReceive, c *ReceiveConfig, do func(func() error)) {
	for i, t := range r.Tokens {
		do(func() error {
			v, e := p.expand(t, receiveKey("tokens", i)...)
			if e != nil {
				return e
			}
			if reason := badToken(v); reason != "" {
				return p.errAt(receiveKey("tokens", i), "%s", reason)
			}
			c.Tokens = append(c.Tokens, v)
			return nil
		})
	}
	do(func() (e error) { c.TokensFile, e = p.expand(r.TokensFile, receiveKey("tokens_file")...); return })
	do(func() error {
		if len(c.Tokens) == 0 && c.TokensFile == "" {
			return p.errAt([]any{"receive", "tokens"}, "required: tokens: [${TOKEN}] or tokens_file: PATH, the Bearer tokens senders present")
		}
		v, e := p.expand(r.TokensCheck, receiveKey("tokens_check")...)
		if e != nil {
			return e
		}
		switch v {
		case "":
			c.TokensCheck = defaultTokensCheck
		case "off":
			c.TokensCheck = 0
		default:
			d, perr := time.ParseDuration(v)
			if perr != nil || d <= 0 {
				return p.errAt(receiveKey("tokens_check"), "%q is not a positive duration (5s) or off", v)
			}
			c.TokensCheck = d
		}
		return nil
	})
}

// receiveTLS reads the tls: block, when there is one.
func (p *parser) receiveTLS(r *rawReceive, c *ReceiveConfig, do func(func() error)) {
	if r.TLS == nil {
		return
	}
	t := &ReceiveTLS{}
	str := func(dst *string, v, key string) {
		do(func() (e error) { *dst, e = p.expand(v, "receive", "tls", key); return })
	}
	str(&t.CertFile, r.TLS.CertFile, "cert_file")
	str(&t.KeyFile, r.TLS.KeyFile, "key_file")
	str(&t.ClientCAFile, r.TLS.ClientCAFile, "client_ca_file")
	do(func() error {
		switch {
		case t.CertFile == "":
			return p.errAt([]any{"receive", "tls", "cert_file"}, "required with tls: the server's certificate (PEM, with its chain)")
		case t.KeyFile == "":
			return p.errAt([]any{"receive", "tls", "key_file"}, "required with tls: the certificate's private key (PEM)")
		}
		return nil
	})
	c.TLS = t
}

func (p *parser) consumers(raws []rawConsumer, c *ReceiveConfig) error {
	if len(raws) == 0 {
		return p.errAt([]any{"consumers"}, "required: at least one consumer (consumers: - name: ... types: [...]), the types this app takes")
	}
	names := map[string]int{}
	types := map[string]int{}
	for i, rc := range raws {
		at := func(k string, more ...any) []any { return append([]any{"consumers", i, k}, more...) }
		k := ReceiveConsumer{Line: p.keyLine("consumers", i)}
		var err error
		if k.Name, err = p.expand(rc.Name, at("name")...); err != nil {
			return err
		}
		switch {
		case k.Name == "" || len(k.Name) > 200:
			return p.errAt(at("name"), "required: 1 to 200 bytes naming the consumer (its dedup records and queue rows carry it)")
		case !isPrintableText(k.Name):
			return p.errAt(at("name"), "%q must be printable text", k.Name)
		}
		if first, dup := names[k.Name]; dup {
			return p.errAt(at("name"), "consumer %q is already consumers[%d]", k.Name, first)
		}
		names[k.Name] = i
		if len(rc.Types) == 0 {
			return p.errAt(at("types"), "required: the message types consumer %q takes (types: [order.created])", k.Name)
		}
		for j, t := range rc.Types {
			v, err := p.expand(t, at("types", j)...)
			if err != nil {
				return err
			}
			if v == "" || len(v) > 200 || !isPrintableText(v) {
				return p.errAt(at("types", j), "a message type is 1 to 200 bytes of printable text")
			}
			if first, dup := types[v]; dup {
				return p.errAt(at("types", j), "type %q is already taken by consumers[%d]: each type goes to one consumer", v, first)
			}
			types[v] = i
			k.Types = append(k.Types, v)
		}
		if k.Window, err = p.duration(rc.Window, at("window")...); err != nil {
			return err
		}
		if k.Window == 0 {
			k.Window = mensageria.DefaultInboxWindow
		}
		c.Consumers = append(c.Consumers, k)
	}
	return nil
}

// minTokenLen is the shortest bearer token the receive daemon accepts, as
// the console's: a short token is guessed, throttle or not (`openssl rand
// -hex 32` makes a good one).
const minTokenLen = 16

// badToken says why t cannot be a bearer token ("" when it can).
func badToken(t string) string {
	if t == "" {
		return "a token must not be empty (is its variable set to nothing?)"
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return "a token is printable ASCII without spaces"
		}
	}
	if len(t) < minTokenLen {
		return fmt.Sprintf("a token is at least %d characters (this one has %d; openssl rand -hex 32 makes one)", minTokenLen, len(t))
	}
	return ""
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// isPrintableText is valid UTF-8 with no control characters.
func isPrintableText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}
