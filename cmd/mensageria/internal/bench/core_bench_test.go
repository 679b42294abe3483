package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// The scenarios run once per benchmark invocation whatever b.N is: each is
// a whole measurement with its own clock. Run them with
//
//	go test -run '^$' -bench '^Benchmark(RelayDrain|SteadyState|EnqueueOverhead|Backlog|TracedDrain)$' -benchtime 1x ./cmd/mensageria/internal/bench/
//
// and see docs/benchmarks.md for the figures.

func benchEnv(b *testing.B) bench.Env {
	return bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
}

func report(b *testing.B, r bench.Result, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range r.Metrics {
		b.ReportMetric(v, k)
	}
	b.ReportMetric(0, "ns/op") // the scenario's own metrics are the result
}

func BenchmarkRelayDrain(b *testing.B) {
	r, err := bench.Drain(context.Background(), benchEnv(b), 100_000)
	report(b, r, err)
}

func BenchmarkSteadyState(b *testing.B) {
	r, err := bench.SteadyState(context.Background(), benchEnv(b), 8, 20*time.Second)
	report(b, r, err)
}

func BenchmarkEnqueueOverhead(b *testing.B) {
	r, err := bench.EnqueueOverhead(context.Background(), benchEnv(b), 3*time.Second)
	report(b, r, err)
}

func BenchmarkBacklog(b *testing.B) {
	r, err := bench.Backlog(context.Background(), benchEnv(b), 10_000, 1_000_000, 10_000)
	report(b, r, err)
}

// BenchmarkTracedDrain: the relay's drain with the OpenTelemetry hook
// against without it, alternating (docs/observability.md).
func BenchmarkTracedDrain(b *testing.B) {
	r, err := bench.TracedDrain(context.Background(), benchEnv(b), 20_000, 5)
	report(b, r, err)
}
