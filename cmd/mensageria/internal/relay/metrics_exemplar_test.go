package relay

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
)

// A sampled attempt's trace is its latency bucket's exemplar; an unsampled
// or untraced one leaves none.
func TestLatencyExemplarIsTheSampledTrace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flags   trace.TraceFlags
		traced  bool
		wantTID string
	}{
		{"sampled", trace.FlagsSampled, true, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"not sampled", 0, true, ""},
		{"untraced", 0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics("pedidos", nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			ctx := context.Background()
			if tc.traced {
				tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
				sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
				ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: tc.flags}))
			}
			m.OnDelivery(mensageria.DeliveryEvent{Type: "pedido.criado", Outcome: mensageria.OutcomeDelivered, Attempt: 1, Latency: 30 * time.Millisecond, Context: ctx})
			reg := prometheus.NewRegistry()
			reg.MustRegister(m.latency)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			observed := uint64(0)
			for _, mf := range mfs {
				for _, metric := range mf.Metric {
					observed += metric.GetHistogram().GetSampleCount()
					for _, b := range metric.GetHistogram().Bucket {
						if ex := b.GetExemplar(); ex != nil {
							for _, l := range ex.Label {
								if l.GetName() == "trace_id" {
									got = append(got, l.GetValue())
								}
							}
						}
					}
				}
			}
			if observed != 1 {
				t.Fatalf("%d observations, want 1", observed)
			}
			switch {
			case tc.wantTID == "" && len(got) > 0:
				t.Errorf("exemplars %v, want none", got)
			case tc.wantTID != "" && (len(got) != 1 || got[0] != tc.wantTID):
				t.Errorf("exemplars %v, want one with trace %s", got, tc.wantTID)
			}
		})
	}
}
