package ops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/ops"
)

func ids(p *ops.Page) []int64 {
	out := make([]int64, len(p.Messages))
	for i, m := range p.Messages {
		out[i] = m.ID
	}
	return out
}

// An app lists only its own types' dead letters; a type of another app,
// or of none, is refused naming its owner; AllApps lists every app's.
func TestDeadLettersScope(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	ours := ob.dead("pedido.criado", 2, false)
	theirs := ob.dead("fatura.emitida", 1, false)
	ob.claim("pedido.pago", 1) // in flight: not a dead letter

	pedidos := ops.New(ob.drv, ops.ForApps("pedidos"))
	page, err := pedidos.DeadLetters(ctx, ops.ListParams{Limit: 10})
	if err != nil || !slices.Equal(ids(page), ours) || page.Truncated {
		t.Fatalf("pedidos' dead letters = %v, %+v; want %v", err, page, ours)
	}
	m := page.Messages[0]
	if m.Owner != "pedidos" || m.State != driver.StateDead || m.LastError != "refused: 422" || strings.Contains(m.LastRoute, "secret") || m.Payload != nil {
		t.Fatalf("listed %+v: want owner, state, reason, a masked route and no payload", m)
	}

	var oos *ops.OutOfScopeError
	_, err = pedidos.DeadLetters(ctx, ops.ListParams{Types: []string{"fatura.emitida"}, Limit: 10})
	if !errors.As(err, &oos) || oos.Type != "fatura.emitida" || oos.Owner != "faturamento" || oos.ID != 0 || !errors.Is(err, ops.ErrOutOfScope) {
		t.Fatalf("listing another app's type: %v (%+v)", err, oos)
	}
	_, err = pedidos.DeadLetters(ctx, ops.ListParams{Types: []string{"avulso"}, Limit: 10})
	if !errors.As(err, &oos) || oos.Owner != "" || !strings.Contains(err.Error(), "no app owns it") {
		t.Fatalf("listing a type no app owns: %v", err)
	}

	all, err := pedidos.In(ops.AllApps()).DeadLetters(ctx, ops.ListParams{Limit: 10})
	if err != nil || !slices.Equal(ids(all), append(slices.Clone(ours), theirs...)) {
		t.Fatalf("every app's dead letters = %v, %v", err, all)
	}

	none, err := ops.New(ob.drv, ops.ForApps("estoque")).DeadLetters(ctx, ops.ListParams{Limit: 10})
	if err != nil || !none.NoTypes || len(none.Messages) != 0 {
		t.Fatalf("an app that owns nothing lists %+v, %v; want nothing, NoTypes", none, err)
	}
}

// Pages follow one another by NextAfter until one is not truncated; a
// page size out of range is refused.
func TestDeadLettersPaging(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	want := ob.dead("pedido.criado", 5, false)
	o := ops.New(ob.drv, ops.ForApps("pedidos"))
	var got []int64
	after := int64(0)
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages of 2 for 5 rows: %v", got)
		}
		p, err := o.DeadLetters(ctx, ops.ListParams{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(p)...)
		if !p.Truncated {
			if p.NextAfter != 0 {
				t.Fatalf("last page has NextAfter %d", p.NextAfter)
			}
			break
		}
		after = p.NextAfter
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged %v, want %v", got, want)
	}
	exact, err := o.DeadLetters(ctx, ops.ListParams{Limit: 5})
	if err != nil || exact.Truncated || len(exact.Messages) != 5 {
		t.Fatalf("a page exactly as large as the rows: %+v, %v; want all five, not truncated", exact, err)
	}
	for _, limit := range []int{0, -1, driver.MaxListLimit + 1} {
		if _, err := o.DeadLetters(ctx, ops.ListParams{Limit: limit}); !errors.Is(err, ops.ErrInvalid) {
			t.Fatalf("limit %d: %v, want ErrInvalid", limit, err)
		}
	}
}

// Show returns a message in full; a missing one is ErrNotFound, another
// app's is refused.
func TestShow(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	ours := ob.dead("pedido.criado", 1, false)[0]
	theirs := ob.dead("fatura.emitida", 1, false)[0]
	o := ops.New(ob.drv, ops.ForApps("pedidos"))
	m, err := o.Show(ctx, ours)
	if err != nil || string(m.Payload) != `{"n":1}` || m.Type != "pedido.criado" || len(m.MessageID) != 36 || m.Gone {
		t.Fatalf("Show = %+v, %v", m, err)
	}
	var nf *ops.NotFoundError
	if _, err := o.Show(ctx, 999999); !errors.As(err, &nf) || nf.ID != 999999 || !errors.Is(err, ops.ErrNotFound) {
		t.Fatalf("Show of a missing id: %v", err)
	}
	var oos *ops.OutOfScopeError
	if _, err := o.Show(ctx, theirs); !errors.As(err, &oos) || oos.ID != theirs || oos.Owner != "faturamento" || !slices.Equal(oos.Apps, []string{"pedidos"}) {
		t.Fatalf("Show of another app's: %v", err)
	}
}

// A retry by ids moves the dead ones back to pending and leaves the
// others, named with why; a discard deletes; one id of another app
// refuses the whole action and changes nothing.
func TestRetryDiscard(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	dead := ob.dead("pedido.criado", 3, false)
	flying := ob.claim("pedido.pago", 1)[0]
	theirs := ob.dead("fatura.emitida", 1, false)[0]
	o := ops.New(ob.drv, ops.ForApps("pedidos"))

	_, err := o.Retry(ctx, ops.Selection{IDs: []int64{dead[0], theirs}})
	var oos *ops.OutOfScopeError
	if !errors.As(err, &oos) || oos.ID != theirs || ob.state(dead[0]) != driver.StateDead || ob.state(theirs) != driver.StateDead {
		t.Fatalf("a retry naming another app's row: %v; states %s, %s", err, ob.state(dead[0]), ob.state(theirs))
	}
	if _, err := o.Discard(ctx, ops.Selection{Types: []string{"fatura.emitida"}}); !errors.As(err, &oos) || oos.Type != "fatura.emitida" || ob.state(theirs) != driver.StateDead {
		t.Fatalf("a discard of another app's type: %v", err)
	}

	res, err := o.Retry(ctx, ops.Selection{IDs: []int64{dead[0], flying, 999999}})
	if err != nil || res.Changed != 1 || len(res.Left) != 2 {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	if got, want := res.Left[0].String()+"; "+res.Left[1].String(), fmt.Sprintf("%d (pending, not dead); 999999 (no such message)", flying); got != want {
		t.Fatalf("left alone: %s, want %s", got, want)
	}
	if ob.state(dead[0]) != driver.StatePending {
		t.Fatalf("retried row is %s", ob.state(dead[0]))
	}

	res, err = o.Discard(ctx, ops.Selection{Types: []string{"pedido.criado"}})
	if err != nil || res.Changed != 2 || ob.state(dead[1]) != "" || ob.state(dead[2]) != "" || ob.state(dead[0]) != driver.StatePending {
		t.Fatalf("discard of the type = %+v, %v: every dead letter of it deleted, the pending one kept", res, err)
	}

	for _, s := range []ops.Selection{{}, {IDs: []int64{1}, Types: []string{"pedido.criado"}}, {IDs: []int64{0}}} {
		if _, err := o.Retry(ctx, s); !errors.Is(err, ops.ErrInvalid) {
			t.Fatalf("selection %+v: %v, want ErrInvalid", s, err)
		}
	}
	if _, err := o.Discard(ctx, ops.Selection{IDs: []int64{dead[0]}, AllowDuplicate: true}); !errors.Is(err, ops.ErrInvalid) {
		t.Fatalf("a discard allowing duplicates: %v, want ErrInvalid", err)
	}
}

// A dead letter an at-most-once attempt marked is retried only when the
// selection allows a duplicate: without, the whole retry is refused and
// nothing changes; a discard takes it as it is.
func TestRetryMarked(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	plain := ob.dead("pedido.criado", 1, false)[0]
	marked := ob.dead("pedido.criado", 1, true)[0]
	o := ops.New(ob.drv, ops.ForApps("pedidos"))

	_, err := o.Retry(ctx, ops.Selection{Types: []string{"pedido.criado"}})
	var amo *ops.AtMostOnceError
	if !errors.As(err, &amo) || !slices.Equal(amo.IDs, []int64{marked}) || ob.state(plain) != driver.StateDead {
		t.Fatalf("retry selecting a marked dead letter: %v; plain row %s", err, ob.state(plain))
	}
	plan, err := o.PlanRetry(ctx, ops.Selection{IDs: []int64{plain, marked}, AllowDuplicate: true})
	if err != nil || !slices.Equal(plan.Marked, []int64{marked}) || ob.state(marked) != driver.StateDead {
		t.Fatalf("plan allowing a duplicate = %+v, %v: it names the marked row and changes nothing", plan, err)
	}
	res, err := o.Apply(ctx, plan)
	if err != nil || res.Changed != 2 || ob.state(marked) != driver.StatePending {
		t.Fatalf("apply = %+v, %v; marked row %s", res, err, ob.state(marked))
	}
}

// A resolution of messages in doubt is scoped like a retry, records who
// and why, and sorts out rows not in doubt; a message resolved delivered
// is still shown from its records.
func TestResolve(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	doubt := ob.inDoubt("pedido.criado", 2)
	theirs := ob.inDoubt("fatura.emitida", 1)[0]
	dead := ob.dead("pedido.pago", 1, false)[0]
	o := ops.New(ob.drv, ops.ForApps("pedidos"))

	page, err := o.InDoubt(ctx, ops.ListParams{Limit: 10})
	if err != nil || !slices.Equal(ids(page), doubt) || page.Messages[0].AttemptedAt == nil {
		t.Fatalf("in doubt = %+v, %v", page, err)
	}
	var oos *ops.OutOfScopeError
	_, err = o.Resolve(ctx, ops.Decision{IDs: []int64{doubt[0], theirs}, Outcome: ops.OutcomeDead, By: "ana", Reason: "checked"})
	if !errors.As(err, &oos) || oos.ID != theirs || ob.state(doubt[0]) != ops.StateInDoubt {
		t.Fatalf("resolving another app's: %v", err)
	}
	if _, err := o.Resolve(ctx, ops.Decision{IDs: doubt, Outcome: ops.OutcomeDead, By: "ana"}); !errors.Is(err, ops.ErrInvalidDecision) || !errors.Is(err, driver.ErrInvalidResolve) {
		t.Fatalf("a decision without a reason: %v", err)
	}

	res, err := o.Resolve(ctx, ops.Decision{IDs: []int64{doubt[0], dead}, Outcome: ops.OutcomeDelivered, By: "ana", Reason: "billing has it"})
	if err != nil || !slices.Equal(res.Resolved, []int64{doubt[0]}) || !slices.Equal(res.NotInDoubt, []int64{dead}) {
		t.Fatalf("resolve = %+v, %v", res, err)
	}
	gone, err := o.ShowInDoubt(ctx, doubt[0])
	if err != nil || !gone.Gone || gone.Type != "pedido.criado" || len(gone.Resolutions) != 1 || gone.Resolutions[0].By != "ana" || gone.Resolutions[0].Outcome != ops.OutcomeDelivered {
		t.Fatalf("show of a message resolved delivered = %+v, %v", gone, err)
	}
	if _, err := ops.New(ob.drv, ops.ForApps("faturamento")).ShowInDoubt(ctx, doubt[0]); !errors.As(err, &oos) || oos.Owner != "pedidos" {
		t.Fatalf("another app's show of it: %v", err)
	}
	res, err = o.Resolve(ctx, ops.Decision{IDs: []int64{doubt[1]}, Outcome: ops.OutcomeRetry, By: "ana", Reason: "not there"})
	if err != nil || len(res.Resolved) != 1 || ob.state(doubt[1]) != ops.StatePending {
		t.Fatalf("resolve retry = %+v, %v; state %s", res, err, ob.state(doubt[1]))
	}
	if _, err := o.ShowInDoubt(ctx, 999999); !errors.Is(err, ops.ErrNotFound) {
		t.Fatalf("show of a missing id: %v", err)
	}
}

// Decision.Check refuses, without a database, what no backend records:
// no ids, an outcome other than the three, no one deciding or no reason.
func TestDecisionCheck(t *testing.T) {
	good := ops.Decision{IDs: []int64{1}, Outcome: ops.OutcomeRetry, By: "ana", Reason: "not there"}
	if err := good.Check(); err != nil {
		t.Fatalf("Check of a good decision: %v", err)
	}
	for _, o := range []ops.Outcome{ops.OutcomeDelivered, ops.OutcomeRetry, ops.OutcomeDead} {
		d := good
		d.Outcome = o
		if err := d.Check(); err != nil {
			t.Errorf("Check of outcome %q: %v", o, err)
		}
	}
	for name, bad := range map[string]func(*ops.Decision){
		"no ids":          func(d *ops.Decision) { d.IDs = nil },
		"unknown outcome": func(d *ops.Decision) { d.Outcome = "maybe" },
		"no by":           func(d *ops.Decision) { d.By = "" },
		"no reason":       func(d *ops.Decision) { d.Reason = " " },
	} {
		d := good
		bad(&d)
		if err := d.Check(); !errors.Is(err, ops.ErrInvalidDecision) {
			t.Errorf("Check with %s: %v, want ErrInvalidDecision", name, err)
		}
	}
}

// Owners lists the scope's entries; a transfer moves an entry only from
// its owner, naming who owns it otherwise; a missing entry is not found.
func TestOwners(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	o := ops.New(ob.drv, ops.ForApps("faturamento"))
	list, err := o.Owners(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "fatura.emitida" {
		t.Fatalf("faturamento's entries = %+v, %v", list, err)
	}
	if _, err := o.Register(ctx, "faturamento", []driver.Resource{{Kind: driver.ResourceType, Name: "pedido.criado"}}); !errors.Is(err, driver.ErrOwnerConflict) {
		t.Fatalf("registering another app's type: %v", err)
	}
	if _, err := o.Register(ctx, "pedidos", nil); !errors.Is(err, ops.ErrOutOfScope) {
		t.Fatalf("registering for an app outside the scope: %v", err)
	}
	if _, err := o.Register(ctx, "faturamento", []driver.Resource{{Kind: driver.ResourceType, Name: "fatura.paga"}}); err != nil {
		t.Fatal(err)
	}

	var tce *ops.TransferConflictError
	err = o.Transfer(ctx, driver.ResourceType, "pedido.criado", "faturamento", "estoque")
	if !errors.As(err, &tce) || !tce.Known || tce.Owner != "pedidos" || !errors.Is(err, driver.ErrOwnerConflict) {
		t.Fatalf("transfer from an app that does not own it: %v", err)
	}
	if err := o.Transfer(ctx, driver.ResourceType, "pedido.criado", "pedidos", "estoque"); err != nil {
		t.Fatal(err)
	}
	if e, err := o.Owner(ctx, driver.ResourceType, "pedido.criado"); err != nil || e.App != "estoque" {
		t.Fatalf("after the transfer: %+v, %v", e, err)
	}
	if err := o.Release(ctx, driver.ResourceType, "pedido.criado", "estoque"); err != nil {
		t.Fatal(err)
	}
	var nf *ops.NotFoundError
	if err := o.Release(ctx, driver.ResourceType, "pedido.criado", "estoque"); !errors.As(err, &nf) || nf.Name != "pedido.criado" || !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("releasing a released entry: %v", err)
	}
	if err := o.Transfer(ctx, driver.ResourceType, "x", "a", "a"); !errors.Is(err, ops.ErrInvalid) {
		t.Fatalf("a transfer to its own app: %v", err)
	}
	if err := o.Transfer(ctx, driver.ResourceType, "x", "a", "not an app!"); !errors.Is(err, ops.ErrInvalid) {
		t.Fatalf("a transfer to an invalid app name: %v", err)
	}
}

// The status has a line per type counted, owned or named, with its
// owner, counts and route, and the elections asked for.
func TestStatus(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	ob.dead("pedido.criado", 2, false)
	ob.inDoubt("pedido.criado", 1)
	ob.claim("fatura.emitida", 1)
	if err := ob.drv.SetRouteStates(ctx, driver.RouteStatesParams{App: "pedidos", States: []driver.RouteState{{Type: "pedido.criado", App: "pedidos", Route: "pedidos → http https://u:secret@b/m2m", State: "paused", Failures: 3}}}); err != nil {
		t.Fatal(err)
	}
	o := ops.New(ob.drv, ops.ForApps("pedidos"))
	st, err := o.Status(ctx, ops.StatusParams{Types: []string{"estoque.baixa"}, Elections: []string{"pedidos"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ty := range st.Types {
		names = append(names, ty.Type)
	}
	if !slices.Equal(names, []string{"estoque.baixa", "fatura.emitida", "pedido.criado", "pedido.pago"}) {
		t.Fatalf("types %v", names)
	}
	pc, fe, idle := st.Types[2], st.Types[1], st.Types[0]
	if !pc.Counted || pc.Dead != 2 || pc.InDoubt != 1 || pc.Owner != "pedidos" || pc.Route == nil || pc.Route.State != "paused" || strings.Contains(pc.Route.Name, "secret") {
		t.Fatalf("pedido.criado: %+v (route %+v)", pc, pc.Route)
	}
	if fe.InFlight != 1 || fe.Owner != "faturamento" || idle.Counted || idle.Owner != "" {
		t.Fatalf("fatura.emitida %+v, estoque.baixa %+v", fe, idle)
	}
	if len(st.Elections) != 1 || st.Elections[0].App != "pedidos" || st.Elections[0].Err != nil || st.Elections[0].Leader.Holder != "" {
		t.Fatalf("elections %+v", st.Elections)
	}
	all, err := o.Status(ctx, ops.StatusParams{AllElections: true})
	if err != nil || len(all.Elections) != 2 || all.Elections[0].App != "faturamento" {
		t.Fatalf("every app's elections: %+v, %v", all.Elections, err)
	}
}

// DeliveredPerMinute reads the deliveries the driver counts per type and
// minute, whatever the scope; a driver that keeps no such history answers
// not ok, and nothing else.
func TestDeliveredPerMinute(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	ob.settle(driver.SettleParams{Delivered: ob.claim("pedido.criado", 3)})
	ob.claim("fatura.emitida", 1) // in flight: not delivered

	mins, ok, err := ops.New(ob.drv, ops.ForApps("faturamento")).DeliveredPerMinute(ctx, []string{"pedido.criado", "fatura.emitida"}, 10*time.Minute)
	if err != nil || !ok {
		t.Fatalf("DeliveredPerMinute = %v, %v, %v", mins, ok, err)
	}
	n := map[string]int64{}
	for _, m := range mins {
		n[m.Type] += m.N
		if m.Minute.IsZero() {
			t.Errorf("a count without its minute: %+v", m)
		}
	}
	if n["pedido.criado"] != 3 || n["fatura.emitida"] != 0 {
		t.Fatalf("delivered per type = %v, want pedido.criado 3 and no fatura.emitida", n)
	}

	// An interface value holding only driver.Driver hides the history.
	var plain struct{ driver.Driver }
	plain.Driver = ob.drv
	if mins, ok, err := ops.New(plain, ops.AllApps()).DeliveredPerMinute(ctx, []string{"pedido.criado"}, time.Minute); ok || err != nil || mins != nil {
		t.Fatalf("DeliveredPerMinute without a history = %v, %v, %v", mins, ok, err)
	}
}

// CheckApp refuses, without a database, the app names Transfer refuses,
// as an ErrInvalid that is mensageria's ErrInvalidApp too.
func TestCheckApp(t *testing.T) {
	for _, good := range []string{"pedidos", "a", "billing-v2.eu:1"} {
		if err := ops.CheckApp(good); err != nil {
			t.Errorf("CheckApp(%q) = %v", good, err)
		}
	}
	for _, bad := range []string{"", " pedidos", "not an app!", "-x", strings.Repeat("a", 101), "a\u200bb"} {
		err := ops.CheckApp(bad)
		if !errors.Is(err, ops.ErrInvalid) || !errors.Is(err, driver.ErrInvalidApp) {
			t.Errorf("CheckApp(%q) = %v, want ErrInvalid and ErrInvalidApp", bad, err)
		}
		if terr := ops.New(nil, ops.AllApps()).Transfer(context.Background(), driver.ResourceType, "t", "a", bad); bad != "" && (terr == nil || terr.Error() != err.Error()) {
			t.Errorf("Transfer to %q = %v, CheckApp = %v", bad, terr, err)
		}
	}
}
