package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/m2mhttp"
	natssender "github.com/xadm/mensageria/transport/nats"
)

// newSender builds the Sender of a route, and what closes it. The relay's
// timing reaches the Senders that need it (a transactional route's
// retention, a NATS route's retry horizon) from the Client, at Start.
//
// The route's TLS files are read here, and a destination that refuses
// the route's TLS or credentials stops the start with a DestinationError
// (exit 2) naming what failed; one that cannot be reached is logged and
// left to the relay's retries, except NATS, whose connection is needed
// to build the Sender.
func newSender(ctx context.Context, c *config.Config, r config.Route, log *slog.Logger) (mensageria.Sender, func(), error) {
	usage := func(err error) error {
		var ce *config.ConfigError
		var de *DestinationError
		if errors.As(err, &ce) || errors.As(err, &de) {
			return &daemon.Error{Code: daemon.ExitUsage, Err: err}
		}
		return &daemon.Error{Code: daemon.ExitUsage, Err: fmt.Errorf("route %s (line %d): %w", r.Type, r.Line, err)}
	}
	switch r.Transport {
	case "http":
		return newHTTPSender(ctx, c, r, log, usage)
	case "kafka":
		return newKafkaSender(ctx, c, r, log, usage)
	case "nats":
		return newNATSSender(ctx, c, r, log, usage)
	}
	return nil, nil, fmt.Errorf("route %q: transport %q is not in this build", r.Type, r.Transport)
}

// newHTTPSender builds an http: route's Sender, and probes an https://
// destination with the route's TLS.
func newHTTPSender(ctx context.Context, c *config.Config, r config.Route, log *slog.Logger, usage func(error) error) (mensageria.Sender, func(), error) {
	h := r.HTTP
	cfg := m2mhttp.SenderConfig{
		URL:           h.URL,
		Token:         h.Token.Reveal(),
		Timeout:       h.Timeout,
		MaxConcurrent: h.MaxConcurrent,
		MaxBatchItems: h.MaxBatchItems,
		MaxBatchBytes: h.MaxBatchBytes,
		NotApplied:    h.NotApplied,
		PayloadOnly:   h.PayloadOnly,
	}
	if h.TLS != nil {
		tc, err := loadClientTLS(h.TLS, c.File, time.Now())
		if err != nil {
			return nil, nil, usage(err)
		}
		cfg.Client = httpClient(tc, h.MaxConcurrent)
	}
	var s mensageria.Sender
	var err error
	if h.Batch {
		s, err = m2mhttp.NewBatchSender(cfg)
	} else {
		s, err = m2mhttp.NewSender(cfg)
	}
	if err != nil {
		return nil, nil, usage(err)
	}
	if strings.HasPrefix(h.URL, "https://") {
		client := cfg.Client
		if client == nil {
			client = httpClient(nil, h.MaxConcurrent)
		}
		if err := checkHTTPS(ctx, r, client, log); err != nil {
			return nil, nil, usage(err)
		}
	}
	return s, func() {}, nil
}

// newKafkaSender builds a kafka: route's Sender, idempotent or
// transactional, once the cluster accepted the route's credentials and
// knows its topic.
func newKafkaSender(ctx context.Context, c *config.Config, r config.Route, log *slog.Logger, usage func(error) error) (mensageria.Sender, func(), error) {
	opts, err := kafkaOpts(c, r.Kafka)
	if err != nil {
		return nil, nil, usage(err)
	}
	if k := r.Kafka; k.SASL != nil && k.SASL.Mechanism == "PLAIN" && k.TLS == nil {
		log.Warn("SASL PLAIN without TLS sends the password in clear text; add a tls: block", "type", r.Type, "destination", r.Destination())
	}
	if err := checkKafka(ctx, r, opts, log); err != nil {
		return nil, nil, usage(err)
	}
	var s interface {
		mensageria.BatchSender
		Check(context.Context) error
		Close()
	}
	if r.Kafka.TransactionalID != "" {
		s, err = kafka.NewTransactionalSender(kafka.TransactionalConfig{Brokers: r.Kafka.Brokers, Topic: r.Kafka.Topic,
			TransactionalID: r.Kafka.TransactionalID, Opts: opts, Logger: log})
	} else {
		s, err = kafka.NewSender(kafka.SenderConfig{Brokers: r.Kafka.Brokers, Topic: r.Kafka.Topic, Opts: opts, Logger: log})
	}
	if err != nil {
		return nil, nil, usage(err)
	}
	if err := checkKafkaTopic(ctx, r, s.Check); err != nil {
		s.Close()
		return nil, nil, usage(err)
	}
	return s, s.Close, nil
}

// newNATSSender connects to a nats: route's server and builds its Sender
// once the stream that holds the subject is found.
func newNATSSender(ctx context.Context, c *config.Config, r config.Route, log *slog.Logger, usage func(error) error) (mensageria.Sender, func(), error) {
	opts, err := natsOpts(c, r.NATS)
	if err != nil {
		return nil, nil, usage(err)
	}
	opts = append(opts, natsgo.Name("mensageria relay"), natsgo.MaxReconnects(-1))
	nc, err := natsgo.Connect(r.NATS.URL, opts...)
	if err != nil {
		if reason, ok := natsRefusal(err, r.NATS); ok {
			return nil, nil, usage(&DestinationError{Type: r.Type, Line: r.Line, Destination: r.Destination(), Reason: reason, Err: err})
		}
		return nil, nil, fmt.Errorf("route %s (line %d): %s: %w", r.Type, r.Line, r.Destination(), err)
	}
	if d := r.NATS.Describe(); d != "" {
		log.Info("NATS security checked", "type", r.Type, "destination", r.Destination(), "security", d)
	}
	// The Logger carries the duplicate window's warning, checked at
	// Start against the relay's retry horizon.
	s, err := natssender.NewSender(ctx, natssender.SenderConfig{Conn: nc, Subject: r.NATS.Subject, Stream: r.NATS.Stream, Logger: log})
	if err == nil && r.NATS.Stream == "" {
		// NewSender checked a configured stream; the one that holds
		// the subject is checked here, so that a subject no stream
		// holds stops the start as a missing stream does.
		cctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, err = s.Check(cctx)
		cancel()
		var se *natssender.StreamError
		if !errors.As(err, &se) {
			err = nil // unreachable: logged at Start, and retried
		}
	}
	if err != nil {
		nc.Close()
		var se *natssender.StreamError
		if errors.As(err, &se) {
			return nil, nil, usage(&DestinationError{Type: r.Type, Line: r.Line, Destination: r.Destination(), Reason: "the stream is missing", Err: err})
		}
		return nil, nil, fmt.Errorf("route %s (line %d): %w", r.Type, r.Line, err)
	}
	return s, func() { _ = nc.Drain() }, nil
}

// checkKafkaTopic asks the route's cluster about its topic: one that does
// not exist (auto-creation off), whose name Kafka refuses, or that the
// client may not use is a DestinationError naming it. A cluster that does
// not answer is left to checkKafka's line and the relay's retries.
func checkKafkaTopic(ctx context.Context, r config.Route, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err := check(ctx)
	if !kafka.TopicRefused(err) {
		return nil
	}
	reason := "the topic is missing"
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		reason = "the topic is not this client's to use"
	case errors.Is(err, kerr.InvalidTopicException):
		reason = "Kafka refuses the topic's name"
	}
	return &DestinationError{Type: r.Type, Line: r.Line, Destination: r.Destination(), Reason: reason, Err: err}
}

// enqueueOnly stands in for a route's Sender in clients that never relay
// (enqueue, demo producers): the registry then still decides what may be
// enqueued, without dialing any destination.
var enqueueOnly = mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error {
	return mensageria.Permanent(fmt.Errorf("this client only enqueues"))
})

// registry builds the registry of a config's routes, with its Senders (the
// Client discovers the hooks and settings they need in the registry). With
// a nil log the Senders are stand-ins, for clients that only enqueue.
func registry(ctx context.Context, c *config.Config, log *slog.Logger) (*mensageria.Registry, []mensageria.Sender, func(), error) {
	live := log != nil
	reg := mensageria.NewRegistry()
	var senders []mensageria.Sender
	var closers []func()
	closeAll := func() {
		for _, f := range closers {
			f()
		}
	}
	for _, r := range c.Routes {
		var s mensageria.Sender = enqueueOnly
		if live {
			var closeFn func()
			var err error
			if s, closeFn, err = newSender(ctx, c, r, log); err != nil {
				closeAll()
				return nil, nil, nil, err
			}
			closers = append(closers, closeFn)
			senders = append(senders, s)
		}
		var opts []mensageria.RouteOption
		if r.Ordered {
			opts = append(opts, mensageria.Ordered())
		}
		if r.MaxRate > 0 {
			opts = append(opts, mensageria.MaxRate(r.MaxRate))
		}
		if r.Delivery == mensageria.AtMostOnce {
			opts = append(opts, mensageria.Mode(mensageria.AtMostOnce))
			if r.HTTP.Reconcile != nil && live {
				probe, err := m2mhttp.NewProbe(r.HTTP.Reconcile.ProbeConfig())
				if err != nil {
					closeAll()
					return nil, nil, nil, fmt.Errorf("route %s (line %d): reconcile: %w", r.Type, r.Line, err)
				}
				opts = append(opts, mensageria.Reconcile(probe))
			}
		}
		if err := reg.Register(r.Type, s, opts...); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
	}
	return reg, senders, closeAll, nil
}

// EnqueueRegistry is the registry of a config's routes for a client that
// only enqueues ('mensageria enqueue'): each route's Sender is a stand-in
// that dials nothing, and the registry still decides what may be enqueued.
func EnqueueRegistry(c *config.Config) (*mensageria.Registry, error) {
	reg, _, _, err := registry(context.Background(), c, nil)
	return reg, err
}
