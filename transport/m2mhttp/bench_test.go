package m2mhttp_test

import (
	"context"
	"testing"

	"github.com/xadm/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// BenchmarkHTTPEndToEnd runs the scenario once per invocation; use
// -benchtime 1x. Its figures are the reported metrics, not ns/op.
func BenchmarkHTTPEndToEnd(b *testing.B) {
	pool := testdb.Pool(b)
	schema := testdb.Schema(b)
	for b.Loop() {
		res, err := bench.HTTPEndToEnd(context.Background(), bench.HTTPEndToEndConfig{Env: bench.Env{Pool: pool, Schema: schema}, Logf: b.Logf})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []string{"msgs/s", "p50-ms", "p99-ms", "enqueue/s", "paced-rate"} {
			b.ReportMetric(res.Metrics[m], m)
		}
		if b.N > 1 {
			b.Fatal("run with -benchtime 1x: one scenario per invocation")
		}
	}
}
