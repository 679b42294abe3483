package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/xadm/mensageria/driver"
)

// RoutePause is an operator's pause of a message type: who paused it,
// why and since when.
type RoutePause = driver.RoutePause

// PauseRouteError refuses a pause no backend may record: a blank, over-long
// or non-UTF-8 type, operator or reason (Field says which).
type PauseRouteError = driver.PauseRouteError

// CheckPause returns a *PauseRouteError for a pause of typ by by, for
// reason, that PauseRoute would refuse as every backend does, without
// reading the database; a caller checks its input with it before
// connecting. A resume carries no reason: check it with reason "-".
func CheckPause(typ, by, reason string) error {
	return driver.CheckPauseRoute(driver.PauseRouteParams{App: "-", Type: typ, PausedBy: by, Reason: reason})
}

// ErrNoRoutePause is returned by the route pause verbs when the driver
// records no pauses (it does not implement driver.RoutePauser).
var ErrNoRoutePause = errors.New("mensageria/ops: this database's driver records no route pauses")

func (o *Ops) pauser() (driver.RoutePauser, error) {
	p, ok := o.drv.(driver.RoutePauser)
	if !ok {
		return nil, ErrNoRoutePause
	}
	return p, nil
}

// PauseRoute pauses typ on purpose (docs/adr/0032-route-pause.md): every
// relay of the type's owner claims none of its messages, which stay
// pending, until ResumeRoute; running relays stop claiming it within a
// third of their lease. by names the operator and reason says why; both
// are required (a *PauseRouteError otherwise). The scope must hold
// the type's owner in the catalog (*OutOfScopeError), and a type the
// catalog does not have is a *NotFoundError. Pausing a paused type
// replaces who and why and keeps its start.
func (o *Ops) PauseRoute(ctx context.Context, typ, by, reason string) (RoutePause, error) {
	p, err := o.pauser()
	if err != nil {
		return RoutePause{}, err
	}
	owner, err := o.Owner(ctx, driver.ResourceType, typ)
	if err != nil {
		return RoutePause{}, err
	}
	if owner.App == "" {
		return RoutePause{}, &OutOfScopeError{Apps: o.scope.Apps(), Type: typ}
	}
	if !o.scope.Has(owner.App) {
		return RoutePause{}, &OutOfScopeError{Apps: o.scope.Apps(), Type: typ, Owner: owner.App}
	}
	return p.PauseRoute(ctx, driver.PauseRouteParams{App: owner.App, Type: typ, PausedBy: by, Reason: reason})
}

// ResumeRoute lifts the pause of typ and returns it: its owner's relays
// claim it again within a third of their lease. A type not paused is a
// *NotFoundError; a pause the scope does not hold, an *OutOfScopeError.
func (o *Ops) ResumeRoute(ctx context.Context, typ string) (RoutePause, error) {
	p, err := o.pauser()
	if err != nil {
		return RoutePause{}, err
	}
	all, err := p.RoutePauses(ctx, "")
	if err != nil {
		return RoutePause{}, fmt.Errorf("route pauses: %w", err)
	}
	for _, x := range all {
		if x.Type != typ {
			continue
		}
		if !o.scope.Has(x.App) {
			return RoutePause{}, &OutOfScopeError{Apps: o.scope.Apps(), Type: typ, Owner: x.App}
		}
		resumed, found, err := p.ResumeRoute(ctx, typ)
		if err != nil {
			return RoutePause{}, err
		}
		if found {
			return resumed, nil
		}
	}
	return RoutePause{}, &NotPausedError{Type: typ}
}

// RoutePauses lists every app's route pauses, by type (reads are never
// scoped, as the status is not); nil on a driver that records none.
func (o *Ops) RoutePauses(ctx context.Context) ([]RoutePause, error) {
	p, ok := o.drv.(driver.RoutePauser)
	if !ok {
		return nil, nil
	}
	out, err := p.RoutePauses(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("route pauses: %w", err)
	}
	return out, nil
}

// NotPausedError is ResumeRoute's answer for a type no operator paused;
// errors.Is matches ErrNotFound.
type NotPausedError struct{ Type string }

func (e *NotPausedError) Error() string {
	return fmt.Sprintf("mensageria/ops: message type %q is not paused", e.Type)
}

// Is makes errors.Is match ErrNotFound.
func (e *NotPausedError) Is(target error) bool { return target == ErrNotFound }
