package ops_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/ops"
)

// Messages lists the scope's rows whatever their state, each with it,
// pages like the other lists and refuses another app's type.
func TestMessagesEveryState(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	inFlight := ob.claim("pedido.criado", 1)[0]
	delivered := ob.claim("pedido.criado", 1)[0]
	ob.settle(driver.SettleParams{Delivered: []int64{delivered}, KeepDelivered: true})
	dead := ob.dead("pedido.criado", 1, false)[0]
	doubt := ob.inDoubt("pedido.pago", 1)[0]
	ob.dead("fatura.emitida", 1, false)

	pedidos := ops.New(ob.drv, ops.ForApps("pedidos"))
	page, err := pedidos.Messages(ctx, ops.ListParams{Limit: 10})
	if err != nil || page.Truncated {
		t.Fatalf("pedidos' messages = %+v, %v", page, err)
	}
	want := map[int64]ops.State{inFlight: ops.StatePending, delivered: ops.StateDelivered, dead: ops.StateDead, doubt: ops.StateInDoubt}
	got := map[int64]ops.State{}
	for _, m := range page.Messages {
		got[m.ID] = m.State
	}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v (faturamento's row left out)", got, want)
	}
	for id, st := range want {
		if got[id] != st {
			t.Fatalf("message %d listed %q, want %q (all: %v)", id, got[id], st, got)
		}
	}

	one, err := pedidos.Messages(ctx, ops.ListParams{Types: []string{"pedido.pago"}, Limit: 10})
	if err != nil || !slices.Equal(ids(one), []int64{doubt}) {
		t.Fatalf("pedido.pago's messages = %v, %v; want [%d]", ids(one), err, doubt)
	}
	first, err := pedidos.Messages(ctx, ops.ListParams{Limit: 3})
	if err != nil || !first.Truncated || len(first.Messages) != 3 {
		t.Fatalf("a page of 3 of 4 = %+v, %v; want 3, truncated", first, err)
	}
	rest, err := pedidos.Messages(ctx, ops.ListParams{After: first.NextAfter, Limit: 3})
	if err != nil || rest.Truncated || len(rest.Messages) != 1 {
		t.Fatalf("the page after = %+v, %v; want the last one", rest, err)
	}

	_, err = pedidos.Messages(ctx, ops.ListParams{Types: []string{"fatura.emitida"}, Limit: 10})
	if !errors.Is(err, ops.ErrOutOfScope) {
		t.Fatalf("listing another app's type: %v, want ErrOutOfScope", err)
	}
	if _, err := pedidos.Messages(ctx, ops.ListParams{}); !errors.Is(err, ops.ErrInvalid) {
		t.Fatalf("a page of 0: %v, want ErrInvalid", err)
	}
}
