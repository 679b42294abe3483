package ops

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/xadm/mensageria/driver"
)

// Scope is which apps' message types an Ops may act on.
type Scope struct {
	apps []string // none: every app's
}

// AllApps is the scope of every app of the schema: a DBA's.
func AllApps() Scope { return Scope{} }

// ForApps is the scope of the types the catalog gives these apps. Without
// apps it is AllApps.
func ForApps(apps ...string) Scope {
	return Scope{apps: slices.Clone(apps)}
}

// All reports whether the scope is every app's.
func (s Scope) All() bool { return len(s.apps) == 0 }

// Apps returns the scope's apps; none for AllApps.
func (s Scope) Apps() []string { return slices.Clone(s.apps) }

// Has reports whether the scope may act on a type owner owns ("" for a
// type no app owns, which only AllApps may act on).
func (s Scope) Has(owner string) bool {
	return s.All() || (owner != "" && slices.Contains(s.apps, owner))
}

// Ops is the operator's verbs over one driver, within one Scope. It holds
// no state of its own: making one per call, or one per scope, is free.
type Ops struct {
	drv   driver.Driver
	scope Scope
}

// New returns the verbs over drv within scope.
func New(drv driver.Driver, scope Scope) *Ops {
	return &Ops{drv: drv, scope: scope}
}

// Scope returns the scope o acts within.
func (o *Ops) Scope() Scope { return o.scope }

// In returns o's verbs within another scope.
func (o *Ops) In(scope Scope) *Ops { return New(o.drv, scope) }

// AtMostOnce reports whether the driver keeps messages in doubt.
func (o *Ops) AtMostOnce() bool {
	_, ok := o.drv.(driver.AtMostOnce)
	return ok
}

func (o *Ops) atMostOnce() (driver.AtMostOnce, error) {
	amo, ok := o.drv.(driver.AtMostOnce)
	if !ok {
		return nil, ErrNoAtMostOnce
	}
	return amo, nil
}

// ErrInvalid is wrapped by the refusal of a request that cannot be
// carried out as asked (a page size out of range, an empty selection);
// nothing is read or changed.
var ErrInvalid = errors.New("mensageria/ops: invalid request")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// ErrNoAtMostOnce is returned by the verbs on messages in doubt when the
// driver keeps none (it does not implement driver.AtMostOnce).
var ErrNoAtMostOnce = errors.New("mensageria/ops: this database's driver keeps no messages in doubt (no at-most-once support)")

// ErrNotFound is wrapped by *NotFoundError.
var ErrNotFound = errors.New("mensageria/ops: not found")

// NotFoundError names what is not there: a message by ID, or a catalog
// entry by Kind and Name.
type NotFoundError struct {
	ID   int64
	Kind driver.ResourceKind
	Name string
}

func (e *NotFoundError) Error() string {
	if e.Kind != "" {
		return fmt.Sprintf("mensageria/ops: %s %q is not in the ownership catalog", e.Kind, e.Name)
	}
	return fmt.Sprintf("mensageria/ops: no message %d", e.ID)
}

// Is makes errors.Is match ErrNotFound, and driver.ErrNotOwned for a
// catalog entry.
func (e *NotFoundError) Is(target error) bool {
	return target == ErrNotFound || (e.Kind != "" && target == driver.ErrNotOwned)
}

// ErrOutOfScope is wrapped by *OutOfScopeError.
var ErrOutOfScope = errors.New("mensageria/ops: another app's")

// OutOfScopeError refuses an act on a message (ID set) or a message type
// (ID 0) that the scope's Apps do not own; Owner is the type's owner in
// the catalog, "" when no app owns it. Nothing was changed.
type OutOfScopeError struct {
	Apps  []string
	ID    int64
	Type  string
	Owner string
}

func (e *OutOfScopeError) Error() string {
	owner := "no app owns it"
	if e.Owner != "" {
		owner = "it is owned by app " + strconv.Quote(e.Owner)
	}
	what := fmt.Sprintf("message type %q", e.Type)
	if e.ID != 0 {
		what = fmt.Sprintf("message %d (type %s)", e.ID, e.Type)
	}
	return fmt.Sprintf("mensageria/ops: %s is not app %s's: %s; nothing changed", what, strings.Join(e.Apps, ", "), owner)
}

// Is makes errors.Is match ErrOutOfScope.
func (e *OutOfScopeError) Is(target error) bool { return target == ErrOutOfScope }

// ErrAtMostOnce is wrapped by *AtMostOnceError.
var ErrAtMostOnce = errors.New("mensageria/ops: dead letters of at_most_once routes whose last attempt may have reached the receiver")

// AtMostOnceError refuses a retry that selects dead letters an
// at-most-once attempt marked (IDs): their last request may have reached
// the receiver, so sending them again may apply the effect twice (ADR
// 0015). Selection.AllowDuplicate sends them all the same. Nothing was
// changed.
type AtMostOnceError struct {
	IDs []int64
}

func (e *AtMostOnceError) Error() string {
	return fmt.Sprintf("mensageria/ops: %d dead letter(s) (%s) belong to at_most_once routes and their last attempt may have reached the receiver: sending again may apply the effect twice; nothing changed",
		len(e.IDs), IDList(e.IDs))
}

// Is makes errors.Is match ErrAtMostOnce.
func (e *AtMostOnceError) Is(target error) bool { return target == ErrAtMostOnce }

// IDList names up to ten ids, comma-separated, for a message.
func IDList(ids []int64) string {
	s := make([]string, 0, len(ids))
	for i, id := range ids {
		if i == 10 {
			s = append(s, "…")
			break
		}
		s = append(s, strconv.FormatInt(id, 10))
	}
	return strings.Join(s, ", ")
}
