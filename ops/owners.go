package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/xadm/mensageria/driver"
)

// Owners lists the catalog entries of the scope's apps (every entry with
// AllApps), with the entries the upgrade to the catalog left unclaimed for
// the types named in unclaimed (the ones an app's config routes), sorted
// by kind and name.
func (o *Ops) Owners(ctx context.Context, unclaimed ...string) ([]driver.Ownership, error) {
	all, err := o.drv.Owners(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("ownership catalog: %w", err)
	}
	var list []driver.Ownership
	for _, e := range all {
		if o.scope.All() || (e.App != "" && o.scope.Has(e.App)) ||
			(e.App == "" && e.Kind == driver.ResourceType && slices.Contains(unclaimed, e.Name)) {
			list = append(list, e)
		}
	}
	return list, nil
}

// Register records that app owns resources, as its relay does when it
// starts: each one absent from the catalog (or left unclaimed) becomes
// app's. One another app owns fails the whole call with the driver's
// *driver.OwnerConflictError and records nothing; an app outside the
// scope is an *OutOfScopeError.
func (o *Ops) Register(ctx context.Context, app string, resources []driver.Resource) (driver.RegisterResult, error) {
	if err := driver.CheckApp(app); err != nil {
		return driver.RegisterResult{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if !o.scope.Has(app) {
		return driver.RegisterResult{}, &OutOfScopeError{Apps: o.scope.Apps(), Owner: app}
	}
	return o.drv.Register(ctx, driver.RegisterParams{App: app, Resources: resources})
}

// ErrTransferConflict is wrapped by *TransferConflictError.
var ErrTransferConflict = errors.New("mensageria/ops: the catalog entry is not the app's it moves from")

// TransferConflictError refuses a transfer or release whose From is not
// the entry's owner: Owner is who owns it (Known false when the entry
// vanished meanwhile). Nothing was changed.
type TransferConflictError struct {
	Kind  driver.ResourceKind
	Name  string
	From  string
	Owner string
	Known bool
	err   *driver.OwnerConflictError
}

func (e *TransferConflictError) Error() string {
	if !e.Known {
		return fmt.Sprintf("mensageria/ops: %s %q is not owned by %q; nothing changed", e.Kind, e.Name, e.From)
	}
	return fmt.Sprintf("mensageria/ops: %s %q is owned by %q, not %q; nothing changed", e.Kind, e.Name, e.Owner, e.From)
}

// Is makes errors.Is match ErrTransferConflict.
func (e *TransferConflictError) Is(target error) bool { return target == ErrTransferConflict }

// Unwrap returns the driver's conflict.
func (e *TransferConflictError) Unwrap() error { return e.err }

// Transfer moves one catalog entry from app from ("" for an entry the
// upgrade left unclaimed) to app to, only while from still owns it: the
// explicit operator step of handing a type, or anything else, over. It is
// not bound to the scope: it names both apps. An entry not in the catalog
// is a *NotFoundError, one from does not own a *TransferConflictError.
func (o *Ops) Transfer(ctx context.Context, kind driver.ResourceKind, name, from, to string) error {
	if to == "" {
		return invalid("a transfer needs the app it moves to (Release deletes the entry)")
	}
	if to == from {
		return invalid("the entry moves from and to %q", from)
	}
	if err := CheckApp(to); err != nil {
		return err
	}
	return o.transfer(ctx, kind, name, from, to)
}

// CheckApp refuses, as Transfer and Register do, an app name that is not
// 1-100 letters, digits or ._:- starting with a letter or digit: the
// error wraps ErrInvalid and mensageria.ErrInvalidApp. A caller checks an
// operator's input with it before connecting.
func CheckApp(app string) error {
	if err := driver.CheckApp(app); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Release deletes one catalog entry of app from, only while from still
// owns it; errors as Transfer's. A released type can no longer be
// enqueued until an app registers it.
func (o *Ops) Release(ctx context.Context, kind driver.ResourceKind, name, from string) error {
	return o.transfer(ctx, kind, name, from, "")
}

func (o *Ops) transfer(ctx context.Context, kind driver.ResourceKind, name, from, to string) error {
	switch {
	case name == "":
		return invalid("the entry's name is empty")
	case kind == driver.ResourceMigrations && name != driver.MigrationsName:
		return invalid("the migrations entry is named %q, not %q", driver.MigrationsName, name)
	}
	err := o.drv.Transfer(ctx, driver.TransferParams{Kind: kind, Name: name, From: from, To: to})
	var oce *driver.OwnerConflictError
	switch {
	case errors.Is(err, driver.ErrNotOwned):
		return &NotFoundError{Kind: kind, Name: name}
	case errors.As(err, &oce):
		return o.transferConflict(ctx, oce, kind, name, from)
	}
	return err
}

// transferConflict says who owns an entry a transfer found not from's.
func (o *Ops) transferConflict(ctx context.Context, oce *driver.OwnerConflictError, kind driver.ResourceKind, name, from string) error {
	e := &TransferConflictError{Kind: kind, Name: name, From: from, err: oce}
	for _, x := range oce.Conflicts {
		if x.Kind == kind && x.Name == name {
			e.Owner, e.Known = x.App, true
		}
	}
	if e.Known {
		return e
	}
	all, err := o.drv.Owners(ctx, "")
	if err != nil {
		return fmt.Errorf("ownership catalog: %w", err)
	}
	for _, x := range all {
		if x.Kind == kind && x.Name == name {
			e.Owner, e.Known = x.App, true
		}
	}
	return e
}

// Owner returns the catalog entry of kind and name, or a *NotFoundError.
func (o *Ops) Owner(ctx context.Context, kind driver.ResourceKind, name string) (driver.Ownership, error) {
	all, err := o.drv.Owners(ctx, "")
	if err != nil {
		return driver.Ownership{}, fmt.Errorf("ownership catalog: %w", err)
	}
	for _, x := range all {
		if x.Kind == kind && x.Name == name {
			return x, nil
		}
	}
	return driver.Ownership{}, &NotFoundError{Kind: kind, Name: name}
}
