package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The peer comparison: the same scenarios run for mensageria and for a peer
// system (River, river.go) one after the other in one process on one
// server, with one harness for both: the same business transaction, the
// same producers, the same clock. Pickup latency runs from the producer's
// commit returning to the handler's start (mensageria's Sender, River's
// Work), both in this process, on the monotonic clock.

// PeerScenarios are the scenarios PeerCompare runs for every system, in
// run order.
var PeerScenarios = []string{"steady", "tax", "drain"}

// The peers PeerCompare knows: River at its defaults, and River with the
// fetch tuning its documentation gives for latency (riverTuned).
const (
	PeerRiver      = "river"
	PeerRiverTuned = "river-tuned"
)

// Peers are the peer names PeerConfig.Peers accepts.
var Peers = []string{PeerRiver, PeerRiverTuned}

// ErrPeerConfig is the error class of a PeerConfig PeerCompare refuses.
var ErrPeerConfig = errors.New("bench: peer config")

// PeerConfig sizes PeerCompare.
type PeerConfig struct {
	// Scenarios of PeerScenarios to run. Default all of them.
	Scenarios []string
	// Peers run beside mensageria. Default both of Peers.
	Peers []string
	// Producers commit the business transactions of steady and tax.
	// Default 8.
	Producers int
	// SteadyFor is how long steady's producers run. Default 20s.
	SteadyFor time.Duration
	// TaxRun is every tax mode's run per round, over TaxRounds rounds
	// (Alternate). Defaults 10s and 3.
	TaxRun    time.Duration
	TaxRounds int
	// Messages is drain's backlog. Default 100,000.
	Messages int
}

func (c *PeerConfig) withDefaults() error {
	if c.Scenarios == nil {
		c.Scenarios = PeerScenarios
	}
	if c.Peers == nil {
		c.Peers = Peers
	}
	orDefault(&c.Producers, 8)
	orDefault(&c.TaxRounds, 3)
	orDefault(&c.Messages, 100000)
	if c.SteadyFor <= 0 {
		c.SteadyFor = 20 * time.Second
	}
	if c.TaxRun <= 0 {
		c.TaxRun = 10 * time.Second
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(PeerScenarios, s) {
			return fmt.Errorf("%w: scenario %q: use %s", ErrPeerConfig, s, strings.Join(PeerScenarios, ", "))
		}
	}
	if len(c.Peers) == 0 {
		return fmt.Errorf("%w: no peer", ErrPeerConfig)
	}
	for _, p := range c.Peers {
		if !slices.Contains(Peers, p) {
			return fmt.Errorf("%w: peer %q: use %s", ErrPeerConfig, p, strings.Join(Peers, ", "))
		}
	}
	return nil
}

// peerSystem is one system's side of the comparison.
type peerSystem interface {
	name() string
	// start runs the system's consumer, which calls deliver with a
	// message's sequence number at its no-op handler's start.
	start(ctx context.Context, deliver func(seq int64)) error
	stop() error
	// enqueueTx writes message seq in tx, through the running consumer's
	// client (the application's one client, producing and consuming).
	enqueueTx(ctx context.Context, tx pgx.Tx, seq int64) error
	// fill writes a backlog of messages 1..n with the system's bulk
	// insert, no consumer running.
	fill(ctx context.Context, n int) error
	// table is the system's queue table, schema-qualified.
	table() string
	// pending reports whether rows of the benchmark remain unsettled.
	pending(ctx context.Context) (bool, error)
}

// PeerCompare runs cfg.Scenarios for mensageria and for each of cfg.Peers,
// on e's server, and returns one result: every system's figures
// (<scenario>/<system>/<figure>) and mensageria's ratio to each peer
// (<scenario>/mensageria÷<peer>/<figure>), with the table of them in the
// notes.
func PeerCompare(ctx context.Context, e Env, cfg PeerConfig) (Result, error) {
	r := Result{Scenario: "peer"}
	if err := cfg.withDefaults(); err != nil {
		return r, err
	}
	// The library's pool default (4 connections on 2 cores) would queue
	// the producers behind one another: room for all of them and for
	// both systems' own connections (River's listener keeps one).
	pcfg := e.Pool.Config()
	pcfg.MaxConns = int32(cfg.Producers + 10)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	pe := Env{Pool: pool, Schema: e.Schema}
	if err := pe.business(ctx); err != nil {
		return r, err
	}
	systems := []peerSystem{}
	m, err := newMensageriaPeer(ctx, pe)
	if err != nil {
		return r, err
	}
	systems = append(systems, m)
	for _, p := range cfg.Peers {
		side, drop, err := pe.sideSchema(ctx, peerSchema(e.Schema, p))
		if err != nil {
			return r, err
		}
		defer drop()
		rp, err := newRiverPeer(ctx, side, p == PeerRiverTuned)
		if err != nil {
			return r, err
		}
		systems = append(systems, rp)
	}
	notes, err := pe.serverNotes(ctx)
	if err != nil {
		return r, err
	}
	h := &peerHarness{env: pe, cfg: cfg}
	for _, s := range PeerScenarios {
		if !slices.Contains(cfg.Scenarios, s) {
			continue
		}
		var res map[string]map[string]float64
		switch s {
		case "steady":
			res, err = h.eachSystem(systems, h.steady)
		case "tax":
			res, err = h.tax(ctx, systems)
		case "drain":
			res, err = h.eachSystem(systems, h.drain)
		}
		if err != nil {
			return r, fmt.Errorf("%s: %w", s, err)
		}
		for sys, figs := range res {
			for k, v := range figs {
				r.Set(s+"/"+sys+"/"+k, v)
			}
		}
	}
	setPeerRatios(&r, peerFigures, cfg.Peers)
	r.Notes = strings.TrimSpace(PeerTable(r) + "\n" + notes + "\n" + cfg.sizes())
	return r, nil
}

// sizes says how long and how large the scenarios that ran were.
func (c PeerConfig) sizes() string {
	var parts []string
	for _, s := range c.Scenarios {
		switch s {
		case "steady":
			parts = append(parts, fmt.Sprintf("steady %s of %d producers", c.SteadyFor, c.Producers))
		case "tax":
			parts = append(parts, fmt.Sprintf("tax %d rounds of %s, %d producers", c.TaxRounds, c.TaxRun, c.Producers))
		case "drain":
			parts = append(parts, fmt.Sprintf("drain of %d messages", c.Messages))
		}
	}
	return strings.Join(parts, "; ") + fmt.Sprintf("; %d CPUs", runtime.NumCPU())
}

// peerSchema names peer's schema next to the bench's: River refuses a
// schema name longer than 46 characters (its notification topics must fit
// PostgreSQL's 63 behind it).
func peerSchema(schema, peer string) string {
	name := schema + "_" + strings.ReplaceAll(peer, "-", "_")
	if len(name) > 46 {
		name = fmt.Sprintf("peer_%08x_%s", rand.Uint32(), strings.ReplaceAll(peer, "-", "_"))
	}
	return name
}

// peerFigures are the figures the table shows per scenario, in order, and
// whether higher is better.
var peerFigures = []peerFigure{
	{"steady", "enqueue/s", true},
	{"steady", "delivered/s", true},
	{"steady", "pickup-p50-ms", false},
	{"steady", "pickup-p99-ms", false},
	{"steady", "rss-mb", false},
	{"steady", "table-mb", false},
	{"tax", "tx/s", true},
	{"tax", "tax-ratio", true},
	{"tax", "pickup-p50-ms", false},
	{"tax", "pickup-p99-ms", false},
	{"drain", "msgs/s", true},
	{"drain", "alloc-kb/msg", false},
	{"drain", "rss-mb", false},
	{"drain", "table-mb", false},
}

// peerFigure is one line of a peer table: a figure of a scenario (or of
// a stress phase), and whether higher is better.
type peerFigure struct {
	scenario, figure string
	higher           bool
}

// setPeerRatios sets mensageria's ratio to each peer for every figure
// both have.
func setPeerRatios(r *Result, figures []peerFigure, peers []string) {
	for _, f := range figures {
		m, ok := r.Metrics[f.scenario+"/mensageria/"+f.figure]
		if !ok {
			continue
		}
		for _, p := range peers {
			if v, ok := r.Metrics[f.scenario+"/"+p+"/"+f.figure]; ok && v != 0 {
				r.Set(f.scenario+"/mensageria÷"+p+"/"+f.figure, m/v)
			}
		}
	}
}

// PeerTable lays out a PeerCompare result: one line per figure, every
// system's value and mensageria's ratio to each peer.
func PeerTable(r Result) string { return peerTable(r, peerFigures) }

func peerTable(r Result, figures []peerFigure) string {
	var peers []string
	for _, p := range Peers {
		for k := range r.Metrics {
			if strings.Contains(k, "/"+p+"/") {
				peers = append(peers, p)
				break
			}
		}
	}
	var b strings.Builder
	width := len("figure")
	for _, f := range figures {
		width = max(width, len(f.scenario)+1+len(f.figure))
	}
	fmt.Fprintf(&b, "%-*s %6s %12s", width, "figure", "better", "mensageria")
	for _, p := range peers {
		fmt.Fprintf(&b, " %12s", p)
	}
	for _, p := range peers {
		fmt.Fprintf(&b, " %14s", "m÷"+p)
	}
	for _, f := range figures {
		m, ok := r.Metrics[f.scenario+"/mensageria/"+f.figure]
		if !ok {
			continue
		}
		better := "lower"
		if f.higher {
			better = "higher"
		}
		fmt.Fprintf(&b, "\n%-*s %6s %12s", width, f.scenario+" "+f.figure, better, peerNum(m))
		for _, p := range peers {
			if v, ok := r.Metrics[f.scenario+"/"+p+"/"+f.figure]; ok {
				fmt.Fprintf(&b, " %12s", peerNum(v))
			} else {
				fmt.Fprintf(&b, " %12s", "-")
			}
		}
		for _, p := range peers {
			if v, ok := r.Metrics[f.scenario+"/mensageria÷"+p+"/"+f.figure]; ok {
				fmt.Fprintf(&b, " %14.2f", v)
			} else {
				fmt.Fprintf(&b, " %14s", "-")
			}
		}
	}
	return b.String()
}

func peerNum(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// peerHarness runs the scenarios' common parts.
type peerHarness struct {
	env Env
	cfg PeerConfig
	seq atomic.Int64
}

// eachSystem runs scenario for every system, one after the other.
func (h *peerHarness) eachSystem(systems []peerSystem, scenario func(peerSystem) (map[string]float64, error)) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	for _, s := range systems {
		figs, err := scenario(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name(), err)
		}
		out[s.name()] = figs
	}
	return out, nil
}

// tx commits one business transaction, with message seq of s unless s is
// nil.
func (h *peerHarness) tx(ctx context.Context, s peerSystem, seq int64) error {
	return pgx.BeginFunc(ctx, h.env.Pool, func(tx pgx.Tx) error {
		if err := h.env.businessWrite(ctx, tx, int(seq%1000)); err != nil {
			return err
		}
		if s == nil {
			return nil
		}
		return s.enqueueTx(ctx, tx, seq)
	})
}

// produce has cfg.Producers commit business transactions (with a message
// of s, unless nil) back to back for dur, each commit noted in book when
// there is one, and returns how many committed and how long they ran.
func (h *peerHarness) produce(ctx context.Context, s peerSystem, book *pickupBook, dur time.Duration) (int64, time.Duration, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	began := time.Now()
	deadline := began.Add(dur)
	for range h.cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				seq := h.seq.Add(1)
				if err := h.tx(ctx, s, seq); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if book != nil {
					book.commit(seq, time.Now())
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	window := time.Since(began)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, 0, err
	}
	return n.Load(), window, ctx.Err()
}

// startWarm starts s's consumer and has it handle one message before
// anything is timed: the figures are of a running consumer, not of its
// start (leader election, first fetch), which each system does its own way.
func (h *peerHarness) startWarm(ctx context.Context, s peerSystem, book *pickupBook) error {
	if err := s.start(ctx, book.deliver); err != nil {
		return err
	}
	seq := h.seq.Add(1)
	err := h.tx(ctx, s, seq)
	if err == nil {
		book.commit(seq, time.Now())
		err = book.await(ctx, 1, time.Minute)
	}
	if err != nil {
		_ = s.stop()
		return fmt.Errorf("warm-up: %w", err)
	}
	book.reset()
	return nil
}

// steady: cfg.Producers commit single-message business transactions back
// to back for cfg.SteadyFor while the system's consumer works them.
func (h *peerHarness) steady(s peerSystem) (map[string]float64, error) {
	ctx := context.Background()
	figs := map[string]float64{}
	mem := startMemWatch()
	book := newPickupBook()
	if err := h.startWarm(ctx, s, book); err != nil {
		return nil, err
	}
	n, window, err := h.produce(ctx, s, book, h.cfg.SteadyFor)
	inWindow := book.deliveredCount()
	if err == nil {
		err = book.await(ctx, n, time.Minute)
	}
	if stopErr := s.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return nil, err
	}
	figs["enqueue/s"] = float64(n) / window.Seconds()
	figs["delivered/s"] = float64(inWindow) / window.Seconds()
	figs["keepup-ratio"] = float64(inWindow) / float64(max(n, 1))
	book.setPickups(figs)
	mem.set(figs, 0)
	return figs, h.tableMB(ctx, s, figs)
}

// tax: the business transaction alone and with one message of each
// system, its consumer working them in this process, the modes
// alternating over cfg.TaxRounds; tax-ratio is a system's transactions a
// second over the business transaction's alone.
func (h *peerHarness) tax(ctx context.Context, systems []peerSystem) (map[string]map[string]float64, error) {
	modes := []string{"business"}
	bySystem := map[string]peerSystem{}
	for _, s := range systems {
		modes = append(modes, s.name())
		bySystem[s.name()] = s
	}
	res, err := Alternate(h.cfg.TaxRounds, modes, func(mode string) (Result, error) {
		out := Result{Scenario: mode}
		s := bySystem[mode]
		if s == nil {
			n, window, err := h.produce(ctx, nil, nil, h.cfg.TaxRun)
			out.Set("tx/s", float64(n)/window.Seconds())
			return out, err
		}
		book := newPickupBook()
		if err := h.startWarm(ctx, s, book); err != nil {
			return out, err
		}
		n, window, err := h.produce(ctx, s, book, h.cfg.TaxRun)
		// Worked off before the next mode, so that none pays for this
		// one's backlog.
		if err == nil {
			err = book.await(ctx, n, time.Minute)
		}
		if stopErr := s.stop(); err == nil {
			err = stopErr
		}
		out.Set("tx/s", float64(n)/window.Seconds())
		book.setPickups(out.Metrics)
		return out, err
	})
	if err != nil {
		return nil, err
	}
	for _, s := range systems {
		res[s.name()]["tax-ratio"] = res[s.name()]["tx/s"] / res["business"]["tx/s"]
		res[s.name()]["business-tx/s"] = res["business"]["tx/s"]
	}
	delete(res, "business")
	return res, nil
}

// drain: a backlog of cfg.Messages written with the system's bulk insert,
// the table vacuumed and a checkpoint taken, then worked from the
// consumer's start until every message was handled and every row settled.
func (h *peerHarness) drain(s peerSystem) (map[string]float64, error) {
	ctx := context.Background()
	n := h.cfg.Messages
	if err := s.fill(ctx, n); err != nil {
		return nil, err
	}
	if err := h.env.exec(ctx, "VACUUM ANALYZE "+s.table()); err != nil {
		return nil, err
	}
	if err := h.env.exec(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	mem := startMemWatch()
	var handled atomic.Int64
	done := make(chan struct{})
	began := time.Now()
	if err := s.start(ctx, func(int64) {
		if handled.Add(1) == int64(n) {
			close(done)
		}
	}); err != nil {
		return nil, err
	}
	err := func() error {
		select {
		case <-done:
		case <-time.After(10 * time.Minute):
			return fmt.Errorf("%d of %d handled after 10 minutes", handled.Load(), n)
		}
		for {
			busy, err := s.pending(ctx)
			if err != nil || !busy {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	elapsed := time.Since(began)
	if stopErr := s.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return nil, err
	}
	figs := map[string]float64{"msgs": float64(n), "msgs/s": float64(n) / elapsed.Seconds()}
	if extra := handled.Load() - int64(n); extra > 0 {
		figs["redelivered"] = float64(extra)
	}
	mem.set(figs, n)
	return figs, h.tableMB(ctx, s, figs)
}

// tableMB records the size of s's table with its indexes and TOAST.
func (h *peerHarness) tableMB(ctx context.Context, s peerSystem, figs map[string]float64) error {
	var bytes int64
	if err := h.env.Pool.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", s.table()).Scan(&bytes); err != nil {
		return err
	}
	figs["table-mb"] = float64(bytes) / (1 << 20)
	return nil
}

// pickupBook joins commits and handler starts by sequence number, on the
// monotonic clock.
type pickupBook struct {
	mu        sync.Mutex
	committed map[int64]time.Time
	early     map[int64]time.Time // handled before its commit was noted
	seen      map[int64]bool
	lat       *Histogram
	delivered int64 // first deliveries
	again     int64 // deliveries of a message seen before
	progress  chan struct{}
}

func newPickupBook() *pickupBook {
	return &pickupBook{lat: &Histogram{}, committed: map[int64]time.Time{}, early: map[int64]time.Time{}, seen: map[int64]bool{}, progress: make(chan struct{}, 1)}
}

func (b *pickupBook) commit(seq int64, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if got, ok := b.early[seq]; ok {
		delete(b.early, seq)
		// Handled before the producer's goroutine ran again: below what
		// the clock can tell apart from the commit.
		b.lat.Add(max(got.Sub(at), 0))
		return
	}
	b.committed[seq] = at
}

func (b *pickupBook) deliver(seq int64) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[seq] {
		b.again++
		return
	}
	b.seen[seq] = true
	b.delivered++
	if at, ok := b.committed[seq]; ok {
		delete(b.committed, seq)
		b.lat.Add(now.Sub(at))
	} else {
		b.early[seq] = now
	}
	select {
	case b.progress <- struct{}{}:
	default:
	}
}

// reset forgets the latencies and counts so far (not which messages were
// seen: one handled again later still counts as a redelivery).
func (b *pickupBook) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lat = &Histogram{}
	b.delivered, b.again = 0, 0
}

func (b *pickupBook) deliveredCount() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delivered
}

// await waits until n messages were handled, or for at most within
// without progress.
func (b *pickupBook) await(ctx context.Context, n int64, within time.Duration) error {
	for {
		got := b.deliveredCount()
		if got >= n {
			return nil
		}
		select {
		case <-b.progress:
		case <-time.After(within):
			return fmt.Errorf("%d of %d messages handled, none more in %s", got, n, within)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *pickupBook) setPickups(figs map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	figs["pickup-p50-ms"] = b.lat.PercentileMs(50)
	figs["pickup-p99-ms"] = b.lat.PercentileMs(99)
	figs["pickup-max-ms"] = float64(b.lat.Max()) / float64(time.Millisecond)
	if b.again > 0 {
		figs["redelivered"] = float64(b.again)
	}
}

// memWatch samples the process's resident set while a system runs, after
// handing the heap the previous one left back to the OS, and counts what
// the run allocated. Both systems run in one process: the figures are the
// process's (harness included), comparable between systems, not each
// system's footprint alone.
type memWatch struct {
	alloc0 uint64
	peak   atomic.Int64
	stop   chan struct{}
	done   chan struct{}
}

func startMemWatch() *memWatch {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w := &memWatch{alloc0: ms.TotalAlloc, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			w.peak.Store(max(w.peak.Load(), rssBytes()))
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// set stops the watch and records the peak RSS (rss-mb) and, for n > 0,
// the bytes allocated per message (alloc-kb/msg).
func (w *memWatch) set(figs map[string]float64, n int) {
	close(w.stop)
	<-w.done
	if peak := w.peak.Load(); peak > 0 {
		figs["rss-mb"] = float64(peak) / (1 << 20)
	}
	if n > 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		figs["alloc-kb/msg"] = float64(ms.TotalAlloc-w.alloc0) / 1024 / float64(n)
	}
}

// rssBytes is the process's resident set from /proc (0 where there is
// none).
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
