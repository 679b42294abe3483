package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/xadm/mensageria/driver"
)

// Selection picks dead letters to retry or discard: by IDs, or every dead
// letter of Types; one or the other, never neither.
type Selection struct {
	IDs   []int64
	Types []string
	// AllowDuplicate retries dead letters an at-most-once attempt marked
	// too, clearing the mark: their last request may have reached the
	// receiver, so its effect may apply twice. Without it a retry that
	// selects any is refused with an *AtMostOnceError. Retry only.
	AllowDuplicate bool
}

// Action is what a Plan does.
type Action string

// The actions.
const (
	ActionRetry   Action = "retry"
	ActionDiscard Action = "discard"
	ActionResolve Action = "resolve"
)

// Left is a message asked for by id that an action leaves alone: State is
// what it is instead of dead, "" when there is no such message.
type Left struct {
	ID    int64
	State State
}

// Plan is an action checked and ready to apply: the scope allows it, and
// nothing has changed yet. A caller that asks for confirmation does so
// between PlanRetry (or PlanDiscard, PlanResolve) and Apply.
type Plan struct {
	Action Action
	// IDs are the dead letters among the ids asked for (retry, discard),
	// or the ids to resolve; Types the types whose every dead letter the
	// action takes.
	IDs   []int64
	Types []string
	// Left are the ids asked for that are not dead letters (retry,
	// discard): left alone.
	Left []Left
	// Marked are the dead letters of a retry an at-most-once attempt
	// marked, sent again because the selection allows a duplicate.
	Marked         []int64
	allowDuplicate bool
	decision       Decision
}

// Result is what an applied Plan changed.
type Result struct {
	Action Action
	// Changed counts the dead letters retried or discarded (one no longer
	// dead when the action ran is not one).
	Changed int
	// Left is the Plan's Left.
	Left []Left
	// Marked is the Plan's Marked.
	Marked []int64
	// Resolved and NotInDoubt sort the ids of a resolution: those left
	// alone were not in doubt (settled, being probed or sent, or no such
	// row).
	Resolved   []int64
	NotInDoubt []int64
}

// Retry moves the selected dead letters of the scope back to pending,
// attempts from zero: PlanRetry, then Apply.
func (o *Ops) Retry(ctx context.Context, s Selection) (*Result, error) {
	p, err := o.PlanRetry(ctx, s)
	if err != nil {
		return nil, err
	}
	return o.Apply(ctx, p)
}

// Discard deletes the selected dead letters of the scope: PlanDiscard,
// then Apply.
func (o *Ops) Discard(ctx context.Context, s Selection) (*Result, error) {
	p, err := o.PlanDiscard(ctx, s)
	if err != nil {
		return nil, err
	}
	return o.Apply(ctx, p)
}

// PlanRetry checks a retry: every type selected, and every row selected
// by id, must be the scope's (else an *OutOfScopeError, and nothing is
// acted on); ids that are not dead letters are Left; dead letters an
// at-most-once attempt marked refuse the retry with an *AtMostOnceError
// unless s.AllowDuplicate.
func (o *Ops) PlanRetry(ctx context.Context, s Selection) (*Plan, error) {
	p, err := o.plan(ctx, ActionRetry, s)
	if err != nil {
		return nil, err
	}
	if len(p.IDs) == 0 && len(p.Types) == 0 {
		return p, nil
	}
	marked, err := driver.MarkedDead(ctx, o.drv, driver.ReviveParams{IDs: p.IDs, Types: p.Types})
	if err != nil {
		return nil, err
	}
	if len(marked) > 0 && !s.AllowDuplicate {
		return nil, &AtMostOnceError{IDs: marked}
	}
	p.Marked = marked
	return p, nil
}

// PlanDiscard checks a discard as PlanRetry does, marks aside.
func (o *Ops) PlanDiscard(ctx context.Context, s Selection) (*Plan, error) {
	if s.AllowDuplicate {
		return nil, invalid("allow duplicate is for a retry, not a discard")
	}
	return o.plan(ctx, ActionDiscard, s)
}

func (o *Ops) plan(ctx context.Context, a Action, s Selection) (*Plan, error) {
	switch {
	case len(s.IDs) > 0 && len(s.Types) > 0:
		return nil, invalid("select dead letters by ids or by types, not both")
	case len(s.IDs) == 0 && len(s.Types) == 0:
		return nil, invalid("select dead letters: ids, or types")
	}
	p := &Plan{Action: a, allowDuplicate: s.AllowDuplicate}
	if len(s.Types) > 0 {
		if slices.Contains(s.Types, "") {
			return nil, invalid("a type is empty")
		}
		types, err := o.typesInScope(ctx, s.Types)
		if err != nil {
			return nil, err
		}
		p.Types = types
		return p, nil
	}
	for _, id := range s.IDs {
		if id <= 0 {
			return nil, invalid("%d is not a message id", id)
		}
	}
	// Every id is checked before anything changes: one row of another
	// app refuses the whole action.
	jobs, err := o.rowsByID(ctx, s.IDs)
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]driver.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	for _, id := range s.IDs {
		switch j, ok := byID[id]; {
		case !ok:
			p.Left = append(p.Left, Left{ID: id})
		case j.State != StateDead:
			p.Left = append(p.Left, Left{ID: id, State: j.State})
		default:
			p.IDs = append(p.IDs, id)
		}
	}
	return p, nil
}

// Outcome is what a Decision says of messages in doubt.
type Outcome = driver.Resolution

// The outcomes of a Decision.
const (
	// OutcomeDelivered: the receiver has the effect; the message is
	// settled as delivered.
	OutcomeDelivered = driver.ResolveDelivered
	// OutcomeRetry: the receiver does not have the effect; the message
	// gets one more attempt.
	OutcomeRetry = driver.ResolveRetry
	// OutcomeDead: nobody sends the message again; it becomes a dead
	// letter.
	OutcomeDead = driver.ResolveDead
)

// ErrInvalidDecision is wrapped by the refusal of a Decision that cannot
// be recorded (Decision.Check); it is the drivers' own, so errors.Is
// matches the refusal of a backend too.
var ErrInvalidDecision = driver.ErrInvalidResolve

// Decision is an operator's decision about messages in doubt.
type Decision struct {
	IDs []int64
	// Outcome is delivered (the receiver has the effect), retry (it does
	// not: one more attempt) or dead (nobody sends it again).
	Outcome Outcome
	// By names who decides and Reason why; both are recorded, and
	// required.
	By, Reason string
	// KeepDelivered keeps a row resolved delivered, as delivered, instead
	// of deleting it.
	KeepDelivered bool
}

func (d Decision) params() driver.ResolveParams {
	return driver.ResolveParams{IDs: slices.Clone(d.IDs), Outcome: d.Outcome, By: d.By, Reason: d.Reason, KeepDelivered: d.KeepDelivered}
}

// Check returns an error wrapping ErrInvalidDecision when d cannot
// be recorded: no ids, an unknown outcome, no By or no Reason.
func (d Decision) Check() error { return driver.CheckResolve(d.params()) }

// Resolve records a decision about messages in doubt of the scope:
// PlanResolve, then Apply.
func (o *Ops) Resolve(ctx context.Context, d Decision) (*Result, error) {
	p, err := o.PlanResolve(ctx, d)
	if err != nil {
		return nil, err
	}
	return o.Apply(ctx, p)
}

// PlanResolve checks a decision: it must be recordable (Decision.Check),
// the driver must keep messages in doubt (ErrNoAtMostOnce), and every row
// it names must be the scope's (*OutOfScopeError). Rows not in doubt are
// sorted out when it is applied.
func (o *Ops) PlanResolve(ctx context.Context, d Decision) (*Plan, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	if _, err := o.atMostOnce(); err != nil {
		return nil, err
	}
	if !o.scope.All() {
		if _, err := o.rowsByID(ctx, d.IDs); err != nil {
			return nil, err
		}
	}
	return &Plan{Action: ActionResolve, IDs: slices.Clone(d.IDs), decision: d}, nil
}

// Apply carries a Plan out.
func (o *Ops) Apply(ctx context.Context, p *Plan) (*Result, error) {
	res := &Result{Action: p.Action, Left: p.Left, Marked: p.Marked}
	switch p.Action {
	case ActionResolve:
		amo, err := o.atMostOnce()
		if err != nil {
			return nil, err
		}
		rr, err := amo.Resolve(ctx, p.decision.params())
		if err != nil {
			return nil, err
		}
		res.Resolved, res.NotInDoubt = rr.Resolved, rr.NotInDoubt
		return res, nil
	case ActionRetry, ActionDiscard:
	default:
		return nil, invalid("unknown action %q", p.Action)
	}
	// No id is a dead letter: an empty selection would be read as "by
	// types", of none.
	if len(p.IDs) == 0 && len(p.Types) == 0 {
		return res, nil
	}
	n, err := o.drv.Revive(ctx, driver.ReviveParams{IDs: p.IDs, Types: p.Types, Discard: p.Action == ActionDiscard,
		ClearMark: p.Action == ActionRetry && p.allowDuplicate})
	if err != nil {
		return nil, err
	}
	res.Changed = n
	return res, nil
}

// String names a message left alone, and why: "12 (no such message)",
// "12 (in flight, not dead)".
func (l Left) String() string {
	if l.State == "" {
		return fmt.Sprintf("%d (no such message)", l.ID)
	}
	return fmt.Sprintf("%d (%s, not dead)", l.ID, strings.ReplaceAll(string(l.State), "_", " "))
}
