package mensageria_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/internal/testsignal"
)

// BenchmarkPickupAtPacedRate: 8 producers commit 800 single-message
// transactions a second in all, for 15 s, through the Client whose relay
// delivers them to a no-op Sender; pickup latency runs from the commit
// returning to the Sender's start. The default NotifyDebounce beside none
// (a notification on every enqueue), two rounds, in one run, so that the
// tail the debounce leaves reads as a ratio (docs/benchmarks.md, "Where
// the tail came from"):
//
//	go test -run '^$' -bench PickupAtPacedRate -benchtime 1x .
func BenchmarkPickupAtPacedRate(b *testing.B) {
	pool := testdb.Pool(b)
	for round := range 2 {
		for _, debounce := range []time.Duration{mensageria.DefaultNotifyDebounce, time.Nanosecond} {
			b.Run(fmt.Sprintf("round=%d/debounce=%s", round, debounce), func(b *testing.B) {
				schema := testdb.Schema(b)
				d, err := postgres.New(pool, &postgres.Config{Schema: schema})
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
					b.Fatal(err)
				}
				var mu sync.Mutex
				first := map[uuid.UUID]time.Time{}
				send := mensageria.SenderFunc(func(_ context.Context, dl *mensageria.Delivery) error {
					now := time.Now()
					mu.Lock()
					if _, ok := first[dl.ID]; !ok {
						first[dl.ID] = now
					}
					mu.Unlock()
					return nil
				})
				c, err := mensageria.New(d, &mensageria.Config{App: "pickup", NotifyDebounce: debounce,
					Registry: mensageria.NewRegistry().MustRegister("pickup.t", send), Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Start(ctx); err != nil {
					b.Fatal(err)
				}
				defer c.Stop(context.Background())
				const producers, rate = 8, 800
				dur := 15 * time.Second
				committed := make([]map[uuid.UUID]time.Time, producers)
				var wg sync.WaitGroup
				end := time.Now().Add(dur)
				for p := range producers {
					committed[p] = map[uuid.UUID]time.Time{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						tick := time.NewTicker(time.Second * producers / rate)
						defer tick.Stop()
						for i := 0; time.Now().Before(end); i++ {
							<-tick.C
							var ids []uuid.UUID
							err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
								var err error
								ids, err = c.EnqueueTx(ctx, tx, mensageria.Message{Type: "pickup.t", Key: fmt.Sprintf("k%d-%d", p, i), Payload: []byte(`{"a":1}`)})
								return err
							})
							if err != nil {
								b.Error(err)
								return
							}
							committed[p][ids[0]] = time.Now()
						}
					}()
				}
				wg.Wait()
				// The last messages' deliveries, before the figures.
				total := 0
				for _, m := range committed {
					total += len(m)
				}
				testsignal.Eventually(b, 10*time.Second, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return len(first) >= total
				}, "the %d committed messages delivered", total)
				var lat []time.Duration
				mu.Lock()
				for _, m := range committed {
					for id, at := range m {
						if got, ok := first[id]; ok {
							lat = append(lat, got.Sub(at))
						}
					}
				}
				mu.Unlock()
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				pct := func(p float64) float64 { return float64(lat[int(p/100*float64(len(lat)-1))].Microseconds()) / 1000 }
				if len(lat) == 0 {
					b.Fatal("nothing delivered")
				}
				b.ReportMetric(float64(len(lat)), "msgs")
				b.ReportMetric(pct(50), "p50-ms")
				b.ReportMetric(pct(99), "p99-ms")
				b.ReportMetric(pct(99.9), "p999-ms")
			})
		}
	}
}
