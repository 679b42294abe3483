package mensageriaprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriaprom"
)

type traceKey struct{}

// A delivery counts by type and outcome, and its latency carries the
// exemplar the option finds in its context; a dead one counts as a dead
// letter too.
func TestHooks(t *testing.T) {
	h := mensageriaprom.NewHooks("pedidos", mensageriaprom.WithExemplar(func(ctx context.Context) prometheus.Labels {
		if id, ok := ctx.Value(traceKey{}).(string); ok {
			return prometheus.Labels{"trace_id": id}
		}
		return nil
	}))
	ctx := context.WithValue(context.Background(), traceKey{}, "4bf92f35")
	h.OnDelivery(mensageria.DeliveryEvent{Type: "pedido.criado", Outcome: mensageria.OutcomeDelivered, Latency: 30 * time.Millisecond, Context: ctx})
	h.OnDelivery(mensageria.DeliveryEvent{Type: "pedido.criado", Outcome: mensageria.OutcomeDead, Latency: time.Second, Context: context.Background()})
	h.OnElection(mensageria.ElectionEvent{Leader: true, Epoch: 7})
	h.OnFailure(mensageria.FailureEvent{Kind: mensageria.FailureSettle})
	want := `
# HELP mensageria_dead_letters_total Messages this relay parked as dead.
# TYPE mensageria_dead_letters_total counter
mensageria_dead_letters_total{app="pedidos",type="pedido.criado"} 1
# HELP mensageria_deliveries_total Delivery attempts by type and outcome (delivered, retry, dead; fenced: another relay owns the row now; expired: the lease ran out before the settle; unsettled: the database refused the settle).
# TYPE mensageria_deliveries_total counter
mensageria_deliveries_total{app="pedidos",outcome="dead",type="pedido.criado"} 1
mensageria_deliveries_total{app="pedidos",outcome="delivered",type="pedido.criado"} 1
# HELP mensageria_relay_epoch Fence epoch of this process's leadership.
# TYPE mensageria_relay_epoch gauge
mensageria_relay_epoch{app="pedidos"} 7
# HELP mensageria_relay_leader 1 while this process holds its app's relay election (always 1 with election none).
# TYPE mensageria_relay_leader gauge
mensageria_relay_leader{app="pedidos"} 1
`
	if err := testutil.CollectAndCompare(h, strings.NewReader(want), "mensageria_dead_letters_total", "mensageria_deliveries_total", "mensageria_relay_epoch", "mensageria_relay_leader"); err != nil {
		t.Fatal(err)
	}
	// Every kind has its series from the start.
	if err := testutil.CollectAndCompare(h, strings.NewReader(`
# HELP mensageria_relay_failures_total Failed attempts of the relay's own work with its database, by kind: claim, settle, election (a round that failed on an error, not one another relay won), database (unreachable, whatever the step). A kind failing on every attempt makes /readyz unready.
# TYPE mensageria_relay_failures_total counter
mensageria_relay_failures_total{app="pedidos",kind="claim"} 0
mensageria_relay_failures_total{app="pedidos",kind="database"} 0
mensageria_relay_failures_total{app="pedidos",kind="election"} 0
mensageria_relay_failures_total{app="pedidos",kind="settle"} 1
`), "mensageria_relay_failures_total"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.Latency())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var exemplars []string
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, b := range m.GetHistogram().Bucket {
				for _, l := range b.GetExemplar().GetLabel() {
					exemplars = append(exemplars, l.GetValue())
				}
			}
		}
	}
	if len(exemplars) != 1 || exemplars[0] != "4bf92f35" {
		t.Fatalf("exemplars %v, want the one delivery's trace", exemplars)
	}
}

// failingOutbox answers every read with an error.
type failingOutbox struct{ driver.Driver }

func (failingOutbox) Stats(context.Context) ([]driver.TypeStats, error) {
	return nil, errors.New("connection refused")
}

func (failingOutbox) InboxQueueStats(context.Context) ([]driver.InboxQueueStats, error) {
	return nil, errors.New("connection refused")
}

// A read that fails is a 0 on the up gauge, not a failed scrape.
func TestCollectorsSayWhenTheDatabaseFails(t *testing.T) {
	outbox := mensageriaprom.OutboxCollector("pedidos", failingOutbox{}, nil, nil)
	if err := testutil.CollectAndCompare(outbox, strings.NewReader(`
# HELP mensageria_outbox_stats_up 1 when the last read of the outbox statistics succeeded.
# TYPE mensageria_outbox_stats_up gauge
mensageria_outbox_stats_up{app="pedidos"} 0
`)); err != nil {
		t.Fatal(err)
	}
	queue := mensageriaprom.InboxQueueCollector("recebedor", failingOutbox{}, nil)
	if err := testutil.CollectAndCompare(queue, strings.NewReader(`
# HELP mensageria_inbox_queue_stats_up 1 when the last read of the inbox queue succeeded.
# TYPE mensageria_inbox_queue_stats_up gauge
mensageria_inbox_queue_stats_up{app="recebedor"} 0
`)); err != nil {
		t.Fatal(err)
	}
}

// A route's state is one-hot, a type the catalog moved away reads 0
// claimed, and one an operator paused reads 0 claimed and 1 paused.
func TestRouteCollector(t *testing.T) {
	routes := mensageriaprom.RouteCollector("pedidos", func() []mensageria.RouteHealth {
		return []mensageria.RouteHealth{{Route: "r", Types: []string{"a", "b", "c"}, State: mensageria.RoutePaused, Failures: 2, NotOwned: []string{"b"},
			OperatorPaused: []mensageria.OperatorPause{{Type: "c", By: "cli:ana", Reason: "upgrade"}}}}
	})
	if err := testutil.CollectAndCompare(routes, strings.NewReader(`
# HELP mensageria_relay_type_claimed 1 for each type the config routes that this relay claims; 0 for one the ownership catalog now gives another app (or none), which it no longer claims; 0 too while an operator paused it (mensageria_route_type_paused).
# TYPE mensageria_relay_type_claimed gauge
mensageria_relay_type_claimed{app="pedidos",route="r",type="a"} 1
mensageria_relay_type_claimed{app="pedidos",route="r",type="b"} 0
mensageria_relay_type_claimed{app="pedidos",route="r",type="c"} 0
# HELP mensageria_route_type_paused 1 for each type the config routes that an operator paused on purpose ('mensageria routes pause'): no relay of the app claims it until resumed.
# TYPE mensageria_route_type_paused gauge
mensageria_route_type_paused{app="pedidos",route="r",type="a"} 0
mensageria_route_type_paused{app="pedidos",route="r",type="b"} 0
mensageria_route_type_paused{app="pedidos",route="r",type="c"} 1
# HELP mensageria_route_state 1 for the state each route (one destination) is in: flowing; paused (its destination failed; its types are not claimed until the probe); probing (one message is being tried).
# TYPE mensageria_route_state gauge
mensageria_route_state{app="pedidos",route="r",state="flowing",types="a,b,c"} 0
mensageria_route_state{app="pedidos",route="r",state="paused",types="a,b,c"} 1
mensageria_route_state{app="pedidos",route="r",state="probing",types="a,b,c"} 0
`), "mensageria_relay_type_claimed", "mensageria_route_type_paused", "mensageria_route_state"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(mensageriaprom.RouteCollector("pedidos", nil)); n != 0 {
		t.Fatalf("no routes collected %d series", n)
	}
}
