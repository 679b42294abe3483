package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver/postgres"
)

// OutboxTaxConfig sizes the OutboxTax scenario.
type OutboxTaxConfig struct {
	// Producers run the business transaction as fast as they can. Default 8.
	Producers int
	// Run is how long each mode runs per round. Default 10s.
	Run time.Duration
	// Rounds of every mode, rotating which goes first. Default 3.
	Rounds int
	// PacedFor is the length of the paced run at PacedShare of the outbox
	// mode's saturated rate. Defaults 30s and 0.8.
	PacedFor   time.Duration
	PacedShare float64
}

// The modes of OutboxTax.
var outboxTaxModes = []string{"business", "outbox", "outbox-queued", "outbox-unchecked", "enqueue-only", "outbox-no-key-index", "outbox-no-id-index"}

// taxIndexModes are the modes that run outbox without one of the indexes
// an enqueue writes besides the primary key and the claim's: what each
// costs the business rate. Each is dropped for its round only.
var taxIndexModes = map[string]string{
	// Per-key order's "an older unsettled row of this key?" (ordered
	// routes only).
	"outbox-no-key-index": "outbox_key_idx",
	// message_id's uniqueness: an explicit id enqueued twice is refused.
	"outbox-no-id-index": "outbox_message_id_key",
}

// OutboxTax measures what the outbox costs the application's own business
// throughput at saturation: Producers commit the same business
// transaction (an order insert and a customer update, sent in one round
// trip) as fast as they can,
//
//	business          without any enqueue, no relay running;
//	outbox            with one EnqueueTx each (a round trip of its own),
//	                  while the relay (in this process) delivers to a no-op
//	                  Sender;
//	outbox-queued     the same with the message queued into the business
//	                  statements' batch (PrepareEnqueue and QueueInsert):
//	                  no round trip of its own;
//	outbox-unchecked  outbox with the outbox's insert check (the ownership
//	                  catalog's rules) taken out: the check's share;
//	enqueue-only      outbox with no relay running (its rows are deleted
//	                  after the round, as settles would have): how the
//	                  tax splits between the enqueue and the relay;
//	outbox-no-key-index, outbox-no-id-index
//	                  outbox with the per-key order index, or message_id's
//	                  unique index, dropped for the round: what each index
//	                  an enqueue writes costs (key-index-tax-ratio,
//	                  id-index-tax-ratio); the primary key and the claim
//	                  index, which every claim and settle reads, stay;
//
// alternating over Rounds, medians compared: tax-ratio is outbox /
// business transactions a second (the target: at least 0.8),
// queued-tax-ratio outbox-queued / business, with every mode's
// transaction latencies and the outbox modes' pickup latency (commit →
// Sender). Then a paced run at PacedShare of the outbox mode's rate
// measures the pickup latency below saturation (target p99 ≤ 10 ms).
func OutboxTax(ctx context.Context, e Env, cfg OutboxTaxConfig) (Result, error) {
	r := Result{Scenario: "outbox-tax"}
	if err := cfg.withDefaults(); err != nil {
		return r, err
	}
	if _, err := e.driver(); err != nil {
		return r, err
	}
	pcfg := e.Pool.Config()
	pcfg.MaxConns = int32(cfg.Producers + 6)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	t := &outboxTax{cfg: cfg, env: Env{Pool: pool, Schema: e.Schema}}
	db, notes, err := t.env.stressDB(ctx)
	if err != nil {
		return r, err
	}
	t.db = db
	r.Notes = notes
	if t.d, err = postgres.New(pool, &postgres.Config{Schema: e.Schema}); err != nil {
		return r, err
	}
	res, err := Alternate(cfg.Rounds, outboxTaxModes, func(mode string) (Result, error) {
		return t.runMode(ctx, mode)
	})
	if err != nil {
		return r, err
	}
	if err := t.check(ctx, true); err != nil {
		return r, err
	}
	for _, mode := range outboxTaxModes {
		for k, v := range res[mode] {
			r.Set(mode+"/"+k, v)
		}
	}
	r.Set("tax-ratio", res["outbox"]["tx/s"]/res["business"]["tx/s"])
	r.Set("queued-tax-ratio", res["outbox-queued"]["tx/s"]/res["business"]["tx/s"])
	r.Set("unchecked-tax-ratio", res["outbox-unchecked"]["tx/s"]/res["business"]["tx/s"])
	r.Set("no-relay-tax-ratio", res["enqueue-only"]["tx/s"]/res["business"]["tx/s"])
	r.Set("key-index-tax-ratio", res["outbox-no-key-index"]["tx/s"]/res["business"]["tx/s"])
	r.Set("id-index-tax-ratio", res["outbox-no-id-index"]["tx/s"]/res["business"]["tx/s"])
	r.Set("producers", float64(cfg.Producers))
	r.Set("rounds", float64(cfg.Rounds))
	err = t.paced(ctx, res["outbox"]["tx/s"], &r)
	return r, err
}

// withDefaults fills the zero fields and refuses what cannot be run.
func (cfg *OutboxTaxConfig) withDefaults() error {
	if cfg.Producers == 0 {
		cfg.Producers = 8
	}
	if cfg.Run == 0 {
		cfg.Run = 10 * time.Second
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = 3
	}
	if cfg.PacedFor == 0 {
		cfg.PacedFor = 30 * time.Second
	}
	if cfg.PacedShare == 0 {
		cfg.PacedShare = 0.8
	}
	if cfg.Producers < 1 || cfg.Run < 100*time.Millisecond || cfg.Rounds < 1 || cfg.PacedFor < 100*time.Millisecond || cfg.PacedShare <= 0 || cfg.PacedShare > 1 {
		return fmt.Errorf("%w: outbox tax: producers ≥ 1, run and paced-for ≥ 100ms, rounds ≥ 1, paced share in (0, 1]", ErrStressConfig)
	}
	return nil
}

// outboxTax is what every mode of one OutboxTax run shares: the stress
// scenario's business tables, the driver, and the sequence numbers of
// every mode's transactions.
type outboxTax struct {
	cfg OutboxTaxConfig
	env Env
	db  stressDB
	d   *postgres.Driver
	seq atomic.Int64
}

// business is the business transaction alone, without any enqueue.
func (t *outboxTax) business(ctx context.Context, n int64) error {
	return pgx.BeginFunc(ctx, t.env.Pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, t.env.stressBusiness(n)).Close()
	})
}

// check installs the enqueue trigger as migrated (on) or with its rules
// taken out, as the unchecked mode runs.
func (t *outboxTax) check(ctx context.Context, on bool) error {
	if on {
		return installEnqueueTriggerWithout(ctx, t.env, t.d)
	}
	return installEnqueueTriggerWithout(ctx, t.env, t.d, triggerRules)
}

// runMode runs one round of mode at saturation; with the outbox, the
// relay then delivers what is left before the next mode runs.
func (t *outboxTax) runMode(ctx context.Context, mode string) (out Result, err error) {
	out = Result{Scenario: mode}
	if err := t.check(ctx, mode != "outbox-unchecked"); err != nil {
		return out, err
	}
	if index, ok := taxIndexModes[mode]; ok {
		restore, err := t.dropIndex(ctx, index)
		if err != nil {
			return out, fmt.Errorf("%s: %w", mode, err)
		}
		defer func() {
			if rerr := restore(); rerr != nil && err == nil {
				err = fmt.Errorf("%s: restoring %s: %w", mode, index, rerr)
			}
		}()
	}
	var book *stressBook
	tx := t.business
	switch mode {
	case "business":
	case "enqueue-only":
		tx = t.db.tx
	default:
		book = newStressBook(1)
		relay := &inProcessRelay{drv: t.d, spec: StressRelaySpec{App: stressApp, Type: stressType}, record: book.deliver}
		if err := relay.start(ctx); err != nil {
			return out, err
		}
		defer func() { _ = relay.stop() }()
		tx = t.db.tx
		if mode == "outbox-queued" {
			tx = t.db.queuedTx
		}
	}
	n, lat, window, err := t.saturate(ctx, tx, book)
	if err != nil {
		return out, fmt.Errorf("%s: %w", mode, err)
	}
	out.Set("tx/s", float64(n)/window.Seconds())
	out.Set("tx-p50-ms", lat.PercentileMs(50))
	out.Set("tx-p99-ms", lat.PercentileMs(99))
	if mode == "enqueue-only" {
		// What no relay delivered goes as a relay's settle would take it,
		// so that the next mode starts from an outbox as empty as the
		// others leave it.
		if err := t.env.exec(ctx, "DELETE FROM "+t.env.Schema+".outbox WHERE type = $1", stressType); err != nil {
			return out, fmt.Errorf("%s: %w", mode, err)
		}
	}
	if book == nil {
		return out, nil
	}
	book.mu.Lock()
	delivered := book.phases[0].delivered
	book.mu.Unlock()
	out.Set("keepup", float64(delivered)/float64(max(n, 1)))
	// Drain before the next mode, so none pays for this one's
	// backlog, and read the pickups of every message.
	for first, _ := book.behind(); first > 0; first, _ = book.behind() {
		select {
		case <-book.progress:
		case <-time.After(time.Minute):
			return out, fmt.Errorf("%s: %d messages undelivered a minute after the run", mode, first)
		case <-ctx.Done():
			return out, ctx.Err()
		}
	}
	out.Set("pickup-p50-ms", book.phases[0].pickup.PercentileMs(50))
	out.Set("pickup-p99-ms", book.phases[0].pickup.PercentileMs(99))
	return out, nil
}

// dropIndex drops the outbox's index name (the constraint it backs, if
// it backs one) and returns what creates it again as it was.
func (t *outboxTax) dropIndex(ctx context.Context, name string) (restore func() error, err error) {
	var constraint, def string
	err = t.env.Pool.QueryRow(ctx, `
		SELECT coalesce(c.conname, ''),
		       coalesce(pg_get_constraintdef(c.oid), pg_get_indexdef(i.oid))
		FROM pg_class i
		JOIN pg_namespace n ON n.oid = i.relnamespace
		LEFT JOIN pg_constraint c ON c.conindid = i.oid
		WHERE n.nspname = $1 AND i.relname = $2 AND i.relkind = 'i'`, t.env.Schema, name).Scan(&constraint, &def)
	if err != nil {
		return nil, fmt.Errorf("reading index %s: %w", name, err)
	}
	table := t.env.Schema + ".outbox"
	drop, create := "DROP INDEX "+t.env.Schema+"."+name, def
	if constraint != "" {
		drop = "ALTER TABLE " + table + " DROP CONSTRAINT " + constraint
		create = "ALTER TABLE " + table + " ADD CONSTRAINT " + constraint + " " + def
	}
	if err := t.env.exec(ctx, drop); err != nil {
		return nil, err
	}
	return func() error { return t.env.exec(context.WithoutCancel(ctx), create) }, nil
}

// saturate has the producers run tx as fast as they can for cfg.Run,
// each commit noted in book when there is one. It returns how many
// committed, their latencies and how long they ran.
func (t *outboxTax) saturate(ctx context.Context, tx func(context.Context, int64) error, book *stressBook) (int64, *Histogram, time.Duration, error) {
	var lat Histogram
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	deadline := time.Now().Add(t.cfg.Run)
	began := time.Now()
	for range t.cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				k := t.seq.Add(1)
				start := time.Now()
				if err := tx(ctx, k); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done := time.Now()
				lat.Add(done.Sub(start))
				n.Add(1)
				if book != nil {
					book.commit(k, done)
				}
			}
		}()
	}
	wg.Wait()
	window := time.Since(began)
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, nil, 0, err
	}
	return n.Load(), &lat, window, nil
}

// paced runs below saturation, at PacedShare of the outbox mode's
// outboxRate: the stress scenario's paced producers, the relay in this
// process.
func (t *outboxTax) paced(ctx context.Context, outboxRate float64, r *Result) error {
	rate := int(t.cfg.PacedShare * outboxRate)
	if rate < 1 {
		return fmt.Errorf("outbox tax: the outbox mode ran %.1f tx/s", outboxRate)
	}
	scfg, err := StressConfig{Rate: rate, Producers: t.cfg.Producers, Phases: []StressPhase{{Name: "paced", For: t.cfg.PacedFor, Load: 1}}}.withDefaults()
	if err != nil {
		return err
	}
	s := &stressRun{cfg: scfg, db: t.db, book: newStressBook(1)}
	s.relay = &inProcessRelay{drv: t.d, spec: StressRelaySpec{App: stressApp, Type: stressType}, record: s.book.deliver}
	// Sequence numbers of the paced run start above every earlier one.
	s.base = t.seq.Load()
	paced, err := s.run(ctx, "")
	for k, v := range paced.Metrics {
		switch k {
		case "rate", "producers", "committed", "undelivered", "phantoms":
			continue
		}
		r.Set(k, v)
	}
	r.Set("paced/share", t.cfg.PacedShare)
	return err
}
