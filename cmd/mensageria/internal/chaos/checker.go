package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/xadm/mensageria/cmd/mensageria/internal/verdict"
)

// Violation kinds the checker reports.
const (
	Lost           = verdict.Lost            // a committed message never applied (or a poison one never parked)
	DuplicateEff   = verdict.DuplicateEffect // one message applied more than once
	ForeignClaim   = verdict.ForeignClaim    // a message claimed, sent or received by another app
	OrderViolation = verdict.Order           // an ordered key applied out of enqueue order
	StaleSettle    = "stale-settle"          // a settle by a relay that no longer held the lease
	UnexpectedDead = "unexpected-dead"       // dead without an injected permanent error, or a poison message applied
	RolledBackSeen = "rolled-back-seen"      // a message of a rolled-back transaction showed up
	Unknown        = "unknown-message"       // a message nobody enqueued showed up
	NoArrival      = "no-arrival"            // an effect without its request on the wire
	BusinessRow    = "business-row"          // a business row that disagrees with its committed transactions
	EpochReused    = "epoch-reused"          // one election epoch won by two relay processes
)

// Violation is one broken promise; for the suite's own kinds N may name
// an epoch (epoch-reused) or a producer (business-row) instead.
type Violation = verdict.Violation

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
func (r *Report) Count(kind string) int { return verdict.Count(r.Violations, kind) }

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

// checker is one run of Check: the history indexed, and the part of it
// the shared verdict judges.
type checker struct {
	h *History
	r *Report

	msgs     map[int64]*Enqueued
	rolled   map[int64]bool
	arrivals map[int64]*Arrival
	arrivedN map[int64]int
	effects  map[int64][]*Effect
	dead     map[int64]bool
	pending  map[int64]bool
	judged   verdict.History
}

// Check verifies every promise of the contract against h: lost,
// duplicate effects, foreign claims and order as package verdict defines
// them, and the suite's own properties on top (the wire, dead letters,
// leases, elections, business rows).
func Check(h *History) *Report {
	c := &checker{
		h: h, r: &Report{Settles: map[string]int{}, Faults: h.Faults, Fenced: h.Fenced},
		arrivals: map[int64]*Arrival{}, arrivedN: map[int64]int{}, effects: map[int64][]*Effect{},
		dead: map[int64]bool{}, pending: map[int64]bool{},
		judged: verdict.History{Owner: h.Owner, Ordered: h.Ordered},
	}
	c.enqueued()
	c.wire()
	c.applied()
	c.ends()
	c.leases()
	c.judge()
	c.elections()
	c.business()
	return c.r
}

func (c *checker) bad(kind string, n int64, format string, a ...any) {
	c.r.Violations = append(c.r.Violations, Violation{Kind: kind, N: n, Detail: fmt.Sprintf(format, a...)})
}

func (c *checker) enqueued() {
	c.msgs = make(map[int64]*Enqueued, len(c.h.Enqueued))
	for i := range c.h.Enqueued {
		m := &c.h.Enqueued[i]
		if _, dup := c.msgs[m.N]; dup {
			c.bad(Unknown, m.N, "enqueued twice in the history")
		}
		c.msgs[m.N] = m
		if m.Poison {
			c.r.Poison++
		}
		c.judged.Messages = append(c.judged.Messages, verdict.Message{N: m.N, Type: m.Type, Key: m.Key, Index: m.Index, MayEndDead: m.Poison})
	}
	c.r.Messages = len(c.msgs)
	c.rolled = make(map[int64]bool, len(c.h.RolledBack))
	for _, n := range c.h.RolledBack {
		c.rolled[n] = true
	}
	c.r.RolledBack = len(c.rolled)
}

// known says whether n may appear at all, reporting it once per place
// when it may not.
func (c *checker) known(n int64, where string) *Enqueued {
	if m := c.msgs[n]; m != nil {
		return m
	}
	if c.rolled[n] {
		c.bad(RolledBackSeen, n, "its transaction was rolled back, yet it appears in %s", where)
	} else {
		c.bad(Unknown, n, "never enqueued, yet it appears in %s", where)
	}
	return nil
}

// wire reads the requests that reached the receivers: each is a claim by
// its sending relay's app and by the app of the endpoint that took it.
func (c *checker) wire() {
	for i := range c.h.Arrivals {
		a := &c.h.Arrivals[i]
		c.arrivals[a.ID] = a
		if a.AckDropped {
			c.r.AckDrops++
		}
		m := c.known(a.N, fmt.Sprintf("arrival %d", a.ID))
		if m == nil {
			continue
		}
		c.arrivedN[a.N]++
		c.judged.Claims = append(c.judged.Claims, verdict.Claim{N: a.N, Type: m.Type, Apps: []string{a.Route, appOf(a.Relay)},
			Ref: fmt.Sprintf("arrival %d came from relay %q at the receiver of %q", a.ID, a.Relay, a.Route)})
	}
	c.r.Arrivals = len(c.h.Arrivals)
	for _, n := range c.arrivedN {
		c.r.Redeliveries += n - 1
	}
}

// applied reads the effects: each comes from a request for its message.
func (c *checker) applied() {
	for i := range c.h.Effects {
		e := &c.h.Effects[i]
		if c.known(e.N, fmt.Sprintf("effect %d", e.Seq)) == nil {
			continue
		}
		c.effects[e.N] = append(c.effects[e.N], e)
		c.judged.Effects = append(c.judged.Effects, verdict.Effect{Seq: e.Seq, N: e.N})
		if a := c.arrivals[e.ArrivalID]; a == nil || a.N != e.N {
			c.bad(NoArrival, e.N, "effect %d names arrival %d, which is not a request for this message", e.Seq, e.ArrivalID)
		}
	}
	c.r.Effects = len(c.h.Effects)
	for i := range c.h.Arrivals {
		a := &c.h.Arrivals[i]
		if es := c.effects[a.N]; len(es) > 0 && a.ID > es[0].ArrivalID {
			c.r.DuplicatesAbsorbed++
		}
	}
}

// ends reads the dead letters and the rows pending at the end: only a
// poison message ends dead.
func (c *checker) ends() {
	for _, n := range c.h.Dead {
		if m := c.known(n, "the dead letters"); m != nil {
			c.dead[n] = true
			if !m.Poison {
				c.bad(UnexpectedDead, n, "parked as dead but no permanent error was injected")
			}
		}
	}
	c.r.Dead = len(c.dead)
	for _, n := range c.h.Pending {
		if c.known(n, "the pending outbox rows at the end") != nil {
			c.pending[n] = true
		}
	}
	for n := range c.dead {
		c.judged.Dead = append(c.judged.Dead, n)
	}
	for n := range c.pending {
		c.judged.Pending = append(c.judged.Pending, n)
	}
}

// judge hands the history to the shared verdict, then checks what only
// the suite can see of each message: a poison message is never applied,
// and every message that got anywhere reached the receiver.
func (c *checker) judge() {
	v := verdict.Judge(&c.judged)
	for _, x := range v.Violations {
		if x.Kind == Lost && !c.msgs[x.N].Poison {
			x.Detail += fmt.Sprintf(" (arrivals %d; leases: %s)", c.arrivedN[x.N], c.leaseStory(x.N))
		}
		c.r.Violations = append(c.r.Violations, x)
	}
	for _, m := range c.h.Enqueued {
		es := c.effects[m.N]
		if m.Poison && len(es) == 1 {
			c.bad(UnexpectedDead, m.N, "a permanent error was injected, yet its effect was applied")
		}
		if c.arrivedN[m.N] == 0 && len(es) == 0 && !m.Poison {
			continue // lost: reported by the verdict
		}
		if c.arrivedN[m.N] == 0 {
			c.bad(NoArrival, m.N, "never reached the receiver")
		}
	}
}

// leaseStory is what the trigger recorded of message n's row, in order:
// what a lost message's row went through is where its loss is told.
func (c *checker) leaseStory(n int64) string {
	var b strings.Builder
	for _, l := range c.h.Leases {
		if l.N != n {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d:%s by %q token %d at %s", l.Seq, l.Kind, l.Relay, l.Token, l.At.Format("15:04:05.000"))
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// rowState is what the leases of one outbox row have been so far.
type rowState struct {
	claim *LeaseEvent
	final string
}

// leases: every settle must come from the row's last claim, before that
// claim's lease passed, and a settled row is never claimed again. Every
// claim is also one for the verdict's foreign-claim check.
func (c *checker) leases() {
	leases := make([]*LeaseEvent, 0, len(c.h.Leases))
	for i := range c.h.Leases {
		leases = append(leases, &c.h.Leases[i])
	}
	slices.SortFunc(leases, func(a, b *LeaseEvent) int { return cmp.Compare(a.Seq, b.Seq) })
	rows := map[int64]*rowState{}
	for _, l := range leases {
		m := c.known(l.N, fmt.Sprintf("lease event %d (%s)", l.Seq, l.Kind))
		if m == nil {
			continue
		}
		st := rows[l.Row]
		if st == nil {
			st = &rowState{}
			rows[l.Row] = st
		}
		if l.Kind == KindClaim {
			c.claimed(m, l, st)
			continue
		}
		c.settled(l, st)
	}
}

func (c *checker) claimed(m *Enqueued, l *LeaseEvent, st *rowState) {
	c.r.Claims++
	c.judged.Claims = append(c.judged.Claims, verdict.Claim{N: l.N, Type: m.Type, Apps: []string{appOf(l.Relay)},
		Ref: fmt.Sprintf("relay %q claimed it (lease event %d)", l.Relay, l.Seq)})
	if st.final != "" {
		c.bad(StaleSettle, l.N, "claimed again (lease event %d) after it was settled %s: that settle did not hold", l.Seq, st.final)
	}
	st.claim = l
}

func (c *checker) settled(l *LeaseEvent, st *rowState) {
	c.r.Settles[l.Kind]++
	cl := st.claim
	switch {
	case cl == nil:
		c.bad(StaleSettle, l.N, "%s by %q (lease event %d) without a live claim", l.Kind, l.Relay, l.Seq)
	case cl.Token != l.Token || cl.Relay != l.Relay:
		c.bad(StaleSettle, l.N, "%s by %q with token %d (lease event %d), but the last claim was %q's token %d", l.Kind, l.Relay, l.Token, l.Seq, cl.Relay, cl.Token)
	case !l.At.Before(cl.Until):
		c.bad(StaleSettle, l.N, "%s by %q at %s (lease event %d), but its lease ended at %s", l.Kind, l.Relay, l.At.Format("15:04:05.000000"), l.Seq, cl.Until.Format("15:04:05.000000"))
	}
	st.claim = nil
	if l.Kind == KindDelivered || l.Kind == KindDead {
		st.final = l.Kind
	}
}

// elections: an epoch is won once. Every claim is fenced by its epoch, so
// two processes holding one epoch would both claim, as if each were the
// only relay of the app; a crash that lost an epoch's commit would hand
// it out again.
func (c *checker) elections() {
	type appEpoch struct {
		app   string
		epoch int64
	}
	winner := map[appEpoch]string{}
	for _, e := range c.h.Elections {
		c.r.Elections++
		k := appEpoch{appOf(e.Relay), e.Epoch}
		if w, ok := winner[k]; ok && w != e.Relay {
			c.bad(EpochReused, e.Epoch, "app %s: epoch %d won by %q and again by %q", k.app, e.Epoch, w, e.Relay)
			continue
		}
		winner[k] = e.Relay
	}
}

func (c *checker) business() {
	for _, b := range c.h.Business {
		if b.Committed != b.Value {
			c.bad(BusinessRow, int64(b.Producer), "producer committed %d transactions but its business row says %d", b.Committed, b.Value)
		}
	}
}
