package chaos

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// builder writes histories the way a correct run would: every message is
// claimed by its own app's relay, possibly loses its lease or gets a
// retry, reaches the receiver one or more times, is applied once and
// settled by the last owner of its lease.
type builder struct {
	h     History
	rng   *rand.Rand
	clock time.Time
	seq   int64
	arr   int64
	row   int64
	index map[string]int
}

var testTypes = []string{"a.poke", "a.seq", "b.poke", "b.seq"}

func newBuilder(seed uint64) *builder {
	return &builder{
		h: History{
			Owner:   map[string]string{"a.poke": "a", "a.seq": "a", "b.poke": "b", "b.seq": "b"},
			Ordered: map[string]bool{"a.seq": true, "b.seq": true},
			Faults:  map[string]int{},
		},
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		index: map[string]int{},
	}
}

func (b *builder) tick(d time.Duration) time.Time { b.clock = b.clock.Add(d); return b.clock }
func (b *builder) next() int64                    { b.seq++; return b.seq }

// message adds one committed message and its whole delivery.
func (b *builder) message(typ, key string, poison bool) int64 {
	n := int64(len(b.h.Enqueued) + len(b.h.RolledBack) + 1)
	k := typ + "/" + key
	b.h.Enqueued = append(b.h.Enqueued, Enqueued{N: n, Type: typ, Key: key, Index: b.index[k], Poison: poison})
	b.index[k]++
	b.row++
	row := b.row
	app := b.h.Owner[typ]
	const lease = 3 * time.Second
	attempts := 1 + b.rng.IntN(3)
	applied := false
	for at := 1; at <= attempts; at++ {
		relay := fmt.Sprintf("%s/%d#%d", app, b.rng.IntN(2), b.rng.IntN(3))
		token := b.rng.Int64()
		claimAt := b.tick(time.Millisecond)
		b.h.Leases = append(b.h.Leases, LeaseEvent{Seq: b.next(), Row: row, N: n, Type: typ, Kind: KindClaim, Token: token, Until: claimAt.Add(lease), At: claimAt, Relay: relay})
		for range b.rng.IntN(3) + 1 {
			b.arr++
			drop := b.rng.IntN(10) == 0
			b.h.Arrivals = append(b.h.Arrivals, Arrival{ID: b.arr, N: n, Type: typ, Attempt: at, Route: app, Relay: relay, AckDropped: drop})
			if !poison && !applied {
				b.h.Effects = append(b.h.Effects, Effect{Seq: b.next(), N: n, ArrivalID: b.arr})
				applied = true
			}
		}
		last := at == attempts
		switch {
		case last && poison:
			b.h.Leases = append(b.h.Leases, LeaseEvent{Seq: b.next(), Row: row, N: n, Type: typ, Kind: KindDead, Token: token, Until: claimAt.Add(lease), At: b.tick(time.Millisecond), Relay: relay})
			b.h.Dead = append(b.h.Dead, n)
		case last:
			b.h.Leases = append(b.h.Leases, LeaseEvent{Seq: b.next(), Row: row, N: n, Type: typ, Kind: KindDelivered, Token: token, Until: claimAt.Add(lease), At: b.tick(time.Millisecond), Relay: relay})
		case b.rng.IntN(2) == 0:
			// A retry, settled in time.
			b.h.Leases = append(b.h.Leases, LeaseEvent{Seq: b.next(), Row: row, N: n, Type: typ, Kind: KindRetry, Token: token, Until: claimAt.Add(lease), At: b.tick(time.Millisecond), Relay: relay})
		default:
			// The relay died or was paused: the lease runs out and the
			// next claim takes the row; the zombie's late settle was
			// refused, so it left no event.
			b.tick(lease + time.Millisecond)
			b.h.Fenced++
		}
	}
	return n
}

func (b *builder) rollback() {
	b.h.RolledBack = append(b.h.RolledBack, int64(len(b.h.Enqueued)+len(b.h.RolledBack)+1))
}

func (b *builder) random(count int) *History {
	for range count {
		typ := testTypes[b.rng.IntN(len(testTypes))]
		key := fmt.Sprintf("k%d", b.rng.IntN(4))
		switch b.rng.IntN(20) {
		case 0:
			b.rollback()
		case 1:
			b.message(typ, key, true)
		default:
			b.message(typ, key, false)
		}
	}
	// Two applied messages of one ordered key, so order can be broken.
	b.message("a.seq", "fixed", false)
	b.message("a.seq", "fixed", false)
	b.rollback()
	b.h.Business = []Business{{Producer: 0, Committed: 10, Value: 10}}
	// Each relay process wins an epoch or more, each epoch once; a
	// process reports a win it already reported when it sees it again.
	epoch, holder := map[string]int64{}, map[string]string{}
	for _, l := range b.h.Leases {
		if l.Kind != KindClaim {
			continue
		}
		app := appOf(l.Relay)
		if holder[app] != l.Relay || b.rng.IntN(4) == 0 {
			epoch[app]++
			holder[app] = l.Relay
		}
		b.h.Elections = append(b.h.Elections, Election{Relay: l.Relay, Epoch: epoch[app]})
	}
	return &b.h
}

func cleanHistory(seed uint64, count int) *History { return newBuilder(seed).random(count) }

func TestCheckCleanHistoryPasses(t *testing.T) {
	h := cleanHistory(1, 200)
	r := Check(h)
	if !r.OK() {
		t.Fatalf("clean history failed:\n%s", r.Summary())
	}
	if r.Messages == 0 || r.Redeliveries == 0 || r.DuplicatesAbsorbed == 0 || r.Dead == 0 {
		t.Fatalf("figures not counted: %s", r.Summary())
	}
}

// A mutation breaks one promise of a clean history.
type mutation struct {
	name string
	kind string
	// apply changes h; pick chooses among candidates.
	apply func(h *History, pick func(n int) int) bool
}

func applied(h *History) []int {
	poison := map[int64]bool{}
	for _, m := range h.Enqueued {
		if m.Poison {
			poison[m.N] = true
		}
	}
	var out []int
	for i, e := range h.Effects {
		if !poison[e.N] {
			out = append(out, i)
		}
	}
	return out
}

func indexesOf(h *History, kind string) []int {
	var out []int
	for i, l := range h.Leases {
		if l.Kind == kind {
			out = append(out, i)
		}
	}
	return out
}

func settles(h *History) []int {
	var out []int
	for i, l := range h.Leases {
		if l.Kind != KindClaim {
			out = append(out, i)
		}
	}
	return out
}

var mutations = []mutation{
	{"lost message", Lost, func(h *History, pick func(int) int) bool {
		c := applied(h)
		i := c[pick(len(c))]
		n := h.Effects[i].N
		h.Effects = append(h.Effects[:i:i], h.Effects[i+1:]...)
		_ = n
		return true
	}},
	{"pending at the end", Lost, func(h *History, pick func(int) int) bool {
		c := applied(h)
		i := c[pick(len(c))]
		n := h.Effects[i].N
		h.Effects = append(h.Effects[:i:i], h.Effects[i+1:]...)
		h.Pending = append(h.Pending, n)
		return true
	}},
	{"doubled effect", DuplicateEff, func(h *History, pick func(int) int) bool {
		c := applied(h)
		e := h.Effects[c[pick(len(c))]]
		e.Seq = 1 << 40
		h.Effects = append(h.Effects, e)
		return true
	}},
	{"foreign claim", ForeignClaim, func(h *History, pick func(int) int) bool {
		c := indexesOf(h, KindClaim)
		l := &h.Leases[c[pick(len(c))]]
		other := map[string]string{"a": "b", "b": "a"}[h.Owner[l.Type]]
		l.Relay = other + "/0#0"
		return true
	}},
	{"foreign arrival", ForeignClaim, func(h *History, pick func(int) int) bool {
		a := &h.Arrivals[pick(len(h.Arrivals))]
		a.Relay = map[string]string{"a": "b", "b": "a"}[h.Owner[a.Type]] + "/1#0"
		return true
	}},
	{"order violation", OrderViolation, func(h *History, pick func(int) int) bool {
		// Swap the effect order of two messages of one ordered key.
		msgs := map[int64]Enqueued{}
		for _, m := range h.Enqueued {
			msgs[m.N] = m
		}
		type tk struct{ t, k string }
		first := map[tk]int{}
		var pairs [][2]int
		for i, e := range h.Effects {
			m := msgs[e.N]
			if !h.Ordered[m.Type] || m.Poison {
				continue
			}
			k := tk{m.Type, m.Key}
			if j, ok := first[k]; ok {
				pairs = append(pairs, [2]int{j, i})
			} else {
				first[k] = i
			}
		}
		p := pairs[pick(len(pairs))]
		h.Effects[p[0]].Seq, h.Effects[p[1]].Seq = h.Effects[p[1]].Seq, h.Effects[p[0]].Seq
		return true
	}},
	{"settle after the lease passed", StaleSettle, func(h *History, pick func(int) int) bool {
		c := settles(h)
		l := &h.Leases[c[pick(len(c))]]
		l.At = l.Until.Add(time.Duration(pick(1000)) * time.Millisecond)
		return true
	}},
	{"settle by a relay that lost its lease", StaleSettle, func(h *History, pick func(int) int) bool {
		c := settles(h)
		l := &h.Leases[c[pick(len(c))]]
		l.Token++
		return true
	}},
	{"settle by another replica", StaleSettle, func(h *History, pick func(int) int) bool {
		c := settles(h)
		l := &h.Leases[c[pick(len(c))]]
		l.Relay += "x"
		return true
	}},
	{"settled row claimed again", StaleSettle, func(h *History, pick func(int) int) bool {
		c := indexesOf(h, KindDelivered)
		l := h.Leases[c[pick(len(c))]]
		l.Seq, l.Kind, l.Token = l.Seq+1<<40, KindClaim, 42
		h.Leases = append(h.Leases, l)
		return true
	}},
	{"dead without a permanent error", UnexpectedDead, func(h *History, pick func(int) int) bool {
		c := applied(h)
		h.Dead = append(h.Dead, h.Effects[c[pick(len(c))]].N)
		return true
	}},
	{"rolled-back message delivered", RolledBackSeen, func(h *History, pick func(int) int) bool {
		n := h.RolledBack[pick(len(h.RolledBack))]
		h.Arrivals = append(h.Arrivals, Arrival{ID: 1 << 40, N: n, Type: "a.poke", Route: "a", Relay: "a/0#0"})
		return true
	}},
	{"rolled-back message applied", RolledBackSeen, func(h *History, pick func(int) int) bool {
		n := h.RolledBack[pick(len(h.RolledBack))]
		h.Effects = append(h.Effects, Effect{Seq: 1 << 40, N: n, ArrivalID: 1})
		return true
	}},
	{"effect without a request", NoArrival, func(h *History, pick func(int) int) bool {
		c := applied(h)
		h.Effects[c[pick(len(c))]].ArrivalID = 1 << 40
		return true
	}},
	{"epoch won twice", EpochReused, func(h *History, pick func(int) int) bool {
		e := h.Elections[pick(len(h.Elections))]
		e.Relay = appOf(e.Relay) + "/9#9"
		h.Elections = append(h.Elections, e)
		return true
	}},
	{"business row off", BusinessRow, func(h *History, pick func(int) int) bool {
		h.Business[0].Value += int64(1 + pick(3))
		return true
	}},
}

func TestCheckCatchesEachViolation(t *testing.T) {
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			h := cleanHistory(7, 200)
			rng := rand.New(rand.NewPCG(3, 4))
			m.apply(h, func(n int) int { return rng.IntN(n) })
			r := Check(h)
			if r.Count(m.kind) == 0 {
				t.Fatalf("%s not caught as %s:\n%s", m.name, m.kind, r.Summary())
			}
		})
	}
}

// TestCheckProperties: any clean history passes, and any one violation
// injected into it is caught as its kind.
func TestCheckProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "seed")
		count := rapid.IntRange(0, 60).Draw(t, "messages")
		h := cleanHistory(seed, count)
		if r := Check(h); !r.OK() {
			t.Fatalf("clean history failed:\n%s", r.Summary())
		}
		m := mutations[rapid.IntRange(0, len(mutations)-1).Draw(t, "mutation")]
		m.apply(h, func(n int) int { return rapid.IntRange(0, n-1).Draw(t, "pick") })
		if r := Check(h); r.Count(m.kind) == 0 {
			t.Fatalf("%s not caught as %s:\n%s", m.name, m.kind, r.Summary())
		}
	})
}
