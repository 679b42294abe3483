package bench

import (
	"context"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// The console scenario checks its page against the rows it filled; a run
// that did other scenarios first leaves their apps, types and rows in the
// shared schema, which must not make the check fail.
func TestConsoleCountsOnlyItsOwnRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := Env{Pool: testdb.Pool(t), Schema: testdb.Schema(t)}
	d, err := e.driver()
	if err != nil {
		t.Fatal(err)
	}
	// What an earlier scenario (enqueue-check) leaves behind.
	if err := own(ctx, d, "bench-earlier", "earlier.type"); err != nil {
		t.Fatal(err)
	}
	if err := d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{Type: "earlier.type", Key: "k1", Payload: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	r, err := Console(ctx, e, ConsoleConfig{Pending: 200, Types: 4, Apps: 2, Dead: 8, Loads: 3})
	if err != nil {
		t.Fatalf("console after another scenario's rows: %v", err)
	}
	if r.Metrics["page-p50-ms"] <= 0 {
		t.Fatalf("console timed no page: %+v", r.Metrics)
	}
}
