package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/xadm/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// The figures come from kfake, franz-go's in-process cluster: no network,
// no disk, no replication. They compare the two modes' protocol cost; a
// real cluster adds its round trips to both, more so to the transactional
// one (AddPartitionsToTxn, EndTxn, markers on every partition).

func benchCluster(b *testing.B) *kfake.Cluster {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.DefaultNumPartitions(6), kfake.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

// messagesFor sizes a run to last about a second or more: the relay moves
// tens of thousands of messages a second at claims of 100, the Sender alone
// hundreds of thousands.
func messagesFor(batch int, senderAlone bool) int {
	n := 20000
	switch {
	case batch <= 1:
		n = 1000
	case batch <= 10:
		n = 5000
	}
	if senderAlone && batch >= 100 {
		n *= 10
	}
	return n
}

// BenchmarkKafkaRelay: the relay's Kafka Sender alone, idempotent vs
// transactional, at batch sizes 1, 10, 100, 1000. Run with -benchtime 1x.
func BenchmarkKafkaRelay(b *testing.B) {
	eachModeAndBatch(b, func(ctx context.Context, brokers []string, mode string, batch int) (bench.Result, error) {
		return bench.KafkaRelay(ctx, brokers, mode, batch, messagesFor(batch, true))
	})
}

// BenchmarkKafkaRelayDrain: the relay itself draining an outbox backlog in
// PostgreSQL into Kafka, idempotent vs transactional, at claim sizes 1, 10,
// 100, 1000. Run with -benchtime 1x.
func BenchmarkKafkaRelayDrain(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	eachModeAndBatch(b, func(ctx context.Context, brokers []string, mode string, batch int) (bench.Result, error) {
		return bench.KafkaRelayDrain(ctx, env, brokers, mode, batch, messagesFor(batch, false))
	})
}

// eachModeAndBatch runs one sub-benchmark per mode and batch size, each on
// a cluster of its own.
func eachModeAndBatch(b *testing.B, run func(ctx context.Context, brokers []string, mode string, batch int) (bench.Result, error)) {
	for _, mode := range []string{"idempotent", "transactional"} {
		for _, batch := range []int{1, 10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, batch), func(b *testing.B) {
				c := benchCluster(b)
				runScenario(b, func(ctx context.Context) (bench.Result, error) {
					return run(ctx, c.ListenAddrs(), mode, batch)
				})
			})
		}
	}
}

// BenchmarkKafkaCompare: at claims of 100, commit-to-consumer latency
// through the relay at a paced 1,000 msgs/s, then the relay draining a
// PostgreSQL outbox into Kafka and the Sender alone, idempotent vs
// transactional, alternating over rounds on one cluster and one database;
// medians and ratios. Target: relay-tx/idem-ratio ≥ 0.8.
func BenchmarkKafkaCompare(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	c := benchCluster(b)
	runScenario(b, func(ctx context.Context) (bench.Result, error) {
		return bench.KafkaCompare(ctx, env, bench.KafkaCompareConfig{Brokers: c.ListenAddrs()})
	})
}

// BenchmarkKafkaSink: consuming into PostgreSQL with the offsets in the
// database (kafka.Sink) vs plain at-least-once (same effects, offsets
// committed to Kafka after the database commit).
func BenchmarkKafkaSink(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	c := benchCluster(b)
	runScenario(b, func(ctx context.Context) (bench.Result, error) {
		return bench.KafkaSinkCompare(ctx, env, c.ListenAddrs(), 20000, 4)
	})
}

// runScenario runs a scenario b.N times and reports every metric of the
// last run.
func runScenario(b *testing.B, scenario func(context.Context) (bench.Result, error)) {
	b.Helper()
	var r bench.Result
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		var err error
		r, err = scenario(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	reportAll(b, r)
}

func reportAll(b *testing.B, r bench.Result) {
	b.Helper()
	for _, name := range slices.Sorted(maps.Keys(r.Metrics)) {
		b.ReportMetric(r.Metrics[name], name)
	}
}
