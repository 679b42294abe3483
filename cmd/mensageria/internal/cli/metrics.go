package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/ops"
	"github.com/xadm/mensageria/redact"
	"github.com/xadm/mensageria/transport/kafka"
)

// metrics observes the relay (as a mensageria hook) and reads the outbox
// at scrape time, so gauges are never staler than the scrape.
type metrics struct {
	app        string
	reg        *prometheus.Registry
	deliveries *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	duration   *prometheus.HistogramVec
	deadTotal  *prometheus.CounterVec
	leader     prometheus.Gauge
	epoch      prometheus.Gauge
	failures   *prometheus.CounterVec
	// routes reports the running relay's routes (Client.Routes); set
	// before the metrics are served.
	routes func() []mensageria.RouteHealth
}

func newMetrics(app string, drv driver.Driver, elector driver.Elector, log *slog.Logger) *metrics {
	constLabels := prometheus.Labels{"app": app}
	m := &metrics{
		app: app,
		reg: prometheus.NewRegistry(),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mensageria_deliveries_total", Help: "Delivery attempts by type and outcome (delivered, retry, dead; fenced: another relay owns the row now; expired: the lease ran out before the settle; unsettled: the database refused the settle).", ConstLabels: constLabels,
		}, []string{"type", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mensageria_delivery_latency_seconds", Help: "From enqueue (database clock) to the end of the delivery attempt.", ConstLabels: constLabels,
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mensageria_send_duration_seconds", Help: "Time the Sender took for one attempt.", ConstLabels: constLabels,
			Buckets: prometheus.DefBuckets,
		}, []string{"type"}),
		deadTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mensageria_dead_letters_total", Help: "Messages this relay parked as dead.", ConstLabels: constLabels,
		}, []string{"type"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mensageria_relay_leader", Help: "1 while this process holds its app's relay election (always 1 with election none).", ConstLabels: constLabels,
		}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mensageria_relay_epoch", Help: "Fence epoch of this process's leadership.", ConstLabels: constLabels,
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mensageria_relay_failures_total", Help: "Failed attempts of the relay's own work with its database, by kind: claim, settle, election (a round that failed on an error, not one another relay won), database (unreachable, whatever the step). A kind failing on every attempt makes /readyz unready.", ConstLabels: constLabels,
		}, []string{"kind"}),
	}
	// Every kind is exported from the start, at 0, so that an alert on
	// its rate has a series before the first failure.
	for _, k := range []mensageria.FailureKind{mensageria.FailureClaim, mensageria.FailureSettle, mensageria.FailureElection, mensageria.FailureDatabase} {
		m.failures.WithLabelValues(string(k))
	}
	m.reg.MustRegister(m.deliveries, m.latency, m.duration, m.deadTotal, m.leader, m.epoch, m.failures,
		&outboxCollector{app: app, ops: ops.New(drv, ops.AllApps()), elector: elector, log: log}, routeCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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

// OnDelivery implements mensageria.OnDelivery.
func (m *metrics) OnDelivery(ev mensageria.DeliveryEvent) {
	m.deliveries.WithLabelValues(ev.Type, string(ev.Outcome)).Inc()
	observeWithTrace(m.latency.WithLabelValues(ev.Type, string(ev.Outcome)), ev.Latency.Seconds(), ev.Context)
	m.duration.WithLabelValues(ev.Type).Observe(ev.Duration.Seconds())
	if ev.Outcome == mensageria.OutcomeDead {
		m.deadTotal.WithLabelValues(ev.Type).Inc()
	}
}

// observeWithTrace observes v with the trace of ctx's span as its
// exemplar when the span is sampled (--trace), so a slow delivery on a
// latency graph leads to its trace; exemplars are served in the OpenMetrics
// format, to a scraper that asks for it.
func observeWithTrace(o prometheus.Observer, v float64, ctx context.Context) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String()})
			return
		}
	}
	o.Observe(v)
}

// OnFailure implements mensageria.OnFailure.
func (m *metrics) OnFailure(ev mensageria.FailureEvent) {
	m.failures.WithLabelValues(string(ev.Kind)).Inc()
}

// OnElection implements mensageria.OnElection.
func (m *metrics) OnElection(ev mensageria.ElectionEvent) {
	if ev.Leader {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
	m.epoch.Set(float64(ev.Epoch))
}

// The per-type gauges carry the type's owning app in the catalog (owner,
// empty for a type no app owns) beside the app of the relay that serves
// them: every relay of a schema reports every type, and a dashboard tells
// whose backlog it is.
var (
	typeLabels    = []string{"app", "type", "owner"}
	descPending   = prometheus.NewDesc("mensageria_outbox_pending", "Pending messages (in flight included) by type.", typeLabels, nil)
	descInFlight  = prometheus.NewDesc("mensageria_outbox_in_flight", "Messages leased to a relay right now, by type.", typeLabels, nil)
	descDead      = prometheus.NewDesc("mensageria_outbox_dead", "Dead letters waiting for an operator, by type.", typeLabels, nil)
	descDelivered = prometheus.NewDesc("mensageria_outbox_delivered_last_hour", "Messages delivered in the last hour, by type.", typeLabels, nil)
	descOldest    = prometheus.NewDesc("mensageria_outbox_oldest_pending_seconds", "Age of the oldest pending message, by type.", typeLabels, nil)
	descInDoubt   = prometheus.NewDesc("mensageria_outbox_in_doubt", "Messages of at_most_once routes in doubt (their attempt may have reached the receiver; never sent again automatically), by type.", typeLabels, nil)
	descDoubtAge  = prometheus.NewDesc("mensageria_outbox_oldest_in_doubt_seconds", "Age of the oldest message in doubt's attempt, by type (0 when none).", typeLabels, nil)
	descHolder    = prometheus.NewDesc("mensageria_election_holder", "1 for the process that holds the app's relay election, as the database knows it.", []string{"app", "holder"}, nil)
	descUp        = prometheus.NewDesc("mensageria_outbox_stats_up", "1 when the last read of the outbox statistics succeeded.", []string{"app"}, nil)
)

type outboxCollector struct {
	app     string
	ops     *ops.Ops       // every app's: every relay of a schema reports every type
	elector driver.Elector // nil with election none
	log     *slog.Logger
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descInFlight, descDead, descDelivered, descOldest, descInDoubt, descDoubtAge, descHolder, descUp} {
		ch <- d
	}
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := c.ops.Count(ctx)
	if err != nil {
		c.log.Warn("metrics: outbox stats failed", "err", err)
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0, c.app)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1, c.app)
	for _, s := range stats {
		l := []string{c.app, s.Type, s.Owner}
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(s.Pending), l...)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), l...)
		ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(s.Dead), l...)
		ch <- prometheus.MustNewConstMetric(descDelivered, prometheus.GaugeValue, float64(s.DeliveredLastHour), l...)
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, s.OldestPending.Seconds(), l...)
		ch <- prometheus.MustNewConstMetric(descInDoubt, prometheus.GaugeValue, float64(s.InDoubt), l...)
		ch <- prometheus.MustNewConstMetric(descDoubtAge, prometheus.GaugeValue, s.OldestInDoubt.Seconds(), l...)
	}
	if c.elector != nil {
		if h, err := c.elector.Holder(ctx); err == nil && h.Holder != "" {
			ch <- prometheus.MustNewConstMetric(descHolder, prometheus.GaugeValue, 1, c.app, h.Holder)
		}
	}
}

var (
	// A route is one Sender: two config routes to one URL are two routes
	// of one name, told apart by their types.
	routeLabels       = []string{"app", "route", "types"}
	descRouteState    = prometheus.NewDesc("mensageria_route_state", "1 for the state each route (one destination) is in: flowing; paused (its destination failed; its types are not claimed until the probe); probing (one message is being tried).", append(routeLabels, "state"), nil)
	descRouteFailures = prometheus.NewDesc("mensageria_route_failures", "Destination-level failures in a row of each route.", routeLabels, nil)
	descRouteMaxRate  = prometheus.NewDesc("mensageria_route_max_rate", "The route's max_rate in messages per second, when it has one.", routeLabels, nil)
	// descTypeClaimed follows the ownership catalog while the relay runs:
	// an operator's 'owners transfer' turns a type's line to 0 within a
	// lease.
	descTypeClaimed = prometheus.NewDesc("mensageria_relay_type_claimed", "1 for each type the config routes that this relay claims; 0 for one the ownership catalog now gives another app (or none), which it no longer claims.", []string{"app", "route", "type"}, nil)
)

var routeStates = []mensageria.RouteState{mensageria.RouteFlowing, mensageria.RoutePaused, mensageria.RouteProbing}

// routeCollector reads the routes' flow control at scrape time.
type routeCollector struct{ m *metrics }

func (routeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRouteState
	ch <- descRouteFailures
	ch <- descRouteMaxRate
	ch <- descTypeClaimed
}

func (c routeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.routes == nil {
		return
	}
	for _, r := range c.m.routes() {
		l := []string{c.m.app, r.Route, strings.Join(r.Types, ",")}
		for _, st := range routeStates {
			v := 0.0
			if r.State == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descRouteState, prometheus.GaugeValue, v, append(l, string(st))...)
		}
		ch <- prometheus.MustNewConstMetric(descRouteFailures, prometheus.GaugeValue, float64(r.Failures), l...)
		if r.MaxRate > 0 {
			ch <- prometheus.MustNewConstMetric(descRouteMaxRate, prometheus.GaugeValue, r.MaxRate, l...)
		}
		for _, typ := range r.Types {
			v := 1.0
			if slices.Contains(r.NotOwned, typ) {
				v = 0
			}
			ch <- prometheus.MustNewConstMetric(descTypeClaimed, prometheus.GaugeValue, v, c.m.app, r.Route, typ)
		}
	}
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

// serveMux is the relay's HTTP surface: liveness, readiness and metrics.
func serveMux(m *metrics, ready func(context.Context) error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		// The body is unauthenticated: no secret of a URL it quotes.
		if err := ready(ctx); err != nil {
			http.Error(w, redact.Text("not ready: "+err.Error()), http.StatusServiceUnavailable)
			return
		}
		detail := ""
		if m.routes != nil {
			detail = routeDetail(m.routes(), time.Now())
		}
		_, _ = w.Write([]byte(redact.Text("ready\n" + detail)))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	return mux
}
