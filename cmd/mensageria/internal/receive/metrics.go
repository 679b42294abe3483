package receive

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriaprom"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// receiveMetrics is what `mensageria receive` serves on /metrics: counts of
// its answers and outcomes, and the inbox queue read at scrape time.
type receiveMetrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	messages *prometheus.CounterVec
	reloads  *prometheus.CounterVec
	notifies *prometheus.CounterVec
}

func newReceiveMetrics(app string, q driver.InboxQueueReader, rc func() *m2mhttp.Receiver, log *slog.Logger) *receiveMetrics {
	l := prometheus.Labels{"app": app}
	m := &receiveMetrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mensageria_receive_requests_total",
			Help: "Requests answered, by status code.", ConstLabels: l}, []string{"code"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mensageria_receive_messages_total",
			Help: "Messages by type and outcome: applied (stored in the inbox queue), duplicate, conflict, stale, refused, retry.", ConstLabels: l}, []string{"type", "outcome"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mensageria_receive_token_reloads_total",
			Help: "Reloads of the tokens file and the TLS files, by result (ok; error: refused, what was in force stays).", ConstLabels: l}, []string{"result"}),
		notifies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mensageria_inbox_notifications_total",
			Help: "NOTIFY sent on the inbox channel after rows were stored, by result (ok, error, dropped).", ConstLabels: l}, []string{"result"}),
	}
	m.reg.MustRegister(m.requests, m.messages, m.reloads, m.notifies,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mensageria_receive_conflicts_total",
			Help: "Messages refused as conflicts: a dedup key already applied with another payload.", ConstLabels: l},
			func() float64 { return float64(rc().Conflicts()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mensageria_receive_wrong_tokens_total",
			Help: "Requests refused for a bearer token that is not one of the receiver's (401, or 429 once its address is throttled).", ConstLabels: l},
			func() float64 { return float64(rc().WrongTokens()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mensageria_receive_tokens",
			Help: "Bearer tokens accepted now.", ConstLabels: l}, func() float64 { return float64(rc().Tokens()) }),
		mensageriaprom.InboxQueueCollector(app, q, log),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// countStatus wraps h so that every answer is counted by its status code.
func (m *receiveMetrics) countStatus(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		m.requests.WithLabelValues(strconv.Itoa(sw.code)).Inc()
	})
}

type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
