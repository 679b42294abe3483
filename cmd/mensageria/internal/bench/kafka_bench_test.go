package bench_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// The figures come from kfake, franz-go's fake cluster: no disk, no
// replication. The mode comparisons run on two clusters: one in this
// process, sharing its scheduler and heap, and one run apart on loopback
// (the bench/kfake program, built and started by the benchmark),
// which shows the network's costs, the producer's linger among them.
// MENSAGERIA_BENCH_KAFKA_BROKERS points them at a cluster of one's own
// instead. They compare the two modes' protocol cost; a real cluster adds
// its round trips to both, more so to the transactional one
// (AddPartitionsToTxn, EndTxn, markers on every partition).

// EnvBenchKafkaBrokers names a Kafka cluster for the benchmarks, comma
// separated seed brokers.
const EnvBenchKafkaBrokers = "MENSAGERIA_BENCH_KAFKA_BROKERS"

// EnvBenchKafkaCluster picks the kfake clusters the mode comparisons run
// on: "process", "in-process", or both (the default), comma separated.
const EnvBenchKafkaCluster = "MENSAGERIA_BENCH_KAFKA_CLUSTER"

// benchClusters runs one sub-benchmark per cluster kind, each given its
// brokers: the named cluster, or kfake in this process and in one of its
// own.
func benchClusters(b *testing.B, run func(b *testing.B, brokers []string)) {
	if v := os.Getenv(EnvBenchKafkaBrokers); v != "" {
		b.Run("cluster=given", func(b *testing.B) { run(b, strings.Split(v, ",")) })
		return
	}
	kinds := []string{bench.KafkaProcess, bench.KafkaInProcess}
	if v := os.Getenv(EnvBenchKafkaCluster); v != "" {
		kinds = strings.Split(v, ",")
	}
	for _, kind := range kinds {
		b.Run("cluster="+kind, func(b *testing.B) {
			switch kind {
			case bench.KafkaInProcess:
				run(b, inProcessBrokers(b))
			case bench.KafkaProcess:
				run(b, processBrokers(b))
			default:
				b.Fatalf("%s=%q: want process, in-process or both", EnvBenchKafkaCluster, kind)
			}
		})
	}
}

// inProcessBrokers starts a kfake cluster in this process.
func inProcessBrokers(b *testing.B) []string {
	b.Helper()
	c, err := bench.NewKfakeCluster()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c.ListenAddrs()
}

var kfakeBinary struct {
	once sync.Once
	path string
	err  error
}

// processBrokers builds bench/kfake (once) and starts it as a
// process of its own.
func processBrokers(b *testing.B) []string {
	b.Helper()
	kfakeBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "mensageria-kfake-")
		if err != nil {
			kfakeBinary.err = err
			return
		}
		kfakeBinary.path = filepath.Join(dir, "kfake")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(goBin, "build", "-o", kfakeBinary.path, "github.com/xadm/mensageria/cmd/mensageria/internal/bench/kfake").CombinedOutput()
		if err != nil {
			kfakeBinary.err = fmt.Errorf("go build bench/kfake: %v\n%s", err, out)
		}
	})
	if kfakeBinary.err != nil {
		b.Fatal(kfakeBinary.err)
	}
	p, err := bench.StartKfakeProcess(context.Background(), kfakeBinary.path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Stop)
	return p.Brokers
}

// benchBrokers returns the cluster of EnvBenchKafkaBrokers, or a fresh
// in-process kfake cluster, for the benchmarks that are not mode
// comparisons.
func benchBrokers(b *testing.B) []string {
	b.Helper()
	if v := os.Getenv(EnvBenchKafkaBrokers); v != "" {
		return strings.Split(v, ",")
	}
	return inProcessBrokers(b)
}

// benchBatches are the claim sizes the modes are compared at.
var benchBatches = bench.KafkaClaims

// messagesFor sizes a run to last about a second or more: the relay moves
// about a thousand messages a second at claims of 1 and tens of thousands
// at claims of 100, the Sender alone ten times as many.
func messagesFor(batch int, senderAlone bool) int {
	n := bench.KafkaClaimMessages(batch)
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

// eachBatch runs one sub-benchmark per cluster kind and batch size, each
// on a cluster of its own.
func eachBatch(b *testing.B, run func(ctx context.Context, brokers []string, batch, rounds int) (bench.Result, error)) {
	rounds := benchRounds(b)
	benchClusters(b, func(b *testing.B, brokers []string) {
		for _, batch := range benchBatches {
			b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
				runScenario(b, func(ctx context.Context) (bench.Result, error) {
					return run(ctx, brokers, batch, rounds)
				})
			})
		}
	})
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
