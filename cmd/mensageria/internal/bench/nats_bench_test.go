package bench_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

func benchConn(b *testing.B) *natsgo.Conn {
	b.Helper()
	url := testdb.NatsURL()
	nc, err := natsgo.Connect(url)
	if err != nil {
		testdb.Unavailable(b, "NATS at "+url, err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// BenchmarkNatsCompare: the JetStream Sender with and without
// Nats-Msg-Id (batch 100, two batches in flight, file-backed streams with a
// 2-minute window), and the sink with the stream sequence in PostgreSQL vs
// plain at-least-once, alternating over rounds. Run with -benchtime 1x.
func BenchmarkNatsCompare(b *testing.B) {
	nc := benchConn(b)
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	var r bench.Result
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		var err error
		r, err = bench.NatsCompare(ctx, env, nc, 20000, 4)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Metrics)) {
		b.ReportMetric(r.Metrics[name], name)
	}
}
