package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
)

// WakeupConfig sizes the Wakeup scenario. Zero fields take the defaults.
type WakeupConfig struct {
	// Rounds of every mode, each round in a rotated order (Alternate).
	// Default 5.
	Rounds int
	// Run is how long each enqueue-rate mode runs per round. Default 2s.
	Run time.Duration
	// Producers is the number of connections of the concurrent modes.
	// Default 8.
	Producers int
	// Rate is the paced plain-SQL enqueues per second of the latency
	// phase. Default 200 (the target is set at that rate).
	Rate int
	// PacedFor is how long each latency run paces Rate. Default 5s.
	PacedFor time.Duration
}

func (c *WakeupConfig) defaults() {
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Run <= 0 {
		c.Run = 2 * time.Second
	}
	if c.Producers <= 0 {
		c.Producers = 8
	}
	if c.Rate <= 0 {
		c.Rate = 200
	}
	if c.PacedFor <= 0 {
		c.PacedFor = 5 * time.Second
	}
}

// The outboxes of Wakeup, one schema each:
//
//	wakeup  as migrated: migration 10's enqueue trigger, whose function
//	        runs at the first row of each type in a transaction and
//	        notifies when no transaction chose to in the last 10 ms;
//	off     the same trigger with its wake-up taken out (its rules stay):
//	        what a plain SQL enqueue did before (no notification at all);
//	every   the wake-up taken out and a plain trigger added that notifies
//	        on every INSERT statement: the obvious design;
//	commit  the wake-up taken out and, in its place, the same debounce
//	        decided at commit: a deferred constraint trigger whose WHEN
//	        passes the first row of each transaction, whose PL/pgSQL
//	        function then checks the debounce and notifies. It spares a
//	        transaction that enqueues early and commits late from being
//	        skipped, at the price of a trigger call in every one.
var wakeupVariants = []string{"wakeup", "off", "every", "commit"}

// wakeupAlternatives are the rejected designs, installed in place of the
// migration's trigger in their schemas (%[1]s is the schema).
var wakeupAlternatives = map[string]string{
	"every": `
		CREATE FUNCTION %[1]s.outbox_notify_every() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', ''); RETURN NULL; END $$;
		CREATE TRIGGER outbox_notify_every AFTER INSERT ON %[1]s.outbox
			FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.outbox_notify_every();`,
	"commit": `
		CREATE FUNCTION %[1]s.outbox_notify_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE
			now_ms bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
			last_ms bigint := pg_sequence_last_value('%[1]s.outbox_wakeup_at'::regclass);
		BEGIN
			IF last_ms IS NULL OR now_ms - last_ms NOT BETWEEN 0 AND 9 THEN
				PERFORM setval('%[1]s.outbox_wakeup_at'::regclass, now_ms);
				PERFORM pg_notify(TG_TABLE_SCHEMA || '_outbox', '');
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER outbox_notify_at_commit AFTER INSERT ON %[1]s.outbox
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (current_setting('mensageria.wakeup_commit_%[1]s', true) IS DISTINCT FROM 'queued'
			      AND set_config('mensageria.wakeup_commit_%[1]s', 'queued', true) = 'queued')
			EXECUTE FUNCTION %[1]s.outbox_notify_at_commit();`,
}

// How rows are enqueued in the rate modes:
//
//	sql-1        one connection, a plain one-row INSERT, autocommitted (a
//	             Java or psql producer);
//	sql-1-async  the same with synchronous_commit off: no WAL flush to
//	             wait for, so what is left is the CPU each variant spends,
//	             which the flush's noise hides on a busy machine;
//	sql-N        Producers connections doing the same at once;
//	go-100       the driver's Insert of 100 rows, one transaction each;
//	go-N         Producers goroutines enqueueing one message each through
//	             a Client (its own debounced pg_notify included).
func wakeupKinds(producers int) []string {
	n := strconv.Itoa(producers)
	return []string{"sql-1", "sql-1-async", "sql-" + n, "go-100", "go-" + n}
}

// Wakeup measures what the enqueue wake-up (migration 5's, in migration
// 7's trigger) costs the enqueue rate and what it buys in latency:
//
//   - the rate of each enqueue kind into each variant's outbox, rounds
//     alternating with a rotated order, each run from an empty table;
//     <kind>-ratio is wakeup/off (the target: at least 0.95),
//     <kind>-every-ratio and <kind>-commit-ratio the rejected designs';
//   - commit → delivery latency of plain SQL enqueues paced at Rate a
//     second, one connection per pacer, to the real relay at its defaults
//     (poll every second) with a recording Sender, in the wakeup and the
//     off outboxes, alternating (the target: p50 at most 50 ms).
func Wakeup(ctx context.Context, e Env, cfg WakeupConfig) (Result, error) {
	cfg.defaults()
	r := Result{Scenario: "wakeup"}
	const typ = "bench.wakeup"
	app := relayApp(typ)
	w := &wakeupRun{cfg: cfg, typ: typ, app: app, envs: map[string]Env{"wakeup": e}, drivers: map[string]*postgres.Driver{}}
	for _, v := range wakeupVariants {
		env, ok := w.envs[v]
		if !ok {
			side, drop, err := e.sideSchema(ctx, e.Schema+"_wk_"+v)
			if err != nil {
				return r, err
			}
			defer drop()
			env = side
			w.envs[v] = env
		}
		d, err := env.driver()
		if err != nil {
			return r, err
		}
		w.drivers[v] = d
		if err := own(ctx, d, app, typ); err != nil {
			return r, err
		}
	}
	// Every variant but the migration's own takes the wake-up out of the
	// enqueue trigger (its rules stay); the alternatives then add theirs.
	for _, v := range wakeupVariants[1:] {
		if err := installEnqueueTriggerWithout(ctx, w.envs[v], w.drivers[v], triggerWakeup); err != nil {
			return r, err
		}
	}
	for v, sql := range wakeupAlternatives {
		if err := w.envs[v].exec(ctx, fmt.Sprintf(sql, w.envs[v].Schema)); err != nil {
			return r, fmt.Errorf("install the %s variant: %w", v, err)
		}
	}
	if err := w.rates(ctx, &r); err != nil {
		return r, err
	}
	if err := w.latencies(ctx, &r); err != nil {
		return r, err
	}
	r.Set("rate", float64(cfg.Rate))
	r.Set("rounds", float64(cfg.Rounds))
	return r, nil
}

// wakeupRun is one Wakeup run: every variant's outbox, by variant.
type wakeupRun struct {
	cfg      WakeupConfig
	typ, app string
	envs     map[string]Env
	drivers  map[string]*postgres.Driver
}

// rates measures the enqueue rate of every kind into every variant's
// outbox, and sets each one's median and the ratios to the off variant.
func (w *wakeupRun) rates(ctx context.Context, r *Result) error {
	kinds := wakeupKinds(w.cfg.Producers)
	var modes []string
	for _, k := range kinds {
		for _, v := range wakeupVariants {
			modes = append(modes, k+"/"+v)
		}
	}
	// Each mode's rate in every round, so that the ratios are taken round
	// by round (the two runs of a pair are seconds apart) and their median
	// reported: a machine whose disk or load drifts over minutes moves
	// both runs of a round alike.
	perRound := map[string][]float64{}
	var seq atomic.Int64
	if _, err := Alternate(w.cfg.Rounds, modes, func(mode string) (Result, error) {
		kind, variant, _ := strings.Cut(mode, "/")
		env, d := w.envs[variant], w.drivers[variant]
		if err := env.exec(ctx, "TRUNCATE "+env.Schema+".outbox"); err != nil {
			return Result{}, err
		}
		rows, elapsed, err := wakeupEnqueueFor(ctx, d, env, kind, w.typ, w.app, w.cfg, &seq)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", mode, err)
		}
		perRound[mode] = append(perRound[mode], float64(rows)/elapsed.Seconds())
		return Result{}, nil
	}); err != nil {
		return err
	}
	ratios := func(a, b string) float64 {
		rs := make([]float64, len(perRound[a]))
		for i := range rs {
			rs[i] = perRound[a][i] / perRound[b][i]
		}
		return median(rs)
	}
	for _, k := range kinds {
		for _, v := range wakeupVariants {
			r.Set(k+"-"+v+"-rows/s", median(perRound[k+"/"+v]))
		}
		r.Set(k+"-ratio", ratios(k+"/wakeup", k+"/off"))
		r.Set(k+"-every-ratio", ratios(k+"/every", k+"/off"))
		r.Set(k+"-commit-ratio", ratios(k+"/commit", k+"/off"))
	}
	return nil
}

// latencies measures the commit → delivery latency of paced plain SQL
// enqueues in the wakeup and the off outboxes, alternating.
func (w *wakeupRun) latencies(ctx context.Context, r *Result) error {
	lat := map[string]*Latencies{"wakeup": {}, "off": {}}
	if _, err := Alternate(w.cfg.Rounds, []string{"wakeup", "off"}, func(variant string) (Result, error) {
		env := w.envs[variant]
		if err := env.exec(ctx, "TRUNCATE "+env.Schema+".outbox"); err != nil {
			return Result{}, err
		}
		return Result{}, pacedSQLLatency(ctx, w.drivers[variant], env, w.typ, w.cfg, lat[variant])
	}); err != nil {
		return err
	}
	for v, l := range lat {
		r.setPercentiles(v+"-", l)
	}
	return nil
}

// wakeupEnqueueFor enqueues rows of typ the way kind says for cfg.Run and
// returns how many and how long that took.
func wakeupEnqueueFor(ctx context.Context, d *postgres.Driver, e Env, kind, typ, app string, cfg WakeupConfig, seq *atomic.Int64) (int, time.Duration, error) {
	workers := 1
	if strings.HasSuffix(kind, "-"+strconv.Itoa(cfg.Producers)) {
		workers = cfg.Producers
	}
	var client *mensageria.Client
	if strings.HasPrefix(kind, "go-") && kind != "go-100" {
		var err error
		client, err = mensageria.New(d, &mensageria.Config{App: app, Registry: mensageria.NewRegistry().MustRegister(typ, noop), Logger: quiet()})
		if err != nil {
			return 0, 0, err
		}
	}
	var conn *pgx.Conn
	if kind == "sql-1-async" {
		pc, err := e.Pool.Acquire(ctx)
		if err != nil {
			return 0, 0, err
		}
		// Taken out of the pool and closed after: the setting must not
		// leak into the other modes.
		conn = pc.Hijack()
		defer conn.Close(context.WithoutCancel(ctx))
		if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
			return 0, 0, err
		}
	}
	insert := "INSERT INTO " + e.Schema + ".outbox (type, key, payload) VALUES ($1, $2, $3)"
	one := func(ctx context.Context) (int, error) {
		switch {
		case client != nil:
			_, err := client.Enqueue(ctx, mensageria.Message{Type: typ, Key: "k-" + strconv.FormatInt(seq.Add(1), 10), Payload: []byte(Payload)})
			return 1, err
		case kind == "go-100":
			return 100, insertBatch(ctx, d, typ, 100, nil, func() string { return "k-" + strconv.FormatInt(seq.Add(1), 10) })
		case conn != nil:
			_, err := conn.Exec(ctx, insert, typ, "k-"+strconv.FormatInt(seq.Add(1), 10), Payload)
			return 1, err
		default:
			_, err := e.Pool.Exec(ctx, insert, typ, "k-"+strconv.FormatInt(seq.Add(1), 10), Payload)
			return 1, err
		}
	}
	var total atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	began := time.Now()
	deadline := began.Add(cfg.Run)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				n, err := one(ctx)
				if err != nil {
					errs <- err
					return
				}
				total.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return int(total.Load()), elapsed, nil
}

// pacedSQLLatency runs the relay of typ on d at its defaults, paces plain
// SQL INSERTs of typ at cfg.Rate a second for cfg.PacedFor, waits until
// every one is delivered, and adds each one's commit → Sender latency to
// lat.
func pacedSQLLatency(ctx context.Context, d *postgres.Driver, e Env, typ string, cfg WakeupConfig, lat *Latencies) error {
	total := int(float64(cfg.Rate) * cfg.PacedFor.Seconds())
	committed := make([]atomic.Int64, total) // unix nanos at commit, by message number
	var got atomic.Int64
	done := make(chan struct{})
	sender := mensageria.SenderFunc(func(_ context.Context, dl *mensageria.Delivery) error {
		now := time.Now().UnixNano()
		i, err := strconv.Atoi(strings.TrimPrefix(dl.Key, "w-"))
		if err != nil || i < 0 || i >= total {
			return mensageria.Permanent(fmt.Errorf("key %q is not one of this run's", dl.Key))
		}
		if at := committed[i].Load(); at > 0 {
			lat.Add(time.Duration(max(now-at, 0)))
		} else {
			// Delivered before the producer saw its commit return.
			lat.Add(0)
		}
		if got.Add(1) == int64(total) {
			close(done)
		}
		return nil
	})
	c, err := newRelay(d, typ, sender, 0)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	insert := "INSERT INTO " + e.Schema + ".outbox (type, key, payload) VALUES ($1, $2, $3)"
	if _, err := pace(ctx, cfg.Rate, total, 4, func(ctx context.Context, i int) error {
		if _, err := e.Pool.Exec(ctx, insert, typ, "w-"+strconv.Itoa(i), Payload); err != nil {
			return err
		}
		committed[i].CompareAndSwap(0, time.Now().UnixNano())
		return nil
	}); err != nil {
		return err
	}
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	select {
	case <-done:
		return nil
	case <-wait.Done():
		return fmt.Errorf("paced run: %d of %d delivered in a minute", got.Load(), total)
	}
}
