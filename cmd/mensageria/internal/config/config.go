// Package config is the mensageria command's YAML configuration: the
// relay's file (routes, the relay: block, the console: block) and the
// receive daemon's (the receive: block and its consumers), decoded into
// typed values and validated, every mistake located by file, line and
// key path (docs/config.md). It reads files only to decode them: the
// files a config names (certificates, tokens, credentials) are read by the
// daemons when they start, and nothing here opens a database or a
// connection.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/redact"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// Config is a validated config file.
type Config struct {
	// File is the name the config was read from, for messages about its
	// fields found after parsing (a CA file that holds no certificate).
	File string
	// Database is a postgres:// (or postgresql://) URL, a mysql:// (or
	// mariadb://) URL, or sqlite:PATH.
	Database string
	Schema   string
	App      string
	Routes   []Route
	// Relay is the relay: block, as the library's settings of the relay
	// it names (App, Registry and the rest are left zero: ClientConfig
	// fills App); zero values take the library's defaults.
	Relay mensageria.Config
	// Console is the console: block, nil when the file has none.
	Console *ConsoleConfig
	// Warnings are the deprecated spellings the file still uses, each
	// located as an error would be; the command prints them and goes on.
	Warnings []string
	// Receive is the receive daemon's config this one was read from, when
	// an operator command was given one (FromReceive): its database,
	// schema and app, no routes. Nil for a relay's config.
	Receive *ReceiveConfig
}

// Route is one message type this app sends, and how.
type Route struct {
	Type string
	// Transport is the one transport block present: http, kafka or nats.
	Transport string
	HTTP      *HTTPRoute
	Kafka     *KafkaRoute
	NATS      *NATSRoute
	Ordered   bool
	// MaxRate bounds the messages per second the relay hands the route
	// (mensageria.MaxRate); 0: no limit.
	MaxRate float64
	// Delivery is the route's mode (delivery: at_least_once, the default,
	// or at_most_once for a receiver that is not idempotent).
	Delivery mensageria.DeliveryMode
	Line     int
}

// KafkaRoute is a kafka: block: the idempotent producer to one topic, or
// with TransactionalID the transactional sender (exactly once into Kafka).
type KafkaRoute struct {
	Brokers         []string
	Topic           string
	TransactionalID string
	TLS             *TLSConfig  // nil: plaintext
	SASL            *SASLConfig // nil: no authentication
}

// NATSRoute is a nats: block: JetStream publishes to one subject.
type NATSRoute struct {
	URL     string
	Subject string
	Stream  string // optional: verified at start, and every publish expects it
	TLS     *TLSConfig
	// At most one way to authenticate: a credentials file (JWT and seed),
	// an nkey seed file, or a user and password.
	CredsFile string
	NkeyFile  string
	User      string
	Password  Secret
	Field     string // where the block is in the file, for messages
	Line      int
}

// HTTPRoute is an http: block.
type HTTPRoute struct {
	URL           string
	Token         Secret
	Timeout       time.Duration
	MaxConcurrent int
	// Batch sends each claim as batch requests (m2mhttp.NewBatchSender),
	// at most MaxBatchItems envelopes and MaxBatchBytes bytes each (0: the
	// library's defaults).
	Batch         bool
	MaxBatchItems int
	MaxBatchBytes int
	TLS           *TLSConfig // only with an https:// URL
	// NotApplied are the statuses that prove the receiver did not apply a
	// request (at_most_once only); PayloadOnly posts the payload itself;
	// Reconcile is the probe of messages in doubt (at_most_once only).
	NotApplied  []int
	PayloadOnly bool
	Reconcile   *ReconcileProbe
}

// ReconcileProbe is an http route's reconcile: block.
type ReconcileProbe struct {
	URL        string
	Token      Secret // default: the route's token
	Applied    []int
	NotApplied []int
	Timeout    time.Duration
}

// TLSConfig is a tls: block: how the relay verifies the destination and,
// with a client certificate, proves who it is. The files are read when a
// relay starts, not when the config is parsed, so commands that never
// connect work where the files are absent.
type TLSConfig struct {
	CAFile   string // PEM bundle of the CAs to trust; empty: the system's
	CertFile string // PEM client certificate (chain), with KeyFile
	KeyFile  string
	Field    string // where the block is in the file, for messages
	Line     int
}

// SASLConfig is a Kafka route's sasl: block.
type SASLConfig struct {
	Mechanism string // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	User      string
	Password  Secret
	Field     string
	Line      int
}

// Secret is a value from the file that must never be shown: it prints as
// "xxxxx" through fmt, slog and encoding/json. Reveal returns it.
type Secret string

// Reveal returns the secret itself, for the one place that sends it.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) String() string                { return redacted(s) }
func (s Secret) LogValue() slog.Value          { return slog.StringValue(redacted(s)) }
func (s Secret) MarshalText() ([]byte, error)  { return []byte(redacted(s)), nil }
func (s Secret) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, redacted(s)) }
func redacted(s Secret) string {
	if s == "" {
		return ""
	}
	return "xxxxx"
}

// Backend returns "postgres", "mysql" or "sqlite".
func (c *Config) Backend() string {
	if strings.HasPrefix(c.Database, "sqlite:") {
		return "sqlite"
	}
	if IsMySQL(c.Database) {
		return "mysql"
	}
	return "postgres"
}

// SQLitePath is the file of a sqlite: database.
func (c *Config) SQLitePath() string { return strings.TrimPrefix(c.Database, "sqlite:") }

// Route returns the route of a type.
func (c *Config) Route(typ string) (Route, bool) {
	for _, r := range c.Routes {
		if r.Type == typ {
			return r, true
		}
	}
	return Route{}, false
}

// Types lists the routed types in file order.
func (c *Config) Types() []string {
	out := make([]string, len(c.Routes))
	for i, r := range c.Routes {
		out[i] = r.Type
	}
	return out
}

// ClientConfig is the library config the file describes (without the
// registry, which needs the transports).
func (c *Config) ClientConfig() mensageria.Config {
	cc := c.Relay
	cc.App = c.App
	return cc
}

// Effective is the library config the file describes with every default
// filled in, by the library itself: the figures the relay really runs with.
func (c *Config) Effective() mensageria.Config { return c.OfflineClient().Config() }

// OfflineClient is a client of the config that never touches a database,
// for the figures the library derives from it (its effective config, its
// retry horizon). It panics on a config ParseConfig would refuse.
func (c *Config) OfflineClient() *mensageria.Client {
	cc := c.ClientConfig()
	cl, err := mensageria.New(nopDriver{}, &cc)
	if err != nil {
		panic("config: a parsed config the library refuses: " + err.Error()) // ParseConfig ran the same check
	}
	return cl
}

// nopDriver lets validation run the library's own checks; New never calls
// a driver method.
type nopDriver struct{ driver.Driver }

// ConfigError is a config file mistake, located by line.
type ConfigError struct {
	File  string
	Line  int    // 0 when the file as a whole is wrong
	Field string // the dotted path of the field, e.g. routes[0].http.url
	Msg   string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(err, mensageria.ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == mensageria.ErrConfig }

// The file's shape. Every leaf is a string so that ${ENV} may stand for any
// value (a number or a duration too); the strings are parsed after the
// expansion, each error located through the node tree.
type rawConfig struct {
	Database string      `yaml:"database"`
	Schema   string      `yaml:"schema"`
	App      string      `yaml:"app"`
	Routes   []rawRoute  `yaml:"routes"`
	Relay    *rawRelay   `yaml:"relay"`
	Console  *rawConsole `yaml:"console"`
}

type rawRoute struct {
	Type     string    `yaml:"type"`
	HTTP     *rawHTTP  `yaml:"http"`
	Kafka    *rawKafka `yaml:"kafka"`
	NATS     *rawNATS  `yaml:"nats"`
	Ordering string    `yaml:"ordering"`
	MaxRate  string    `yaml:"max_rate"`
	Delivery string    `yaml:"delivery"`
}

type rawKafka struct {
	Brokers         []string `yaml:"brokers"`
	Topic           string   `yaml:"topic"`
	TransactionalID string   `yaml:"transactional_id"`
	TLS             *rawTLS  `yaml:"tls"`
	SASL            *rawSASL `yaml:"sasl"`
}

type rawNATS struct {
	URL       string  `yaml:"url"`
	Subject   string  `yaml:"subject"`
	Stream    string  `yaml:"stream"`
	TLS       *rawTLS `yaml:"tls"`
	CredsFile string  `yaml:"creds_file"`
	NkeyFile  string  `yaml:"nkey_file"`
	User      string  `yaml:"user"`
	Password  string  `yaml:"password"`
}

type rawHTTP struct {
	URL           string        `yaml:"url"`
	Token         string        `yaml:"token"`
	Timeout       string        `yaml:"timeout"`
	MaxConcurrent string        `yaml:"max_concurrent"`
	Batch         string        `yaml:"batch"`
	MaxBatchItems string        `yaml:"max_batch_items"`
	MaxBatchBytes string        `yaml:"max_batch_bytes"`
	TLS           *rawTLS       `yaml:"tls"`
	NotApplied    []string      `yaml:"not_applied"`
	PayloadOnly   string        `yaml:"payload_only"`
	Reconcile     *rawReconcile `yaml:"reconcile"`
}

type rawReconcile struct {
	URL        string   `yaml:"url"`
	Token      string   `yaml:"token"`
	Applied    []string `yaml:"applied"`
	NotApplied []string `yaml:"not_applied"`
	Timeout    string   `yaml:"timeout"`
}

type rawTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

type rawSASL struct {
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
}

type rawRelay struct {
	Batch        string `yaml:"batch"`
	Concurrency  string `yaml:"concurrency"`
	Lease        string `yaml:"lease"`
	MaxAttempts  string `yaml:"max_attempts"`
	Election     string `yaml:"election"`
	PollOnly     string `yaml:"poll_only"`
	PollInterval string `yaml:"poll_interval"`
	BackoffBase  string `yaml:"backoff_base"`
	BackoffMax   string `yaml:"backoff_max"`

	RetryAfterCeiling     string `yaml:"retry_after_ceiling"`
	RouteFailureThreshold string `yaml:"route_failure_threshold"`
	RoutePause            string `yaml:"route_pause"`
	RoutePauseMax         string `yaml:"route_pause_max"`
	ReconcileInterval     string `yaml:"reconcile_interval"`
}

// sections names each block type for unknown-key messages.
var sections = map[string]reflect.Type{
	"rawConfig":    reflect.TypeFor[rawConfig](),
	"rawRoute":     reflect.TypeFor[rawRoute](),
	"rawHTTP":      reflect.TypeFor[rawHTTP](),
	"rawKafka":     reflect.TypeFor[rawKafka](),
	"rawNATS":      reflect.TypeFor[rawNATS](),
	"rawRelay":     reflect.TypeFor[rawRelay](),
	"rawTLS":       reflect.TypeFor[rawTLS](),
	"rawSASL":      reflect.TypeFor[rawSASL](),
	"rawConsole":   reflect.TypeFor[rawConsole](),
	"rawReconcile": reflect.TypeFor[rawReconcile](),
}

// LoadConfig reads and validates a config file; env looks variables up
// (os.LookupEnv when nil).
func LoadConfig(path string, env func(string) (string, bool)) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{File: path, Msg: err.Error()}
	}
	return ParseConfig(path, b, env)
}

// ParseConfig decodes and validates the bytes of a config file named name.
func ParseConfig(name string, data []byte, env func(string) (string, bool)) (*Config, error) {
	var raw rawConfig
	p, err := decodeConfigFile(name, data, env, &raw, "database, app and routes", "database:, app:, routes:, ...")
	if err != nil {
		return nil, err
	}
	return p.build(&raw)
}

// decodeConfigFile decodes the one YAML document of the config file name
// into raw, refusing unknown keys, and returns the parser that knows where
// each of its values came from. needs and shape complete the messages for
// an empty file and for one that is not a mapping.
func decodeConfigFile(name string, data []byte, env func(string) (string, bool), raw any, needs, shape string) (*parser, error) {
	if env == nil {
		env = os.LookupEnv
	}
	p := &parser{name: name, env: env, nonce: fmt.Sprintf("%08x", rand.Uint32())}
	data = p.protect(data)
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, p.yamlErr(err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return nil, &ConfigError{File: name, Msg: "the file is empty; it needs at least " + needs}
	}
	p.root = root.Content[0]
	if p.root.Kind != yaml.MappingNode {
		return nil, &ConfigError{File: name, Line: p.root.Line, Msg: "the file must be a mapping (" + shape + ")"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(raw); err != nil {
		return nil, p.yamlErr(err)
	}
	// A second document would be silently ignored; refuse it.
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &ConfigError{File: name, Line: extra.Line, Msg: "only one YAML document is allowed"}
	}
	return p, nil
}

type parser struct {
	name     string
	env      func(string) (string, bool)
	root     *yaml.Node
	nonce    string
	warnings []string
}

// deprecated records a spelling the file may still use but should not.
func (p *parser) deprecated(path []any, format string, args ...any) {
	p.warnings = append(p.warnings, p.errAt(path, format, args...).Error())
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+\.(\w+)$`)

// yamlErr rewrites yaml.v3's messages in the form every other config error
// has: file:line: field: message.
func (p *parser) yamlErr(err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []*ConfigError
	for _, m := range msgs {
		ce := &ConfigError{File: p.name, Msg: strings.TrimPrefix(m, "yaml: ")}
		defer func() { ce.Msg, ce.Field = p.unprotect(ce.Msg), p.unprotect(ce.Field) }()
		if g := yamlLine.FindStringSubmatch(ce.Msg); g != nil {
			ce.Line, _ = strconv.Atoi(g[1])
			ce.Msg = g[2]
			if u := unknownField.FindStringSubmatch(ce.Msg); u != nil {
				ce.Field = p.pathAt(ce.Line, u[1])
				ce.Msg = fmt.Sprintf("unknown key %q (known keys here: %s)", u[1], strings.Join(knownKeys(sections[u[2]]), ", "))
			} else if strings.Contains(ce.Msg, "cannot unmarshal") {
				kind := yaml.Kind(0)
				switch {
				case strings.Contains(ce.Msg, "unmarshal !!map"):
					kind = yaml.MappingNode
				case strings.Contains(ce.Msg, "unmarshal !!seq"):
					kind = yaml.SequenceNode
				default:
					kind = yaml.ScalarNode
				}
				ce.Field = p.pathAtKind(ce.Line, "", kind)
				ce.Msg = friendlyUnmarshal(ce.Msg)
			}
		}
		out = append(out, ce)
	}
	if len(out) == 1 {
		return out[0]
	}
	return MultiError(out)
}

// MultiError is several located errors of one file (YAML's type errors),
// one per line. Each is a *ConfigError, so errors.As finds the first and
// errors.Is(err, mensageria.ErrConfig) holds.
type MultiError []*ConfigError

func (m MultiError) Error() string {
	s := make([]string, len(m))
	for i, e := range m {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

func (m MultiError) Unwrap() []error {
	out := make([]error, len(m))
	for i, e := range m {
		out[i] = e
	}
	return out
}

// rawPkg is how yaml.v3 names this package in its messages ("config."),
// before the raw types.
var rawPkg = strings.TrimSuffix(reflect.TypeFor[rawConfig]().String(), "rawConfig")

func friendlyUnmarshal(msg string) string {
	switch {
	case strings.Contains(msg, "into []"+rawPkg+"rawRoute"):
		return "routes must be a list (each item starting with '- type: ...')"
	case strings.Contains(msg, "into []string"):
		return "expected a list here ([a, b] or '- a' lines)"
	case strings.Contains(msg, "!!seq into"):
		return "expected a single value or a mapping here, found a list"
	case strings.Contains(msg, "!!map into"):
		return "expected a single value or a list here, found a mapping"
	case strings.Contains(msg, "into "+rawPkg+"raw"):
		return "expected a mapping (key: value lines) here"
	}
	return msg
}

func knownKeys(t reflect.Type) []string {
	if t == nil {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" {
			out = append(out, tag)
		}
	}
	return out
}

// pathAt finds the dotted path of the key named key on line (or of the
// value on line, when key is empty), for messages.
func (p *parser) pathAt(line int, key string) string { return p.pathAtKind(line, key, 0) }

// pathAtKind is pathAt for a value of one kind (0: any).
func (p *parser) pathAtKind(line int, key string, kind yaml.Kind) string {
	// The deepest match wins: a mapping value starts on the line of its
	// first key, and the message is about that key's value.
	var found string
	consider := func(path string) {
		if len(path) > len(found) {
			found = path
		}
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		if n == nil {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				sub := join(path, k.Value)
				if key != "" && k.Line == line && k.Value == key {
					consider(sub)
				}
				if key == "" && v.Line == line && (kind == 0 || v.Kind == kind) {
					consider(sub)
				}
				walk(v, sub)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				sub := fmt.Sprintf("%s[%d]", path, i)
				if key == "" && c.Line == line && (c.Kind == kind || (kind == 0 && c.Kind == yaml.ScalarNode)) {
					consider(sub)
				}
				walk(c, sub)
			}
		}
	}
	walk(p.root, "")
	if found == "" {
		return key
	}
	return found
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// node returns the value node at a path of keys and indices, or nil.
func (p *parser) node(path ...any) *yaml.Node {
	n := p.root
	for _, step := range path {
		if n == nil {
			return nil
		}
		switch s := step.(type) {
		case string:
			var next *yaml.Node
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == s {
						next = n.Content[i+1]
					}
				}
			}
			n = next
		case int:
			if n.Kind != yaml.SequenceNode || s >= len(n.Content) {
				return nil
			}
			n = n.Content[s]
		}
	}
	return n
}

// keyLine is the line of the last key of path, or of its nearest present
// parent, so a missing field is reported where it belongs.
func (p *parser) keyLine(path ...any) int {
	for len(path) > 0 {
		parent := p.node(path[:len(path)-1]...)
		if k, ok := path[len(path)-1].(string); ok && parent != nil && parent.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(parent.Content); i += 2 {
				if parent.Content[i].Value == k {
					return parent.Content[i].Line
				}
			}
		}
		if i, ok := path[len(path)-1].(int); ok && parent != nil && parent.Kind == yaml.SequenceNode && i < len(parent.Content) {
			return parent.Content[i].Line
		}
		path = path[:len(path)-1]
	}
	if p.root != nil {
		return p.root.Line
	}
	return 0
}

func fieldName(path []any) string {
	var b strings.Builder
	for _, s := range path {
		switch v := s.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(v)
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		}
	}
	return b.String()
}

func (p *parser) errAt(path []any, format string, args ...any) *ConfigError {
	line := 0
	if n := p.node(path...); n != nil {
		line = n.Line
	} else {
		line = p.keyLine(path...)
	}
	return &ConfigError{File: p.name, Line: line, Field: fieldName(path), Msg: fmt.Sprintf(format, args...)}
}

var envRef = regexp.MustCompile(`\$\$|\$\{([^}]*)\}`)
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// protect replaces each ${NAME} of the file with a placeholder made of
// letters, on the same line, before YAML sees it: in a flow mapping such as
// http: {token: ${TOKEN}} the braces would otherwise be read as structure.
// The placeholder carries a random nonce, so no text of the file can pose
// as one.
func (p *parser) protect(data []byte) []byte {
	return envRef.ReplaceAllFunc(data, func(m []byte) []byte {
		if string(m) == "$$" {
			return m
		}
		name := m[2 : len(m)-1]
		if !envName.Match(name) {
			return m
		}
		return []byte(p.placeholder(string(name)))
	})
}

func (p *parser) placeholder(name string) string {
	return "__menv" + p.nonce + "_" + name + "__"
}

// unprotect shows placeholders in messages as the ${NAME} the user wrote.
func (p *parser) unprotect(s string) string {
	if p.nonce == "" || !strings.Contains(s, "__menv"+p.nonce) {
		return s
	}
	re := regexp.MustCompile(`__menv` + p.nonce + `_([A-Za-z_][A-Za-z0-9_]*?)__`)
	return re.ReplaceAllString(s, "$${$1}")
}

// expand replaces ${NAME} with the variable's value; $$ is a literal $. Only
// values are expanded, after parsing, so a secret can never change the
// file's structure.
func (p *parser) expand(s string, path ...any) (string, error) {
	if !strings.Contains(s, "$") && !strings.Contains(s, "__menv") {
		return s, nil
	}
	re := regexp.MustCompile(`\$\$|\$\{[^}]*\}|__menv` + p.nonce + `_([A-Za-z_][A-Za-z0-9_]*?)__`)
	var err error
	out := re.ReplaceAllStringFunc(s, func(m string) string {
		if err != nil {
			return ""
		}
		if m == "$$" {
			return "$"
		}
		if strings.HasPrefix(m, "${") {
			err = p.errAt(path, "%q is not a valid environment variable reference (use ${NAME}, or $$ for a literal $)", m)
			return ""
		}
		name := re.FindStringSubmatch(m)[1]
		v, ok := p.env(name)
		if !ok {
			err = p.errAt(path, "environment variable %s is not set", name)
			return ""
		}
		return v
	})
	return out, err
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (p *parser) build(raw *rawConfig) (*Config, error) {
	c := &Config{File: p.name}
	if err := p.database(raw, c); err != nil {
		return nil, err
	}
	if len(raw.Routes) == 0 {
		return nil, p.errAt([]any{"routes"}, "no routes: list at least one message type this app sends (routes: - type: ... http: {url: ...})")
	}
	seen := map[string]int{}
	for i, rr := range raw.Routes {
		r, err := p.route(i, rr)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[r.Type]; dup {
			return nil, p.errAt([]any{"routes", i, "type"}, "type %q is already routed by routes[%d]", r.Type, first)
		}
		seen[r.Type] = i
		c.Routes = append(c.Routes, r)
	}
	if raw.Relay != nil {
		if err := p.relay(raw.Relay, &c.Relay); err != nil {
			return nil, err
		}
	}
	if c.Relay.Election == "" {
		c.Relay.Election = mensageria.ElectionLeader
	}
	if raw.Console != nil {
		var err error
		if c.Console, err = p.console(raw.Console); err != nil {
			return nil, err
		}
	}
	if err := p.transactionalIDs(c); err != nil {
		return nil, err
	}
	// The library's own validation catches the remaining limits (app name,
	// batch range, the lease's bounds, pairs that contradict each other);
	// report them against the file too, in the file's words.
	cc := c.ClientConfig()
	if _, nerr := mensageria.New(nopDriver{}, &cc); nerr != nil {
		var ce *mensageria.ConfigError
		if errors.As(nerr, &ce) {
			return nil, p.errAt(libFieldPath(ce.Field), "%s", yamlWords(ce.Reason))
		}
		return nil, &ConfigError{File: p.name, Msg: nerr.Error()}
	}
	if err := p.deadlines(c); err != nil {
		return nil, err
	}
	c.Warnings = p.warnings
	return c, nil
}

// libWords are the library's field names as the file spells them.
var libWords = regexp.MustCompile(`\b(BackoffBase|BackoffMax|RoutePause|RoutePauseMax|Lease|PollInterval)\b`)

// yamlWords rewrites a library reason's field names as the file's keys.
func yamlWords(reason string) string {
	return libWords.ReplaceAllStringFunc(reason, func(w string) string { return fieldName(libFieldPath(w)) })
}

// DeliveryWindow is how long the deliveries of one claimed batch may run
// under the config's lease (mensageria.DeliveryWindow): the relay cuts
// whatever is still running then.
func (c *Config) DeliveryWindow() time.Duration {
	return mensageria.DeliveryWindow(c.Effective().Lease)
}

// RequestTimeout is the bound of one request of an http route: its
// timeout, or the default (m2mhttp.DefaultTimeout, shortened to the
// delivery window when that is shorter, as the sender does at start).
func (c *Config) RequestTimeout(h *HTTPRoute) time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return min(m2mhttp.DefaultTimeout, c.DeliveryWindow())
}

// deadlines refuses an http route's timeout (or its probe's) longer than
// the delivery window of the relay's lease: the relay would cut every
// request at the window, and the error would blame the timeout.
func (p *parser) deadlines(c *Config) error {
	lease := c.Effective().Lease
	w := mensageria.DeliveryWindow(lease)
	leaseSaid := "relay.lease " + lease.String()
	if c.Relay.Lease == 0 {
		leaseSaid = "the default relay.lease of " + lease.String()
	}
	check := func(d time.Duration, path []any) error {
		if d <= w {
			return nil
		}
		return p.errAt(path, "%s is longer than the %s a claimed batch's deliveries may take (%s less the %s the relay keeps to settle them): every request would be cut at %s, reported as a timeout of %s; give at most %s, or raise relay.lease",
			d, w, leaseSaid, lease-w, w, d, w)
	}
	for i, r := range c.Routes {
		if r.HTTP == nil {
			continue
		}
		if err := check(r.HTTP.Timeout, []any{"routes", i, "http", "timeout"}); err != nil {
			return err
		}
		if pr := r.HTTP.Reconcile; pr != nil {
			if err := check(pr.Timeout, []any{"routes", i, "http", "reconcile", "timeout"}); err != nil {
				return err
			}
		}
	}
	return nil
}

// database fills and checks database, schema and app.
func (p *parser) database(raw *rawConfig, c *Config) error {
	var err error
	str := func(dst *string, v string, path ...any) {
		if err != nil {
			return
		}
		*dst, err = p.expand(v, path...)
	}
	str(&c.Database, raw.Database, "database")
	str(&c.Schema, raw.Schema, "schema")
	str(&c.App, raw.App, "app")
	if err != nil {
		return err
	}
	switch {
	case c.Database == "":
		return p.errAt([]any{"database"}, "required: a postgres://user@host/db URL, a mysql://user@host/db URL or sqlite:/path/file.db")
	case strings.HasPrefix(c.Database, "sqlite:"):
		if strings.TrimPrefix(c.Database, "sqlite:") == "" {
			return p.errAt([]any{"database"}, "sqlite: needs a file path, e.g. sqlite:/var/lib/app/mensageria.db")
		}
	case IsMySQL(c.Database):
		if why := checkMySQLURL(c.Database); why != "" {
			return p.errAt([]any{"database"}, "%s", why)
		}
	case strings.HasPrefix(c.Database, "postgres://"), strings.HasPrefix(c.Database, "postgresql://"):
		if u, perr := url.Parse(c.Database); perr != nil || u.Host == "" {
			return p.errAt([]any{"database"}, "not a valid PostgreSQL URL (postgres://user:password@host:5432/db)")
		}
	default:
		return p.errAt([]any{"database"}, "unsupported database %q: use postgres://..., mysql://... (or mariadb://...) or sqlite:/path/file.db", redact.Text(redact.URL(c.Database)))
	}
	if c.Schema == "" {
		c.Schema = "mensageria"
	} else if !schemaName.MatchString(c.Schema) {
		return p.errAt([]any{"schema"}, "%q must be a lower-case SQL identifier (a-z, 0-9, _; at most 63)", c.Schema)
	}
	if c.App == "" {
		return p.errAt([]any{"app"}, "required: the name of this application (replicas of one app share it)")
	}
	return nil
}

// transactionalIDs refuses a Kafka transactional id that would fence
// another relay: two routes sharing one would fence each other, and relays
// that are not elected would fence the leader.
func (p *parser) transactionalIDs(c *Config) error {
	txIDs := map[string]int{}
	for i, r := range c.Routes {
		if r.Kafka == nil || r.Kafka.TransactionalID == "" {
			continue
		}
		at := []any{"routes", i, "kafka", "transactional_id"}
		if c.Relay.Election == mensageria.ElectionNone {
			return p.errAt(at, "needs relay.election: leader: with election none every replica would use the id and fence the others")
		}
		if first, dup := txIDs[r.Kafka.TransactionalID]; dup {
			return p.errAt(at, "%q is already used by routes[%d]: each route needs its own transactional id", r.Kafka.TransactionalID, first)
		}
		txIDs[r.Kafka.TransactionalID] = i
	}
	return nil
}

func libFieldPath(f string) []any {
	switch f {
	case "App":
		return []any{"app"}
	case "BatchSize":
		return []any{"relay", "batch"}
	case "Concurrency":
		return []any{"relay", "concurrency"}
	case "MaxAttempts":
		return []any{"relay", "max_attempts"}
	case "Lease":
		return []any{"relay", "lease"}
	case "BackoffMax":
		return []any{"relay", "backoff_max"}
	case "BackoffBase":
		return []any{"relay", "backoff_base"}
	case "PollInterval":
		return []any{"relay", "poll_interval"}
	case "Election":
		return []any{"relay", "election"}
	case "RetryAfterCeiling":
		return []any{"relay", "retry_after_ceiling"}
	case "RouteFailureThreshold":
		return []any{"relay", "route_failure_threshold"}
	case "RoutePause":
		return []any{"relay", "route_pause"}
	case "RoutePauseMax":
		return []any{"relay", "route_pause_max"}
	case "ReconcileInterval":
		return []any{"relay", "reconcile_interval"}
	}
	return []any{"relay"}
}

func (p *parser) route(i int, rr rawRoute) (Route, error) {
	r := Route{Line: p.keyLine("routes", i)}
	var err error
	if r.Type, err = p.expand(rr.Type, "routes", i, "type"); err != nil {
		return r, err
	}
	if r.Type == "" {
		return r, p.errAt([]any{"routes", i, "type"}, "required: the message type this route sends")
	}
	if len(r.Type) > 200 {
		return r, p.errAt([]any{"routes", i, "type"}, "longer than 200 bytes")
	}
	ord, err := p.expand(rr.Ordering, "routes", i, "ordering")
	if err != nil {
		return r, err
	}
	switch ord {
	case "", "none":
	case "key":
		r.Ordered = true
	default:
		return r, p.errAt([]any{"routes", i, "ordering"}, "unknown ordering %q (use key, or leave it out)", ord)
	}
	if r.MaxRate, err = p.rate(rr.MaxRate, "routes", i, "max_rate"); err != nil {
		return r, err
	}
	mode, err := p.expand(rr.Delivery, "routes", i, "delivery")
	if err != nil {
		return r, err
	}
	switch mode {
	case "", "at_least_once":
	case "at_most_once":
		r.Delivery = mensageria.AtMostOnce
		if rr.HTTP == nil {
			return r, p.errAt([]any{"routes", i, "delivery"}, "at_most_once needs an http: route: only the HTTP transport tells a request that never left from one that may have been applied")
		}
	default:
		return r, p.errAt([]any{"routes", i, "delivery"}, "unknown delivery %q (use at_least_once, the default, or at_most_once for a receiver that is not idempotent)", mode)
	}
	var kinds []string
	for k, present := range map[string]bool{"http": rr.HTTP != nil, "kafka": rr.Kafka != nil, "nats": rr.NATS != nil} {
		if present {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	switch {
	case len(kinds) == 0:
		return r, p.errAt([]any{"routes", i}, "route %q has no transport: add http: {url: ..., token: ...} (or kafka: / nats:)", r.Type)
	case len(kinds) > 1:
		return r, p.errAt([]any{"routes", i, kinds[1]}, "route %q has %s: one transport per route", r.Type, strings.Join(kinds, " and "))
	case rr.Kafka != nil:
		return p.kafkaRoute(i, r, rr.Kafka)
	case rr.NATS != nil:
		return p.natsRoute(i, r, rr.NATS)
	}
	return p.httpRoute(i, r, rr.HTTP)
}

// httpRoute reads an http: route's block.
func (p *parser) httpRoute(i int, r Route, rh *rawHTTP) (Route, error) {
	var err error
	r.Transport = "http"
	h := &HTTPRoute{}
	base := []any{"routes", i, "http"}
	at := func(k string) []any { return append(append([]any{}, base...), k) }
	if h.URL, err = p.expand(rh.URL, at("url")...); err != nil {
		return r, err
	}
	if h.URL == "" {
		return r, p.errAt(at("url"), "required: the receiver's URL (http://host:port/path)")
	}
	u, perr := url.Parse(h.URL)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return r, p.errAt(at("url"), "%q is not an absolute http:// or https:// URL", redact.URL(h.URL))
	}
	if u.User != nil {
		return r, p.errAt(at("url"), "must not carry credentials (user:password@): the receiver authenticates the token")
	}
	tok, err := p.expand(rh.Token, at("token")...)
	if err != nil {
		return r, err
	}
	h.Token = Secret(tok)
	if h.Token == "" {
		return r, p.errAt(at("token"), "required: the bearer token the receiver expects (keep it out of the file: token: ${RECEIVER_TOKEN})")
	}
	if !printableASCII(tok) {
		// The value itself is never shown: it is a secret.
		return r, p.errAt(at("token"), "must be printable ASCII (it travels in the Authorization header)")
	}
	if h.Timeout, err = p.duration(rh.Timeout, at("timeout")...); err != nil {
		return r, err
	}
	if h.MaxConcurrent, err = p.int(rh.MaxConcurrent, 1, at("max_concurrent")...); err != nil {
		return r, err
	}
	if h.Batch, err = p.bool(rh.Batch, at("batch")...); err != nil {
		return r, err
	}
	if h.MaxBatchItems, err = p.int(rh.MaxBatchItems, 1, at("max_batch_items")...); err != nil {
		return r, err
	}
	if h.MaxBatchBytes, err = p.int(rh.MaxBatchBytes, 1024, at("max_batch_bytes")...); err != nil {
		return r, err
	}
	if !h.Batch {
		for _, k := range []string{"max_batch_items", "max_batch_bytes"} {
			if p.node(at(k)...) != nil {
				return r, p.errAt(at(k), "only applies with batch: true (each message is its own request otherwise)")
			}
		}
	}
	if err := p.onceFields(i, r, h, rh, at); err != nil {
		return r, err
	}
	if rh.TLS != nil {
		if u.Scheme != "https" {
			return r, p.errAt(at("tls"), "the URL is %s://: a tls: block needs an https:// URL", u.Scheme)
		}
		if h.TLS, err = p.tls(rh.TLS, at("tls")); err != nil {
			return r, err
		}
	}
	r.HTTP = h
	return r, nil
}

// printableASCII is what an HTTP header value may hold.
func printableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// tls reads a tls: block. An empty block means TLS verified against the
// system's CAs.
func (p *parser) tls(rt *rawTLS, base []any) (*TLSConfig, error) {
	at := func(k string) []any { return append(append([]any{}, base...), k) }
	t := &TLSConfig{Field: fieldName(base), Line: p.keyLine(base...)}
	var err error
	for _, f := range []struct {
		dst *string
		raw string
		key string
	}{{&t.CAFile, rt.CAFile, "ca_file"}, {&t.CertFile, rt.CertFile, "cert_file"}, {&t.KeyFile, rt.KeyFile, "key_file"}} {
		if *f.dst, err = p.expand(f.raw, at(f.key)...); err != nil {
			return nil, err
		}
		if *f.dst == "" && p.node(at(f.key)...) != nil {
			return nil, p.errAt(at(f.key), "empty: give a file path, or leave the key out")
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		return nil, p.errAt(at("cert_file"), "needs key_file too: the client certificate's private key")
	case t.KeyFile != "" && t.CertFile == "":
		return nil, p.errAt(at("key_file"), "needs cert_file too: the client certificate the key belongs to")
	}
	return t, nil
}

func (p *parser) kafkaRoute(i int, r Route, rk *rawKafka) (Route, error) {
	r.Transport = "kafka"
	k := &KafkaRoute{}
	at := func(key string, more ...any) []any { return append([]any{"routes", i, "kafka", key}, more...) }
	for j, b := range rk.Brokers {
		v, err := p.expand(b, at("brokers", j)...)
		if err != nil {
			return r, err
		}
		// One ${KAFKA_BROKERS} may stand for the whole comma-separated list.
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				if _, _, err := net.SplitHostPort(h); err != nil {
					return r, p.errAt(at("brokers", j), "%q is not host:port", h)
				}
				k.Brokers = append(k.Brokers, h)
			}
		}
	}
	if len(k.Brokers) == 0 {
		return r, p.errAt(at("brokers"), "required: a list of host:port seed brokers")
	}
	var err error
	if k.Topic, err = p.expand(rk.Topic, at("topic")...); err != nil {
		return r, err
	}
	if k.Topic == "" {
		return r, p.errAt(at("topic"), "required: the topic this type is produced to")
	}
	if k.TransactionalID, err = p.expand(rk.TransactionalID, at("transactional_id")...); err != nil {
		return r, err
	}
	if rk.TLS != nil {
		if k.TLS, err = p.tls(rk.TLS, at("tls")); err != nil {
			return r, err
		}
	}
	if rk.SASL != nil {
		if k.SASL, err = p.sasl(rk.SASL, at("sasl")); err != nil {
			return r, err
		}
	}
	r.Kafka = k
	return r, nil
}

// saslMechanisms are the SASL mechanisms a Kafka route may use.
var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

func (p *parser) sasl(rs *rawSASL, base []any) (*SASLConfig, error) {
	at := func(k string) []any { return append(append([]any{}, base...), k) }
	s := &SASLConfig{Field: fieldName(base), Line: p.keyLine(base...)}
	var err error
	if s.Mechanism, err = p.expand(rs.Mechanism, at("mechanism")...); err != nil {
		return nil, err
	}
	s.Mechanism = strings.ToUpper(s.Mechanism)
	if !slices.Contains(saslMechanisms, s.Mechanism) {
		if s.Mechanism == "" {
			return nil, p.errAt(at("mechanism"), "required: one of %s", strings.Join(saslMechanisms, ", "))
		}
		return nil, p.errAt(at("mechanism"), "%q is not supported: use one of %s", s.Mechanism, strings.Join(saslMechanisms, ", "))
	}
	if s.User, err = p.expand(rs.User, at("user")...); err != nil {
		return nil, err
	}
	if s.User == "" {
		return nil, p.errAt(at("user"), "required: the SASL user name")
	}
	pw, err := p.expand(rs.Password, at("password")...)
	if err != nil {
		return nil, err
	}
	if pw == "" {
		return nil, p.errAt(at("password"), "required: the SASL password (keep it out of the file: password: ${KAFKA_PASSWORD})")
	}
	s.Password = Secret(pw)
	return s, nil
}

func (p *parser) natsRoute(i int, r Route, rn *rawNATS) (Route, error) {
	r.Transport = "nats"
	n := &NATSRoute{Field: fieldName([]any{"routes", i, "nats"}), Line: p.keyLine("routes", i, "nats")}
	at := func(key string) []any { return []any{"routes", i, "nats", key} }
	var err error
	if n.URL, err = p.expand(rn.URL, at("url")...); err != nil {
		return r, err
	}
	if n.URL == "" {
		return r, p.errAt(at("url"), "required: the NATS server (nats://host:4222)")
	}
	u, perr := url.Parse(n.URL)
	if perr != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
		return r, p.errAt(at("url"), "%q is not a nats:// or tls:// URL", redact.URL(n.URL))
	}
	if u.User != nil {
		return r, p.errAt(at("url"), "must not carry credentials (user:password@): use user and password, so that the URL can be shown")
	}
	if n.Subject, err = p.expand(rn.Subject, at("subject")...); err != nil {
		return r, err
	}
	if n.Subject == "" || strings.ContainsAny(n.Subject, " \t*>") {
		return r, p.errAt(at("subject"), "required: one concrete subject (no spaces or wildcards)")
	}
	if n.Stream, err = p.expand(rn.Stream, at("stream")...); err != nil {
		return r, err
	}
	if rn.TLS != nil {
		if n.TLS, err = p.tls(rn.TLS, []any{"routes", i, "nats", "tls"}); err != nil {
			return r, err
		}
	}
	var ways []string
	for _, f := range []struct {
		dst *string
		raw string
		key string
	}{{&n.CredsFile, rn.CredsFile, "creds_file"}, {&n.NkeyFile, rn.NkeyFile, "nkey_file"}, {&n.User, rn.User, "user"}} {
		if *f.dst, err = p.expand(f.raw, at(f.key)...); err != nil {
			return r, err
		}
		if *f.dst == "" && p.node(at(f.key)...) != nil {
			return r, p.errAt(at(f.key), "empty: give a value, or leave the key out")
		}
		if *f.dst != "" {
			ways = append(ways, f.key)
		}
	}
	pw, err := p.expand(rn.Password, at("password")...)
	if err != nil {
		return r, err
	}
	n.Password = Secret(pw)
	switch {
	case len(ways) > 1:
		return r, p.errAt(at(ways[1]), "%s and %s: give one way to authenticate (creds_file, nkey_file, or user and password)", ways[0], ways[1])
	case n.User != "" && pw == "":
		return r, p.errAt(at("password"), "required with user (keep it out of the file: password: ${NATS_PASSWORD})")
	case n.User == "" && p.node(at("password")...) != nil:
		return r, p.errAt(at("password"), "needs user too")
	}
	r.NATS = n
	return r, nil
}

func (p *parser) relay(rr *rawRelay, out *mensageria.Config) error {
	var err error
	do := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	do(func() (e error) { out.BatchSize, e = p.int(rr.Batch, 1, "relay", "batch"); return })
	do(func() (e error) { out.Concurrency, e = p.int(rr.Concurrency, 1, "relay", "concurrency"); return })
	do(func() (e error) { out.Lease, e = p.duration(rr.Lease, "relay", "lease"); return })
	do(func() (e error) { out.MaxAttempts, e = p.int(rr.MaxAttempts, 1, "relay", "max_attempts"); return })
	do(func() (e error) { out.PollInterval, e = p.duration(rr.PollInterval, "relay", "poll_interval"); return })
	do(func() (e error) { out.BackoffBase, e = p.duration(rr.BackoffBase, "relay", "backoff_base"); return })
	do(func() (e error) { out.BackoffMax, e = p.duration(rr.BackoffMax, "relay", "backoff_max"); return })
	do(func() (e error) { out.PollOnly, e = p.bool(rr.PollOnly, "relay", "poll_only"); return })
	do(func() (e error) {
		out.RetryAfterCeiling, e = p.duration(rr.RetryAfterCeiling, "relay", "retry_after_ceiling")
		return
	})
	do(func() (e error) {
		out.RouteFailureThreshold, e = p.int(rr.RouteFailureThreshold, 1, "relay", "route_failure_threshold")
		return
	})
	do(func() (e error) { out.RoutePause, e = p.duration(rr.RoutePause, "relay", "route_pause"); return })
	do(func() (e error) {
		out.RoutePauseMax, e = p.duration(rr.RoutePauseMax, "relay", "route_pause_max")
		return
	})
	do(func() (e error) {
		out.ReconcileInterval, e = p.duration(rr.ReconcileInterval, "relay", "reconcile_interval")
		return
	})
	do(func() error {
		v, e := p.expand(rr.Election, "relay", "election")
		if e != nil {
			return e
		}
		switch v {
		case "", "leader":
			out.Election = mensageria.ElectionLeader
		case "advisory":
			p.deprecated([]any{"relay", "election"}, "advisory is the former name of leader, still accepted: write election: leader")
			out.Election = mensageria.ElectionLeader
		case "none":
			out.Election = mensageria.ElectionNone
		default:
			return p.errAt([]any{"relay", "election"}, "unknown election %q (use leader: one active relay per app, or none: every replica relays)", v)
		}
		return nil
	})
	return err
}

func (p *parser) duration(s string, path ...any) (time.Duration, error) {
	v, err := p.expand(s, path...)
	if err != nil || v == "" {
		return 0, err
	}
	d, perr := time.ParseDuration(v)
	if perr != nil {
		return 0, p.errAt(path, "%q is not a duration (use a number with a unit: 500ms, 5s, 2m, 1h)", v)
	}
	if d <= 0 {
		return 0, p.errAt(path, "%q must be positive", v)
	}
	return d, nil
}

// rate reads a positive number of messages per second.
func (p *parser) rate(s string, path ...any) (float64, error) {
	v, err := p.expand(s, path...)
	if err != nil || v == "" {
		return 0, err
	}
	f, perr := strconv.ParseFloat(v, 64)
	if perr != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, p.errAt(path, "%q is not a number of messages per second (e.g. 50, or 0.5 for one every two seconds)", v)
	}
	if f <= 0 {
		return 0, p.errAt(path, "%q must be positive (leave max_rate out for no limit)", v)
	}
	if f > 1e6 {
		return 0, p.errAt(path, "%q is more than a million messages per second: leave max_rate out for no limit", v)
	}
	return f, nil
}

func (p *parser) bool(s string, path ...any) (bool, error) {
	v, err := p.expand(s, path...)
	if err != nil || v == "" {
		return false, err
	}
	b, perr := strconv.ParseBool(v)
	if perr != nil {
		return false, p.errAt(path, "%q is not true or false", v)
	}
	return b, nil
}

func (p *parser) int(s string, min int, path ...any) (int, error) {
	v, err := p.expand(s, path...)
	if err != nil || v == "" {
		return 0, err
	}
	n, perr := strconv.Atoi(v)
	if perr != nil {
		return 0, p.errAt(path, "%q is not a whole number", v)
	}
	if n < min {
		return 0, p.errAt(path, "%d must be at least %d", n, min)
	}
	return n, nil
}

// onceFields reads an http route's at-most-once keys: not_applied,
// payload_only and the reconcile: block.
func (p *parser) onceFields(i int, r Route, h *HTTPRoute, rh *rawHTTP, at func(string) []any) error {
	var err error
	if h.PayloadOnly, err = p.bool(rh.PayloadOnly, at("payload_only")...); err != nil {
		return err
	}
	if h.PayloadOnly && h.Batch {
		return p.errAt(at("payload_only"), "a batch request carries envelopes; payload_only sends one message's payload per request (drop batch: true)")
	}
	once := r.Delivery == mensageria.AtMostOnce
	if once && h.Batch {
		return p.errAt(at("batch"), "batch requests go to a mensageria receiver, which is idempotent: deliver it at_least_once (at_most_once is for a receiver that cannot be)")
	}
	for _, k := range []string{"not_applied", "reconcile"} {
		if !once && p.node(at(k)...) != nil {
			return p.errAt(at(k), "only applies with delivery: at_most_once (an at-least-once route retries every failure)")
		}
	}
	if h.NotApplied, err = p.statuses(rh.NotApplied, 300, at("not_applied")); err != nil {
		return err
	}
	rc := rh.Reconcile
	if rc == nil {
		return nil
	}
	base := at("reconcile")
	rat := func(k string) []any { return append(append([]any{}, base...), k) }
	pr := &ReconcileProbe{}
	if pr.URL, err = p.expand(rc.URL, rat("url")...); err != nil {
		return err
	}
	if pr.URL == "" {
		return p.errAt(rat("url"), "required: the GET that tells whether a message's effect exists, with {key} (the natural key) or {id} in it")
	}
	tok, err := p.expand(rc.Token, rat("token")...)
	if err != nil {
		return err
	}
	if !printableASCII(tok) {
		return p.errAt(rat("token"), "must be printable ASCII (it travels in the Authorization header)")
	}
	pr.Token = Secret(tok)
	if pr.Token == "" {
		pr.Token = h.Token
	}
	if pr.Applied, err = p.statuses(rc.Applied, 100, rat("applied")); err != nil {
		return err
	}
	if pr.NotApplied, err = p.statuses(rc.NotApplied, 100, rat("not_applied")); err != nil {
		return err
	}
	if pr.Timeout, err = p.duration(rc.Timeout, rat("timeout")...); err != nil {
		return err
	}
	// The library's own checks, located at the block.
	if _, err := m2mhttp.NewProbe(pr.ProbeConfig()); err != nil {
		var ce *mensageria.ConfigError
		if errors.As(err, &ce) {
			return p.errAt(base, "%s", ce.Reason)
		}
		return p.errAt(base, "%v", err)
	}
	h.Reconcile = pr
	return nil
}

// ProbeConfig is the m2mhttp probe the block describes.
func (pr *ReconcileProbe) ProbeConfig() m2mhttp.ProbeConfig {
	return m2mhttp.ProbeConfig{URL: pr.URL, Token: pr.Token.Reveal(), Applied: pr.Applied, NotApplied: pr.NotApplied, Timeout: pr.Timeout}
}

// statuses reads a list of HTTP statuses, each from lo to 599.
func (p *parser) statuses(raw []string, lo int, path []any) ([]int, error) {
	var out []int
	for j, v := range raw {
		at := append(append([]any{}, path...), j)
		s, err := p.expand(v, at...)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < lo || n > 599 {
			return nil, p.errAt(at, "%q is not an HTTP status from %d to 599", s, lo)
		}
		out = append(out, n)
	}
	return out, nil
}
