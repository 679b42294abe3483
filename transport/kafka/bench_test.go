package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/xadm/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// The figures come from kfake, franz-go's fake cluster: no disk, no
// replication. By default it runs in this process, sharing its scheduler
// and heap; MENSAGERIA_BENCH_KAFKA_BROKERS points the benchmarks at one
// run apart on loopback (go run ./internal/bench/kfake prints the
// addresses), which shows the network's costs, the producer's linger
// among them. They compare the two modes' protocol cost; a real cluster
// adds its round trips to both, more so to the transactional one
// (AddPartitionsToTxn, EndTxn, markers on every partition).

// EnvBenchKafkaBrokers names a Kafka cluster for the benchmarks, comma
// separated seed brokers.
const EnvBenchKafkaBrokers = "MENSAGERIA_BENCH_KAFKA_BROKERS"

// benchBrokers returns the cluster of EnvBenchKafkaBrokers, or a fresh
// in-process kfake cluster.
func benchBrokers(b *testing.B) []string {
	b.Helper()
	if v := os.Getenv(EnvBenchKafkaBrokers); v != "" {
		return strings.Split(v, ",")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.DefaultNumPartitions(6), kfake.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()
}

// benchBatches are the claim sizes the modes are compared at.
var benchBatches = []int{1, 20, 100, 500}

// messagesFor sizes a run to last about a second or more: the relay moves
// about a thousand messages a second at claims of 1 and tens of thousands
// at claims of 100, the Sender alone ten times as many.
func messagesFor(batch int, senderAlone bool) int {
	n := 20000
	switch {
	case batch <= 1:
		n = 1000
	case batch <= 20:
		n = 10000
	}
	if senderAlone && batch >= 20 {
		n *= 10
	}
	return n
}

// benchRounds is how many rounds the modes alternate over
// (MENSAGERIA_BENCH_ROUNDS, default 3).
func benchRounds(b *testing.B) int {
	b.Helper()
	v := os.Getenv("MENSAGERIA_BENCH_ROUNDS")
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("MENSAGERIA_BENCH_ROUNDS=%q: want a positive number", v)
	}
	return n
}

// BenchmarkKafkaRelay: the relay's Kafka Sender alone, idempotent vs
// transactional alternating over rounds, at batches of 1, 20, 100, 500.
// Run with -benchtime 1x. Target: idem/tx-ratio ≥ 1 at each.
func BenchmarkKafkaRelay(b *testing.B) {
	eachBatch(b, func(ctx context.Context, brokers []string, batch, rounds int) (bench.Result, error) {
		return bench.KafkaSenderCompare(ctx, brokers, batch, messagesFor(batch, true), rounds)
	})
}

// BenchmarkKafkaRelayDrain: the relay itself draining an outbox backlog in
// PostgreSQL into Kafka, idempotent vs transactional alternating over
// rounds, at claims of 1, 20, 100, 500. Run with -benchtime 1x. Target:
// idem/tx-ratio ≥ 1 at each.
func BenchmarkKafkaRelayDrain(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	eachBatch(b, func(ctx context.Context, brokers []string, batch, rounds int) (bench.Result, error) {
		return bench.KafkaDrainCompare(ctx, env, brokers, batch, messagesFor(batch, false), rounds)
	})
}

// eachBatch runs one sub-benchmark per batch size, each on a cluster of
// its own unless one is named.
func eachBatch(b *testing.B, run func(ctx context.Context, brokers []string, batch, rounds int) (bench.Result, error)) {
	rounds := benchRounds(b)
	for _, batch := range benchBatches {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			brokers := benchBrokers(b)
			runScenario(b, func(ctx context.Context) (bench.Result, error) {
				return run(ctx, brokers, batch, rounds)
			})
		})
	}
}

// BenchmarkKafkaCompare: at claims of 100, commit-to-consumer latency
// through the relay at a paced 1,000 msgs/s, then the relay draining a
// PostgreSQL outbox into Kafka and the Sender alone, idempotent vs
// transactional, alternating over rounds on one cluster and one database;
// medians and ratios. Target: relay-tx/idem-ratio ≥ 0.8.
func BenchmarkKafkaCompare(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	brokers := benchBrokers(b)
	runScenario(b, func(ctx context.Context) (bench.Result, error) {
		return bench.KafkaCompare(ctx, env, bench.KafkaCompareConfig{Brokers: brokers})
	})
}

// BenchmarkKafkaSink: consuming into PostgreSQL with the offsets in the
// database (kafka.Sink) vs plain at-least-once (same effects, offsets
// committed to Kafka after the database commit).
func BenchmarkKafkaSink(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	brokers := benchBrokers(b)
	runScenario(b, func(ctx context.Context) (bench.Result, error) {
		return bench.KafkaSinkCompare(ctx, env, brokers, 20000, 4)
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
