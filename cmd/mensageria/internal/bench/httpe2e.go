package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// HTTPEndToEndConfig sizes the HTTP end-to-end scenario.
type HTTPEndToEndConfig struct {
	// Env is where both apps run: Pool is required; an empty Schema means
	// a fresh one, dropped at the end.
	Env
	// Messages in the throughput phase. Default 50,000.
	Messages int
	// Producers enqueue the throughput phase, 50 messages per transaction.
	// Default 4.
	Producers int
	// Rate of the paced phase, in messages per second, each in its own
	// transaction. Default 1,000.
	Rate int
	// PacedFor is how long the paced phase enqueues. Default 10s.
	PacedFor time.Duration
	// Pacers share the paced phase's enqueues, so that one slow commit
	// does not hold back the messages behind it. Default 16.
	Pacers int
	// Concurrency is the relay's (and the Sender's) deliveries in flight.
	// Default 16.
	Concurrency int
	// BatchClaim is the relay's BatchSize in the batch mode: how many
	// messages one claim takes, handed to the BatchSender at once. The
	// single mode keeps the relay's default (100). Default 100, the same:
	// larger claims split into concurrent requests measured no better on
	// the 2-core machine (more transactions competing for it).
	BatchClaim int
	// BatchItems is the BatchSender's MaxBatchItems: a claim is split into
	// requests of at most this many envelopes, sent concurrently, each
	// applied by the receiver in one transaction. Default 100.
	BatchItems int
	// Only runs one mode: "single", "once", "batch" or "daemon". Default:
	// every mode, in that order.
	Only string
	// Daemon, when set, adds a third mode, daemon: the relay is the one
	// Daemon starts (the mensageria command's relay, configured with batch
	// delivery), while the producers enqueue through a Client of the same
	// app that does not relay. Its metrics are prefixed daemon-, and
	// daemon-ratio is its throughput over the batch mode's.
	Daemon DaemonRelay
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// DaemonRelay starts a relay of t.App delivering t.Type from t.Schema to
// t.URL in batch requests, and returns once it relays; stop ends it.
type DaemonRelay func(ctx context.Context, t DaemonTarget) (stop func() error, err error)

// DaemonTarget is what a DaemonRelay relays, sized as the batch mode is.
type DaemonTarget struct {
	Schema, App, Type  string
	URL, Token         string
	Concurrency, Claim int
	BatchItems         int
}

// HTTPEndToEnd measures PostgreSQL outbox → relay → HTTP over loopback →
// receiver inbox effect, the whole at-least-once path with every
// guarantee on: msgs/s sustained while producers enqueue as fast as they
// can, and commit-to-effect latency (p50-ms, p99-ms) at a paced rate.
//
// It measures two modes one after the other, each with its own relay,
// receiver and message type in the same schema: single (m2mhttp.Sender,
// one request and one receiver transaction per message: msgs/s, p50-ms,
// p99-ms) and batch (m2mhttp.BatchSender, one request per BatchItems
// messages of a claim, applied in one receiver transaction:
// batch-msgs/s, batch-p50-ms, batch-p99-ms), and batch-ratio, the batch
// throughput over the single one; with Daemon set, a third, daemon (the
// command's relay with batch delivery: daemon-msgs/s ..., daemon-ratio
// over batch).
func HTTPEndToEnd(ctx context.Context, cfg HTTPEndToEndConfig) (Result, error) {
	res := Result{Scenario: "http-end-to-end"}
	if err := cfg.withDefaults(); err != nil {
		return res, err
	}
	if cfg.Schema == "" {
		cfg.Schema = fmt.Sprintf("bench_http_%08x", rand.Uint32())
		if _, err := cfg.Pool.Exec(ctx, "CREATE SCHEMA "+cfg.Schema); err != nil {
			return res, err
		}
		defer func() {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_, _ = cfg.Pool.Exec(c, "DROP SCHEMA IF EXISTS "+cfg.Schema+" CASCADE")
		}()
	}
	drv, err := cfg.Env.driver()
	if err != nil {
		return res, err
	}
	var notes []string
	modes := []string{"single", "once", "batch"}
	if cfg.Daemon != nil {
		modes = append(modes, "daemon")
	}
	for _, mode := range modes {
		prefix := mode + "-"
		if mode == "single" {
			prefix = ""
		}
		if cfg.Only != "" && cfg.Only != mode {
			continue
		}
		m, note, err := httpMode(ctx, cfg, drv, mode)
		if err != nil {
			return res, fmt.Errorf("%s mode: %w", mode, err)
		}
		for k, v := range m {
			res.Set(prefix+k, v)
		}
		notes = append(notes, note)
	}
	setHTTPRatios(&res)
	res.Notes = strings.Join(notes, "; ")
	return res, nil
}

// withDefaults fills the zero fields and refuses an unknown Only.
func (cfg *HTTPEndToEndConfig) withDefaults() error {
	if cfg.Pool == nil {
		return errors.New("bench: HTTPEndToEnd needs a pool")
	}
	orDefault(&cfg.Messages, 50000)
	orDefault(&cfg.Producers, 4)
	orDefault(&cfg.Rate, 1000)
	orDefault(&cfg.Concurrency, 16)
	orDefault(&cfg.Pacers, 16)
	orDefault(&cfg.BatchClaim, 100)
	orDefault(&cfg.BatchItems, 100)
	if cfg.PacedFor <= 0 {
		cfg.PacedFor = 10 * time.Second
	}
	if cfg.Only != "" && cfg.Only != "single" && cfg.Only != "once" && cfg.Only != "batch" && cfg.Only != "daemon" {
		return fmt.Errorf("bench: HTTPEndToEnd: Only is %q, want single, once, batch or daemon", cfg.Only)
	}
	if cfg.Only == "daemon" && cfg.Daemon == nil {
		return errors.New("bench: HTTPEndToEnd: Only is daemon, and Daemon is not set")
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return nil
}

// setHTTPRatios compares the modes that ran: batch and daemon throughput
// over the mode each improves on, and the at-most-once route's cost.
func setHTTPRatios(res *Result) {
	if s, b := res.Metrics["msgs/s"], res.Metrics["batch-msgs/s"]; s > 0 && b > 0 {
		res.Set("batch-ratio", b/s)
	}
	// The at-most-once route's cost over the single mode, same claim size:
	// its throughput ratio (target >= 0.8) and its added latency.
	if s, o := res.Metrics["msgs/s"], res.Metrics["once-msgs/s"]; s > 0 && o > 0 {
		res.Set("once-ratio", o/s)
		res.Set("once-added-p50-ms", res.Metrics["once-p50-ms"]-res.Metrics["p50-ms"])
		res.Set("once-added-p99-ms", res.Metrics["once-p99-ms"]-res.Metrics["p99-ms"])
	}
	if b, d := res.Metrics["batch-msgs/s"], res.Metrics["daemon-msgs/s"]; b > 0 && d > 0 {
		res.Set("daemon-ratio", d/b)
	}
}

// httpRoute is what one mode relays: its message type, the sending app,
// the relay's claim size and the route's options.
type httpRoute struct {
	mode, typ, app string
	claim          int
	opts           []mensageria.RouteOption
}

func newHTTPRoute(mode string, batchClaim int) httpRoute {
	r := httpRoute{mode: mode, typ: "bench.http", app: "bench-http", claim: 100}
	switch mode {
	case "once":
		// The single mode on an at-most-once route: a synchronous mark
		// per claim before the requests, and the classification.
		r.typ, r.app = "bench.http.once", "bench-http-once"
		r.opts = append(r.opts, mensageria.Mode(mensageria.AtMostOnce))
	case "batch":
		r.typ, r.app, r.claim = "bench.http.batch", "bench-http-batch", batchClaim
	case "daemon":
		r.typ, r.app, r.claim = "bench.http.daemon", "bench-http-daemon", batchClaim
	}
	return r
}

// httpMode runs the throughput and the paced phase of one mode.
func httpMode(ctx context.Context, cfg HTTPEndToEndConfig, drv *postgres.Driver, mode string) (map[string]float64, string, error) {
	route := newHTTPRoute(mode, cfg.BatchClaim)
	logf := func(format string, args ...any) { cfg.Logf(mode+" "+format, args...) }
	res := map[string]float64{}

	recv, err := startHTTPReceiver(drv, route, cfg.Rate*int(cfg.PacedFor/time.Second+1))
	if err != nil {
		return nil, "", err
	}
	defer recv.shutdown(ctx)
	client, stopRelay, err := startHTTPSender(ctx, cfg, drv, route, recv.url)
	if err != nil {
		return nil, "", err
	}
	defer stopRelay()

	// Throughput: producers enqueue everything as fast as they can while
	// the relay delivers; the rate counts until the last effect.
	const tputMax = 1 << 22
	if cfg.Messages > tputMax {
		cfg.Messages = tputMax
	}
	start := time.Now()
	if err := enqueueAsFastAsPossible(ctx, client, route.typ, cfg.Messages, cfg.Producers); err != nil {
		return nil, "", err
	}
	enqueued := time.Since(start)
	if err := recv.waitApplied(ctx, int64(cfg.Messages), 10*time.Minute); err != nil {
		return nil, "", err
	}
	elapsed := time.Since(start)
	res["msgs/s"] = float64(cfg.Messages) / elapsed.Seconds()
	res["enqueue/s"] = float64(cfg.Messages) / enqueued.Seconds()
	logf("throughput: %d messages applied in %s (%.0f msgs/s; enqueue took %s)", cfg.Messages, elapsed.Round(time.Millisecond), float64(cfg.Messages)/elapsed.Seconds(), enqueued.Round(time.Millisecond))

	// Latency: single-message transactions at a steady rate.
	total := int(float64(cfg.Rate) * cfg.PacedFor.Seconds())
	total = min(total, len(recv.effectAt))
	lat, pacedElapsed, err := recv.pacedLatency(ctx, client, route.typ, cfg.Rate, total, cfg.Pacers)
	if err != nil {
		return nil, "", err
	}
	res["p50-ms"] = lat.PercentileMs(50)
	res["p99-ms"] = lat.PercentileMs(99)
	res["paced-rate"] = float64(total) / pacedElapsed.Seconds()
	logf("latency at %.0f msgs/s: p50 %.2f ms, p99 %.2f ms over %d messages", float64(total)/pacedElapsed.Seconds(), lat.PercentileMs(50), lat.PercentileMs(99), total)
	return res, httpModeNote(cfg, route, total), nil
}

// httpModeNote says how one mode ran, for the result's notes.
func httpModeNote(cfg HTTPEndToEndConfig, route httpRoute, paced int) string {
	mode := route.mode
	note := fmt.Sprintf("%s: throughput %d msgs, %d producers x 50/tx, relay concurrency %d, claims of %d", mode, cfg.Messages, cfg.Producers, cfg.Concurrency, route.claim)
	if mode != "single" && mode != "once" {
		note += fmt.Sprintf(", requests of at most %d", cfg.BatchItems)
	}
	if mode == "once" {
		note += " (an at-most-once route: one synchronous mark per claim)"
	}
	if mode == "daemon" {
		note += " (the command's relay, from a config with batch: true)"
	}
	return note + fmt.Sprintf("; latency %d msgs at %d/s, one per tx", paced, cfg.Rate)
}

// httpReceiverApp is the receiving app: its inbox behind an HTTP server on
// loopback, and an effect that counts what it applied and records when
// each paced message ("p-<i>") was applied.
type httpReceiverApp struct {
	url      string
	srv      *http.Server
	applied  atomic.Int64
	effectAt []atomic.Int64
	// committedAt is when the producer of paced message i saw its commit.
	committedAt []atomic.Int64
}

func startHTTPReceiver(drv *postgres.Driver, route httpRoute, pacedSlots int) (*httpReceiverApp, error) {
	r := &httpReceiverApp{effectAt: make([]atomic.Int64, pacedSlots), committedAt: make([]atomic.Int64, pacedSlots)}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "bench-" + route.mode})
	if err != nil {
		return nil, err
	}
	rc, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{
		Tokens: []string{"bench-token"},
		Handlers: map[string]m2mhttp.Handler{route.typ: {Inbox: inbox, Effect: func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			if i, ok := strings.CutPrefix(d.Key, "p-"); ok {
				if n, err := strconv.Atoi(i); err == nil && n < len(r.effectAt) {
					r.effectAt[n].Store(time.Now().UnixNano())
				}
			}
			r.applied.Add(1)
			return nil
		}}},
		Logger: quiet(),
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.url = "http://" + ln.Addr().String() + "/m2m"
	r.srv = &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *httpReceiverApp) shutdown(ctx context.Context) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(c)
}

// waitApplied returns once the effect has run want times, or an error
// after limit.
func (r *httpReceiverApp) waitApplied(ctx context.Context, want int64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for r.applied.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: only %d of %d messages applied after %s", r.applied.Load(), want, limit)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// pacedLatency enqueues total single-message transactions at rate, waits
// for their effects, and returns each one's commit-to-effect latency and
// how long the pacing took.
func (r *httpReceiverApp) pacedLatency(ctx context.Context, client *mensageria.Client, typ string, rate, total, pacers int) (*Latencies, time.Duration, error) {
	base := r.applied.Load()
	pacedElapsed, err := pace(ctx, rate, total, pacers, func(ctx context.Context, i int) error {
		_, err := client.Enqueue(ctx, mensageria.Message{Type: typ, Key: "p-" + strconv.Itoa(i), Payload: []byte(Payload)})
		r.committedAt[i].Store(time.Now().UnixNano())
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	if err := r.waitApplied(ctx, base+int64(total), 2*time.Minute); err != nil {
		return nil, 0, err
	}
	return commitToArrival(r.committedAt[:total], r.effectAt[:total]), pacedElapsed, nil
}

// startHTTPSender builds the sending app of route, delivering to url, and
// starts its relay, or, in the daemon mode, the daemon's relay while the
// client only enqueues. stop ends whichever relay runs.
func startHTTPSender(ctx context.Context, cfg HTTPEndToEndConfig, drv *postgres.Driver, route httpRoute, url string) (client *mensageria.Client, stop func(), err error) {
	scfg := m2mhttp.SenderConfig{URL: url, Token: "bench-token", MaxConcurrent: cfg.Concurrency, MaxBatchItems: cfg.BatchItems}
	var sender mensageria.Sender
	switch route.mode {
	case "batch":
		sender, err = m2mhttp.NewBatchSender(scfg)
	case "daemon":
		// The daemon relays; this client only enqueues.
		sender = mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
			return mensageria.Permanent(errors.New("bench: the daemon relays this type"))
		})
	default:
		sender, err = m2mhttp.NewSender(scfg)
	}
	if err != nil {
		return nil, nil, err
	}
	client, err = mensageria.New(drv, &mensageria.Config{
		App:            route.app,
		Registry:       mensageria.NewRegistry().MustRegister(route.typ, sender, route.opts...),
		BatchSize:      route.claim,
		Concurrency:    cfg.Concurrency,
		NotifyDebounce: time.Millisecond,
		Logger:         quiet(),
	})
	if err != nil {
		return nil, nil, err
	}
	if route.mode == "daemon" {
		stopDaemon, err := cfg.Daemon(ctx, DaemonTarget{Schema: cfg.Schema, App: route.app, Type: route.typ, URL: scfg.URL, Token: scfg.Token,
			Concurrency: cfg.Concurrency, Claim: route.claim, BatchItems: cfg.BatchItems})
		if err != nil {
			return nil, nil, fmt.Errorf("start the daemon's relay: %w", err)
		}
		return client, func() { _ = stopDaemon() }, nil
	}
	if err := client.Start(ctx); err != nil {
		return nil, nil, err
	}
	return client, func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(c)
	}, nil
}

// enqueueAsFastAsPossible has producers enqueue messages of typ keyed
// "t-<i>", 50 to a transaction, and returns the first error.
func enqueueAsFastAsPossible(ctx context.Context, client *mensageria.Client, typ string, messages, producers int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]mensageria.Message, 0, 50)
			for {
				from := next.Add(50) - 50
				if from >= int64(messages) {
					return
				}
				msgs = msgs[:0]
				for i := from; i < min(from+50, int64(messages)); i++ {
					msgs = append(msgs, mensageria.Message{Type: typ, Key: "t-" + strconv.FormatInt(i, 10), Payload: []byte(Payload)})
				}
				if _, err := client.Enqueue(ctx, msgs...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
