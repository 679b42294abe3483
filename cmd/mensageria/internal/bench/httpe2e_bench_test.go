package bench_test

import (
	"context"
	"flag"
	"testing"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// Knobs of BenchmarkHTTPEndToEnd; zero keeps the scenario's default.
var (
	benchOnly        = flag.String("http.only", "", "BenchmarkHTTPEndToEnd: run only the single, once (at-most-once) or batch mode")
	benchMessages    = flag.Int("http.messages", 0, "BenchmarkHTTPEndToEnd: messages in each throughput phase (default 50000)")
	benchConcurrency = flag.Int("http.concurrency", 0, "BenchmarkHTTPEndToEnd: relay and sender concurrency (default 16)")
	benchClaim       = flag.Int("http.claim", 0, "BenchmarkHTTPEndToEnd: relay BatchSize in the batch mode (default 100)")
	benchItems       = flag.Int("http.items", 0, "BenchmarkHTTPEndToEnd: envelopes per batch request (default 100)")
)

// BenchmarkHTTPEndToEnd runs the scenario once per invocation; use
// -benchtime 1x. Its figures are the reported metrics, not ns/op: the
// single mode's msgs/s, p50-ms and p99-ms, the batch mode's batch-msgs/s,
// batch-p50-ms and batch-p99-ms, and batch-ratio.
func BenchmarkHTTPEndToEnd(b *testing.B) {
	pool := testdb.Pool(b)
	schema := testdb.Schema(b)
	for b.Loop() {
		res, err := bench.HTTPEndToEnd(context.Background(), bench.HTTPEndToEndConfig{
			Env:         bench.Env{Pool: pool, Schema: schema},
			Messages:    *benchMessages,
			Concurrency: *benchConcurrency,
			BatchClaim:  *benchClaim,
			BatchItems:  *benchItems,
			Only:        *benchOnly,
			Logf:        b.Logf,
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []string{"msgs/s", "p50-ms", "p99-ms", "enqueue/s", "paced-rate",
			"once-msgs/s", "once-p50-ms", "once-p99-ms", "once-ratio", "once-added-p50-ms", "once-added-p99-ms",
			"batch-msgs/s", "batch-p50-ms", "batch-p99-ms", "batch-enqueue/s", "batch-paced-rate", "batch-ratio"} {
			if v, ok := res.Metrics[m]; ok {
				b.ReportMetric(v, m)
			}
		}
		if b.N > 1 {
			b.Fatal("run with -benchtime 1x: one scenario per invocation")
		}
	}
}
