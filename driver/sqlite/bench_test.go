package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

// BenchmarkEnqueueRules measures what the catalog's enqueue rules (the
// trigger's owner and header checks, the columns' shape CHECKs) cost an
// enqueue: the same inserts into a schema at version 2, the last without
// them ("before"), and at the newest ("catalog"), through Insert and
// through a plain SQL INSERT, one row per transaction and a hundred.
// Compare the rows/s of the two.
func BenchmarkEnqueueRules(b *testing.B) {
	for _, via := range []string{"go", "sql"} {
		for _, rows := range []int{1, 100} {
			for _, schema := range []string{"catalog", "before"} {
				b.Run(fmt.Sprintf("%s/rows=%d/%s", via, rows, schema), func(b *testing.B) { benchEnqueue(b, via, rows, schema == "catalog") })
			}
		}
	}
}

func benchEnqueue(b *testing.B, via string, n int, catalog bool) {
	ctx := context.Background()
	d, err := sqlite.Open(filepath.Join(b.TempDir(), "m.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if catalog {
		if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Register(ctx, driver.RegisterParams{App: "bench", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}}); err != nil {
			b.Fatal(err)
		}
	} else {
		ms, err := d.MigrationSQL(0)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range ms[:2] {
			if _, err := d.DB().Exec(m.SQL); err != nil {
				b.Fatal(err)
			}
		}
	}
	headers := []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x-request-id":"req-1"}`)
	payload := []byte(`{"id":1,"total":"12.50","items":[{"sku":"a","qty":2}]}`)
	rows := make([]driver.InsertRow, n)
	sqlText := "INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES " + strings.TrimSuffix(strings.Repeat("('order.created', ?, ?, ?), ", n), ", ")
	// Prepared once, as the clients people enqueue with do (Python's
	// sqlite3 keeps 128 statements; JDBC apps prepare theirs).
	stmt, err := d.DB().PrepareContext(ctx, sqlText)
	if err != nil {
		b.Fatal(err)
	}
	defer stmt.Close()
	args := make([]any, 0, 3*n)
	b.ResetTimer()
	for i := range b.N {
		switch via {
		case "go":
			for j := range rows {
				rows[j] = driver.InsertRow{MessageID: uuid.New(), Type: "order.created", Key: fmt.Sprint("order-", i, "-", j), Payload: payload, Headers: headers}
			}
			if err := d.Insert(ctx, driver.InsertParams{Rows: rows}); err != nil {
				b.Fatal(err)
			}
		case "sql":
			args = args[:0]
			for j := range n {
				args = append(args, fmt.Sprint("order-", i, "-", j), string(payload), string(headers))
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "rows/s")
}
