package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// BenchmarkEnqueueWakeup is what the outbox's enqueue wake-up (migration 5)
// costs the enqueue rate, against the same schema with it disabled and with
// a plain notify-per-INSERT trigger instead, and what it buys: commit →
// delivery latency of plain SQL INSERTs paced at 200 a second, with it and
// without it. It runs once whatever b.N is; run it with
//
//	go test -run '^$' -bench EnqueueWakeup -benchtime 1x -timeout 20m ./cmd/mensageria/internal/bench/
//
// The <kind>-ratio metrics are wakeup/off (target: at least 0.95); the
// target latency is wakeup-p50-ms at most 50.
func BenchmarkEnqueueWakeup(b *testing.B) {
	e := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	r, err := bench.Wakeup(context.Background(), e, bench.WakeupConfig{Rounds: 5, Run: 2 * time.Second, PacedFor: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range r.Metrics {
		b.ReportMetric(v, k)
	}
	b.ReportMetric(0, "ns/op") // the scenario's own metrics are the result
}
