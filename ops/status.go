package ops

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/redact"
)

// Counts are one type's rows by state. A new state of a row is a new
// field here: every reader of the status gets it.
type Counts struct {
	Pending int64 // in flight included
	// Scheduled counts messages not due yet (a NotBefore in the future)
	// that were never attempted; Pending leaves them out.
	Scheduled         int64
	InFlight          int64
	Dead              int64
	DeliveredLastHour int64
	// InDoubt counts the messages of at-most-once routes whose attempt
	// may have reached the receiver (Pending leaves them out).
	InDoubt       int64
	OldestPending time.Duration // zero when none
	OldestInDoubt time.Duration // the oldest attempt's age; zero when none
}

// TypeCounts are the counts of one type.
type TypeCounts struct {
	Type string
	// Owner is the type's owning app in the catalog at the count; "" for
	// none.
	Owner string
	Counts
}

// InboxQueue is one consumer's inbox queue: deliveries accepted by a
// receiver that its app has not applied yet, and the ones it parked as
// dead.
type InboxQueue struct {
	Consumer      string
	Owner         string // the consumer's app in the catalog; "" for none
	Pending       int64
	Dead          int64
	OldestPending time.Duration
}

// Counted is one count of the outbox (which reads every pending row) and
// of the inbox queue, when the schema holds one: what a caller that shows
// the status often keeps, and recounts at its own pace.
type Counted struct {
	At    time.Time // when the count began
	Took  time.Duration
	Types []TypeCounts
	Inbox []InboxQueue // nil on a driver that keeps no inbox queue
}

// Count counts the outbox per type.
func (o *Ops) Count(ctx context.Context) ([]TypeCounts, error) {
	stats, err := o.drv.Stats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TypeCounts, len(stats))
	for i, s := range stats {
		out[i] = TypeCounts{Type: s.Type, Owner: s.Owner, Counts: Counts{Pending: s.Pending, Scheduled: s.Scheduled, InFlight: s.InFlight, Dead: s.Dead, DeliveredLastHour: s.DeliveredLastHr,
			InDoubt: s.InDoubt, OldestPending: s.OldestPending, OldestInDoubt: s.OldestInDoubt}}
	}
	return out, nil
}

// ReadCounts counts the outbox per type and the inbox queue per consumer;
// a count is whole or not at all.
func (o *Ops) ReadCounts(ctx context.Context) (*Counted, error) {
	c := &Counted{At: time.Now()}
	var err error
	if c.Types, err = o.Count(ctx); err != nil {
		return nil, err
	}
	if q, ok := o.drv.(driver.InboxQueueReader); ok {
		stats, err := q.InboxQueueStats(ctx)
		if err != nil {
			return nil, err
		}
		c.Inbox = make([]InboxQueue, len(stats))
		for i, s := range stats {
			c.Inbox[i] = InboxQueue{Consumer: s.Consumer, Pending: s.Pending, Dead: s.Dead, OldestPending: s.OldestPending}
		}
	}
	c.Took = time.Since(c.At)
	return c, nil
}

// DeliveredMinute is how many messages of one type were delivered in one
// minute (Minute is the minute's start).
type DeliveredMinute = driver.DeliveredMinute

// DeliveredPerMinute reads the deliveries of each of types in every
// minute that began less than since ago (on the database clock), sorted by
// type and minute; a minute with none has no entry. Reads are not scoped.
// ok is false, and nothing is read, on a driver that keeps no delivery
// history (it does not implement driver.DeliveryHistory).
func (o *Ops) DeliveredPerMinute(ctx context.Context, types []string, since time.Duration) (mins []DeliveredMinute, ok bool, err error) {
	h, ok := o.drv.(driver.DeliveryHistory)
	if !ok {
		return nil, false, nil
	}
	mins, err = h.DeliveredPerMinute(ctx, types, since)
	return mins, true, err
}

// TypeStatus is one type's line of the status.
type TypeStatus struct {
	Type string
	// Owner is the type's owning app in the catalog as it is now; "" for
	// none.
	Owner string
	// Counted says the count saw rows of the type; a type without is
	// shown for its owner or its route, with zero counts.
	Counted bool
	Counts
	// Route is the flow control of the type's route as its owner's active
	// relay last recorded it; nil before any relay of the owner ran.
	Route *Route
	// Paused is an operator's pause of the type (PauseRoute), with who
	// and why; nil when it is not paused.
	Paused *RoutePause
}

// Route is a route's state as its relay last recorded it. Its texts are
// masked (redact.Text).
type Route struct {
	App   string
	Name  string
	State string // flowing, paused or probing
	Since time.Time
	// Until is when the probe of a paused route is due; zero otherwise.
	Until     time.Time
	Failures  int
	LastError string
	// Recorded is when the relay wrote it, on the database clock.
	Recorded time.Time
}

// Leader is an app's relay election holder as the database records it.
type Leader = driver.Leader

// Election is one app's relay election, as the database holds it; Err is
// why it could not be read.
type Election struct {
	App    string
	Leader Leader
	Err    error
}

// Status is the read model of a schema: every type with its owner, counts
// and route; the inbox queues; the catalog; and the elections asked for.
type Status struct {
	// CountedAt and CountTook are the count's (see Counted).
	CountedAt time.Time
	CountTook time.Duration
	Types     []TypeStatus // sorted by type
	Inbox     []InboxQueue
	Owners    []driver.Ownership
	Elections []Election // sorted by app
	// Timings are what each read took: owners, routes, elections.
	Timings map[string]time.Duration
}

// StatusParams says what a Status holds beyond every type counted, owned
// or routed.
type StatusParams struct {
	// Counted is a count kept by the caller; nil counts now.
	Counted *Counted
	// Types also get a line, with zero counts, when nothing else names
	// them: an app's configured types, before any row or owner.
	Types []string
	// Elections are the apps whose election is read; with AllElections,
	// every app the catalog or a route state names too.
	Elections    []string
	AllElections bool
}

// electionLease is what Status hands Driver.Elector: it only reads the
// holder, so the lease is never used to lead.
const electionLease = 30 * time.Second

// Status reads the status. A failed read of the count, the catalog or the
// route states fails it; a failed read of an election is that election's
// Err.
func (o *Ops) Status(ctx context.Context, p StatusParams) (*Status, error) {
	counted := p.Counted
	if counted == nil {
		var err error
		if counted, err = o.ReadCounts(ctx); err != nil {
			return nil, err
		}
	}
	st := &Status{CountedAt: counted.At, CountTook: counted.Took, Timings: map[string]time.Duration{}}
	began := time.Now()
	catalog, err := o.drv.Owners(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("ownership catalog: %w", err)
	}
	st.Owners = catalog
	st.Timings["owners"] = time.Since(began)
	began = time.Now()
	routes, err := o.drv.RouteStates(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("route states: %w", err)
	}
	st.Timings["routes"] = time.Since(began)

	byType := map[string]*TypeStatus{}
	var order []string
	line := func(t string) *TypeStatus {
		if v, ok := byType[t]; ok {
			return v
		}
		v := &TypeStatus{Type: t}
		byType[t] = v
		order = append(order, t)
		return v
	}
	apps := map[string]bool{}
	for _, c := range counted.Types {
		v := line(c.Type)
		v.Counted, v.Counts = true, c.Counts
	}
	for _, t := range p.Types {
		line(t)
	}
	// The owner comes from the catalog as it is now, not as it was at the
	// count.
	for _, e := range catalog {
		if e.App != "" {
			apps[e.App] = true
		}
		if e.Kind == driver.ResourceType {
			line(e.Name).Owner = e.App
		}
	}
	for _, r := range routes {
		apps[r.App] = true
		v := line(r.Type)
		if v.Owner != "" && r.App != v.Owner {
			continue // a former owner's record
		}
		v.Route = &Route{App: r.App, Name: redact.Text(r.Route), State: r.State, Since: r.Since.UTC(), Until: utc(r.Until), Failures: r.Failures,
			LastError: redact.Text(r.LastError), Recorded: r.UpdatedAt.UTC()}
	}
	pauses, err := o.RoutePauses(ctx)
	if err != nil {
		return nil, err
	}
	for _, x := range pauses {
		v := line(x.Type)
		x.Reason, x.PausedBy = redact.Text(x.Reason), redact.Text(x.PausedBy)
		v.Paused = &x
	}
	slices.Sort(order)
	for _, t := range order {
		st.Types = append(st.Types, *byType[t])
	}
	owners := map[string]string{}
	for _, e := range catalog {
		if e.Kind == driver.ResourceConsumer {
			owners[e.Name] = e.App
		}
	}
	for _, q := range counted.Inbox {
		q.Owner = owners[q.Consumer]
		st.Inbox = append(st.Inbox, q)
	}

	began = time.Now()
	names := slices.Clone(p.Elections)
	if p.AllElections {
		for a := range apps {
			names = append(names, a)
		}
	}
	slices.Sort(names)
	for _, a := range slices.Compact(names) {
		st.Elections = append(st.Elections, o.election(ctx, a))
	}
	st.Timings["elections"] = time.Since(began)
	return st, nil
}

func (o *Ops) election(ctx context.Context, app string) Election {
	e := Election{App: app}
	el, err := o.drv.Elector(app, electionLease)
	if err == nil {
		e.Leader, err = el.Holder(ctx)
	}
	e.Err = err
	return e
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}
