// Package m2mbatch is the one rule by which a batch of messages is applied in
// one database transaction and a message that fails in it (a poison
// message) is told apart from its neighbours. Inbox.ApplyBatch and the
// Kafka and NATS sinks apply their batches through Apply; docs/guarantees.md
// ("Poison messages in a batch") states the rule for their users. It is
// public, and versioned with the core module, because the Kafka and NATS
// transports are modules of their own; a sink written outside this
// repository can apply its batches by the same rule.
package m2mbatch

import (
	"context"
	"errors"
	"math"
	"time"
)

// ItemError is what a Policy's Commit returns when the effect of one item
// failed: Index is that item's position in the items Commit was given. Any
// other error from Commit is a failure of the transaction as a whole.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return e.Err.Error() }
func (e *ItemError) Unwrap() error { return e.Err }

// Policy is what Apply needs from the batch's owner.
type Policy[T any] struct {
	// Commit applies items, with their effects and their positions, in
	// one transaction: all of them or none. Required.
	Commit func(ctx context.Context, items []T) error
	// Committed, when set, is told the items of each Commit that
	// succeeded, just after it: the place to acknowledge them, never
	// earlier.
	Committed func(items []T)
	// Poison takes an item that failed alone and is not retried: it
	// stores the item's position without its effect (a sink) or keeps the
	// error as the item's outcome (the inbox). An error from Poison stops
	// Apply. Required.
	Poison func(ctx context.Context, item T, err error) error
	// Permanent tells an item's failure no retry can fix: failing alone,
	// such an item is poisoned without a retry. Nil: none is. A failure
	// of the transaction as a whole is never permanent: no item is
	// skipped for the database's sake.
	Permanent func(error) bool
	// Backoff is the first wait before a failure is retried; each next
	// wait doubles, up to MaxBackoff when that is positive. Zero retries
	// nothing: an item that fails alone is poisoned, whatever its error.
	Backoff, MaxBackoff time.Duration
	// Retrying, when set, is told of each failure about to be retried,
	// with the items neither committed nor poisoned yet (to log it, to
	// keep those items leased while Apply waits).
	Retrying func(err error, attempt int, pending []T)
}

// Apply commits items in order, in as few transactions as their failures
// allow:
//
//   - first all of them in one Commit;
//   - when the effect of one item fails, the items before it (which did
//     apply) commit in a transaction of their own, and the failing item is
//     tried again at once, alone (even when it was alone in the batch);
//     then the rest go on the same way;
//   - when it fails again alone, a permanent failure poisons it; any other
//     is retried after a backoff, or, without one, poisons it;
//   - when a transaction fails as a whole, it is retried after a backoff;
//     without one, the rest is tried one item per transaction, so that
//     each item gets its own outcome.
//
// So an item is poisoned only after failing in a transaction of its own:
// never for a neighbour's failure. Every item is committed or poisoned
// once, in order: none before the items ahead of it, so a position stored
// with an item never passes one still pending. Apply returns nil when all
// are, ctx's error when it ends first (the items not reached yet are
// neither), or Poison's error.
func Apply[T any](ctx context.Context, items []T, p Policy[T]) error {
	rest := items
	size := len(rest) // items in the next Commit
	isolate := false  // the item after the next Commit failed: it goes alone then
	alone := false    // the next Commit is an item that failed, tried alone
	singly := false   // a transaction failed as a whole: one item per Commit
	attempt := 0      // failed tries of the next Commit
	for len(rest) > 0 {
		n := min(size, len(rest))
		err := p.Commit(ctx, rest[:n])
		if err == nil {
			if p.Committed != nil {
				p.Committed(rest[:n])
			}
			rest, size, alone, attempt = rest[n:], len(rest)-n, false, 0
			if isolate {
				size, alone, isolate = 1, true, false
			}
			if singly {
				size = 1
			}
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ie *ItemError
		itemFailed := errors.As(err, &ie) && ie.Index >= 0 && ie.Index < n
		switch {
		case itemFailed && ie.Index > 0:
			size, isolate, attempt = ie.Index, true, 0
			continue
		case itemFailed && !alone && !singly:
			size, alone, attempt = 1, true, 0
			continue
		case !itemFailed && !singly && p.Backoff <= 0:
			singly, size, attempt = true, 1, 0
			continue
		}
		// The first item failed alone, or the transaction as a whole.
		cause := err
		if itemFailed {
			cause = ie.Err
		}
		if permanent := itemFailed && p.Permanent != nil && p.Permanent(cause); !permanent && p.Backoff > 0 {
			attempt++
			if p.Retrying != nil {
				p.Retrying(err, attempt, rest)
			}
			if err := sleep(ctx, p.wait(attempt)); err != nil {
				return err
			}
			continue
		}
		if err := p.Poison(ctx, rest[0], cause); err != nil {
			return err
		}
		rest, size, alone, attempt = rest[1:], len(rest)-1, false, 0
		if singly {
			size = 1
		}
	}
	return nil
}

// wait is the backoff before the given retry, counting from 1: Backoff,
// then twice the previous wait, at most MaxBackoff.
func (p *Policy[T]) wait(attempt int) time.Duration {
	d := p.Backoff
	for i := 1; i < attempt && d < math.MaxInt64/2; i++ {
		d *= 2
		if p.MaxBackoff > 0 {
			d = min(d, p.MaxBackoff)
		}
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
