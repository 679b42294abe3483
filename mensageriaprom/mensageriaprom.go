// Package mensageriaprom exports mensageria's metrics to Prometheus: a
// relay's deliveries, failures and election as a mensageria hook
// (Hooks), and, read at scrape time so that no gauge is staler than the
// scrape, the outbox per type (OutboxCollector, built on the ops
// package's counts), the relay's routes (RouteCollector) and the inbox
// queue per consumer (InboxQueueCollector). The mensageria command
// serves exactly these on its /metrics.
package mensageriaprom

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/ops"
)

// Hooks observes a relay (add it to mensageria.Config.Hooks) and is the
// prometheus.Collector of what it observed, labelled with app.
type Hooks struct {
	deliveries *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	duration   *prometheus.HistogramVec
	deadTotal  *prometheus.CounterVec
	leader     prometheus.Gauge
	epoch      prometheus.Gauge
	failures   *prometheus.CounterVec
	exemplar   func(context.Context) prometheus.Labels
}

// Option configures Hooks.
type Option func(*Hooks)

// WithExemplar gives each latency observation the exemplar f returns for
// the attempt's context (nil: none), such as the trace of its span, so
// that a slow delivery on a latency graph leads to its trace. Prometheus
// reads exemplars in the OpenMetrics format only.
func WithExemplar(f func(context.Context) prometheus.Labels) Option {
	return func(h *Hooks) { h.exemplar = f }
}

// NewHooks returns the hooks of app's relay.
func NewHooks(app string, opts ...Option) *Hooks {
	constLabels := prometheus.Labels{"app": app}
	h := &Hooks{
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
	for _, o := range opts {
		o(h)
	}
	// Every kind is exported from the start, at 0, so that an alert on
	// its rate has a series before the first failure.
	for _, k := range []mensageria.FailureKind{mensageria.FailureClaim, mensageria.FailureSettle, mensageria.FailureElection, mensageria.FailureDatabase} {
		h.failures.WithLabelValues(string(k))
	}
	return h
}

func (h *Hooks) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.deliveries, h.latency, h.duration, h.deadTotal, h.leader, h.epoch, h.failures}
}

// Describe implements prometheus.Collector.
func (h *Hooks) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range h.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (h *Hooks) Collect(ch chan<- prometheus.Metric) {
	for _, c := range h.collectors() {
		c.Collect(ch)
	}
}

// Latency is the delivery latency histogram
// (mensageria_delivery_latency_seconds), which Collect also collects.
func (h *Hooks) Latency() *prometheus.HistogramVec { return h.latency }

// AlwaysLeader sets mensageria_relay_leader to 1 for a relay without
// election (mensageria.ElectionNone), which always leads and announces
// no election.
func (h *Hooks) AlwaysLeader() { h.leader.Set(1) }

// OnDelivery implements mensageria.OnDelivery.
func (h *Hooks) OnDelivery(ev mensageria.DeliveryEvent) {
	h.deliveries.WithLabelValues(ev.Type, string(ev.Outcome)).Inc()
	o, v := h.latency.WithLabelValues(ev.Type, string(ev.Outcome)), ev.Latency.Seconds()
	var ex prometheus.Labels
	if h.exemplar != nil && ev.Context != nil {
		ex = h.exemplar(ev.Context)
	}
	if eo, ok := o.(prometheus.ExemplarObserver); ok && ex != nil {
		eo.ObserveWithExemplar(v, ex)
	} else {
		o.Observe(v)
	}
	h.duration.WithLabelValues(ev.Type).Observe(ev.Duration.Seconds())
	if ev.Outcome == mensageria.OutcomeDead {
		h.deadTotal.WithLabelValues(ev.Type).Inc()
	}
}

// OnFailure implements mensageria.OnFailure.
func (h *Hooks) OnFailure(ev mensageria.FailureEvent) {
	h.failures.WithLabelValues(string(ev.Kind)).Inc()
}

// OnElection implements mensageria.OnElection.
func (h *Hooks) OnElection(ev mensageria.ElectionEvent) {
	if ev.Leader {
		h.leader.Set(1)
	} else {
		h.leader.Set(0)
	}
	h.epoch.Set(float64(ev.Epoch))
}

// The per-type gauges carry the type's owning app in the catalog (owner,
// empty for a type no app owns) beside the app of the relay that serves
// them: every relay of a schema reports every type, and a dashboard tells
// whose backlog it is.
var (
	typeLabels    = []string{"app", "type", "owner"}
	descPending   = prometheus.NewDesc("mensageria_outbox_pending", "Pending messages (in flight included) by type.", typeLabels, nil)
	descScheduled = prometheus.NewDesc("mensageria_outbox_scheduled", "Messages not due yet (a NotBefore in the future) and never attempted, by type; not counted pending.", typeLabels, nil)
	descInFlight  = prometheus.NewDesc("mensageria_outbox_in_flight", "Messages leased to a relay right now, by type.", typeLabels, nil)
	descDead      = prometheus.NewDesc("mensageria_outbox_dead", "Dead letters waiting for an operator, by type.", typeLabels, nil)
	descDelivered = prometheus.NewDesc("mensageria_outbox_delivered_last_hour", "Messages delivered in the last hour, by type.", typeLabels, nil)
	descOldest    = prometheus.NewDesc("mensageria_outbox_oldest_pending_seconds", "Age of the oldest pending message, by type.", typeLabels, nil)
	descInDoubt   = prometheus.NewDesc("mensageria_outbox_in_doubt", "Messages of at_most_once routes in doubt (their attempt may have reached the receiver; never sent again automatically), by type.", typeLabels, nil)
	descDoubtAge  = prometheus.NewDesc("mensageria_outbox_oldest_in_doubt_seconds", "Age of the oldest message in doubt's attempt, by type (0 when none).", typeLabels, nil)
	descHolder    = prometheus.NewDesc("mensageria_election_holder", "1 for the process that holds the app's relay election, as the database knows it.", []string{"app", "holder"}, nil)
	descUp        = prometheus.NewDesc("mensageria_outbox_stats_up", "1 when the last read of the outbox statistics succeeded.", []string{"app"}, nil)
)

// scrapeTimeout bounds the reads of one scrape.
const scrapeTimeout = 5 * time.Second

type outboxCollector struct {
	app     string
	ops     *ops.Ops
	elector driver.Elector
	log     *slog.Logger
}

// OutboxCollector reads, at each scrape, the outbox per type of every app
// of drv's schema (labelled with the serving app and the type's owner)
// and, with an elector, who holds app's election. A failed read is
// mensageria_outbox_stats_up 0 and a warning on log (nil: slog.Default).
func OutboxCollector(app string, drv driver.Driver, elector driver.Elector, log *slog.Logger) prometheus.Collector {
	if log == nil {
		log = slog.Default()
	}
	return &outboxCollector{app: app, ops: ops.New(drv, ops.AllApps()), elector: elector, log: log}
}

func (c *outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPending, descScheduled, descInFlight, descDead, descDelivered, descOldest, descInDoubt, descDoubtAge, descHolder, descUp} {
		ch <- d
	}
}

func (c *outboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
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
		ch <- prometheus.MustNewConstMetric(descScheduled, prometheus.GaugeValue, float64(s.Scheduled), l...)
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
	descTypeClaimed = prometheus.NewDesc("mensageria_relay_type_claimed", "1 for each type the config routes that this relay claims; 0 for one the ownership catalog now gives another app (or none), which it no longer claims; 0 too while an operator paused it (mensageria_route_type_paused).", []string{"app", "route", "type"}, nil)
	// descTypePaused is an operator's pause of a type: intended, so it is
	// no failure, but a backlog behind it should be explained on a
	// dashboard (who and why are in the log, 'status' and the console).
	descTypePaused = prometheus.NewDesc("mensageria_route_type_paused", "1 for each type the config routes that an operator paused on purpose ('mensageria routes pause'): no relay of the app claims it until resumed.", []string{"app", "route", "type"}, nil)
)

var routeStates = []mensageria.RouteState{mensageria.RouteFlowing, mensageria.RoutePaused, mensageria.RouteProbing}

type routeCollector struct {
	app    string
	routes func() []mensageria.RouteHealth
}

// RouteCollector reads, at each scrape, the flow control of the relay's
// routes from routes (mensageria.Client.Routes); nil routes, or one
// that returns nil (a relay not started yet), collect nothing.
func RouteCollector(app string, routes func() []mensageria.RouteHealth) prometheus.Collector {
	return routeCollector{app: app, routes: routes}
}

func (routeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRouteState
	ch <- descRouteFailures
	ch <- descRouteMaxRate
	ch <- descTypeClaimed
	ch <- descTypePaused
}

func (c routeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.routes == nil {
		return
	}
	for _, r := range c.routes() {
		l := []string{c.app, r.Route, strings.Join(r.Types, ",")}
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
		paused := map[string]bool{}
		for _, p := range r.OperatorPaused {
			paused[p.Type] = true
		}
		for _, typ := range r.Types {
			claimed, p := 1.0, 0.0
			if paused[typ] {
				claimed, p = 0, 1
			}
			if slices.Contains(r.NotOwned, typ) {
				claimed = 0
			}
			ch <- prometheus.MustNewConstMetric(descTypeClaimed, prometheus.GaugeValue, claimed, c.app, r.Route, typ)
			ch <- prometheus.MustNewConstMetric(descTypePaused, prometheus.GaugeValue, p, c.app, r.Route, typ)
		}
	}
}

var (
	descQueuePending = prometheus.NewDesc("mensageria_inbox_queue_pending", "Inbox queue rows waiting for the app, due or waiting for a retry, by consumer.", []string{"app", "consumer"}, nil)
	descQueueDead    = prometheus.NewDesc("mensageria_inbox_queue_dead", "Inbox queue rows the app parked as dead, by consumer.", []string{"app", "consumer"}, nil)
	descQueueOldest  = prometheus.NewDesc("mensageria_inbox_queue_oldest_pending_seconds", "Age of the oldest pending inbox queue row since it was received, by consumer.", []string{"app", "consumer"}, nil)
	descQueueUp      = prometheus.NewDesc("mensageria_inbox_queue_stats_up", "1 when the last read of the inbox queue succeeded.", []string{"app"}, nil)
)

type queueCollector struct {
	app string
	q   driver.InboxQueueReader
	log *slog.Logger
}

// InboxQueueCollector reads, at each scrape, the inbox queue per consumer
// of q's schema. A failed read is mensageria_inbox_queue_stats_up 0 and a
// warning on log (nil: slog.Default).
func InboxQueueCollector(app string, q driver.InboxQueueReader, log *slog.Logger) prometheus.Collector {
	if log == nil {
		log = slog.Default()
	}
	return &queueCollector{app: app, q: q, log: log}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueuePending, descQueueDead, descQueueOldest, descQueueUp} {
		ch <- d
	}
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	stats, err := c.q.InboxQueueStats(ctx)
	if err != nil {
		c.log.Warn("metrics: inbox queue stats failed", "err", err)
		ch <- prometheus.MustNewConstMetric(descQueueUp, prometheus.GaugeValue, 0, c.app)
		return
	}
	ch <- prometheus.MustNewConstMetric(descQueueUp, prometheus.GaugeValue, 1, c.app)
	for _, s := range stats {
		ch <- prometheus.MustNewConstMetric(descQueuePending, prometheus.GaugeValue, float64(s.Pending), c.app, s.Consumer)
		ch <- prometheus.MustNewConstMetric(descQueueDead, prometheus.GaugeValue, float64(s.Dead), c.app, s.Consumer)
		ch <- prometheus.MustNewConstMetric(descQueueOldest, prometheus.GaugeValue, s.OldestPending.Seconds(), c.app, s.Consumer)
	}
}
