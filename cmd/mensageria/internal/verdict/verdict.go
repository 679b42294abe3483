// Package verdict defines the promises of guaranteed delivery that every
// run of mensageria under faults is judged by — nothing lost, nothing
// applied twice, no row handled by an app that does not own its type, no
// ordered key applied out of order — over a history of what happened.
//
// The fault-injection suite (internal/chaos) and the demo (internal/cli)
// both judge their runs here, so a change to the contract is made once.
// Each keeps only what is its own: the suite its further properties
// (leases, elections, the wire), the demo its presentation.
package verdict

import (
	"cmp"
	"fmt"
	"slices"
)

// Violation kinds.
const (
	Lost            = "lost"             // a committed message neither applied nor, where allowed, parked as dead
	DuplicateEffect = "duplicate-effect" // one message applied more than once
	ForeignClaim    = "foreign-claim"    // a message handled by an app that does not own its type
	Order           = "order"            // an ordered key applied out of enqueue order
)

// History is what a run recorded. Messages are named by N, a number the
// run gives each message.
type History struct {
	// Owner maps each message type to the app that registered it.
	Owner map[string]string
	// Ordered holds the types delivered in per-key order.
	Ordered map[string]bool

	// Messages are the messages whose business transaction committed.
	Messages []Message
	// Claims are the times an app handled a message: a relay claiming
	// its row, a relay sending it, a receiver taking it.
	Claims []Claim
	// Effects are the effects applied, in any order: Seq orders them.
	Effects []Effect
	// Dead are the messages parked as dead at the end of the run.
	Dead []int64
	// Pending are the messages still unsettled at the end of the run.
	Pending []int64
}

// Message is one committed message.
type Message struct {
	N    int64
	Type string
	Key  string
	// Index is the message's position among the committed messages of
	// its (type, key), from 0; it matters only for ordered types.
	Index int
	// MayEndDead: parking it as dead keeps the promise (a receiver may
	// refuse it for good) instead of breaking it.
	MayEndDead bool
}

// Claim is one app handling a message of Type.
type Claim struct {
	N    int64
	Type string
	// Apps are the apps that handled it: the claiming or sending relay's
	// and, for a request, the receiving endpoint's.
	Apps []string
	// Ref says where the claim was seen, for the violation's detail:
	// "relay %q claimed it (lease event 7)".
	Ref string
}

// Effect is one applied effect.
type Effect struct {
	Seq int64
	N   int64
}

// Violation is one broken promise.
type Violation struct {
	Kind   string
	N      int64
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: message %d: %s", v.Kind, v.N, v.Detail) }

// Verdict is the judgement of one history.
type Verdict struct {
	Violations []Violation
	// Applied counts the effects of each message.
	Applied map[int64]int
}

// Count returns how many violations of kind the verdict holds.
func (v *Verdict) Count(kind string) int { return Count(v.Violations, kind) }

// Count returns how many of vs are of kind.
func Count(vs []Violation, kind string) int {
	n := 0
	for _, x := range vs {
		if x.Kind == kind {
			n++
		}
	}
	return n
}

// OK reports whether no promise was broken.
func (v *Verdict) OK() bool { return len(v.Violations) == 0 }

func (v *Verdict) bad(kind string, n int64, format string, a ...any) {
	v.Violations = append(v.Violations, Violation{Kind: kind, N: n, Detail: fmt.Sprintf(format, a...)})
}

// Judge checks h against every promise. Claims and effects of messages
// not in h.Messages are judged for ownership only; whether such a
// message may show up at all is the caller's to say.
func Judge(h *History) *Verdict {
	v := &Verdict{Applied: map[int64]int{}}
	msgs := make(map[int64]*Message, len(h.Messages))
	for i := range h.Messages {
		msgs[h.Messages[i].N] = &h.Messages[i]
	}
	for _, c := range h.Claims {
		v.claim(h, c)
	}
	v.fates(h)
	v.order(h, msgs)
	return v
}

// claim: a message is handled only by the app that owns its type.
func (v *Verdict) claim(h *History, c Claim) {
	owner := h.Owner[c.Type]
	for _, app := range c.Apps {
		if app != owner {
			v.bad(ForeignClaim, c.N, "type %s belongs to app %q but %s", c.Type, owner, c.Ref)
			return
		}
	}
}

// fates: every committed message is applied exactly once, or parked as
// dead where that is allowed.
func (v *Verdict) fates(h *History) {
	seqs := map[int64][]int64{}
	for _, e := range h.Effects {
		seqs[e.N] = append(seqs[e.N], e.Seq)
		v.Applied[e.N]++
	}
	dead := setOf(h.Dead)
	pending := setOf(h.Pending)
	for _, m := range h.Messages {
		es := seqs[m.N]
		switch {
		case len(es) > 1:
			slices.Sort(es)
			v.bad(DuplicateEffect, m.N, "applied %d times (effects %v)", len(es), es)
		case len(es) == 1:
		case m.MayEndDead && !dead[m.N]:
			v.bad(Lost, m.N, "committed but neither applied nor parked as dead (pending at the end: %v)", pending[m.N])
		case !m.MayEndDead:
			v.bad(Lost, m.N, "committed but never applied (dead %v, pending at the end %v)", dead[m.N], pending[m.N])
		}
	}
}

// order: the effects of an ordered key, in the order they were applied,
// follow the order the messages were committed in.
func (v *Verdict) order(h *History, msgs map[int64]*Message) {
	byApply := slices.Clone(h.Effects)
	slices.SortStableFunc(byApply, func(a, b Effect) int { return cmp.Compare(a.Seq, b.Seq) })
	type typeKey struct{ typ, key string }
	last := map[typeKey]int{}
	for _, e := range byApply {
		m := msgs[e.N]
		if m == nil || !h.Ordered[m.Type] {
			continue
		}
		k := typeKey{m.Type, m.Key}
		if prev, ok := last[k]; ok && m.Index <= prev {
			v.bad(Order, m.N, "key %s/%s: message #%d applied after #%d", m.Type, m.Key, m.Index, prev)
			continue
		}
		last[k] = m.Index
	}
}

func setOf(ns []int64) map[int64]bool {
	s := make(map[int64]bool, len(ns))
	for _, n := range ns {
		s[n] = true
	}
	return s
}
