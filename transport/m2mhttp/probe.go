package m2mhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/redact"
)

// ProbeConfig configures a reconcile probe: how an at-most-once route asks
// its receiver whether a message's effect exists.
type ProbeConfig struct {
	// URL is the GET to make, a template: {key} becomes the message's
	// natural key, {id} its message id and {type} its type, each
	// path-escaped. It must name the message ({key} or {id}). Required;
	// http or https.
	URL string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Applied lists the statuses that mean the effect exists. Default
	// [200].
	Applied []int
	// NotApplied lists the statuses that mean it does not: the message is
	// sent once more. Default [404]. A status in neither list, a timeout
	// or a failed connection is no answer: the message stays in doubt.
	NotApplied []int
	// Timeout bounds one probe. Default DefaultTimeout (10s), or the
	// relay's delivery window when shorter; an explicit one longer than
	// the window fails Client.Start, as SenderConfig.Timeout does.
	Timeout time.Duration
	// Client is the HTTP client. Default: one of its own. Redirects are
	// never followed.
	Client *http.Client
}

// Probe asks the receiver of an at-most-once route, by a GET on a URL made
// from the message, whether the message's effect exists. It implements
// mensageria.Reconciler (pass it to mensageria.Reconcile). It is only as
// good as the receiver's answer: a 404 for an effect that exists makes
// the relay apply it twice.
type Probe struct {
	tmpl       string
	auth       string
	applied    []int
	notApplied []int
	timeout    *requestTimeout
	client     *http.Client
	dest       string
	secrets    *redact.Secrets
}

// NewProbe validates cfg and returns its Probe.
func NewProbe(cfg ProbeConfig) (*Probe, error) {
	if !strings.Contains(cfg.URL, "{key}") && !strings.Contains(cfg.URL, "{id}") {
		return nil, &mensageria.ConfigError{Field: "Probe.URL", Reason: fmt.Sprintf("%q names no message: put {key} (the natural key) or {id} (the message id) in it", redact.URL(cfg.URL))}
	}
	sample := expandProbeURL(cfg.URL, "k", "0190a0a0-0000-7000-8000-000000000000", "t")
	u, err := url.Parse(sample)
	_, rest, _ := strings.Cut(cfg.URL, "://")
	host, _, _ := strings.Cut(rest, "/")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(host, "{}") {
		return nil, &mensageria.ConfigError{Field: "Probe.URL", Reason: fmt.Sprintf("%q is not an absolute http(s) URL template (the host cannot be a placeholder)", redact.URL(cfg.URL))}
	}
	if u.User != nil {
		return nil, &mensageria.ConfigError{Field: "Probe.URL", Reason: "must not carry credentials; use Token"}
	}
	if cfg.Token != "" && !validHeaderValue(cfg.Token) {
		return nil, &mensageria.ConfigError{Field: "Probe.Token", Reason: "printable ASCII"}
	}
	if len(cfg.Applied) == 0 {
		cfg.Applied = []int{http.StatusOK}
	}
	if len(cfg.NotApplied) == 0 {
		cfg.NotApplied = []int{http.StatusNotFound}
	}
	for _, st := range append(slices.Clone(cfg.Applied), cfg.NotApplied...) {
		if st < 100 || st > 599 {
			return nil, &mensageria.ConfigError{Field: "Probe", Reason: fmt.Sprintf("%d is not an HTTP status", st)}
		}
	}
	for _, st := range cfg.Applied {
		if slices.Contains(cfg.NotApplied, st) {
			return nil, &mensageria.ConfigError{Field: "Probe", Reason: fmt.Sprintf("status %d is both applied and not applied", st)}
		}
	}
	explicit := cfg.Timeout != 0
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 0 {
		return nil, &mensageria.ConfigError{Field: "Probe.Timeout", Reason: "must not be negative"}
	}
	var c http.Client
	if cfg.Client != nil {
		c = *cfg.Client
	} else {
		c.Transport = newTransport(4)
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	p := &Probe{tmpl: cfg.URL, applied: cfg.Applied, notApplied: cfg.NotApplied, timeout: newRequestTimeout("Probe.Timeout", cfg.Timeout, explicit), client: &c,
		dest: "probe " + redact.URL(cfg.URL), secrets: redact.SecretsOf(cfg.URL)}
	if cfg.Token != "" {
		p.auth = "Bearer " + cfg.Token
	}
	return p, nil
}

func expandProbeURL(tmpl, key, id, typ string) string {
	return strings.NewReplacer("{key}", url.PathEscape(key), "{id}", url.PathEscape(id), "{type}", url.PathEscape(typ)).Replace(tmpl)
}

// UseRelaySettings implements mensageria.RelayAware, as Sender's does: a
// probe runs inside a lease too (the relay's probe batches).
func (p *Probe) UseRelaySettings(rs mensageria.RelaySettings) error {
	return p.timeout.fit(rs)
}

// Reconcile implements mensageria.Reconciler. Its errors show the URL as
// redact.URL does, never what its query string carries.
func (p *Probe) Reconcile(ctx context.Context, d *mensageria.Delivery) (mensageria.Reconciliation, error) {
	r, err := p.reconcile(ctx, d)
	return r, p.secrets.Error(err)
}

func (p *Probe) reconcile(ctx context.Context, d *mensageria.Delivery) (mensageria.Reconciliation, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout.get())
	defer cancel()
	u := expandProbeURL(p.tmpl, d.Key, d.ID.String(), d.Type)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return mensageria.Unknown, fmt.Errorf("probe: build request: %w", err)
	}
	req.Header.Set(mensageria.HeaderRequestID, requestIDOf(d))
	if p.auth != "" {
		req.Header.Set(headerAuthorization, p.auth)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return mensageria.Unknown, fmt.Errorf("probe GET %s: %w", p.dest, unwrapURLError(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProblemBodyBytes))
	switch {
	case slices.Contains(p.applied, resp.StatusCode):
		return mensageria.Applied, nil
	case slices.Contains(p.notApplied, resp.StatusCode):
		return mensageria.NotApplied, nil
	}
	return mensageria.Unknown, fmt.Errorf("probe GET %s: http %d %s is neither applied %v nor not applied %v", p.dest, resp.StatusCode, http.StatusText(resp.StatusCode), p.applied, p.notApplied)
}

var _ mensageria.Reconciler = (*Probe)(nil)
