package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// The enqueue and the relay's drain (claim a batch, settle it delivered)
// on MariaDB and, with the same steps, on PostgreSQL, so the two read
// side by side:
//
//	go test -run '^$' -bench . -benchtime 2000x ./driver/mysql/
//
// rows/s is the figure to compare; both servers are local, so it measures
// the drivers' statements and round trips, not a network.
func BenchmarkEnqueue(b *testing.B) {
	for _, backend := range []string{"mysql", "postgres"} {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("%s/rows=%d", backend, n), func(b *testing.B) {
				d := benchDriver(b, backend)
				rows := benchRows(b, n)
				b.ResetTimer()
				for range b.N {
					for i := range rows {
						rows[i].MessageID = uuid.Must(uuid.NewV7())
					}
					if err := d.Insert(context.Background(), driver.InsertParams{Rows: rows}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

func BenchmarkDrain(b *testing.B) {
	const batch = 100
	for _, backend := range []string{"mysql", "postgres"} {
		b.Run(fmt.Sprintf("%s/batch=%d", backend, batch), func(b *testing.B) {
			d := benchDriver(b, backend)
			ctx := context.Background()
			// b.N batches enqueued first, drained under the timer.
			for range b.N {
				if err := d.Insert(ctx, driver.InsertParams{Rows: benchRows(b, batch)}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"order.created"}, Limit: batch, Lease: time.Minute, Token: int64(i + 1)})
				if err != nil || len(jobs) != batch {
					b.Fatalf("claim %d: %d rows, %v", i, len(jobs), err)
				}
				ids := make([]int64, len(jobs))
				for j, job := range jobs {
					ids[j] = job.ID
				}
				res, err := d.Settle(ctx, driver.SettleParams{Token: int64(i + 1), Delivered: ids})
				if err != nil || len(res.Settled) != batch {
					b.Fatalf("settle %d: %+v, %v", i, res, err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func benchRows(b *testing.B, n int) []driver.InsertRow {
	rows := make([]driver.InsertRow, n)
	for i := range rows {
		rows[i] = driver.InsertRow{MessageID: uuid.Must(uuid.NewV7()), Type: "order.created", Key: fmt.Sprint("order-", i),
			Payload: []byte(`{"id":1,"total":"12.50","items":[{"sku":"a","qty":2}]}`), Headers: []byte(`{"x-request-id":"req-1"}`)}
	}
	return rows
}

// benchDriver is a migrated driver of backend with order.created owned.
func benchDriver(b *testing.B, backend string) driver.Driver {
	ctx := context.Background()
	var d driver.Driver
	switch backend {
	case "mysql":
		d, _ = migrated(b)
	default:
		pd, err := postgres.New(testdb.Pool(b), &postgres.Config{Schema: testdb.Schema(b)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pd.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			b.Fatal(err)
		}
		d = pd
	}
	if _, err := d.Register(ctx, driver.RegisterParams{App: "bench", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}}); err != nil {
		b.Fatal(err)
	}
	return d
}
