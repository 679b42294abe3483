package mensageria

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// busyPoll is the pause between claims while messages keep arriving.
const busyPoll = 2 * time.Millisecond

// stopGrace is how long Stop waits, once its context is done, for cancelled
// deliveries to return and be released.
const stopGrace = 2 * time.Second

// Start launches the relay in the background. It returns at once; the relay
// runs until Stop. An app with no registered types still runs the relay for
// its purge duties but never claims a row.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.relay != nil {
		return ErrAlreadyStarted
	}
	r, err := newRelay(ctx, c)
	if err != nil {
		return err
	}
	c.relay = r
	go r.run()
	return nil
}

// Stop stops claiming at once, lets the batches in flight finish and settle,
// and returns when they did. If ctx ends first, deliveries still running
// are cancelled and their messages released for the next relay, without
// counting the attempt. Stop on a client that was not started returns nil.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	r := c.relay
	c.relay = nil
	c.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.stop(ctx)
}

// IsLeader reports whether this client's relay currently holds its app's
// election (always true with ElectionNone once started).
func (c *Client) IsLeader() bool {
	c.mu.Lock()
	r := c.relay
	c.mu.Unlock()
	return r != nil && r.leader.Load()
}

type relay struct {
	c     *Client
	cfg   *Config
	types []string
	order []string

	runCtx    context.Context // cancelled when Stop's deadline passes
	runCancel context.CancelFunc
	stopping  chan struct{} // closed by Stop: claim no more
	done      chan struct{} // closed when run returns
	stopOnce  sync.Once

	elector driver.Elector
	leader  atomic.Bool
	epoch   atomic.Int64
	changed chan struct{} // leadership changed
	wake    chan struct{} // work may be waiting
	slots   chan struct{} // batches in flight
	sem     chan struct{} // deliveries in flight
	batches sync.WaitGroup

	rngMu sync.Mutex
	rng   *rand.Rand
}

func newRelay(ctx context.Context, c *Client) (*relay, error) {
	cfg := &c.cfg
	r := &relay{
		c:        c,
		cfg:      cfg,
		types:    cfg.Registry.Types(),
		order:    cfg.Registry.orderedTypes(),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
		changed:  make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
		slots:    make(chan struct{}, cfg.BatchesInFlight),
		sem:      make(chan struct{}, cfg.Concurrency),
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	r.runCtx, r.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.Election == ElectionLeader {
		el, err := c.drv.Elector(cfg.App, cfg.Lease)
		if err != nil {
			return nil, fmt.Errorf("mensageria: election: %w", err)
		}
		r.elector = el
	} else {
		r.leader.Store(true)
	}
	return r, nil
}

func (r *relay) run() {
	defer close(r.done)
	var bg sync.WaitGroup
	if r.elector != nil {
		bg.Add(1)
		go func() { defer bg.Done(); r.elect() }()
	}
	if !r.cfg.PollOnly && len(r.types) > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); r.listen() }()
	}
	bg.Add(1)
	go func() { defer bg.Done(); r.purge() }()

	r.claimLoop()
	r.batches.Wait()
	r.runCancel() // ends the background loops
	bg.Wait()
	if r.elector != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.elector.Release(ctx); err != nil {
			r.cfg.Logger.Warn("election release failed", "err", err)
		}
		cancel()
	}
}

func (r *relay) stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopping) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.runCancel() // deliveries see a cancelled context and are released
		select {
		case <-r.done:
		case <-time.After(stopGrace):
			// A Sender that ignores its context keeps its batch; the
			// lease expires and another relay redelivers it.
			r.cfg.Logger.Warn("stop: deliveries still running after cancellation; their leases will expire", "app", r.cfg.App)
		}
		return ctx.Err()
	}
}

func (r *relay) stopped() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// elect keeps calling Acquire at a third of the lease: often enough that a
// live leader never loses its lease and a standby notices a vacancy soon.
func (r *relay) elect() {
	tick := r.cfg.Lease / 3
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-r.runCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.runCtx, tick)
		epoch, ok, err := r.elector.Acquire(ctx)
		cancel()
		if err != nil && r.runCtx.Err() == nil {
			r.cfg.Logger.Warn("election check failed; acting as standby", "app", r.cfg.App, "err", err)
			ok = false
		}
		if was := r.leader.Load(); was != ok || (ok && epoch != r.epoch.Load()) {
			r.epoch.Store(epoch)
			r.leader.Store(ok)
			r.cfg.Logger.Info("relay leadership changed", "app", r.cfg.App, "leader", ok, "epoch", epoch)
			for _, h := range r.c.hooks.election {
				h.OnElection(ElectionEvent{App: r.cfg.App, Leader: ok, Epoch: epoch})
			}
			signal(r.changed)
		}
		t.Reset(tick)
	}
}

func (r *relay) listen() {
	for r.runCtx.Err() == nil {
		l, err := r.c.drv.Listen(r.runCtx)
		if errors.Is(err, driver.ErrNotSupported) {
			return
		}
		if err != nil {
			if r.runCtx.Err() == nil {
				r.cfg.Logger.Warn("listen failed; polling until it is back", "err", err)
			}
			sleep(r.runCtx, r.cfg.PollInterval)
			continue
		}
		for {
			select {
			case <-r.runCtx.Done():
				_ = l.Close()
				return
			case _, ok := <-l.C():
				if !ok {
					_ = l.Close()
					goto again
				}
				signal(r.wake)
			}
		}
	again:
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *relay) claimLoop() {
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	wait := func() bool { // false when stopping
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(r.cfg.PollInterval)
		select {
		case <-r.stopping:
			return false
		case <-r.wake:
		case <-r.changed:
		case <-poll.C:
		}
		return true
	}
	pause := func(d time.Duration) bool { // false when stopping
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.stopping:
			return false
		case <-r.wake:
		case <-t.C:
		}
		return true
	}
	for !r.stopped() {
		if len(r.types) == 0 || !r.leader.Load() {
			if !wait() {
				return
			}
			continue
		}
		select {
		case r.slots <- struct{}{}:
		case <-r.stopping:
			return
		}
		jobs, err := r.claim()
		if err != nil || len(jobs.jobs) == 0 {
			<-r.slots
			if err != nil && !r.stopped() {
				r.cfg.Logger.Warn("claim failed", "app", r.cfg.App, "err", err)
			}
			if !wait() {
				return
			}
			continue
		}
		r.batches.Add(1)
		go func() {
			defer r.batches.Done()
			defer func() { <-r.slots }()
			r.deliver(jobs)
		}()
		if len(jobs.jobs) < r.cfg.BatchSize {
			// The queue was drained at claim time, but messages are
			// flowing: look again after a short pause rather than wait
			// for a (debounced) notification, so a steady stream is
			// picked up within busyPoll. An empty claim then falls back
			// to notifications and the poll.
			if !pause(busyPoll) {
				return
			}
		}
	}
}

func (r *relay) token() int64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Int64()
}

type claimed struct {
	token    int64
	deadline time.Time
	jobs     []driver.Job
}

func (r *relay) claim() (*claimed, error) {
	p := driver.ClaimParams{
		Types:        r.types,
		OrderedTypes: r.order,
		Limit:        r.cfg.BatchSize,
		Lease:        r.cfg.Lease,
		Token:        r.token(),
	}
	if r.elector != nil {
		p.Fence = &driver.Fence{App: r.cfg.App, Epoch: r.epoch.Load()}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.Lease/2)
	jobs, err := r.c.drv.Claim(ctx, p)
	cancel()
	for _, h := range r.c.hooks.claim {
		h.OnClaim(ClaimEvent{Claimed: len(jobs), Duration: time.Since(start), Err: err})
	}
	if err != nil {
		return nil, err
	}
	// Deliveries must finish inside the lease, with a margin for the
	// settle, or another relay may already be delivering them again.
	return &claimed{token: p.Token, deadline: start.Add(r.cfg.Lease - r.cfg.Lease/10), jobs: jobs}, nil
}

// outcome of one job inside a batch.
type outcome struct {
	kind    Outcome // "" = release
	err     error
	delay   time.Duration
	elapsed time.Duration
}

func (r *relay) deliver(b *claimed) {
	ctx, cancel := context.WithDeadline(r.runCtx, b.deadline)
	defer cancel()
	outs := make([]outcome, len(b.jobs))
	ds := make([]*Delivery, len(b.jobs))
	for i := range b.jobs {
		ds[i] = toDelivery(&b.jobs[i])
	}
	var wg sync.WaitGroup
	byType := map[string][]int{}
	for i := range b.jobs {
		rt, ok := r.cfg.Registry.Route(b.jobs[i].Type)
		if !ok {
			// Never claimed on purpose; give it back to its owner untried.
			continue
		}
		if _, ok := rt.Sender.(BatchSender); ok {
			byType[b.jobs[i].Type] = append(byType[b.jobs[i].Type], i)
			continue
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			continue // left as release
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-r.sem }()
			start := time.Now()
			err := safeSend(ctx, rt.Sender, ds[i])
			outs[i] = r.classify(ctx, ds[i], err)
			outs[i].elapsed = time.Since(start)
		}(i)
	}
	for typ, idx := range byType {
		rt, _ := r.cfg.Registry.Route(typ)
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.sem }()
			batch := make([]*Delivery, len(idx))
			for k, i := range idx {
				batch[k] = ds[i]
			}
			start := time.Now()
			errs := safeSendBatch(ctx, rt.Sender.(BatchSender), batch)
			for k, i := range idx {
				var err error
				if errs != nil {
					err = errs[k]
				}
				outs[i] = r.classify(ctx, ds[i], err)
				outs[i].elapsed = time.Since(start)
			}
		}()
	}
	wg.Wait()
	r.settle(b, ds, outs)
}

func toDelivery(j *driver.Job) *Delivery {
	d := &Delivery{
		ID:        uuid.UUID(j.MessageID),
		Type:      j.Type,
		Key:       j.Key,
		Payload:   j.Payload,
		CreatedAt: j.CreatedAt,
		Attempt:   j.Attempt,
		Seq:       j.ID,
	}
	d.Headers = decodeHeaders(j.Headers)
	return d
}

func safeSend(ctx context.Context, s Sender, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sender panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return s.Send(ctx, d)
}

func safeSendBatch(ctx context.Context, s BatchSender, ds []*Delivery) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("sender panicked: %v", p)
			errs = make([]error, len(ds))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	errs = s.SendBatch(ctx, ds)
	if errs != nil && len(errs) != len(ds) {
		err := fmt.Errorf("mensageria: SendBatch returned %d results for %d deliveries", len(errs), len(ds))
		errs = make([]error, len(ds))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

func (r *relay) classify(ctx context.Context, d *Delivery, err error) outcome {
	switch {
	case err == nil:
		return outcome{kind: OutcomeDelivered}
	case r.runCtx.Err() != nil:
		return outcome{err: err} // stopping: release, do not count
	case IsPermanent(err):
		return outcome{kind: OutcomeDead, err: err}
	case d.Attempt >= r.cfg.MaxAttempts:
		return outcome{kind: OutcomeDead, err: fmt.Errorf("gave up after %d attempts: %w", d.Attempt, err)}
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("delivery ran past the lease: %w", err)
	}
	ra, _ := RetryAfterOf(err)
	r.rngMu.Lock()
	delay := backoff(d.Attempt, r.cfg.BackoffBase, r.cfg.BackoffMax, ra, r.rng)
	r.rngMu.Unlock()
	return outcome{kind: OutcomeRetry, err: err, delay: delay}
}

const maxErrorLen = 2000

// errText is what the row keeps of a Sender's error. It must be storable
// whatever the Sender returned: PostgreSQL text refuses NUL and invalid
// UTF-8, and one refused value would fail the settle of the whole batch.
func errText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", " ")
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func (r *relay) settle(b *claimed, ds []*Delivery, outs []outcome) {
	p := driver.SettleParams{Token: b.token, KeepDelivered: r.cfg.DeliveredRetention > 0}
	for i, o := range outs {
		id := b.jobs[i].ID
		switch o.kind {
		case OutcomeDelivered:
			p.Delivered = append(p.Delivered, id)
		case OutcomeRetry:
			p.Retry = append(p.Retry, driver.Retry{ID: id, Delay: o.delay, Error: errText(o.err)})
		case OutcomeDead:
			p.Dead = append(p.Dead, driver.Failure{ID: id, Error: errText(o.err)})
			r.cfg.Logger.Warn("message parked as dead", "type", ds[i].Type, "key", ds[i].Key, "id", ds[i].ID, "attempt", ds[i].Attempt, "err", o.err)
		default:
			p.Release = append(p.Release, id)
		}
	}
	// Settle even while stopping: the outcome is known and must not be
	// redone by the next relay.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runCtx), 10*time.Second)
	defer cancel()
	res, err := r.c.drv.Settle(ctx, p)
	n := len(res.Settled) // FOUNDATION STUB: per-row outcomes come with the relay work
	fenced := err != nil || n < len(outs)
	if err != nil {
		r.cfg.Logger.Warn("settle failed; the batch will be redelivered after its lease", "err", err, "rows", len(outs))
	} else if n < len(outs) {
		r.cfg.Logger.Warn("lease lost before settle; another relay owns those rows now", "rows", len(outs)-n)
	}
	if len(r.c.hooks.delivery) == 0 {
		return
	}
	now := time.Now()
	for i, o := range outs {
		if o.kind == "" {
			continue
		}
		kind := o.kind
		if fenced {
			kind = OutcomeFenced
		}
		ev := DeliveryEvent{Type: ds[i].Type, Outcome: kind, Attempt: ds[i].Attempt, Latency: now.Sub(ds[i].CreatedAt), Duration: o.elapsed, Err: o.err}
		for _, h := range r.c.hooks.delivery {
			h.OnDelivery(ev)
		}
	}
}

// purge runs on the active relay only, so replicas do not race each other
// over the same rows.
func (r *relay) purge() {
	if r.cfg.PurgeInterval <= 0 {
		return
	}
	for {
		sleep(r.runCtx, r.cfg.PurgeInterval)
		if r.runCtx.Err() != nil {
			return
		}
		if !r.leader.Load() {
			continue
		}
		for r.runCtx.Err() == nil {
			res, err := r.c.drv.Purge(r.runCtx, driver.PurgeParams{
				App:             r.cfg.App,
				Types:           r.types,
				DeliveredBefore: r.cfg.DeliveredRetention,
				Batch:           1000,
			})
			if err != nil {
				if r.runCtx.Err() == nil {
					r.cfg.Logger.Warn("purge failed", "err", err)
				}
				break
			}
			if res.Outbox < 1000 && res.Inbox < 1000 {
				break
			}
		}
	}
}
