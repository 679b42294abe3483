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
var outboxTaxModes = []string{"business", "outbox", "outbox-unchecked"}

// OutboxTax measures what the outbox costs the application's own business
// throughput at saturation: Producers commit the same business
// transaction (an order insert and a customer update) as fast as they can,
//
//	business          without any enqueue, no relay running;
//	outbox            with one EnqueueTx each, while the relay (in this
//	                  process) delivers to a no-op Sender;
//	outbox-unchecked  the same with the outbox's insert check (the
//	                  ownership catalog's rules) disabled: the check's share;
//
// alternating over Rounds, medians compared: tax-ratio is outbox /
// business transactions a second (the target: at least 0.8), with
// both modes' transaction latencies and the outbox mode's pickup latency
// (commit → Sender). Then a paced run at PacedShare of the outbox mode's
// rate measures the pickup latency below saturation (target p99 ≤ 10 ms).
func OutboxTax(ctx context.Context, e Env, cfg OutboxTaxConfig) (Result, error) {
	r := Result{Scenario: "outbox-tax"}
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
		return r, fmt.Errorf("%w: outbox tax: producers ≥ 1, run and paced-for ≥ 100ms, rounds ≥ 1, paced share in (0, 1]", ErrStressConfig)
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
	pe := Env{Pool: pool, Schema: e.Schema}
	db, notes, err := pe.stressDB(ctx)
	if err != nil {
		return r, err
	}
	r.Notes = notes
	d, err := postgres.New(pool, &postgres.Config{Schema: e.Schema})
	if err != nil {
		return r, err
	}
	var seq atomic.Int64
	business := func(ctx context.Context, n int64) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			customer := int(n * 7919 % 1000)
			b := &pgx.Batch{}
			b.Queue("INSERT INTO "+e.Schema+".stress_orders (seq, customer, body) VALUES ($1, $2, $3)", n, customer, Payload)
			b.Queue("UPDATE "+e.Schema+".stress_customers SET orders = orders + 1 WHERE id = $1", customer)
			return tx.SendBatch(ctx, b).Close()
		})
	}
	// The unchecked mode runs with the enqueue trigger's rules taken out;
	// every other mode with the trigger as migrated.
	check := func(on bool) error {
		if on {
			return installEnqueueTriggerWithout(ctx, pe, d)
		}
		return installEnqueueTriggerWithout(ctx, pe, d, triggerRules)
	}
	res, err := Alternate(cfg.Rounds, outboxTaxModes, func(mode string) (Result, error) {
		out := Result{Scenario: mode}
		withOutbox := mode != "business"
		if err := check(mode != "outbox-unchecked"); err != nil {
			return out, err
		}
		var book *stressBook
		var relay *inProcessRelay
		tx := business
		if withOutbox {
			book = newStressBook(1)
			relay = &inProcessRelay{drv: d, spec: StressRelaySpec{App: stressApp, Type: stressType}, record: book.deliver}
			if err := relay.start(ctx); err != nil {
				return out, err
			}
			defer func() { _ = relay.stop() }()
			tx = db.tx
		}
		var lat Histogram
		var n atomic.Int64
		var wg sync.WaitGroup
		var firstErr atomic.Value
		deadline := time.Now().Add(cfg.Run)
		began := time.Now()
		for range cfg.Producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					k := seq.Add(1)
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
			return out, fmt.Errorf("%s: %w", mode, err)
		}
		out.Set("tx/s", float64(n.Load())/window.Seconds())
		out.Set("tx-p50-ms", lat.PercentileMs(50))
		out.Set("tx-p99-ms", lat.PercentileMs(99))
		if book != nil {
			book.mu.Lock()
			delivered := book.phases[0].delivered
			book.mu.Unlock()
			out.Set("keepup", float64(delivered)/float64(max(n.Load(), 1)))
			// Drain before the next mode, so none pays for this one's
			// backlog, and read the pickups of every message.
			for book.behind() > 0 {
				select {
				case <-book.progress:
				case <-time.After(time.Minute):
					return out, fmt.Errorf("%s: %d messages undelivered a minute after the run", mode, book.behind())
				case <-ctx.Done():
					return out, ctx.Err()
				}
			}
			out.Set("pickup-p50-ms", book.phases[0].pickup.PercentileMs(50))
			out.Set("pickup-p99-ms", book.phases[0].pickup.PercentileMs(99))
		}
		return out, nil
	})
	if err != nil {
		return r, err
	}
	if err := check(true); err != nil {
		return r, err
	}
	for _, mode := range outboxTaxModes {
		for k, v := range res[mode] {
			r.Set(mode+"/"+k, v)
		}
	}
	r.Set("tax-ratio", res["outbox"]["tx/s"]/res["business"]["tx/s"])
	r.Set("unchecked-tax-ratio", res["outbox-unchecked"]["tx/s"]/res["business"]["tx/s"])
	r.Set("producers", float64(cfg.Producers))
	r.Set("rounds", float64(cfg.Rounds))

	// Below saturation: the stress scenario's paced producers, the relay
	// in this process.
	rate := int(cfg.PacedShare * res["outbox"]["tx/s"])
	if rate < 1 {
		return r, fmt.Errorf("outbox tax: the outbox mode ran %.1f tx/s", res["outbox"]["tx/s"])
	}
	scfg, err := StressConfig{Rate: rate, Producers: cfg.Producers, Phases: []StressPhase{{Name: "paced", For: cfg.PacedFor, Load: 1}}}.withDefaults()
	if err != nil {
		return r, err
	}
	s := &stressRun{cfg: scfg, db: db, book: newStressBook(1)}
	s.relay = &inProcessRelay{drv: d, spec: StressRelaySpec{App: stressApp, Type: stressType}, record: s.book.deliver}
	// Sequence numbers of the paced run start above every earlier one.
	s.base = seq.Load()
	paced, err := s.run(ctx, "")
	for k, v := range paced.Metrics {
		switch k {
		case "rate", "producers", "committed", "undelivered", "phantoms":
			continue
		}
		r.Set(k, v)
	}
	r.Set("paced/share", cfg.PacedShare)
	return r, err
}
