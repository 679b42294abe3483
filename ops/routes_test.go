package ops_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/ops"
)

// An operator pauses and resumes only its own apps' types: another app's
// type is refused and left as it was, an unknown one is not found, a
// pause needs its operator and reason, and the status shows the pause
// with who and why until the resume.
func TestRoutePauseScope(t *testing.T) {
	ob := newOutbox(t)
	ctx := context.Background()
	pedidos := ops.New(ob.drv, ops.ForApps("pedidos"))
	faturamento := ops.New(ob.drv, ops.ForApps("faturamento"))

	p, err := pedidos.PauseRoute(ctx, "pedido.criado", "cli:ana", "billing upgrades until 14:00")
	if err != nil || p.App != "pedidos" || p.PausedBy != "cli:ana" {
		t.Fatalf("PauseRoute of its own type = %+v, %v", p, err)
	}
	var oos *ops.OutOfScopeError
	if _, err := faturamento.PauseRoute(ctx, "pedido.pago", "cli:rui", "no"); !errors.As(err, &oos) || oos.Owner != "pedidos" {
		t.Fatalf("pausing another app's type: %v, want an *OutOfScopeError naming pedidos", err)
	}
	if _, err := faturamento.ResumeRoute(ctx, "pedido.criado"); !errors.Is(err, ops.ErrOutOfScope) {
		t.Fatalf("resuming another app's pause: %v", err)
	}
	if _, err := pedidos.PauseRoute(ctx, "nao.existe", "cli:ana", "x"); !errors.Is(err, ops.ErrNotFound) {
		t.Fatalf("pausing a type the catalog lacks: %v", err)
	}
	if _, err := pedidos.PauseRoute(ctx, "avulso", "cli:ana", "x"); !errors.Is(err, ops.ErrNotFound) && !errors.Is(err, ops.ErrOutOfScope) {
		t.Fatalf("pausing a type no app owns: %v", err)
	}
	var pe *driver.PauseRouteError
	if _, err := pedidos.PauseRoute(ctx, "pedido.pago", "cli:ana", " "); !errors.As(err, &pe) {
		t.Fatalf("a pause without a reason: %v, want a *driver.PauseRouteError", err)
	}

	st, err := faturamento.Status(ctx, ops.StatusParams{})
	if err != nil {
		t.Fatal(err)
	}
	var shown *driver.RoutePause
	for _, ty := range st.Types {
		if ty.Type == "pedido.criado" {
			shown = ty.Paused
		} else if ty.Paused != nil {
			t.Fatalf("%s shows a pause %+v nobody made", ty.Type, ty.Paused)
		}
	}
	if shown == nil || shown.PausedBy != "cli:ana" || shown.Reason != "billing upgrades until 14:00" {
		t.Fatalf("the status shows the pause as %+v", shown)
	}

	resumed, err := pedidos.ResumeRoute(ctx, "pedido.criado")
	if err != nil || resumed.Type != "pedido.criado" {
		t.Fatalf("ResumeRoute = %+v, %v", resumed, err)
	}
	var np *ops.NotPausedError
	if _, err := pedidos.ResumeRoute(ctx, "pedido.criado"); !errors.As(err, &np) || !errors.Is(err, ops.ErrNotFound) {
		t.Fatalf("resuming a type not paused: %v", err)
	}
	if list, err := pedidos.RoutePauses(ctx); err != nil || len(list) != 0 {
		t.Fatalf("pauses after the resume: %+v, %v", list, err)
	}
}

// CheckPause refuses, without a database, the pauses PauseRoute refuses:
// a blank, over-long or non-UTF-8 type, operator or reason; a resume is
// checked with the reason "-".
func TestCheckPause(t *testing.T) {
	if err := ops.CheckPause("pedido.criado", "cli:ana", "billing upgrades"); err != nil {
		t.Fatalf("CheckPause of a good pause: %v", err)
	}
	if err := ops.CheckPause("pedido.criado", "cli:ana", "-"); err != nil {
		t.Fatalf("CheckPause of a resume: %v", err)
	}
	long := strings.Repeat("x", 201)
	for _, c := range []struct{ typ, by, reason, field string }{
		{" ", "cli:ana", "x", "type"},
		{long, "cli:ana", "x", "type"},
		{"pedido.criado", "", "x", "paused by"},
		{"pedido.criado", "cli:ana", "  ", "reason"},
		{"pedido.criado", "cli:ana", "a\x00b", "reason"},
		{"pedido.criado", "cli:ana", "\xff", "reason"},
	} {
		var pe *ops.PauseRouteError
		if err := ops.CheckPause(c.typ, c.by, c.reason); !errors.As(err, &pe) || pe.Field != c.field {
			t.Errorf("CheckPause(%q, %q, %q) = %v, want a *PauseRouteError on %s", c.typ, c.by, c.reason, err, c.field)
		}
	}
	// What CheckPause refuses, PauseRoute refuses the same way.
	ob := newOutbox(t)
	_, err := ops.New(ob.drv, ops.AllApps()).PauseRoute(context.Background(), "pedido.criado", "cli:ana", "  ")
	want := ops.CheckPause("pedido.criado", "cli:ana", "  ")
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Fatalf("PauseRoute with a blank reason: %v, CheckPause: %v", err, want)
	}
}
