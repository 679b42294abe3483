package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriaprom"
	"github.com/xadm/mensageria/transport/kafka"
)

// metrics observes the relay (as a mensageria hook, mensageriaprom's) and
// reads the outbox at scrape time, so gauges are never staler than the
// scrape.
type metrics struct {
	*mensageriaprom.Hooks
	app string
	reg *prometheus.Registry
	// latency is the hooks' delivery latency histogram.
	latency *prometheus.HistogramVec
	// routes reports the running relay's routes (Client.Routes); set
	// before the metrics are served.
	routes func() []mensageria.RouteHealth
}

func newMetrics(app string, drv driver.Driver, elector driver.Elector, log *slog.Logger) *metrics {
	h := mensageriaprom.NewHooks(app, mensageriaprom.WithExemplar(traceExemplar))
	m := &metrics{Hooks: h, app: app, reg: prometheus.NewRegistry(), latency: h.Latency()}
	m.reg.MustRegister(h, mensageriaprom.OutboxCollector(app, drv, elector, log),
		mensageriaprom.RouteCollector(app, func() []mensageria.RouteHealth {
			if m.routes == nil {
				return nil
			}
			return m.routes()
		}),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// traceExemplar is the trace of ctx's span when it is sampled (--trace),
// so a slow delivery on a latency graph leads to its trace.
func traceExemplar(ctx context.Context) prometheus.Labels {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()}
	}
	return nil
}

// watchTransactional exports a Kafka transactional sender's counters:
// transactions committed and aborted, and deliveries reconciled (answered
// from its position records instead of produced again, each one a
// duplicate avoided).
func (m *metrics) watchTransactional(s *kafka.TransactionalSender) {
	labels := prometheus.Labels{"app": m.app, "transactional_id": s.TransactionalID()}
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mensageria_kafka_transactions_committed_total",
			Help: "Kafka transactions the relay committed.", ConstLabels: labels}, func() float64 { return float64(s.Committed()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mensageria_kafka_transactions_aborted_total",
			Help: "Kafka transactions the relay aborted (their messages are retried).", ConstLabels: labels}, func() float64 { return float64(s.Aborted()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mensageria_kafka_reconciled_total",
			Help: "Deliveries found already committed to Kafka and not produced again (a relay crashed or a settle was lost).", ConstLabels: labels},
			func() float64 { return float64(s.Reconciled()) }),
	)
}

// routeDetail is what /readyz adds about routes that are not flowing: a
// paused route does not make the relay unready (the other routes flow,
// and it resumes by itself), but its state belongs in the answer.
func routeDetail(routes []mensageria.RouteHealth, now time.Time) string {
	var b strings.Builder
	for _, r := range routes {
		if r.State == mensageria.RouteFlowing {
			continue
		}
		fmt.Fprintf(&b, "route %s (%s): %s for %s", r.Route, strings.Join(r.Types, ", "), r.State, now.Sub(r.Since).Round(time.Second))
		if r.State == mensageria.RoutePaused && !r.Until.IsZero() {
			fmt.Fprintf(&b, ", probe in %s", max(r.Until.Sub(now), 0).Round(time.Second))
			if r.RetryAfter {
				b.WriteString(" (the destination's Retry-After)")
			}
		}
		fmt.Fprintf(&b, "; %d failures in a row", r.Failures)
		if r.LastError != "" {
			fmt.Fprintf(&b, ", last: %s", r.LastError)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// serveMux is the relay's HTTP surface: liveness, readiness (with the
// routes that are not flowing) and metrics.
func serveMux(m *metrics, ready func(context.Context) error) *http.ServeMux {
	detail := func() string {
		if m.routes == nil {
			return ""
		}
		return routeDetail(m.routes(), time.Now())
	}
	return daemon.HealthMux(ready, detail, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
}
