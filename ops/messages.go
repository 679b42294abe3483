package ops

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/redact"
)

// State is a message's state in the outbox.
type State = driver.State

// The states an operator sees. A message in flight is pending with a
// lease.
const (
	StatePending   = driver.StatePending
	StateDelivered = driver.StateDelivered
	// StateDead is a dead letter's: no relay sends it again until it is
	// retried.
	StateDead = driver.StateDead
	// StateInDoubt is a message's of an at-most-once route whose attempt
	// may have reached the receiver: no relay sends it again until an
	// operator resolves it.
	StateInDoubt = driver.StateInDoubt
)

// Message is an outbox row as an operator sees it: a dead letter, or a
// message in doubt. Its texts are masked (redact.Text): a row written
// before the relay masked its reasons may still quote a secret of a URL.
type Message struct {
	ID int64
	// MessageID is the message's UUID in its canonical text.
	MessageID string
	Type      string
	Key       string
	State     State
	Attempts  int
	CreatedAt time.Time // UTC
	LastError string
	// LastRoute says which app and destination gave the last error.
	LastRoute string
	// Owner is the type's owning app in the catalog ("" for none).
	Owner string
	// AttemptedAt is when the at-most-once attempt that may have reached
	// the receiver began (UTC); nil when none is marked.
	AttemptedAt *time.Time
	// Payload and Headers are the stored documents, as stored: Show only.
	Payload []byte
	Headers []byte
	// Resolutions are the decisions recorded about the message while it
	// was in doubt, newest first: Show only, on a driver that keeps
	// messages in doubt.
	Resolutions []Resolution
	// Gone says the message is no longer in the outbox (resolved
	// delivered): only its resolutions are known (ShowInDoubt).
	Gone bool
}

// Resolution is one recorded decision about a message in doubt.
type Resolution struct {
	Outcome Outcome
	By      string
	Reason  string
	At      time.Time // UTC
}

func uuidText(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func messageOf(j driver.Job, detail bool) Message {
	m := Message{
		ID: j.ID, MessageID: uuidText(j.MessageID), Type: j.Type, Key: j.Key, State: j.State, Attempts: j.Attempt,
		CreatedAt: j.CreatedAt.UTC(), LastError: redact.Text(j.LastError), LastRoute: redact.Text(j.LastRoute), Owner: j.Owner,
	}
	if j.AttemptedAt != nil {
		at := j.AttemptedAt.UTC()
		m.AttemptedAt = &at
	}
	if detail {
		m.Payload, m.Headers = j.Payload, j.Headers
	}
	return m
}

func resolutionsOf(recs []driver.ResolutionRecord) []Resolution {
	out := make([]Resolution, 0, len(recs))
	for _, r := range recs {
		out = append(out, Resolution{Outcome: r.Outcome, By: r.By, Reason: r.Reason, At: r.At.UTC()})
	}
	return out
}

// MaxLimit is the largest ListParams.Limit: the drivers' own bound,
// driver.MaxListLimit, for a caller that speaks only to ops.
const MaxLimit = driver.MaxListLimit

// ListParams selects one page of a list.
type ListParams struct {
	// Types narrows the list to these types, each of which must be the
	// scope's; none lists every type of the scope.
	Types []string
	// After lists only ids after this one: the NextAfter of the page
	// before.
	After int64
	// Limit is the page's size, 1 to MaxLimit; more is paged with After.
	Limit int
}

// Page is one page of a list, in id order.
type Page struct {
	Messages []Message
	// Truncated says more follow; NextAfter is then the After of the next
	// page.
	Truncated bool
	NextAfter int64
	// NoTypes says the scope's apps own no message types, so there was
	// nothing to list (without a type a filter would list every app's).
	NoTypes bool
}

// DeadLetters lists one page of the scope's dead letters.
func (o *Ops) DeadLetters(ctx context.Context, p ListParams) (*Page, error) {
	return o.list(ctx, StateDead, p)
}

// Messages lists one page of the scope's messages in every state: pending
// (in flight and scheduled included), delivered (until the purge deletes
// them; a relay that keeps no delivered rows leaves none), dead and in
// doubt, each with its State. DeadLetters and InDoubt list what awaits an
// operator; Messages is for a caller that checks how every message of a
// type ended, such as a run that audits its own deliveries.
func (o *Ops) Messages(ctx context.Context, p ListParams) (*Page, error) {
	return o.list(ctx, "", p)
}

// InDoubt lists one page of the scope's messages in doubt.
func (o *Ops) InDoubt(ctx context.Context, p ListParams) (*Page, error) {
	return o.list(ctx, StateInDoubt, p)
}

func (o *Ops) list(ctx context.Context, state driver.State, p ListParams) (*Page, error) {
	if p.Limit < 1 || p.Limit > driver.MaxListLimit {
		return nil, invalid("the page size must be between 1 and %d, got %d", driver.MaxListLimit, p.Limit)
	}
	if p.After < 0 {
		return nil, invalid("after must be a message id, got %d", p.After)
	}
	types, err := o.typesInScope(ctx, p.Types)
	if err != nil {
		return nil, err
	}
	if !o.scope.All() && len(types) == 0 {
		return &Page{NoTypes: true}, nil
	}
	// One row more than the page says whether more follow; at the
	// driver's own bound the next page tells.
	limit := min(p.Limit+1, driver.MaxListLimit)
	jobs, err := o.drv.ListMessages(ctx, driver.ListFilter{State: state, Types: types, AfterID: p.After, Limit: limit})
	if err != nil {
		return nil, err
	}
	page := &Page{}
	if len(jobs) > p.Limit || len(jobs) == driver.MaxListLimit {
		jobs = jobs[:p.Limit]
		page.Truncated, page.NextAfter = true, jobs[len(jobs)-1].ID
	}
	page.Messages = make([]Message, len(jobs))
	for i, j := range jobs {
		page.Messages[i] = messageOf(j, false)
	}
	return page, nil
}

// Show returns one message in full, payload and headers included, with
// the resolutions recorded about it on a driver that keeps messages in
// doubt; whatever its state (a caller says when it is not the one
// expected). A message that is not there is a *NotFoundError, one of
// another app's type an *OutOfScopeError.
func (o *Ops) Show(ctx context.Context, id int64) (*Message, error) {
	jobs, err := o.drv.ListMessages(ctx, driver.ListFilter{IDs: []int64{id}, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, &NotFoundError{ID: id}
	}
	if err := o.checkRows(jobs); err != nil {
		return nil, err
	}
	m := messageOf(jobs[0], true)
	if amo, ok := o.drv.(driver.AtMostOnce); ok {
		recs, err := amo.Resolutions(ctx, [][16]byte{jobs[0].MessageID}, 20)
		if err != nil {
			return nil, err
		}
		m.Resolutions = resolutionsOf(recs)
	}
	return &m, nil
}

// ShowInDoubt is Show for a message in doubt: one resolved delivered is
// gone from the outbox, and is then shown from its recorded resolutions
// (Gone set, with its ID, MessageID, Type and Key).
func (o *Ops) ShowInDoubt(ctx context.Context, id int64) (*Message, error) {
	amo, err := o.atMostOnce()
	if err != nil {
		return nil, err
	}
	m, err := o.Show(ctx, id)
	if err == nil || !isNotFound(err) {
		return m, err
	}
	all, err := amo.Resolutions(ctx, nil, 1000)
	if err != nil {
		return nil, err
	}
	var recs []driver.ResolutionRecord
	for _, r := range all {
		if r.OutboxID == id {
			recs = append(recs, r)
		}
	}
	if len(recs) == 0 {
		return nil, &NotFoundError{ID: id}
	}
	if err := o.checkGone(ctx, id, recs[0].Type); err != nil {
		return nil, err
	}
	return &Message{ID: id, MessageID: uuidText(recs[0].MessageID), Type: recs[0].Type, Key: recs[0].Key,
		Resolutions: resolutionsOf(recs), Gone: true}, nil
}

func isNotFound(err error) bool {
	_, ok := err.(*NotFoundError)
	return ok
}

// typesInScope narrows the types asked for (none: all of the scope's) to
// the scope, refusing a type of another app with its owner's name.
func (o *Ops) typesInScope(ctx context.Context, asked []string) ([]string, error) {
	if o.scope.All() {
		return asked, nil
	}
	catalog, err := o.drv.Owners(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("ownership catalog: %w", err)
	}
	owners := typeOwners(catalog)
	if len(asked) == 0 {
		var own []string
		for _, e := range catalog {
			if e.Kind == driver.ResourceType && o.scope.Has(e.App) {
				own = append(own, e.Name)
			}
		}
		return own, nil
	}
	for _, t := range asked {
		if !o.scope.Has(owners[t]) {
			return nil, &OutOfScopeError{Apps: o.scope.Apps(), Type: t, Owner: owners[t]}
		}
	}
	return slices.Clone(asked), nil
}

// typeOwners maps each type of the catalog to its owner.
func typeOwners(catalog []driver.Ownership) map[string]string {
	m := map[string]string{}
	for _, e := range catalog {
		if e.Kind == driver.ResourceType {
			m[e.Name] = e.App
		}
	}
	return m
}

// checkRows refuses rows whose type the scope does not own, naming the
// owner (as the catalog gave it when the rows were read).
func (o *Ops) checkRows(jobs []driver.Job) error {
	for _, j := range jobs {
		if !o.scope.Has(j.Owner) {
			return &OutOfScopeError{Apps: o.scope.Apps(), ID: j.ID, Type: j.Type, Owner: j.Owner}
		}
	}
	return nil
}

// checkGone is checkRows for a message gone from the outbox: its type's
// owner is read from the catalog.
func (o *Ops) checkGone(ctx context.Context, id int64, typ string) error {
	if o.scope.All() {
		return nil
	}
	catalog, err := o.drv.Owners(ctx, "")
	if err != nil {
		return fmt.Errorf("ownership catalog: %w", err)
	}
	owner := typeOwners(catalog)[typ]
	if !o.scope.Has(owner) {
		return &OutOfScopeError{Apps: o.scope.Apps(), ID: id, Type: typ, Owner: owner}
	}
	return nil
}

// rowsByID reads the rows of ids, checking each is the scope's.
func (o *Ops) rowsByID(ctx context.Context, ids []int64) ([]driver.Job, error) {
	jobs, err := o.drv.ListMessages(ctx, driver.ListFilter{IDs: ids, Limit: len(ids)})
	if err != nil {
		return nil, err
	}
	return jobs, o.checkRows(jobs)
}
