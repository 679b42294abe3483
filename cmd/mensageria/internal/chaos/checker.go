package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Violation kinds the checker reports.
const (
	Lost           = "lost"             // a committed message never applied (or a poison one never parked)
	DuplicateEff   = "duplicate-effect" // one message applied more than once
	ForeignClaim   = "foreign-claim"    // a message claimed, sent or received by another app
	OrderViolation = "order"            // an ordered key applied out of enqueue order
	StaleSettle    = "stale-settle"     // a settle by a relay that no longer held the lease
	UnexpectedDead = "unexpected-dead"  // dead without an injected permanent error, or a poison message applied
	RolledBackSeen = "rolled-back-seen" // a message of a rolled-back transaction showed up
	Unknown        = "unknown-message"  // a message nobody enqueued showed up
	NoArrival      = "no-arrival"       // an effect without its request on the wire
	BusinessRow    = "business-row"     // a business row that disagrees with its committed transactions
	EpochReused    = "epoch-reused"     // one election epoch won by two relay processes
)

// Violation is one broken promise.
type Violation struct {
	Kind   string
	N      int64
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s: message %d: %s", v.Kind, v.N, v.Detail) }

// Report is the checker's verdict and the run's figures.
type Report struct {
	Violations []Violation

	Messages           int // committed
	RolledBack         int
	Poison             int
	Arrivals           int
	Redeliveries       int // arrivals beyond the first of each message
	DuplicatesAbsorbed int // arrivals after the message's effect, which the inbox absorbed
	AckDrops           int // arrivals whose answer the receiver dropped on purpose
	Effects            int
	Dead               int
	Claims             int
	Elections          int // epochs won
	Settles            map[string]int
	Fenced             int
	Faults             map[string]int
}

// Count returns how many violations of kind the report holds.
func (r *Report) Count(kind string) int {
	n := 0
	for _, v := range r.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// OK reports whether no promise was broken.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Summary is a multi-line account of the figures and the first violations.
func (r *Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "messages %d (rolled back %d, poison %d), arrivals %d, redeliveries %d, duplicates absorbed %d, acks dropped %d, effects %d, dead %d, claims %d, fenced settles %d, elections %d\n",
		r.Messages, r.RolledBack, r.Poison, r.Arrivals, r.Redeliveries, r.DuplicatesAbsorbed, r.AckDrops, r.Effects, r.Dead, r.Claims, r.Fenced, r.Elections)
	fmt.Fprintf(&b, "settles %v\nfaults %v\n", sortedMap(r.Settles), sortedMap(r.Faults))
	for _, k := range []string{Lost, DuplicateEff, ForeignClaim, OrderViolation, StaleSettle, UnexpectedDead, RolledBackSeen, Unknown, NoArrival, BusinessRow, EpochReused} {
		fmt.Fprintf(&b, "%s %d; ", k, r.Count(k))
	}
	b.WriteByte('\n')
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "... and %d more\n", len(r.Violations)-20)
			break
		}
		b.WriteString(v.String() + "\n")
	}
	return b.String()
}

func sortedMap(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// appOf reads the app out of a relay name "app/replica#incarnation".
func appOf(relay string) string {
	app, _, _ := strings.Cut(relay, "/")
	return app
}

// Check verifies every promise of the contract against h.
func Check(h *History) *Report {
	r := &Report{Settles: map[string]int{}, Faults: h.Faults, Fenced: h.Fenced}
	bad := func(kind string, n int64, format string, a ...any) {
		r.Violations = append(r.Violations, Violation{Kind: kind, N: n, Detail: fmt.Sprintf(format, a...)})
	}

	msgs := make(map[int64]*Enqueued, len(h.Enqueued))
	for i := range h.Enqueued {
		m := &h.Enqueued[i]
		if _, dup := msgs[m.N]; dup {
			bad(Unknown, m.N, "enqueued twice in the history")
		}
		msgs[m.N] = m
		if m.Poison {
			r.Poison++
		}
	}
	r.Messages = len(msgs)
	rolled := make(map[int64]bool, len(h.RolledBack))
	for _, n := range h.RolledBack {
		rolled[n] = true
	}
	r.RolledBack = len(rolled)
	// known says whether n may appear at all, reporting it once per place
	// when it may not.
	known := func(n int64, where string) *Enqueued {
		if m := msgs[n]; m != nil {
			return m
		}
		if rolled[n] {
			bad(RolledBackSeen, n, "its transaction was rolled back, yet it appears in %s", where)
		} else {
			bad(Unknown, n, "never enqueued, yet it appears in %s", where)
		}
		return nil
	}

	// The wire.
	arrivals := make(map[int64]*Arrival, len(h.Arrivals))
	arrivedN := map[int64]int{}
	for i := range h.Arrivals {
		a := &h.Arrivals[i]
		arrivals[a.ID] = a
		if a.AckDropped {
			r.AckDrops++
		}
		m := known(a.N, fmt.Sprintf("arrival %d", a.ID))
		if m == nil {
			continue
		}
		arrivedN[a.N]++
		owner := h.Owner[m.Type]
		if a.Route != owner || appOf(a.Relay) != owner {
			bad(ForeignClaim, a.N, "type %s belongs to app %q but arrival %d came from relay %q at the receiver of %q", m.Type, owner, a.ID, a.Relay, a.Route)
		}
	}
	r.Arrivals = len(h.Arrivals)
	for _, c := range arrivedN {
		r.Redeliveries += c - 1
	}

	// The effects.
	effects := map[int64][]*Effect{}
	for i := range h.Effects {
		e := &h.Effects[i]
		m := known(e.N, fmt.Sprintf("effect %d", e.Seq))
		if m == nil {
			continue
		}
		effects[e.N] = append(effects[e.N], e)
		if a := arrivals[e.ArrivalID]; a == nil || a.N != e.N {
			bad(NoArrival, e.N, "effect %d names arrival %d, which is not a request for this message", e.Seq, e.ArrivalID)
		}
	}
	r.Effects = len(h.Effects)
	for i := range h.Arrivals {
		a := &h.Arrivals[i]
		if es := effects[a.N]; len(es) > 0 && a.ID > es[0].ArrivalID {
			r.DuplicatesAbsorbed++
		}
	}

	dead := map[int64]bool{}
	for _, n := range h.Dead {
		if m := known(n, "the dead letters"); m != nil {
			dead[n] = true
			if !m.Poison {
				bad(UnexpectedDead, n, "parked as dead but no permanent error was injected")
			}
		}
	}
	r.Dead = len(dead)
	pending := map[int64]bool{}
	for _, n := range h.Pending {
		if known(n, "the pending outbox rows at the end") != nil {
			pending[n] = true
		}
	}

	for _, m := range h.Enqueued {
		es := effects[m.N]
		switch {
		case len(es) > 1:
			bad(DuplicateEff, m.N, "applied %d times (effects %v)", len(es), seqs(es))
		case m.Poison && len(es) > 0:
			bad(UnexpectedDead, m.N, "a permanent error was injected, yet its effect was applied")
		case m.Poison && !dead[m.N]:
			bad(Lost, m.N, "a permanent error was injected but it was not parked as dead (pending at the end: %v)", pending[m.N])
		case !m.Poison && len(es) == 0:
			bad(Lost, m.N, "committed but never applied (arrivals %d, dead %v, pending at the end %v)", arrivedN[m.N], dead[m.N], pending[m.N])
		}
		if arrivedN[m.N] == 0 && len(es) == 0 && !m.Poison {
			continue // reported as lost already
		}
		if arrivedN[m.N] == 0 {
			bad(NoArrival, m.N, "never reached the receiver")
		}
	}

	// Per-key order, over the effects in the order they were applied.
	byEffect := make([]*Effect, 0, len(h.Effects))
	for i := range h.Effects {
		byEffect = append(byEffect, &h.Effects[i])
	}
	slices.SortFunc(byEffect, func(a, b *Effect) int { return cmp64(a.Seq, b.Seq) })
	type tk struct{ typ, key string }
	last := map[tk]int{}
	for _, e := range byEffect {
		m := msgs[e.N]
		if m == nil || !h.Ordered[m.Type] {
			continue
		}
		k := tk{m.Type, m.Key}
		if prev, ok := last[k]; ok && m.Index <= prev {
			bad(OrderViolation, m.N, "key %s/%s: message #%d applied after #%d", m.Type, m.Key, m.Index, prev)
			continue
		}
		last[k] = m.Index
	}

	// Leases: every settle must come from the row's last claim, before
	// that claim's lease passed, and a settled row is never claimed again.
	leases := make([]*LeaseEvent, 0, len(h.Leases))
	for i := range h.Leases {
		leases = append(leases, &h.Leases[i])
	}
	slices.SortFunc(leases, func(a, b *LeaseEvent) int { return cmp64(a.Seq, b.Seq) })
	type rowState struct {
		claim *LeaseEvent
		final string
	}
	rows := map[int64]*rowState{}
	for _, l := range leases {
		m := known(l.N, fmt.Sprintf("lease event %d (%s)", l.Seq, l.Kind))
		if m == nil {
			continue
		}
		st := rows[l.Row]
		if st == nil {
			st = &rowState{}
			rows[l.Row] = st
		}
		if l.Kind == KindClaim {
			r.Claims++
			if owner := h.Owner[m.Type]; appOf(l.Relay) != owner {
				bad(ForeignClaim, l.N, "type %s belongs to app %q but relay %q claimed it (lease event %d)", m.Type, owner, l.Relay, l.Seq)
			}
			if st.final != "" {
				bad(StaleSettle, l.N, "claimed again (lease event %d) after it was settled %s: that settle did not hold", l.Seq, st.final)
			}
			st.claim = l
			continue
		}
		r.Settles[l.Kind]++
		c := st.claim
		switch {
		case c == nil:
			bad(StaleSettle, l.N, "%s by %q (lease event %d) without a live claim", l.Kind, l.Relay, l.Seq)
		case c.Token != l.Token || c.Relay != l.Relay:
			bad(StaleSettle, l.N, "%s by %q with token %d (lease event %d), but the last claim was %q's token %d", l.Kind, l.Relay, l.Token, l.Seq, c.Relay, c.Token)
		case !l.At.Before(c.Until):
			bad(StaleSettle, l.N, "%s by %q at %s (lease event %d), but its lease ended at %s", l.Kind, l.Relay, l.At.Format("15:04:05.000000"), l.Seq, c.Until.Format("15:04:05.000000"))
		}
		st.claim = nil
		if l.Kind == KindDelivered || l.Kind == KindDead {
			st.final = l.Kind
		}
	}

	// The election: an epoch is won once. Every claim is fenced by its
	// epoch, so two processes holding one epoch would both claim, as if
	// each were the only relay of the app; a crash that lost an epoch's
	// commit would hand it out again.
	type ae struct {
		app   string
		epoch int64
	}
	winner := map[ae]string{}
	for _, e := range h.Elections {
		r.Elections++
		k := ae{appOf(e.Relay), e.Epoch}
		if w, ok := winner[k]; ok && w != e.Relay {
			bad(EpochReused, e.Epoch, "app %s: epoch %d won by %q and again by %q", k.app, e.Epoch, w, e.Relay)
			continue
		}
		winner[k] = e.Relay
	}

	for _, b := range h.Business {
		if b.Committed != b.Value {
			bad(BusinessRow, int64(b.Producer), "producer committed %d transactions but its business row says %d", b.Committed, b.Value)
		}
	}
	return r
}

func seqs(es []*Effect) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
