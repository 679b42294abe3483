package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The stress scenario (issue #14): a fixed offered rate of single-message
// business transactions, credited on wall-clock time, through phases that
// production brings — a pinned xmin horizon, analytics readers, overload, a
// relay killed mid-load — with what each phase did to the pickup latency
// (commit → Sender start), the backlog, and the outbox's dead tuples and
// size. stress_pg.go and stress_sqlite.go hold the backends' sides.

// StressPhase is one phase of the scenario.
type StressPhase struct {
	Name string
	For  time.Duration
	// Load multiplies the base rate.
	Load float64
	// Pin holds the xmin horizon for the whole phase: one session sits in
	// `BEGIN; SELECT txid_current();`, as a forgotten psql, a long report or
	// a lagging replica with hot_standby_feedback does.
	Pin bool
	// Readers runs REPEATABLE READ sessions that scan the outbox over and
	// over, each transaction holding its snapshot for a while.
	Readers bool
	// Crash kills the relay process with SIGKILL a quarter into the phase
	// (or CrashAfter into it), inside a Send that it holds unanswered (so
	// with a batch claimed, delivered in part and unsettled), and starts it
	// again at once.
	Crash      bool
	CrashAfter time.Duration
}

// StandardStressPhases is the sequence: warmup, clean,
// idle-in-tx (pinned for `pinned`), recovery, active-readers, high-load
// (1.5×), recovery-2, crash; every phase but the first and the pinned one
// lasts `phase`.
func StandardStressPhases(warmup, phase, pinned time.Duration) []StressPhase {
	return []StressPhase{
		{Name: "warmup", For: warmup, Load: 1},
		{Name: "clean", For: phase, Load: 1},
		{Name: "idle-in-tx", For: pinned, Load: 1, Pin: true},
		{Name: "recovery", For: phase, Load: 1},
		{Name: "active-readers", For: phase, Load: 1, Readers: true},
		{Name: "high-load", For: phase, Load: 1.5},
		{Name: "recovery-2", For: phase, Load: 1},
		{Name: "crash", For: phase, Load: 1, Crash: true},
	}
}

// StressConfig sizes the scenario.
type StressConfig struct {
	// Rate is the base offered rate, business transactions (one message
	// each) a second. Default 800.
	Rate int
	// Producers run the business transactions. Default 8.
	Producers int
	// Phases run in order. Default StandardStressPhases(30s, 90s, 2m).
	Phases []StressPhase
	// ReaderSessions, ReaderTx and ReaderPause shape the active readers:
	// that many sessions, each transaction scanning for ReaderTx with
	// ReaderPause between scans. Defaults 3, 5s, 100ms.
	ReaderSessions int
	ReaderTx       time.Duration
	ReaderPause    time.Duration
	// Lease is the relay's lease. Default the library's (30s).
	Lease time.Duration
	// BatchSize is the relay's claim size. Default the library's.
	BatchSize int
	// PollInterval is the relay's. Default the library's; the SQLite
	// relay process, which no notification reaches, polls every 5ms.
	PollInterval time.Duration
	// Sample is how often the database's gauges are read. Default 1s.
	Sample time.Duration
	// SendDelay makes the relay process's every Send last this long (see
	// StressRelaySpec); for the harness's own test only.
	SendDelay time.Duration
	// OutboxSettings are storage parameters set on the outbox before the
	// run ("autovacuum_vacuum_scale_factor=0", ...), to measure a table
	// setting before a migration makes it the default. PostgreSQL only.
	OutboxSettings []string
	// RelayCommand returns the command that starts the relay child: this
	// executable, which hands over to RunStressRelay when StressRelayEnv is
	// set. Required where a phase crashes, and on PostgreSQL, where every
	// phase runs the relay in its own process.
	RelayCommand func() *exec.Cmd
}

// ErrStressConfig is the error class of a StressConfig the scenario refuses.
var ErrStressConfig = errors.New("bench: stress config")

func (c StressConfig) withDefaults() (StressConfig, error) {
	if c.Rate == 0 {
		c.Rate = 800
	}
	if c.Producers == 0 {
		c.Producers = 8
	}
	if c.Phases == nil {
		c.Phases = StandardStressPhases(30*time.Second, 90*time.Second, 2*time.Minute)
	}
	if c.ReaderSessions == 0 {
		c.ReaderSessions = 3
	}
	if c.ReaderTx == 0 {
		c.ReaderTx = 5 * time.Second
	}
	if c.ReaderPause == 0 {
		c.ReaderPause = 100 * time.Millisecond
	}
	if c.Sample == 0 {
		c.Sample = time.Second
	}
	switch {
	case c.Rate < 1 || c.Producers < 1:
		return c, fmt.Errorf("%w: rate %d and producers %d must be at least 1", ErrStressConfig, c.Rate, c.Producers)
	case len(c.Phases) == 0:
		return c, fmt.Errorf("%w: no phases", ErrStressConfig)
	case c.ReaderSessions < 1 || c.ReaderTx <= 0 || c.ReaderPause < 0 || c.Sample <= 0:
		return c, fmt.Errorf("%w: reader sessions, reader transaction and sample interval must be positive", ErrStressConfig)
	case c.Lease < 0 || c.BatchSize < 0 || c.PollInterval < 0 || c.SendDelay < 0:
		return c, fmt.Errorf("%w: negative lease, batch size, poll interval or send delay", ErrStressConfig)
	}
	if _, err := outboxSettingsSQL(c.OutboxSettings); err != nil {
		return c, err
	}
	seen := map[string]bool{}
	for _, p := range c.Phases {
		switch {
		case p.Name == "" || strings.ContainsAny(p.Name, "/ \t"):
			return c, fmt.Errorf("%w: phase name %q: a word without '/' or spaces", ErrStressConfig, p.Name)
		case seen[p.Name]:
			return c, fmt.Errorf("%w: phase %q twice", ErrStressConfig, p.Name)
		case p.For < 100*time.Millisecond:
			return c, fmt.Errorf("%w: phase %q lasts %s: at least 100ms", ErrStressConfig, p.Name, p.For)
		case p.Load <= 0 || p.Load > 100:
			return c, fmt.Errorf("%w: phase %q: load %g must be in (0, 100]", ErrStressConfig, p.Name, p.Load)
		case p.Crash && c.RelayCommand == nil:
			return c, fmt.Errorf("%w: phase %q crashes the relay process, and no RelayCommand starts one", ErrStressConfig, p.Name)
		}
		seen[p.Name] = true
	}
	return c, nil
}

// schedule credits business transactions on wall-clock time: ticket n
// (from 1) is due at the moment the phases' rates have offered n of them
// since start. Producers that fall behind take the overdue tickets at once,
// so a slow phase shows as enqueued < offered, never as a lower offer.
type schedule struct {
	start  time.Time
	phases []schedPhase
}

type schedPhase struct {
	start, end time.Time
	rate       float64 // tickets a second
	first      float64 // tickets offered before the phase
}

func newSchedule(start time.Time, base int, phases []StressPhase) *schedule {
	s := &schedule{start: start}
	at, offered := start, 0.0
	for _, p := range phases {
		sp := schedPhase{start: at, end: at.Add(p.For), rate: float64(base) * p.Load, first: offered}
		s.phases = append(s.phases, sp)
		offered += sp.rate * p.For.Seconds()
		at = sp.end
	}
	return s
}

// due returns when ticket n is due, or false once the phases are over.
func (s *schedule) due(n int64) (time.Time, bool) {
	for _, p := range s.phases {
		last := p.first + p.rate*p.end.Sub(p.start).Seconds()
		if float64(n) <= last {
			return p.start.Add(time.Duration((float64(n) - p.first) / p.rate * float64(time.Second))), true
		}
	}
	return time.Time{}, false
}

// offered is how many tickets phase i offered.
func (s *schedule) offered(i int) float64 {
	p := s.phases[i]
	return p.rate * p.end.Sub(p.start).Seconds()
}

// dbSample is what the backend reports of the outbox at one moment:
// gauges (dead tuples, sizes), whose maximum and last value per phase are
// kept, and counters, whose growth over a phase is.
type dbSample struct {
	at       time.Time
	gauges   map[string]float64
	counters map[string]float64
}

// stressDB is a backend's side of the scenario.
type stressDB struct {
	name string
	// tx runs business transaction seq: an order insert, a customer
	// update and one message, keyed stressKey(seq), committed together.
	tx func(ctx context.Context, seq int64) error
	// queuedTx is tx with the message sent in the business statements'
	// round trip; nil where the backend has no pipeline to queue it in.
	queuedTx func(ctx context.Context, seq int64) error
	// sample reads the outbox's gauges and counters.
	sample func(ctx context.Context) (dbSample, error)
	// committed calls each for every business transaction above after
	// that committed: the ground truth of the audit, read from the
	// business table.
	committed func(ctx context.Context, after int64, each func(seq int64)) error
	// waiting lists the sequence numbers of the stress type's rows still
	// in the outbox (undelivered, not lost).
	waiting func(ctx context.Context) ([]int64, error)
	// pin holds the xmin horizon until release is called; reader runs one
	// REPEATABLE READ session until ctx ends. Nil where the backend has
	// no such thing.
	pin    func(ctx context.Context) (release func() error, err error)
	reader func(ctx context.Context, tx, pause time.Duration, scans *atomic.Int64) error
	// derive adds metrics computed from a phase's counter growth.
	derive func(prefix string, secs float64, growth map[string]float64, r *Result)
}

// phaseBook is what one phase saw.
type phaseBook struct {
	enqueued   int64 // commits in the phase
	delivered  int64 // first deliveries in the phase
	redeliver  int64 // deliveries of an already delivered message
	maxDepth   int64 // committed and not yet delivered
	commitErrs int64
	pickup     Histogram // of the messages committed in the phase
	scans      atomic.Int64
	gaugeMax   map[string]float64
	gaugeEnd   map[string]float64
	first      *dbSample
	last       *dbSample
}

type commitRec struct {
	at    int64 // unix ns
	phase int
}

// stressBook joins the producers' commits and the relay's Sends.
type stressBook struct {
	mu        sync.Mutex
	phases    []*phaseBook
	cur       int
	pending   map[int64]commitRec // committed, not yet delivered
	early     map[int64]int64     // Sent before the commit was recorded
	counts    []uint8             // Sends per sequence number (saturating)
	committed int64
	delivered int64 // first deliveries
	progress  chan struct{}
	sent      chan struct{} // a Send was recorded
	firstErr  error

	// The crash: when the kill came, which messages the killed relay may
	// have held (undelivered, or delivered in the phase before the kill
	// and maybe unsettled), and the last delivery of one of them after it.
	killAt     int64
	crashPhase int
	crashSeen  []int64
	crashSet   map[int64]bool
	drainedAt  int64
	atKill     int // messages committed and undelivered at the kill
	// holding is set while the relay is held before its kill: the
	// messages Sent then (held) were delivered and never settled, so they
	// are delivered again after the kill; the run waits for that.
	holding bool
	held    []int64
}

func newStressBook(phases int) *stressBook {
	b := &stressBook{pending: map[int64]commitRec{}, early: map[int64]int64{}, progress: make(chan struct{}, 1), sent: make(chan struct{}, 1), crashPhase: -1}
	for range phases {
		b.phases = append(b.phases, &phaseBook{gaugeMax: map[string]float64{}, gaugeEnd: map[string]float64{}})
	}
	return b
}

func (b *stressBook) enter(i int, crash bool) {
	b.mu.Lock()
	b.cur = i
	if crash {
		b.crashPhase = i
	}
	b.mu.Unlock()
}

func (b *stressBook) commitFailed(err error) {
	b.mu.Lock()
	b.phases[b.cur].commitErrs++
	if b.firstErr == nil {
		b.firstErr = err
	}
	b.mu.Unlock()
}

func (b *stressBook) commit(seq int64, at time.Time) {
	ns := at.UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.phases[b.cur]
	p.enqueued++
	b.committed++
	if sent, ok := b.early[seq]; ok {
		delete(b.early, seq)
		p.pickup.Add(time.Duration(sent - ns))
	} else {
		b.pending[seq] = commitRec{at: ns, phase: b.cur}
	}
	p.maxDepth = max(p.maxDepth, b.committed-b.delivered)
}

func (b *stressBook) deliver(seq int64, at time.Time) {
	ns := at.UnixNano()
	b.mu.Lock()
	defer b.mu.Unlock()
	for int64(len(b.counts)) <= seq {
		b.counts = append(b.counts, make([]uint8, max(1024, len(b.counts)))...)
	}
	if b.killAt != 0 && ns > b.killAt && b.crashSet[seq] {
		b.drainedAt = max(b.drainedAt, ns)
	}
	if b.counts[seq] < 255 {
		b.counts[seq]++
	}
	select {
	case b.sent <- struct{}{}:
	default:
	}
	if b.holding {
		b.held = append(b.held, seq)
	}
	p := b.phases[b.cur]
	if b.counts[seq] > 1 {
		p.redeliver++
		b.signalProgress()
		return
	}
	p.delivered++
	b.delivered++
	if b.cur == b.crashPhase && b.killAt == 0 {
		b.crashSeen = append(b.crashSeen, seq)
	}
	if rec, ok := b.pending[seq]; ok {
		delete(b.pending, seq)
		b.phases[rec.phase].pickup.Add(time.Duration(ns - rec.at))
	} else {
		b.early[seq] = ns
	}
	b.signalProgress()
}

func (b *stressBook) signalProgress() {
	select {
	case b.progress <- struct{}{}:
	default:
	}
}

// hold marks the relay held: what it Sends from now on is not settled.
func (b *stressBook) hold() {
	b.mu.Lock()
	b.holding = true
	b.mu.Unlock()
}

// killed marks the moment the relay was killed.
func (b *stressBook) killed(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	b.killAt = at.UnixNano()
	b.crashSet = map[int64]bool{}
	for seq := range b.pending {
		b.crashSet[seq] = true
	}
	b.atKill = len(b.pending)
	for _, seq := range b.crashSeen {
		b.crashSet[seq] = true
	}
	b.crashSeen = nil
}

// behind is how many committed messages are not delivered yet, and how
// many the relay held at its kill are not delivered again yet.
func (b *stressBook) behind() (first, again int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, seq := range b.held {
		if b.counts[seq] < 2 {
			again++
		}
	}
	return b.committed - b.delivered, again
}

func (b *stressBook) record(i int, s dbSample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.phases[i]
	for k, v := range s.gauges {
		p.gaugeMax[k] = max(p.gaugeMax[k], v)
		p.gaugeEnd[k] = v
	}
	if p.first == nil {
		p.first = &s
	}
	p.last = &s
}

// stressRun is one run of the scenario on one backend.
type stressRun struct {
	cfg   StressConfig
	db    stressDB
	relay relayRunner
	book  *stressBook
	// base is added to every ticket: the run's business transactions are
	// base+1, base+2, ... (a table that earlier runs wrote to).
	base int64
	// relayUp is whether the relay runs, to be stopped at the end.
	relayUp bool
}

// run drives the phases and returns the result, metrics prefixed by
// prefix.
func (s *stressRun) run(ctx context.Context, prefix string) (Result, error) {
	r := Result{Scenario: "stress"}
	cfg := s.cfg
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := s.relay.start(ctx); err != nil {
		return r, err
	}
	s.relayUp = true
	defer func() {
		if s.relayUp {
			_ = s.relay.stop()
		}
	}()

	sched := newSchedule(time.Now().Add(200*time.Millisecond), cfg.Rate, cfg.Phases)
	producers := s.startProducers(ctx, sched)
	var phaseIdx atomic.Int64
	sampled := s.sampleEvery(ctx, &phaseIdx)

	var errs []error
	for i := range cfg.Phases {
		sp := sched.phases[i]
		sleep(ctx, time.Until(sp.start))
		if ctx.Err() != nil {
			break
		}
		if i > 0 {
			s.sampleNow(ctx, i-1)
		}
		s.book.enter(i, cfg.Phases[i].Crash)
		phaseIdx.Store(int64(i))
		s.sampleNow(ctx, i)
		phaseErrs, err := s.runPhase(ctx, i, sp.end, prefix, &r)
		if err != nil {
			return r, err
		}
		errs = append(errs, phaseErrs...)
	}
	producers.Wait()
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	s.sampleNow(ctx, len(cfg.Phases)-1)

	// Let the relay deliver what is left, then stop it and audit.
	undelivered, err := s.awaitDelivered(ctx)
	if err != nil {
		return r, err
	}
	if undelivered != nil {
		errs = append(errs, undelivered)
	}
	s.relayUp = false
	if err := s.relay.stop(); err != nil {
		errs = append(errs, err)
	}
	cancel()
	<-sampled

	if err := s.audit(context.WithoutCancel(ctx), prefix, &r); err != nil {
		errs = append(errs, err)
	}
	s.report(prefix, sched, &r)
	return r, errors.Join(errs...)
}

// startProducers starts the business transactions, each at its due time
// on sched, until the schedule ends or ctx does.
func (s *stressRun) startProducers(ctx context.Context, sched *schedule) *sync.WaitGroup {
	var next atomic.Int64
	producers := &sync.WaitGroup{}
	for range s.cfg.Producers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for ctx.Err() == nil {
				n := next.Add(1)
				due, ok := sched.due(n)
				if !ok {
					return
				}
				if w := time.Until(due); w > 0 {
					sleep(ctx, w)
				}
				if err := s.db.tx(ctx, s.base+n); err != nil {
					if ctx.Err() != nil {
						return
					}
					s.book.commitFailed(err)
					continue
				}
				s.book.commit(s.base+n, time.Now())
			}
		}()
	}
	return producers
}

// sampleNow records a sample of the database in phase i's book.
func (s *stressRun) sampleNow(ctx context.Context, i int) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if smp, err := s.db.sample(sctx); err == nil {
		smp.at = time.Now()
		s.book.record(i, smp)
	}
}

// sampleEvery samples the database every cfg.Sample into the phase that
// phaseIdx holds, until ctx ends; the channel closes then.
func (s *stressRun) sampleEvery(ctx context.Context, phaseIdx *atomic.Int64) <-chan struct{} {
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(s.cfg.Sample)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.sampleNow(ctx, int(phaseIdx.Load()))
			}
		}
	}()
	return sampled
}

// phaseErrors collects what went wrong in a phase, from its readers too.
type phaseErrors struct {
	mu   sync.Mutex
	list []error
}

func (p *phaseErrors) add(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, err)
}

// runPhase runs phase i until end with what it brings: a pinned horizon,
// readers, a relay crash. It returns what went wrong along the way, or an
// error that ends the run.
func (s *stressRun) runPhase(ctx context.Context, i int, end time.Time, prefix string, r *Result) ([]error, error) {
	ph := s.cfg.Phases[i]
	phaseCtx, endPhase := context.WithDeadline(ctx, end)
	defer endPhase()
	var errs phaseErrors
	var release func() error
	if ph.Pin {
		if s.db.pin == nil {
			return nil, fmt.Errorf("%w: phase %q pins the horizon, which %s has not", ErrStressConfig, ph.Name, s.db.name)
		}
		rel, err := s.db.pin(ctx)
		if err != nil {
			errs.add(fmt.Errorf("phase %s: pin the horizon: %w", ph.Name, err))
		}
		release = rel
	}
	var side sync.WaitGroup
	if ph.Readers {
		if s.db.reader == nil {
			return nil, fmt.Errorf("%w: phase %q runs readers, which %s has not", ErrStressConfig, ph.Name, s.db.name)
		}
		s.startReaders(phaseCtx, i, &side, &errs)
	}
	if ph.Crash {
		if err := s.crashRelay(ctx, phaseCtx, ph, prefix, r, &errs); err != nil {
			return nil, err
		}
	}
	<-phaseCtx.Done()
	endPhase()
	side.Wait()
	if release != nil {
		if err := release(); err != nil {
			errs.add(fmt.Errorf("phase %s: release the horizon: %w", ph.Name, err))
		}
	}
	return errs.list, nil
}

// startReaders starts phase i's reader sessions, until phaseCtx ends.
func (s *stressRun) startReaders(phaseCtx context.Context, i int, side *sync.WaitGroup, errs *phaseErrors) {
	cfg := s.cfg
	ph := cfg.Phases[i]
	for k := range cfg.ReaderSessions {
		side.Add(1)
		go func() {
			defer side.Done()
			// Staggered, so that some snapshot is always open.
			sleep(phaseCtx, time.Duration(k)*cfg.ReaderTx/time.Duration(cfg.ReaderSessions))
			if err := s.db.reader(phaseCtx, cfg.ReaderTx, cfg.ReaderPause, &s.book.phases[i].scans); err != nil && phaseCtx.Err() == nil {
				errs.add(fmt.Errorf("phase %s: reader: %w", ph.Name, err))
			}
		}()
	}
}

// crashRelay kills the relay a quarter into the phase (or CrashAfter)
// and starts it again, recording how long the restart took. An error is
// one that ends the run: the relay did not start again.
func (s *stressRun) crashRelay(ctx, phaseCtx context.Context, ph StressPhase, prefix string, r *Result, errs *phaseErrors) error {
	after := ph.For / 4
	if ph.CrashAfter > 0 {
		after = ph.CrashAfter
	}
	sleep(phaseCtx, after)
	// Mid-batch: at a Send that the held relay never answers, so its
	// settle cannot commit however late the kill comes.
	if err := s.relay.hold(phaseCtx); err != nil {
		if phaseCtx.Err() != nil {
			return nil
		}
		return fmt.Errorf("phase %s: %w", ph.Name, err)
	}
	s.book.hold()
	select {
	case <-s.book.sent: // a Send recorded before the hold
	default:
	}
	// Killed even when the phase ends first: a held relay delivers
	// nothing more.
	select {
	case <-s.book.sent:
	case <-phaseCtx.Done():
	}
	at := time.Now()
	if err := s.relay.kill(); err != nil {
		errs.add(fmt.Errorf("phase %s: kill the relay: %w", ph.Name, err))
	}
	s.book.killed(at)
	s.relayUp = false
	if err := s.relay.start(ctx); err != nil {
		return fmt.Errorf("phase %s: restart the relay: %w", ph.Name, err)
	}
	s.relayUp = true
	r.Set(prefix+ph.Name+"/restart-s", time.Since(at).Seconds())
	return nil
}

// awaitDelivered waits until the relay has delivered every committed
// message, and again every message the crash's killed relay held, leaving
// their leases time to run out. undelivered says what was left when that
// time was up; err is ctx's end.
func (s *stressRun) awaitDelivered(ctx context.Context) (undelivered, err error) {
	drainFor := relayLease(s.cfg.Lease) + 30*time.Second
	drainBy := time.NewTimer(drainFor)
	defer drainBy.Stop()
	for {
		first, again := s.book.behind()
		if first == 0 && again == 0 {
			return nil, nil
		}
		select {
		case <-s.book.progress:
		case <-drainBy.C:
			return fmt.Errorf("%d messages still undelivered, and %d the killed relay held not delivered again, %s after the last phase", first, again, drainFor), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// relayLease is the lease the relay runs with.
func relayLease(l time.Duration) time.Duration {
	if l == 0 {
		return 30 * time.Second // mensageria.DefaultLease
	}
	return l
}

// audit compares what committed (the business table) with what the relay
// Sent: lost (committed, never Sent and not waiting in the outbox),
// duplicates (Sent more than once: redeliveries the inbox absorbs) and
// phantoms (Sent, never committed).
func (s *stressRun) audit(ctx context.Context, prefix string, r *Result) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	b := s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	committed := make([]bool, len(b.counts))
	var missing []int64
	var n int64
	err := s.db.committed(ctx, s.base, func(seq int64) {
		n++
		if seq < int64(len(committed)) {
			committed[seq] = true
			if b.counts[seq] > 0 {
				return
			}
		}
		missing = append(missing, seq)
	})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	var dups, phantoms int64
	for seq, c := range b.counts {
		if c > 1 {
			dups += int64(c) - 1
		}
		if c > 0 && !committed[seq] {
			phantoms++
		}
	}
	waiting := 0
	if len(missing) > 0 {
		w, err := s.db.waiting(ctx)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		in := map[int64]bool{}
		for _, seq := range w {
			in[seq] = true
		}
		for _, seq := range missing {
			if in[seq] {
				waiting++
			}
		}
	}
	r.Set(prefix+"committed", float64(n))
	r.Set(prefix+"lost", float64(len(missing)-waiting))
	r.Set(prefix+"undelivered", float64(waiting))
	r.Set(prefix+"duplicates", float64(dups))
	r.Set(prefix+"phantoms", float64(phantoms))
	if b.killAt != 0 {
		// Under the crash phase's name, beside its other figures.
		pre := prefix + s.cfg.Phases[b.crashPhase].Name + "/"
		r.Set(pre+"held-at-kill", float64(b.atKill))
		drain := 0.0
		if b.drainedAt > b.killAt {
			drain = float64(b.drainedAt-b.killAt) / 1e9
		}
		r.Set(pre+"drain-s", drain)
		r.Set(pre+"lease-s", relayLease(s.cfg.Lease).Seconds())
	}
	if len(missing)-waiting > 0 {
		sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
		return fmt.Errorf("audit: %d committed messages were never delivered (first: %v)", len(missing)-waiting, missing[:min(len(missing), 5)])
	}
	return nil
}

// report turns the book into metrics: per phase, the offered, enqueued and
// delivered rates, pickup percentiles, the deepest backlog and the
// database's gauges and counters.
func (s *stressRun) report(prefix string, sched *schedule, r *Result) {
	b := s.book
	b.mu.Lock()
	defer b.mu.Unlock()
	warmP99 := 0.0
	for i, ph := range s.cfg.Phases {
		p := b.phases[i]
		pre := prefix + ph.Name + "/"
		secs := ph.For.Seconds()
		r.Set(pre+"offered/s", sched.offered(i)/secs)
		r.Set(pre+"enqueued/s", float64(p.enqueued)/secs)
		r.Set(pre+"delivered/s", float64(p.delivered)/secs)
		r.Set(pre+"p50-ms", p.pickup.PercentileMs(50))
		r.Set(pre+"p95-ms", p.pickup.PercentileMs(95))
		r.Set(pre+"p99-ms", p.pickup.PercentileMs(99))
		r.Set(pre+"max-ms", float64(p.pickup.Max())/float64(time.Millisecond))
		r.Set(pre+"max-depth", float64(p.maxDepth))
		if p.commitErrs > 0 {
			r.Set(pre+"commit-errors", float64(p.commitErrs))
		}
		if p.redeliver > 0 {
			r.Set(pre+"redelivered", float64(p.redeliver))
		}
		if n := p.scans.Load(); n > 0 {
			r.Set(pre+"reader-scans", float64(n))
		}
		for k, v := range p.gaugeMax {
			r.Set(pre+k+"-max", v)
		}
		for k, v := range p.gaugeEnd {
			r.Set(pre+k+"-end", v)
		}
		if p.first != nil && p.last != nil && s.db.derive != nil {
			growth := map[string]float64{}
			for k, v := range p.last.counters {
				growth[k] = v - p.first.counters[k]
			}
			s.db.derive(pre, p.last.at.Sub(p.first.at).Seconds(), growth, r)
		}
		if i == 0 {
			warmP99 = p.pickup.PercentileMs(99)
		} else if warmP99 > 0 {
			r.Set(pre+"p99-vs-warmup", p.pickup.PercentileMs(99)/warmP99)
		}
	}
	r.Set(prefix+"rate", float64(s.cfg.Rate))
	r.Set(prefix+"producers", float64(s.cfg.Producers))
	r.Notes = strings.TrimSpace(r.Notes + "\n" + stressTable(prefix, s.cfg.Phases, *r))
	if b.firstErr != nil {
		r.Notes = strings.TrimSpace(r.Notes + " first commit error: " + b.firstErr.Error())
	}
}

// stressTable lays a run's main figures out one phase a line.
func stressTable(prefix string, phases []StressPhase, r Result) string {
	cols := []struct{ head, metric, format string }{
		{"offered/s", "offered/s", "%9.0f"}, {"enqueued/s", "enqueued/s", "%10.0f"}, {"delivered/s", "delivered/s", "%11.0f"},
		{"p50ms", "p50-ms", "%7.2f"}, {"p95ms", "p95-ms", "%7.2f"}, {"p99ms", "p99-ms", "%7.2f"}, {"maxms", "max-ms", "%8.1f"},
		{"depth", "max-depth", "%6.0f"}, {"dead-max", "dead-tuples-max", "%9.0f"}, {"outbox-mb", "outbox-mb-max", "%9.1f"},
		{"idx-mb", "indexes-mb-max", "%7.1f"}, {"walk", "claim-walk", "%8.1f"}, {"blocks", "claim-blocks", "%7.1f"}, {"claims/s", "claims/s", "%8.0f"}, {"autovac", "autovacuums", "%7.0f"},
		{"db-mb", "db-mb-max", "%6.1f"}, {"wal-mb", "wal-mb-max", "%6.1f"},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-15s", prefix+"phase")
	var used []int
	for i, c := range cols {
		for _, p := range phases {
			if _, ok := r.Metrics[prefix+p.Name+"/"+c.metric]; ok {
				used = append(used, i)
				fmt.Fprintf(&b, " %*s", len(fmt.Sprintf(c.format, 0.0)), c.head)
				break
			}
		}
	}
	for _, p := range phases {
		fmt.Fprintf(&b, "\n%-15s", p.Name)
		for _, i := range used {
			c := cols[i]
			if v, ok := r.Metrics[prefix+p.Name+"/"+c.metric]; ok {
				fmt.Fprintf(&b, " "+c.format, v)
			} else {
				fmt.Fprintf(&b, " %*s", len(fmt.Sprintf(c.format, 0.0)), "-")
			}
		}
	}
	return b.String()
}

var storageParam = regexp.MustCompile(`^[a-z_]{1,63}=[a-z0-9_.]{1,32}$`)

// CheckOutboxSettings reports the first setting StressConfig.OutboxSettings
// would refuse.
func CheckOutboxSettings(settings []string) error {
	_, err := outboxSettingsSQL(settings)
	return err
}

// outboxSettingsSQL is the SET list of an ALTER TABLE for settings
// ("name=value" each), or "" for none.
func outboxSettingsSQL(settings []string) (string, error) {
	var parts []string
	for _, kv := range settings {
		kv = strings.TrimSpace(kv)
		if !storageParam.MatchString(kv) {
			return "", fmt.Errorf("%w: outbox setting %q: want name=value (lower-case name, a number or a word)", ErrStressConfig, kv)
		}
		parts = append(parts, kv)
	}
	return strings.Join(parts, ", "), nil
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
