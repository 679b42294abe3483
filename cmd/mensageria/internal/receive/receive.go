// Package receive is the daemon 'mensageria receive' runs: the HTTP
// machine-to-machine receiver (transport/m2mhttp) storing every accepted
// delivery in the inbox queue of the app's database, its credentials and
// their reload without a restart, the inbox queue's notifications, its
// metrics, the health endpoints and the purge. Run is its entry point;
// cli/receive.go keeps the flags.
package receive

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/httpguard"
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// Options is what one run of the daemon takes.
type Options struct {
	// Config is the receive config, as config.LoadReceiveConfig returns it.
	Config *config.ReceiveConfig
	// Trace exports OpenTelemetry traces, configured by the OTEL_*
	// variables Env looks up: a span per message received.
	Trace bool
	Env   func(string) (string, bool)
	// ConfigPath names the config file in errors.
	ConfigPath string
	// HealthListen, when not empty, is a plain-HTTP address that also
	// serves /healthz, /readyz and /metrics.
	HealthListen string
	// Migrate applies the missing schema migrations at start; without it
	// a schema behind stops the start.
	Migrate bool
	Log     *slog.Logger
}

// instance is one running `mensageria receive`.
type instance struct {
	cfg *config.ReceiveConfig
	// tracer, when --trace is on, wraps every consumer's effect.
	tracer   *mensageriaotel.Tracer
	b        *daemon.DB
	client   *mensageria.Client // the app's, for the catalog and the purge
	rc       *m2mhttp.Receiver
	creds    *credentials
	metrics  *receiveMetrics
	notify   *notifier // nil on SQLite
	log      *slog.Logger
	stopping atomic.Bool
}

// Run runs the daemon until ctx ends (SIGTERM or SIGINT), then lets the
// requests in flight finish within receive.shutdown_timeout. Its errors
// carry their exit code as a *daemon.Error, or are a *daemon.ConflictError.
func Run(ctx context.Context, o Options) error {
	c, configPath, log := o.Config, o.ConfigPath, o.Log
	d := &instance{cfg: c, log: log}
	toks, err := d.loadCredentials()
	if err != nil {
		return err
	}
	b, err := daemon.OpenPinged(ctx, c.Database, c.Schema, true)
	if err != nil {
		return err
	}
	defer b.Close()
	d.b = b
	if err := daemon.CheckSchema(ctx, b, c.Schema, c.App, o.Migrate, "run 'mensageria migrate up' or start the receiver with --migrate", log); err != nil {
		return err
	}
	tr, err := daemon.StartTracing(ctx, o.Trace, "mensageria-receive", c.App, o.Env, log)
	if err != nil {
		return err
	}
	defer tr.Stop(c.ShutdownTimeout, log)
	d.tracer = tr.Tracer
	queue, ok := b.Driver.(driver.InboxQueueReader)
	if !ok {
		return daemon.Fail("the %T backend has no inbox queue", b.Driver)
	}
	reg, handlers, consumerOf, err := d.consumers(configPath)
	if err != nil {
		return err
	}
	if err := d.register(ctx, reg); err != nil {
		return err
	}
	d.metrics = newReceiveMetrics(c.App, queue, func() *m2mhttp.Receiver { return d.rc }, log)
	if send := b.InboxNotifier(); send != nil {
		d.notify = newNotifier(c.NotifyInterval, send, log, func(r string) { d.metrics.notifies.WithLabelValues(r).Inc() })
		defer d.notify.close()
	}
	d.creds.reloaded = func(r string) { d.metrics.reloads.WithLabelValues(r).Inc() }
	if err := d.newReceiver(toks, handlers, consumerOf); err != nil {
		return err
	}
	srv, health, done, addr, scheme, err := d.serve(o.HealthListen)
	if err != nil {
		return err
	}

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	wg.Go(func() { d.creds.watch(bg, hup) })
	wg.Go(func() { d.purge(bg) })
	defer func() { stopBG(); wg.Wait() }()

	log.Info("receiving", "addr", addr, "url", scheme+"://"+addr+c.Path, "app", c.App, "schema", c.Schema,
		"consumers", len(c.Consumers), "tokens", d.rc.Tokens(), "client_certificates", c.TLS != nil && c.TLS.ClientCAFile != "")
	return d.waitAndStop(ctx, srv, health, done)
}

// loadCredentials reads the tokens senders present and, with tls:, the
// server's certificate: a file that cannot be read stops the start.
func (d *instance) loadCredentials() ([]string, error) {
	c := d.cfg
	d.creds = &credentials{cfg: c, log: d.log, reloaded: func(string) {}}
	toks, sum, err := d.creds.tokens()
	if err != nil {
		return nil, &daemon.Error{Code: daemon.ExitUsage, Err: err}
	}
	d.creds.fileSum = sum
	if c.TLS != nil {
		tc, err := loadTLS(c.TLS)
		if err != nil {
			return nil, &daemon.Error{Code: daemon.ExitUsage, Err: err}
		}
		d.creds.tls.Store(tc)
	}
	return toks, nil
}

// consumers builds each configured consumer's Inbox and queue handler,
// keyed by the types it takes.
func (d *instance) consumers(configPath string) (reg *mensageria.Registry, handlers map[string]m2mhttp.Handler, consumerOf map[string]string, err error) {
	c := d.cfg
	// The consumers are the app's in the catalog, each with its window:
	// the purge, and every other app's, follow it.
	reg = mensageria.NewRegistry()
	handlers = map[string]m2mhttp.Handler{}
	consumerOf = map[string]string{}
	for _, k := range c.Consumers {
		in, err := mensageria.NewInbox(d.b.Driver, mensageria.InboxConfig{Consumer: k.Name, Window: k.Window})
		if err != nil {
			return nil, nil, nil, daemon.Usage("%s:%d: consumer %q: %v", configPath, k.Line, k.Name, err)
		}
		if err := reg.RegisterInbox(in); err != nil {
			return nil, nil, nil, daemon.Usage("%s:%d: %v", configPath, k.Line, err)
		}
		h, err := m2mhttp.QueueHandler(in)
		if err != nil {
			return nil, nil, nil, err
		}
		if d.tracer != nil {
			h.Effect = d.tracer.Effect(h.Effect)
		}
		for _, t := range k.Types {
			handlers[t] = h
			consumerOf[t] = k.Name
		}
	}
	return reg, handlers, consumerOf, nil
}

// register records the consumers as the app's in the ownership catalog,
// after a word about a window too short for a default relay's retries.
func (d *instance) register(ctx context.Context, reg *mensageria.Registry) error {
	c, log := d.cfg, d.log
	cl, err := mensageria.New(d.b.Driver, &mensageria.Config{App: c.App, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	d.client = cl
	// The senders' settings are not known here; a relay's defaults are the
	// usual ones, and a window under their horizon is worth a word.
	if horizon := (&config.Config{App: c.App}).OfflineClient().RetryHorizon(); horizon > 0 {
		for _, k := range c.Consumers {
			if k.Window < horizon {
				log.Warn("the consumer's dedup window is shorter than the retry horizon of a relay with the default settings: a message still retried after the window is refused as stale and parked dead at its sender",
					"consumer", k.Name, "window", k.Window, "default_retry_horizon", horizon.Round(time.Minute))
			}
		}
	}
	res, err := cl.Register(ctx)
	if err != nil {
		return daemon.Conflict("receive", fmt.Errorf("ownership catalog: %w", err))
	}
	for _, o := range res.Unlisted {
		if o.Kind == driver.ResourceConsumer {
			log.Warn("the catalog gives this app a consumer the config no longer lists: its records and queue rows are kept until an operator releases it ('mensageria owners release consumer NAME --from APP')",
				"app", c.App, "consumer", o.Name)
		}
	}
	return nil
}

// newReceiver builds the HTTP receiver over the consumers' handlers; an
// applied message wakes its consumer's workers.
func (d *instance) newReceiver(toks []string, handlers map[string]m2mhttp.Handler, consumerOf map[string]string) error {
	c := d.cfg
	var err error
	d.rc, err = m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{
		Tokens:        toks,
		Handlers:      handlers,
		MaxBodyBytes:  c.MaxBodyBytes,
		MaxBatchItems: c.MaxBatchItems,
		MaxInFlight:   c.MaxInFlight,
		Logger:        d.log,
		OnOutcome: func(typ, outcome string) {
			d.metrics.messages.WithLabelValues(typ, outcome).Inc()
			if outcome == m2mhttp.OutcomeApplied && d.notify != nil {
				d.notify.mark(consumerOf[typ])
			}
		},
	})
	if err != nil {
		return err
	}
	d.creds.rc = d.rc
	return nil
}

// serve starts the deliveries' server on receive.listen and, unless
// healthListen is empty, the health and metrics server; done receives
// the first one's failure; addr and scheme are the deliveries' server's.
func (d *instance) serve(healthListen string) (srv, health *http.Server, done chan error, addr, scheme string, err error) {
	c, log := d.cfg, d.log
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, nil, nil, "", "", daemon.Usage("receive.listen %s: %v", c.Listen, err)
	}
	scheme = "http"
	if c.TLS != nil {
		ln, scheme = tls.NewListener(ln, d.creds.serverTLS()), "https"
	}
	srv = &http.Server{
		Handler:           d.metrics.countStatus(d.mux(true)),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		// Failed handshakes and reset connections are worth a line, not
		// the standard logger's.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done = make(chan error, 2)
	// The goroutines take the server and the channel as arguments: the
	// results named srv and done are nil once a failure below returns.
	go func(s *http.Server, done chan<- error) { done <- s.Serve(ln) }(srv, done)
	if healthListen != "" {
		hl, err := net.Listen("tcp", healthListen)
		if err != nil {
			_ = srv.Close()
			return nil, nil, nil, "", "", daemon.Usage("--listen %s: %v", healthListen, err)
		}
		health = &http.Server{Handler: d.mux(false), ReadHeaderTimeout: 5 * time.Second}
		log.Info("serving health and metrics", "addr", hl.Addr().String(), "paths", "/healthz /readyz /metrics")
		go func(s *http.Server, done chan<- error) { done <- s.Serve(hl) }(health, done)
	}
	return srv, health, done, ln.Addr().String(), scheme, nil
}

// waitAndStop runs until ctx ends or a server fails, then lets the
// requests in flight finish within receive.shutdown_timeout.
func (d *instance) waitAndStop(ctx context.Context, srv, health *http.Server, done <-chan error) error {
	c, log := d.cfg, d.log
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("stopping: finishing the requests in flight", "timeout", c.ShutdownTimeout)
	case serveErr = <-done:
		log.Error("server failed; stopping", "err", serveErr)
	}
	d.stopping.Store(true)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// What is still running is cut off: its transaction rolls back and
		// its sender retries it.
		log.Warn("stop timed out; the requests still in flight were cut off, and their senders will retry them", "err", err)
		_ = srv.Close()
	}
	if health != nil {
		_ = health.Shutdown(sctx)
	}
	log.Info("receive stopped", "app", c.App)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// mux serves deliveries (when deliveries) and the probes. What ServeMux
// would answer itself, in text/plain or as a bare redirect (an unclean
// path such as //m2m, a method a probe does not take, a path nothing
// serves), is refused as a problem like every other answer.
func (d *instance) mux(deliveries bool) http.Handler {
	mux := http.NewServeMux()
	return httpguard.Routes(d.routes(mux, deliveries), func(w http.ResponseWriter, _ *http.Request, status int, detail string) {
		switch status {
		case http.StatusMethodNotAllowed:
			writeProblem(w, status, m2mhttp.ProblemMethod, "Method not allowed", detail)
		default:
			writeProblem(w, status, m2mhttp.ProblemNotFound, "Not found", detail)
		}
	})
}

// routes registers the daemon's paths on mux.
func (d *instance) routes(mux *http.ServeMux, deliveries bool) *http.ServeMux {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if reason := d.ready(r.Context()); reason != "" {
			writeProblem(w, http.StatusServiceUnavailable, m2mhttp.ProblemUnavailable, "Not ready", reason)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
	if !deliveries {
		return mux
	}
	for _, p := range config.ProbePaths {
		// Any other method on a probe is a mistake, not a delivery.
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Allow", http.MethodGet)
			writeProblem(w, http.StatusMethodNotAllowed, m2mhttp.ProblemMethod, "Method not allowed", p+" answers GET")
		})
	}
	if d.cfg.Path == "/" {
		mux.Handle("/", d.rc)
		return mux
	}
	mux.Handle(d.cfg.Path, d.rc)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, m2mhttp.ProblemNotFound, "Not found", "deliveries are POSTed to "+d.cfg.Path)
	})
	return mux
}

// ready says why the daemon is not ready ("" when it is). The database's
// own error is logged, not shown: the probe may be public.
func (d *instance) ready(ctx context.Context) string {
	if d.stopping.Load() {
		return "stopping"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := d.b.Ping(ctx); err != nil {
		d.log.Warn("readyz: the database does not answer", "err", err)
		return "the database does not answer"
	}
	return ""
}

func writeProblem(w http.ResponseWriter, status int, typ, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	b, _ := json.Marshal(m2mhttp.Problem{Type: typ, Title: title, Status: status, Detail: detail})
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// purge runs, every PurgeInterval, the purge of the app's consumers'
// dedup records and applied queue rows that a relay of the app runs too
// (Client.PurgeInbox), so an app that also runs a relay is purged the
// same way by both.
func (d *instance) purge(ctx context.Context) {
	t := time.NewTicker(d.cfg.PurgeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		records, applied, err := d.client.PurgeInbox(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("purge failed", "err", err)
		}
		if records+applied > 0 {
			d.log.Debug("purged", "records", records, "applied_rows", applied)
		}
	}
}
