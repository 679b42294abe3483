package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/verdict"
	"github.com/xadm/mensageria/ops"
)

// cleanEnd is what a good run of three orders leaves: one refused for
// good and parked as dead, two applied with their invoices; every
// cancellation parked as dead or delivered; estoque's rows untouched.
func cleanEnd() *demoEnd {
	e := &demoEnd{
		committed:  map[string]bool{"pedido-1": true, "pedido-2": true, "pedido-3": true},
		rolledBack: map[string]bool{"pedido-4": true},
		applied: map[string]map[string]int{
			consumerPedidos: {"pedido-1": 1, "pedido-2": 1},
			consumerFaturas: {"pedido-1": 1, "pedido-2": 1},
		},
		dead:    map[string]map[string]bool{typPedido: {"pedido-3": true}, typCancelado: {}},
		foreign: []ops.Message{{ID: 100, Type: typForeign, State: ops.StatePending}, {ID: 101, Type: typForeign, State: ops.StatePending}},
	}
	for i := range demoCancelled {
		k := fmt.Sprintf("cancel-%d", i)
		state := ops.StateDead
		if i == 0 {
			state = ops.StateDelivered
		} else {
			e.dead[typCancelado][k] = true
		}
		e.cancelled = append(e.cancelled, ops.Message{ID: int64(200 + i), Type: typCancelado, Key: k, State: state})
	}
	return e
}

func TestDemoJudge(t *testing.T) {
	tests := []struct {
		name      string
		change    func(e *demoEnd)
		lost      map[string]int
		dup       map[string]int
		untouched int
	}{
		{"clean", func(*demoEnd) {}, nil, nil, 2},
		{"an order never applied", func(e *demoEnd) {
			delete(e.applied[consumerPedidos], "pedido-2")
			delete(e.applied[consumerFaturas], "pedido-2")
		}, map[string]int{typPedido: 1}, nil, 2},
		{"an invoice never applied", func(e *demoEnd) {
			delete(e.applied[consumerFaturas], "pedido-1")
		}, map[string]int{typFatura: 1}, nil, 2},
		{"a cancellation still pending", func(e *demoEnd) {
			e.cancelled[1].State = ops.StatePending
			delete(e.dead[typCancelado], "cancel-1")
		}, map[string]int{typCancelado: 1}, nil, 2},
		{"an order applied three times", func(e *demoEnd) {
			e.applied[consumerPedidos]["pedido-1"] = 3
		}, nil, map[string]int{typPedido: 2}, 2},
		{"a foreign row attempted", func(e *demoEnd) {
			e.foreign[1].Attempts = 1
			e.foreign[1].LastError = "estoque's sender must never run in this demo"
		}, nil, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := cleanEnd()
			tt.change(e)
			v, types := e.judge()
			lost, dup := map[string]int{}, map[string]int{}
			for _, x := range v.Violations {
				switch x.Kind {
				case verdict.Lost:
					lost[types[x.N]]++
				case verdict.DuplicateEffect:
					dup[types[x.N]] += v.Applied[x.N] - 1
				}
			}
			if !maps.Equal(lost, tt.lost) || !maps.Equal(dup, tt.dup) {
				t.Fatalf("lost %v, duplicate effects %v; want %v, %v\n%v", lost, dup, tt.lost, tt.dup, v.Violations)
			}
			r := &Report{cols: []string{typPedido, typFatura, typCancelado}, rows: map[string]map[string]int{}}
			r.count(v, types, e)
			if r.foreignUntouched != tt.untouched {
				t.Fatalf("foreign untouched %d, want %d", r.foreignUntouched, tt.untouched)
			}
			if r.lost != len(v.Violations)-v.Count(verdict.DuplicateEffect)-v.Count(verdict.ForeignClaim) {
				t.Fatalf("report's lost %d disagrees with the verdict %v", r.lost, v.Violations)
			}
		})
	}
}

// A --db that names no database the demo knows is the operator's mistake:
// a usage error (exit code 2), before anything is created.
func TestRunRefusesAnUnknownDatabaseURL(t *testing.T) {
	var out bytes.Buffer
	rep, err := Run(context.Background(), Options{DB: "oracle://h/db", Messages: 50, Timeout: time.Minute, Out: &out})
	var ue *daemon.Error
	if !errors.As(err, &ue) || ue.Code != daemon.ExitUsage || rep != nil || !strings.Contains(err.Error(), "postgres://, mysql:// or mariadb://") {
		t.Fatalf("Run: %v, %v; want a usage error naming the URLs it takes", rep, err)
	}
	if out.Len() != 0 {
		t.Fatalf("a refused run printed %q", out.String())
	}
}
