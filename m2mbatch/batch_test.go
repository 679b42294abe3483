package m2mbatch

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// permanentError marks an effect's failure no retry can fix, as
// mensageria.Permanent does for the callers of Apply.
type permanentError struct{ error }

func permanent(err error) error { return permanentError{err} }

func isPermanent(err error) bool { return errors.As(err, new(permanentError)) }

// store is a database for Apply: a Commit runs each item's effect in turn
// and either keeps the whole transaction or none of it.
type store struct {
	// effect is the outcome of an item's try (counting from 1).
	effect func(item, try int) error
	// commit is the outcome of the txn-th transaction as a whole,
	// counting from 1, once every effect in it succeeded.
	commit func(txn int) error

	tries     map[int]int
	ranIn     map[int]int // the size of the last Commit that ran an item's effect
	txns      int
	committed [][]int       // the items of each successful Commit
	acked     []int         // the items Committed was told of, in order
	poisoned  map[int]error // the error each poisoned item was given
	settled   []int         // committed or poisoned, in order
	// alsoPoisoned are the items poisoned without having failed in a
	// transaction of their own.
	alsoPoisoned []int
	retries      []int   // the attempt number of each retry announced
	pending      [][]int // the pending items of each retry announced
}

func (s *store) policy(backoff bool) Policy[int] {
	p := Policy[int]{
		Commit: func(ctx context.Context, items []int) error {
			s.txns++
			if err := ctx.Err(); err != nil {
				return err
			}
			for k, it := range items {
				s.tries[it]++
				s.ranIn[it] = len(items)
				if s.effect != nil {
					if err := s.effect(it, s.tries[it]); err != nil {
						return &ItemError{Index: k, Err: err}
					}
				}
			}
			if s.commit != nil {
				if err := s.commit(s.txns); err != nil {
					return err
				}
			}
			s.committed = append(s.committed, slices.Clone(items))
			s.settled = append(s.settled, items...)
			return nil
		},
		Committed: func(items []int) { s.acked = append(s.acked, items...) },
		Poison: func(_ context.Context, it int, err error) error {
			if s.ranIn[it] != 1 {
				s.alsoPoisoned = append(s.alsoPoisoned, it)
			}
			s.poisoned[it] = err
			s.settled = append(s.settled, it)
			return nil
		},
		Permanent: isPermanent,
		Retrying: func(_ error, attempt int, pending []int) {
			s.retries = append(s.retries, attempt)
			s.pending = append(s.pending, slices.Clone(pending))
		},
	}
	if backoff {
		p.Backoff, p.MaxBackoff = time.Microsecond, 4*time.Microsecond
	}
	return p
}

func newStore() *store {
	return &store{tries: map[int]int{}, ranIn: map[int]int{}, poisoned: map[int]error{}}
}

func items(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

var (
	errBad       = permanent(errors.New("unparseable"))
	errDeadlock  = errors.New("deadlock detected")
	errCommitted = errors.New("commit failed: connection reset")
)

// failing returns an effect failing with err on the given tries of item
// (every try when tries is empty).
func failing(item int, err error, tries ...int) func(int, int) error {
	return func(it, try int) error {
		if it == item && (len(tries) == 0 || slices.Contains(tries, try)) {
			return err
		}
		return nil
	}
}

// failingTxns returns a commit outcome failing with err for the given
// transactions.
func failingTxns(err error, txns ...int) func(int) error {
	return func(txn int) error {
		if slices.Contains(txns, txn) {
			return err
		}
		return nil
	}
}

func TestApply(t *testing.T) {
	cases := []struct {
		name    string
		n       int
		effect  func(item, try int) error
		commit  func(txn int) error
		backoff bool // a sink retries; the inbox does not
		// want: the items of each committed transaction, the poisoned
		// items, and the attempts of the retries announced.
		committed [][]int
		poisoned  []int
		retries   []int
		tries     map[int]int // the effect runs of some items, when it matters
	}{
		{name: "all succeed", n: 5, backoff: true,
			committed: [][]int{{0, 1, 2, 3, 4}}},
		{name: "transient failure retried at once, alone", n: 5, backoff: true,
			effect:    failing(2, errDeadlock, 1),
			committed: [][]int{{0, 1}, {2}, {3, 4}}},
		{name: "transient failure retried after a backoff", n: 5, backoff: true,
			effect:    failing(2, errDeadlock, 1, 2, 3),
			committed: [][]int{{0, 1}, {2}, {3, 4}}, retries: []int{1, 2}},
		{name: "transient failure of the first item", n: 3, backoff: true,
			effect:    failing(0, errDeadlock, 1, 2),
			committed: [][]int{{0}, {1, 2}}, retries: []int{1}},
		{name: "transient failure without retries poisons the item", n: 5,
			effect:    failing(2, errDeadlock, 1, 2),
			committed: [][]int{{0, 1}, {3, 4}}, poisoned: []int{2}},
		{name: "transient failure without retries gets a second try, alone", n: 5,
			effect:    failing(2, errDeadlock, 1),
			committed: [][]int{{0, 1}, {2}, {3, 4}}},
		{name: "poison first", n: 5, backoff: true,
			effect:    failing(0, errBad),
			committed: [][]int{{1, 2, 3, 4}}, poisoned: []int{0}},
		{name: "poison middle", n: 5, backoff: true,
			effect:    failing(2, errBad),
			committed: [][]int{{0, 1}, {3, 4}}, poisoned: []int{2}, tries: map[int]int{0: 2, 2: 2, 3: 1}},
		{name: "poison last", n: 5, backoff: true,
			effect:    failing(4, errBad),
			committed: [][]int{{0, 1, 2, 3}}, poisoned: []int{4}},
		{name: "poison alone", n: 1, backoff: true,
			effect:   failing(0, errBad),
			poisoned: []int{0}, tries: map[int]int{0: 2}},
		{name: "a batch of one failing without retries gets a second try", n: 1,
			effect:    failing(0, errDeadlock, 1),
			committed: [][]int{{0}}, tries: map[int]int{0: 2}},
		{name: "a batch of one failing as a whole without retries gets a second try", n: 1,
			commit:    failingTxns(errCommitted, 1),
			committed: [][]int{{0}}},
		{name: "several poison items", n: 6, backoff: true,
			effect: func(it, _ int) error {
				if it == 1 || it == 3 || it == 4 {
					return errBad
				}
				return nil
			},
			committed: [][]int{{0}, {2}, {5}}, poisoned: []int{1, 3, 4}},
		{name: "several poison items without retries", n: 6,
			effect: func(it, _ int) error {
				if it == 1 || it == 3 || it == 4 {
					return errBad
				}
				return nil
			},
			committed: [][]int{{0}, {2}, {5}}, poisoned: []int{1, 3, 4}},
		{name: "whole transaction fails and is retried", n: 5, backoff: true,
			commit:    failingTxns(errCommitted, 1, 2),
			committed: [][]int{{0, 1, 2, 3, 4}}, retries: []int{1, 2}},
		{name: "whole transaction failure marked permanent is still retried", n: 5, backoff: true,
			commit:    failingTxns(permanent(errCommitted), 1),
			committed: [][]int{{0, 1, 2, 3, 4}}, retries: []int{1}},
		{name: "whole transaction fails without retries: one item per transaction", n: 4,
			commit:    failingTxns(errCommitted, 1),
			committed: [][]int{{0}, {1}, {2}, {3}}},
		{name: "whole transaction of one item fails without retries", n: 3,
			commit:    failingTxns(errCommitted, 1, 3),
			committed: [][]int{{0}, {2}}, poisoned: []int{1}},
		{name: "poison item after a failed whole transaction", n: 4, backoff: true,
			effect:    failing(2, errBad),
			commit:    failingTxns(errCommitted, 1),
			committed: [][]int{{0, 1}, {3}}, poisoned: []int{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore()
			s.effect, s.commit = c.effect, c.commit
			if err := Apply(context.Background(), items(c.n), s.policy(c.backoff)); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !equal(s.committed, c.committed) {
				t.Errorf("committed %v, want %v", s.committed, c.committed)
			}
			if got := slices.Sorted(maps.Keys(s.poisoned)); !slices.Equal(got, c.poisoned) {
				t.Errorf("poisoned %v, want %v", got, c.poisoned)
			}
			if !slices.Equal(s.retries, c.retries) {
				t.Errorf("retries %v, want %v", s.retries, c.retries)
			}
			for it, n := range c.tries {
				if s.tries[it] != n {
					t.Errorf("item %d ran %d times, want %d", it, s.tries[it], n)
				}
			}
			checkSettledOnceInOrder(t, s, c.n)
		})
	}
}

// The poison path is given the item's own error, not the batch's.
func TestApplyPoisonGetsTheItemsError(t *testing.T) {
	for _, backoff := range []bool{false, true} {
		s := newStore()
		s.effect = failing(1, errBad)
		if err := Apply(context.Background(), items(3), s.policy(backoff)); err != nil {
			t.Fatal(err)
		}
		if err := s.poisoned[1]; err != errBad {
			t.Errorf("backoff %v: item 1 poisoned with %v, want %v", backoff, err, errBad)
		}
	}
}

// A retry announces every item still pending, not only the failing one:
// a sink keeps them all leased while it waits.
func TestApplyRetryingNamesEveryPendingItem(t *testing.T) {
	s := newStore()
	s.effect = failing(2, errDeadlock, 1, 2)
	if err := Apply(context.Background(), items(5), s.policy(true)); err != nil {
		t.Fatal(err)
	}
	if !equal(s.pending, [][]int{{2, 3, 4}}) {
		t.Fatalf("pending at the retries %v, want [[2 3 4]]", s.pending)
	}
}

func TestApplyContextCancelled(t *testing.T) {
	t.Run("before the first commit", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s := newStore()
		if err := Apply(ctx, items(3), s.policy(true)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply: %v, want context.Canceled", err)
		}
		if len(s.settled) != 0 {
			t.Fatalf("settled %v, want nothing", s.settled)
		}
	})
	t.Run("inside the transaction", func(t *testing.T) {
		// The effect sees ctx end, as a sink's does when it is stopped:
		// the items before it are not committed on their own.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := newStore()
		s.effect = func(it, _ int) error {
			if it == 2 {
				cancel()
				return ctx.Err()
			}
			return nil
		}
		if err := Apply(ctx, items(5), s.policy(true)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply: %v, want context.Canceled", err)
		}
		if len(s.settled) != 0 || s.txns != 1 {
			t.Fatalf("settled %v in %d transactions, want nothing in one", s.settled, s.txns)
		}
	})
	t.Run("while waiting to retry", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := newStore()
		s.effect = failing(2, errDeadlock)
		p := s.policy(true)
		p.Backoff, p.MaxBackoff = time.Hour, time.Hour
		p.Retrying = func(error, int, []int) { cancel() }
		if err := Apply(ctx, items(5), p); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply: %v, want context.Canceled", err)
		}
		if !equal(s.committed, [][]int{{0, 1}}) || len(s.poisoned) != 0 {
			t.Fatalf("committed %v, poisoned %v; want [[0 1]] and nothing poisoned", s.committed, s.poisoned)
		}
	})
}

func TestApplyStopsOnAPoisonPathError(t *testing.T) {
	s := newStore()
	s.effect = failing(1, errBad)
	p := s.policy(true)
	errStore := errors.New("cannot store the position")
	p.Poison = func(context.Context, int, error) error { return errStore }
	if err := Apply(context.Background(), items(4), p); !errors.Is(err, errStore) {
		t.Fatalf("Apply: %v, want the poison path's error", err)
	}
	if !equal(s.committed, [][]int{{0}}) {
		t.Fatalf("committed %v, want only the item before the poisoned one", s.committed)
	}
}

// Whatever fails, and however often, every item is committed or poisoned
// exactly once, in order; a commit is acknowledged after it and only it;
// an item is poisoned only after failing alone, and, when Apply retries,
// only for a permanent failure of its own.
func TestApplyRandomFailures(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 17))
		n := 1 + r.IntN(12)
		backoff := r.IntN(2) == 0
		poison := map[int]bool{}
		for i := range n {
			poison[i] = r.IntN(5) == 0
		}
		s := newStore()
		s.effect = func(it, try int) error {
			switch {
			case poison[it]:
				return errBad
			case try <= 3 && r.IntN(4) == 0:
				return errDeadlock
			}
			return nil
		}
		s.commit = func(int) error {
			if r.IntN(6) == 0 {
				return errCommitted
			}
			return nil
		}
		if err := Apply(context.Background(), items(n), s.policy(backoff)); err != nil {
			t.Fatalf("seed %d: Apply: %v", seed, err)
		}
		checkSettledOnceInOrder(t, s, n)
		if backoff {
			for it := range s.poisoned {
				if !poison[it] {
					t.Errorf("seed %d: item %d poisoned, but only its transient failures were seen", seed, it)
				}
			}
		}
		for it := range poison {
			if poison[it] && s.poisoned[it] == nil {
				t.Errorf("seed %d: item %d always fails and was not poisoned", seed, it)
			}
		}
	}
}

func TestWait(t *testing.T) {
	for _, c := range []struct {
		first, max time.Duration
		want       []time.Duration
	}{
		{time.Millisecond, 4 * time.Millisecond, []time.Duration{1, 2, 4, 4, 4}},
		// A first wait above the cap is kept once, as the sinks always did.
		{60 * time.Millisecond, 30 * time.Millisecond, []time.Duration{60, 30, 30}},
	} {
		p := Policy[int]{Backoff: c.first, MaxBackoff: c.max}
		for i, w := range c.want {
			if got := p.wait(i + 1); got != w*time.Millisecond {
				t.Errorf("Backoff %v, MaxBackoff %v: wait %d is %v, want %v", c.first, c.max, i+1, got, w*time.Millisecond)
			}
		}
	}
	p := Policy[int]{Backoff: time.Second}
	if got := p.wait(200); got <= 0 {
		t.Errorf("without a cap, wait 200 is %v: it must not overflow", got)
	}
}

func checkSettledOnceInOrder(t *testing.T, s *store, n int) {
	t.Helper()
	if !slices.Equal(s.settled, items(n)) {
		t.Errorf("settled %v: want every item once, in order", s.settled)
	}
	if len(s.alsoPoisoned) > 0 {
		t.Errorf("items %v poisoned without failing alone", s.alsoPoisoned)
	}
	var committed []int
	for _, c := range s.committed {
		committed = append(committed, c...)
	}
	if !slices.Equal(s.acked, committed) {
		t.Errorf("acknowledged %v, committed %v: want the same", s.acked, committed)
	}
}

func equal(a, b [][]int) bool {
	return slices.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}
