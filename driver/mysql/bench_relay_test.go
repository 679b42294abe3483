package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// The relay's steady state and the enqueue's overhead on a business
// transaction, on MariaDB and on PostgreSQL, with the same Go code and the
// same business transaction (an order insert and a customer update, two
// statements), so the two read side by side (docs/benchmarks.md, "MariaDB
// beside PostgreSQL"):
//
//	go test -run '^$' -bench 'Steady|Overhead' -benchtime 20000x ./driver/mysql/
//
// Both servers are the machine's shared ones, at their defaults (each
// commit flushed to disk: PostgreSQL's synchronous_commit on, MariaDB's
// innodb_flush_log_at_trx_commit=1).

const benchPayload = `{"id":1,"total":"12.50","items":[{"sku":"a","qty":2}]}`

// business is one backend's migrated driver and its business transaction.
type business struct {
	drv driver.Driver
	// inTx runs the business write for customer, then enqueue (when not
	// nil) with the transaction, and commits.
	inTx func(ctx context.Context, customer int, enqueue func(tx any) error) error
}

func businessOn(b *testing.B, backend string) business {
	ctx := context.Background()
	switch backend {
	case "mysql":
		d, _ := migrated(b)
		db := d.DB()
		for _, q := range []string{
			"CREATE TABLE bench_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer INT NOT NULL, body JSON NOT NULL)",
			"CREATE TABLE bench_customers (id INT PRIMARY KEY, orders INT NOT NULL DEFAULT 0)",
			"INSERT INTO bench_customers (id) WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n < 999) SELECT n FROM g",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		return business{drv: d, inTx: func(ctx context.Context, customer int, enqueue func(any) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			err = func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "INSERT INTO bench_orders (customer, body) VALUES (?, ?)", customer, benchPayload); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "UPDATE bench_customers SET orders = orders + 1 WHERE id = ?", customer); err != nil {
					return err
				}
				if enqueue != nil {
					return enqueue(tx)
				}
				return nil
			}(tx)
			if err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}}
	default:
		pool, schema := testdb.Pool(b), testdb.Schema(b)
		d, err := postgres.New(pool, &postgres.Config{Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(`
			CREATE TABLE %[1]s.bench_orders (id bigserial PRIMARY KEY, customer int NOT NULL, body jsonb NOT NULL);
			CREATE TABLE %[1]s.bench_customers (id int PRIMARY KEY, orders int NOT NULL DEFAULT 0);
			INSERT INTO %[1]s.bench_customers (id) SELECT g FROM generate_series(0, 999) g`, schema)); err != nil {
			b.Fatal(err)
		}
		return business{drv: d, inTx: func(ctx context.Context, customer int, enqueue func(any) error) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".bench_orders (customer, body) VALUES ($1, $2)", customer, benchPayload); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "UPDATE "+schema+".bench_customers SET orders = orders + 1 WHERE id = $1", customer); err != nil {
					return err
				}
				if enqueue != nil {
					return enqueue(tx)
				}
				return nil
			})
		}}
	}
}

// BenchmarkSteady: 8 producers commit b.N business transactions with one
// message each, back to back, while the relay of the same process delivers
// them to a no-op Sender. Pickup latency runs from the producer's commit
// returning to the Sender's start.
func BenchmarkSteady(b *testing.B) {
	for _, backend := range []string{"mysql", "postgres"} {
		b.Run(backend, func(b *testing.B) { steady(b, backend, 0) })
	}
}

// BenchmarkSteadyPaced is BenchmarkSteady with each producer resting 20 ms
// after each commit (at most 400 messages/s from the 8): the pickup of a
// relay that keeps up easily, apart from the queueing of one that runs
// near its capacity, as BenchmarkSteady's back-to-back producers make
// MariaDB's.
func BenchmarkSteadyPaced(b *testing.B) {
	for _, backend := range []string{"mysql", "postgres"} {
		b.Run(backend, func(b *testing.B) { steady(b, backend, 20*time.Millisecond) })
	}
}

// steady runs BenchmarkSteady on backend, each producer resting pace
// after each commit.
func steady(b *testing.B, backend string, pace time.Duration) {
	const producers = 8
	ctx := context.Background()
	biz := businessOn(b, backend)
	var (
		mu      sync.Mutex
		started = map[uuid.UUID]time.Time{}
		all     = make(chan struct{})
		seen    atomic.Int64
	)
	send := func(_ context.Context, dl *mensageria.Delivery) error {
		now := time.Now()
		mu.Lock()
		if _, ok := started[dl.ID]; !ok {
			started[dl.ID] = now
			if seen.Add(1) == int64(b.N) {
				close(all)
			}
		}
		mu.Unlock()
		return nil
	}
	c, err := mensageria.New(biz.drv, &mensageria.Config{
		App:      "bench-steady",
		Registry: mensageria.NewRegistry().MustRegister("bench.steady", mensageria.SenderFunc(send)),
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	committed := make([]map[uuid.UUID]time.Time, producers)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	b.ResetTimer()
	for p := range producers {
		committed[p] = map[uuid.UUID]time.Time{}
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				var ids []uuid.UUID
				err := biz.inTx(ctx, int(i%1000), func(tx any) error {
					var err error
					ids, err = c.EnqueueTx(ctx, tx, mensageria.Message{Type: "bench.steady", Key: fmt.Sprint("o-", i), Payload: []byte(benchPayload)})
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				committed[p][ids[0]] = time.Now()
				if pace > 0 {
					time.Sleep(pace)
				}
			}
		})
	}
	wg.Wait()
	enqueued := b.Elapsed()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("delivered %d of %d within a minute of the last commit", seen.Load(), b.N)
	}
	b.StopTimer()
	var lat []time.Duration
	mu.Lock()
	for _, m := range committed {
		for id, at := range m {
			lat = append(lat, max(started[id].Sub(at), 0))
		}
	}
	mu.Unlock()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p/100*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/enqueued.Seconds(), "enqueue/s")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "delivered/s")
	b.ReportMetric(pct(50), "p50-ms")
	b.ReportMetric(pct(99), "p99-ms")
}

// BenchmarkOverhead: one connection commits the business transaction alone
// and with one enqueue, b.N of each, the two interleaved in runs of 100 so
// that drift on the machine hits both alike; overhead-ratio is the median
// over the runs of (with an enqueue ÷ alone), per transaction. No relay
// runs: this is the producer's cost alone.
func BenchmarkOverhead(b *testing.B) {
	const run = 100
	for _, backend := range []string{"mysql", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			ctx := context.Background()
			biz := businessOn(b, backend)
			c, err := mensageria.New(biz.drv, &mensageria.Config{
				App:      "bench-overhead",
				Registry: mensageria.NewRegistry().MustRegister("bench.overhead", mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil })),
			})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Register(ctx); err != nil {
				b.Fatal(err)
			}
			enqueue := func(n int) func(any) error {
				return func(tx any) error {
					_, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: "bench.overhead", Key: fmt.Sprint(n), Payload: []byte(benchPayload)})
					return err
				}
			}
			timed := func(n int, with bool) (time.Duration, error) {
				began := time.Now()
				for i := range n {
					var e func(any) error
					if with {
						e = enqueue(i)
					}
					if err := biz.inTx(ctx, i%1000, e); err != nil {
						return 0, err
					}
				}
				return time.Since(began), nil
			}
			var ratios []float64
			var alone, with time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += run {
				n := min(run, b.N-done)
				a, err1 := timed(n, false)
				w, err2 := timed(n, true)
				if err := errors.Join(err1, err2); err != nil {
					b.Fatal(err)
				}
				alone, with = alone+a, with+w
				ratios = append(ratios, float64(w)/float64(a))
			}
			b.StopTimer()
			sort.Float64s(ratios)
			b.ReportMetric(float64(alone.Microseconds())/float64(b.N), "business-us")
			b.ReportMetric(float64(with.Microseconds())/float64(b.N), "with-enqueue-us")
			b.ReportMetric(ratios[len(ratios)/2], "overhead-ratio")
		})
	}
}
