package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// BenchmarkEnqueueCheck is the cost of the outbox's insert check on the
// enqueue path: rows/s with the trigger and without it (a second schema with
// it disabled), for the driver's Insert of 1 and of 100 rows and for a
// plain SQL INSERT. It runs once whatever b.N is; run it with
//
//	go test -run '^$' -bench 'EnqueueCheck$' -benchtime 1x ./cmd/mensageria/internal/bench/
//
// The -ratio metrics are checked/unchecked, all the rules (target: at
// least 0.95); the -owner-ratio metrics checked/ownerless, the ownership
// check alone.
func BenchmarkEnqueueCheck(b *testing.B) {
	e := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	r, err := bench.EnqueueCheck(context.Background(), e, bench.EnqueueCheckConfig{Rounds: 10, Run: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range r.Metrics {
		b.ReportMetric(v, k)
	}
	b.ReportMetric(0, "ns/op") // the scenario's own metrics are the result
}
