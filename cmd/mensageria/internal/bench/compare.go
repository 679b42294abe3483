package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
)

// The side-by-side comparisons of issue #5: each guarantee's cost, the modes
// alternating in one run (Alternate). The Go benchmarks of transport/kafka
// and transport/nats and `mensageria bench --scenario kafka,nats` run these.

// KafkaCompareConfig sizes KafkaCompare.
type KafkaCompareConfig struct {
	// Brokers of the cluster. Required.
	Brokers []string
	// Batch is the relay's claim size. Default 100, the target's.
	Batch int
	// Messages per relay run; the Sender alone moves ten times as many.
	// Default 30,000.
	Messages int
	// Rounds of alternating modes. Default 3.
	Rounds int
	// PacedRate and PacedFor shape the latency phase. Default 1,000
	// msgs/s for 5s, after a second of warm-up.
	PacedRate int
	PacedFor  time.Duration
}

// KafkaCompare measures, at claims of cfg.Batch, each mode's
// commit-to-consumer latency through the relay at a paced rate, then the
// relay draining an outbox backlog into Kafka and the Sender alone,
// idempotent and transactional; it reports the medians and the ratios both
// ways (targets: transactional/idempotent ≥ 0.8 at batch 100, and
// idempotent/transactional ≥ 1 at every batch).
func KafkaCompare(ctx context.Context, e Env, cfg KafkaCompareConfig) (Result, error) {
	orDefault(&cfg.Batch, 100)
	orDefault(&cfg.Messages, 30000)
	orDefault(&cfg.Rounds, 3)
	orDefault(&cfg.PacedRate, 1000)
	if cfg.PacedFor <= 0 {
		cfg.PacedFor = 5 * time.Second
	}
	brokers, batchSize, n, rounds := cfg.Brokers, cfg.Batch, cfg.Messages, cfg.Rounds
	modes := KafkaModes
	r := Result{Scenario: "kafka"}
	// Latency needs a load below capacity: a backlog's drain only measures
	// queueing. It goes first, before the throughput phases fill the
	// cluster and the heap; one round, the modes one after the other.
	paced, err := Alternate(1, modes, func(mode string) (Result, error) {
		return KafkaPaced(ctx, e, brokers, mode, batchSize, cfg.PacedRate, cfg.PacedFor)
	})
	if err != nil {
		return r, err
	}
	for _, m := range modes {
		r.Set("paced-"+m+"-p50-ms", paced[m]["p50-ms"])
		r.Set("paced-"+m+"-p99-ms", paced[m]["p99-ms"])
	}
	relay, err := Alternate(rounds, modes, func(mode string) (Result, error) {
		return KafkaRelayDrain(ctx, e, brokers, mode, batchSize, n)
	})
	if err != nil {
		return r, err
	}
	// The Sender alone is ten times faster than the relay: ten times the
	// messages keep its runs long enough to time.
	sender, err := Alternate(rounds, modes, func(mode string) (Result, error) {
		return KafkaRelay(ctx, brokers, mode, batchSize, 10*n)
	})
	if err != nil {
		return r, err
	}
	r.Set("batch", float64(batchSize))
	r.Set("relay-idempotent-msgs/s", relay["idempotent"]["msgs/s"])
	r.Set("relay-transactional-msgs/s", relay["transactional"]["msgs/s"])
	r.Set("relay-tx/idem-ratio", relay["transactional"]["msgs/s"]/relay["idempotent"]["msgs/s"])
	r.Set("relay-idem/tx-ratio", relay["idempotent"]["msgs/s"]/relay["transactional"]["msgs/s"])
	for _, m := range modes {
		for _, metric := range []string{"msgs/s", "p50-ms", "p99-ms"} {
			r.Set("sender-"+m+"-"+metric, sender[m][metric])
		}
	}
	r.Set("sender-tx/idem-ratio", sender["transactional"]["msgs/s"]/sender["idempotent"]["msgs/s"])
	r.Set("sender-idem/tx-ratio", sender["idempotent"]["msgs/s"]/sender["transactional"]["msgs/s"])
	r.Notes = fmt.Sprintf("relay: outbox in PostgreSQL -> relay -> Kafka; sender: the Sender alone, two batches in flight; "+
		"paced: commit to read_committed consumer at %d msgs/s for %s", cfg.PacedRate, cfg.PacedFor)
	return r, nil
}

// KafkaSinkCompare produces records into a fresh topic and measures
// consuming them into the database with the offsets there (kafka.Sink)
// against plain at-least-once consumption.
func KafkaSinkCompare(ctx context.Context, e Env, brokers []string, records, rounds int) (Result, error) {
	r := Result{Scenario: "kafka-sink"}
	d, err := e.driver()
	if err != nil {
		return r, err
	}
	insert, err := e.appliedTable(ctx, "kafka_applied")
	if err != nil {
		return r, err
	}
	topic := fmt.Sprintf("bench-sink-%d", time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		return r, err
	}
	rs := make([]*kgo.Record, records)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%64), Value: []byte(Payload)}
	}
	err = cl.ProduceSync(ctx, rs...).FirstErr()
	cl.Close()
	if err != nil {
		return r, err
	}
	res, err := Alternate(rounds, []string{"db", "plain"}, func(mode string) (Result, error) {
		return KafkaSink(ctx, brokers, topic, records, d, insert, mode == "db")
	})
	if err != nil {
		return r, err
	}
	setSinkMetrics(&r, res)
	return r, nil
}

// NatsCompare measures the JetStream Sender with and without Nats-Msg-Id
// (batches of 100), and a stream consumed into the database with the
// stream sequence there (nats.Sink) against plain at-least-once
// consumption, on scratch streams it deletes afterwards.
func NatsCompare(ctx context.Context, e Env, nc *natsgo.Conn, n, rounds int) (Result, error) {
	r := Result{Scenario: "nats"}
	js, err := jetstream.New(nc)
	if err != nil {
		return r, err
	}
	stream := func(prefix string, storage jetstream.StorageType) (string, error) {
		name := fmt.Sprintf("%s_%08x", prefix, rand.Uint32())
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench." + name},
			Duplicates: 2 * time.Minute, Storage: storage})
		if err != nil {
			return "", fmt.Errorf("bench: create stream: %w", err)
		}
		return name, nil
	}
	drop := func(name string) { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }
	// File-backed, as a relay's stream would be; one per mode.
	relayStreams := map[string]string{}
	for _, mode := range []string{"msgid", "plain"} {
		name, err := stream("MBENCH_RELAY", jetstream.FileStorage)
		if err != nil {
			return r, err
		}
		defer drop(name)
		relayStreams[mode] = name
	}
	relay, err := Alternate(rounds, []string{"msgid", "plain"}, func(mode string) (Result, error) {
		return NatsRelay(ctx, nc, "bench."+relayStreams[mode], mode == "msgid", 100, n)
	})
	if err != nil {
		return r, err
	}
	for _, mode := range []string{"msgid", "plain"} {
		for _, metric := range []string{"msgs/s", "p50-ms", "p99-ms"} {
			r.Set("relay-"+mode+"-"+metric, relay[mode][metric])
		}
	}
	r.Set("relay-msgid/plain-ratio", relay["msgid"]["msgs/s"]/relay["plain"]["msgs/s"])

	d, err := e.driver()
	if err != nil {
		return r, err
	}
	insert, err := e.appliedTable(ctx, "nats_applied")
	if err != nil {
		return r, err
	}
	// In memory: a file-backed stream is read from disk by the first
	// consumer of a round and from the server's cache by the second.
	name, err := stream("MBENCH_SINK", jetstream.MemoryStorage)
	if err != nil {
		return r, err
	}
	defer drop(name)
	for i := range n {
		if _, err := js.PublishAsync("bench."+name, fmt.Appendf(nil, `{"n":%d,"pad":"0123456789abcdef0123456789abcdef"}`, i)); err != nil {
			return r, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return r, ctx.Err()
	}
	sink, err := Alternate(rounds, []string{"db", "plain"}, func(mode string) (Result, error) {
		return NatsSink(ctx, nc, name, n, d, insert, mode == "db")
	})
	if err != nil {
		return r, err
	}
	setSinkMetrics(&r, sink)
	return r, nil
}

func setSinkMetrics(r *Result, res map[string]map[string]float64) {
	for _, mode := range []string{"db", "plain"} {
		for _, metric := range []string{"msgs/s", "tx-p50-ms", "tx-p99-ms"} {
			r.Set("sink-"+mode+"-"+metric, res[mode][metric])
		}
	}
	r.Set("sink-db/plain-ratio", res["db"]["msgs/s"]/res["plain"]["msgs/s"])
}

// appliedTable creates the sinks' effect table and returns the effect that
// writes one row of it.
func (e Env) appliedTable(ctx context.Context, name string) (InsertFunc, error) {
	table := e.Schema + "." + name
	if err := e.exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (source text, part int, off bigint, value bytea)"); err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx mensageria.Tx, source string, part int32, off int64, value []byte) error {
		pt, ok := tx.Raw().(pgx.Tx)
		if !ok {
			return fmt.Errorf("bench: the sink's transaction is %T, not pgx.Tx", tx.Raw())
		}
		_, err := pt.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2, $3, $4)", source, part, off, value)
		return err
	}, nil
}
