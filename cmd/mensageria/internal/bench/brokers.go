package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/nats"
)

// relayBatchesInFlight mirrors the relay: the next batch is claimed while
// the previous one is still being delivered.
const relayBatchesInFlight = 2

// syntheticSeq numbers the deliveries SenderRun makes up, far above any
// outbox row id: a transactional Sender remembers the row ids it committed
// and would skip a made-up delivery that reused one.
var syntheticSeq atomic.Int64

func init() { syntheticSeq.Store(1 << 50) }

// SenderRun drives a BatchSender the way the relay does: batches of
// BatchSize, two in flight, each delivery's latency measured from the
// start of its batch to the Sender's answer.
func SenderRun(ctx context.Context, scenario string, s mensageria.BatchSender, batchSize, messages int) (Result, error) {
	if batchSize < 1 || messages < batchSize {
		return Result{}, fmt.Errorf("bench: batch %d, messages %d", batchSize, messages)
	}
	batches := messages / batchSize
	var (
		next     atomic.Int64
		mu       sync.Mutex // guards firstErr
		lat      Latencies
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range relayBatchesInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(batches) {
				ds := make([]*mensageria.Delivery, batchSize)
				for i := range ds {
					id, _ := uuid.NewV7()
					n := syntheticSeq.Add(1)
					ds[i] = &mensageria.Delivery{ID: id, Type: "bench", Key: fmt.Sprintf("k%d", n%64),
						Payload: json.RawMessage(`{"n":1,"pad":"0123456789abcdef0123456789abcdef0123456789abcdef"}`), Attempt: 1, Seq: n}
				}
				t0 := time.Now()
				errs := s.SendBatch(ctx, ds)
				d := time.Since(t0)
				for range ds {
					lat.Add(d)
				}
				if errs != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, errors.Join(errs...))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{}, firstErr
	}
	r := Result{Scenario: scenario}
	r.Set("msgs/s", float64(batches*batchSize)/elapsed.Seconds())
	r.setPercentiles("", &lat)
	r.Set("batch", float64(batchSize))
	return r, nil
}

// KafkaRelay measures the relay's Kafka Sender alone, in one mode:
// "idempotent" (kafka.Sender) or "transactional" (kafka.TransactionalSender,
// one transaction per batch plus its position record). It isolates the
// protocol cost of each guarantee; KafkaRelayDrain measures the relay.
func KafkaRelay(ctx context.Context, brokers []string, mode string, batchSize, messages int) (Result, error) {
	topic := fmt.Sprintf("bench-%s-%d-%d", mode, batchSize, time.Now().UnixNano())
	s, closeSender, err := kafkaSender(ctx, brokers, mode, topic)
	if err != nil {
		return Result{}, err
	}
	defer closeSender()
	r, err := SenderRun(ctx, "kafka-relay-"+mode, s, batchSize, messages)
	if err != nil {
		return r, err
	}
	return r, allProduced(s)
}

// allProduced fails a run in which a transactional Sender answered a
// delivery from its position records instead of producing it: the figure
// would count messages that never crossed the wire.
func allProduced(s mensageria.BatchSender) error {
	if ts, ok := s.(*kafka.TransactionalSender); ok && ts.Reconciled() > 0 {
		return fmt.Errorf("bench: %d deliveries were reconciled, not produced", ts.Reconciled())
	}
	return nil
}

// kafkaSender opens the Sender of a mode on topic and warms it up (topic
// metadata, producer id) outside any measurement. The clients keep
// franz-go's defaults (a linger of 10ms among them), as the command's
// routes do: what a user of each mode gets. They create the topic, since
// each run produces to one of its own.
func kafkaSender(ctx context.Context, brokers []string, mode, topic string) (mensageria.BatchSender, func(), error) {
	opts := []kgo.Opt{kgo.AllowAutoTopicCreation()}
	var (
		s     mensageria.BatchSender
		close func()
	)
	switch mode {
	case "idempotent":
		ks, err := kafka.NewSender(kafka.SenderConfig{Brokers: brokers, Topic: topic, Opts: opts})
		if err != nil {
			return nil, nil, err
		}
		s, close = ks, ks.Close
	case "transactional":
		ts, err := kafka.NewTransactionalSender(kafka.TransactionalConfig{Brokers: brokers, Topic: topic,
			TransactionalID: "bench-" + topic, PositionsTopic: "bench-positions", Opts: opts, Logger: quiet()})
		if err != nil {
			return nil, nil, err
		}
		s, close = ts, ts.Close
	default:
		return nil, nil, fmt.Errorf("bench: unknown Kafka mode %q", mode)
	}
	if _, err := SenderRun(ctx, "warmup", s, 1, 2); err != nil {
		close()
		return nil, nil, err
	}
	return s, close, nil
}

// KafkaRelayDrain measures the relay itself moving a backlog of n outbox
// rows into Kafka in one mode, claims of batchSize, everything else at the
// relay's defaults: what a user of that mode gets, database included. The
// messages are counted by a consumer of its own (read_committed, each
// message id once), and the run ends when it has seen all of them and the
// relay has settled all of them: the figure counts what reached Kafka, not
// what the relay believes it sent.
func KafkaRelayDrain(ctx context.Context, e Env, brokers []string, mode string, batchSize, n int) (Result, error) {
	d, err := e.driver()
	if err != nil {
		return Result{}, err
	}
	stamp := time.Now().UnixNano()
	typ := fmt.Sprintf("bench.kafka.%s.%d", mode, stamp)
	if err := e.fill(ctx, typ, n); err != nil {
		return Result{}, err
	}
	if err := e.settle(ctx); err != nil {
		return Result{}, err
	}
	topic := fmt.Sprintf("bench-drain-%s-%d", mode, stamp)
	s, closeSender, err := kafkaSender(ctx, brokers, mode, topic)
	if err != nil {
		return Result{}, err
	}
	defer closeSender()
	seen, err := countConsumed(ctx, brokers, topic, typ, n)
	if err != nil {
		return Result{}, err
	}
	began := time.Now()
	if _, err := relayDrainTo(ctx, d, typ, s, batchSize, n); err != nil {
		return Result{}, err
	}
	relayed := time.Now()
	consumed, got, err := seen()
	if err != nil {
		return Result{}, fmt.Errorf("bench: the consumer saw %d of %d messages: %w", got, n, err)
	}
	if err := allProduced(s); err != nil {
		return Result{}, err
	}
	r := Result{Scenario: "kafka-relay-drain-" + mode}
	r.Set("msgs/s", float64(n)/(max(relayed.Sub(began), consumed.Sub(began)).Seconds()))
	r.Set("batch", float64(batchSize))
	return r, nil
}

// countConsumed starts a read_committed consumer of topic that counts the
// distinct message ids of type typ. The function it returns waits until
// want of them were seen, and says when that was.
func countConsumed(ctx context.Context, brokers []string, topic, typ string, want int) (func() (time.Time, int, error), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	type outcome struct {
		at  time.Time
		got int
		err error
	}
	done := make(chan outcome, 1)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cl.Close()
		ids := make(map[string]struct{}, want)
		for len(ids) < want {
			fs := cl.PollFetches(cctx)
			if err := cctx.Err(); err != nil {
				done <- outcome{got: len(ids), err: err}
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				var id, t string
				for _, h := range r.Headers {
					switch h.Key {
					case kafka.HeaderMessageID:
						id = string(h.Value)
					case kafka.HeaderType:
						t = string(h.Value)
					}
				}
				if t == typ {
					ids[id] = struct{}{}
				}
			})
		}
		done <- outcome{at: time.Now(), got: len(ids)}
	}()
	return func() (time.Time, int, error) {
		defer cancel()
		wait, stop := context.WithTimeout(ctx, time.Minute)
		defer stop()
		select {
		case o := <-done:
			return o.at, o.got, o.err
		case <-wait.Done():
			cancel()
			o := <-done
			return o.at, o.got, wait.Err()
		}
	}, nil
}

// KafkaModes are the two relay modes, in the order Alternate starts with.
var KafkaModes = []string{"idempotent", "transactional"}

// KafkaModesCompare runs one measurement per mode over rounds, the modes
// alternating which goes first (Alternate), and reports each mode's
// medians ("idempotent-msgs/s", ...) and the ratio of the two throughputs
// ("idem/tx-ratio": the idempotent path should be at least as fast, so
// at least 1).
func KafkaModesCompare(scenario string, batchSize, rounds int, run func(mode string) (Result, error)) (Result, error) {
	res, err := Alternate(rounds, KafkaModes, run)
	if err != nil {
		return Result{}, err
	}
	r := Result{Scenario: scenario}
	r.Set("batch", float64(batchSize))
	for _, m := range KafkaModes {
		for name, v := range res[m] {
			if name != "batch" {
				r.Set(m+"-"+name, v)
			}
		}
	}
	r.Set("idem/tx-ratio", res["idempotent"]["msgs/s"]/res["transactional"]["msgs/s"])
	r.Notes = fmt.Sprintf("medians of %d rounds, the modes alternating which goes first", rounds)
	return r, nil
}

// KafkaDrainCompare is KafkaRelayDrain in both modes at claims of
// batchSize, alternating over rounds (KafkaModesCompare).
func KafkaDrainCompare(ctx context.Context, e Env, brokers []string, batchSize, n, rounds int) (Result, error) {
	return KafkaModesCompare("kafka-relay-drain", batchSize, rounds, func(mode string) (Result, error) {
		return KafkaRelayDrain(ctx, e, brokers, mode, batchSize, n)
	})
}

// KafkaClaims are the claim sizes the Kafka modes are compared at.
var KafkaClaims = []int{1, 20, 100, 500}

// KafkaClaimMessages sizes a drain at claims of batch to last about a
// second or more at the rates this machine kind shows.
func KafkaClaimMessages(batch int) int {
	switch {
	case batch <= 1:
		return 1000
	case batch <= 20:
		return 10000
	}
	return 20000
}

// KafkaClaimsCompare is KafkaDrainCompare at each claim size of claims on
// one cluster (cluster names its kind, for the notes): each mode's median
// msgs/s and the idem/tx-ratio per claim size ("claim=20-idem/tx-ratio";
// the target is at least 1 at each), and the lowest ratio.
func KafkaClaimsCompare(ctx context.Context, e Env, brokers []string, cluster string, claims []int, rounds int) (Result, error) {
	r := Result{Scenario: "kafka-claims-" + cluster}
	lowest := 0.0
	for _, claim := range claims {
		res, err := KafkaDrainCompare(ctx, e, brokers, claim, KafkaClaimMessages(claim), rounds)
		if err != nil {
			return r, fmt.Errorf("claims of %d: %w", claim, err)
		}
		prefix := fmt.Sprintf("claim=%d-", claim)
		for _, m := range KafkaModes {
			r.Set(prefix+m+"-msgs/s", res.Metrics[m+"-msgs/s"])
		}
		ratio := res.Metrics["idem/tx-ratio"]
		r.Set(prefix+"idem/tx-ratio", ratio)
		if lowest == 0 || ratio < lowest {
			lowest = ratio
		}
	}
	r.Set("lowest-idem/tx-ratio", lowest)
	r.Notes = fmt.Sprintf("the relay draining a PostgreSQL outbox into kfake (%s, %d brokers, %d partitions), counted by a read_committed consumer; medians of %d rounds, the modes alternating which goes first",
		cluster, kfakeBrokers, kfakePartitions, rounds)
	return r, nil
}

// KafkaSenderCompare is KafkaRelay (the Sender alone) in both modes at
// batches of batchSize, alternating over rounds (KafkaModesCompare).
func KafkaSenderCompare(ctx context.Context, brokers []string, batchSize, n, rounds int) (Result, error) {
	return KafkaModesCompare("kafka-relay", batchSize, rounds, func(mode string) (Result, error) {
		return KafkaRelay(ctx, brokers, mode, batchSize, n)
	})
}

// NatsRelay measures the JetStream Sender with or without Nats-Msg-Id.
func NatsRelay(ctx context.Context, nc *natsgo.Conn, subject string, withMsgID bool, batchSize, messages int) (Result, error) {
	s, err := nats.NewSender(ctx, nats.SenderConfig{Conn: nc, Subject: subject, WithoutMsgID: !withMsgID})
	if err != nil {
		return Result{}, err
	}
	name := "nats-relay-msgid"
	if !withMsgID {
		name = "nats-relay-no-msgid"
	}
	if _, err := SenderRun(ctx, "warmup", s, 1, 2); err != nil {
		return Result{}, err
	}
	return SenderRun(ctx, name, s, batchSize, messages)
}

// InsertFunc writes one effect row in the sink's transaction.
type InsertFunc func(ctx context.Context, tx mensageria.Tx, topic string, partition int32, offset int64, value []byte) error

// KafkaSink measures consuming records already in topic into the database:
// through kafka.Sink (effect and offset in one transaction, offsets read
// back on assignment), or plain at-least-once (the same effects, one
// transaction per partition batch, offsets committed to Kafka afterwards).
// The latencies are per database transaction.
func KafkaSink(ctx context.Context, brokers []string, topic string, records int, drv driver.Driver, insert InsertFunc, offsetsInDB bool) (Result, error) {
	group := fmt.Sprintf("bench-sink-%d", time.Now().UnixNano())
	var lat Latencies
	start := time.Now()
	if offsetsInDB {
		s, err := kafka.NewSink(kafka.SinkConfig{Brokers: brokers, Group: group, Topics: []string{topic}, Driver: drv,
			Opts:    []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
			OnBatch: func(b kafka.BatchStats) { lat.Add(b.Duration) },
			Effect: func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
				return insert(ctx, tx, r.Topic, r.Partition, r.Offset, r.Value)
			}})
		if err != nil {
			return Result{}, err
		}
		return awaitSink(ctx, "kafka-sink-offsets-in-db", s.Run, s.Applied, records, start, &lat)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	var applied atomic.Int64
	run := func(ctx context.Context) error {
		for ctx.Err() == nil {
			fs := cl.PollRecords(ctx, 500)
			var err error
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				if err != nil || len(p.Records) == 0 {
					return
				}
				t0 := time.Now()
				err = drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
					for _, r := range p.Records {
						if err := insert(ctx, tx, r.Topic, r.Partition, r.Offset, r.Value); err != nil {
							return err
						}
					}
					return nil
				})
				if err == nil {
					lat.Add(time.Since(t0))
					applied.Add(int64(len(p.Records)))
				}
			})
			if err == nil {
				err = cl.CommitUncommittedOffsets(ctx)
			}
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
		return nil
	}
	return awaitSink(ctx, "kafka-sink-plain-at-least-once", run, applied.Load, records, start, &lat)
}

// NatsSink measures consuming the records already in stream into the
// database: through nats.Sink (effects and the stream sequence in one
// transaction, batches of 100), or plain at-least-once (the same effects
// and batches on a durable consumer, each message acknowledged after the
// commit). The latencies are per database transaction.
func NatsSink(ctx context.Context, nc *natsgo.Conn, stream string, records int, drv driver.Driver, insert InsertFunc, sequenceInDB bool) (Result, error) {
	const batch = 100
	consumer := fmt.Sprintf("bench-sink-%d", time.Now().UnixNano())
	var lat Latencies
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = st.DeleteConsumer(context.WithoutCancel(ctx), consumer) }()
	apply := func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		return insert(ctx, tx, m.Subject(), 0, int64(md.Sequence.Stream), m.Data())
	}
	start := time.Now()
	if sequenceInDB {
		s, err := nats.NewSink(nats.SinkConfig{Conn: nc, Stream: stream, Consumer: consumer, Driver: drv,
			Batch: batch, MaxWait: 100 * time.Millisecond, Effect: apply, Logger: quiet(),
			OnBatch: func(b nats.BatchStats) { lat.Add(b.Duration) }})
		if err != nil {
			return Result{}, err
		}
		return awaitSink(ctx, "nats-sink-sequence-in-db", s.Run, s.Applied, records, start, &lat)
	}
	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: consumer, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 4 * batch, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return Result{}, err
	}
	var applied atomic.Int64
	run := func(ctx context.Context) error {
		for ctx.Err() == nil {
			b, err := cons.Fetch(batch, jetstream.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				return err
			}
			var msgs []jetstream.Msg
			for m := range b.Messages() {
				msgs = append(msgs, m)
			}
			if len(msgs) == 0 {
				continue
			}
			t0 := time.Now()
			err = drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
				for _, m := range msgs {
					if err := apply(ctx, tx, m); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			lat.Add(time.Since(t0))
			for _, m := range msgs {
				_ = m.Ack()
			}
			applied.Add(int64(len(msgs)))
		}
		return nil
	}
	return awaitSink(ctx, "nats-sink-plain-at-least-once", run, applied.Load, records, start, &lat)
}

// KafkaPaced measures commit-to-consumer latency through the relay into
// Kafka in one mode: pacers enqueue rate messages a second, one per
// transaction, for a second of warm-up and then dur, and a read_committed
// consumer notes when each record reaches it. The relay runs at its defaults with claims of
// batchSize.
func KafkaPaced(ctx context.Context, e Env, brokers []string, mode string, batchSize, rate int, dur time.Duration) (Result, error) {
	d, err := e.driver()
	if err != nil {
		return Result{}, err
	}
	// A drain before leaves dead rows whose vacuum would run during (and be
	// billed to) this phase's tail latency.
	if err := e.settle(ctx); err != nil {
		return Result{}, err
	}
	stamp := time.Now().UnixNano()
	typ := fmt.Sprintf("bench.kafka.paced.%s.%d", mode, stamp)
	topic := fmt.Sprintf("bench-paced-%s-%d", mode, stamp)
	s, closeSender, err := kafkaSender(ctx, brokers, mode, topic)
	if err != nil {
		return Result{}, err
	}
	defer closeSender()
	c, err := newRelay(d, typ, s, batchSize)
	if err != nil {
		return Result{}, err
	}
	if err := c.Start(ctx); err != nil {
		return Result{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()

	// The first second paces too but is not measured: the pool's
	// connections and the relay's loops settle in it.
	skip := rate
	total := skip + int(float64(rate)*dur.Seconds())
	committed := make([]atomic.Int64, total)
	arrivals, stopConsuming, err := consumeArrivals(ctx, brokers, topic, total)
	if err != nil {
		return Result{}, err
	}
	defer stopConsuming()

	// One message through the whole path first: the relay elected, the
	// consumer assigned and fetching, before anything is timed.
	if _, err := c.Enqueue(ctx, mensageria.Message{Type: typ, Key: "warm-up", Payload: []byte(Payload)}); err != nil {
		return Result{}, err
	}
	if err := arrivals.awaitWarm(ctx); err != nil {
		return Result{}, err
	}

	pacedFor, err := pace(ctx, rate, total, 16, func(ctx context.Context, i int) error {
		_, err := c.Enqueue(ctx, mensageria.Message{Type: typ, Key: fmt.Sprintf("p-%d", i), Payload: []byte(Payload)})
		committed[i].Store(time.Now().UnixNano())
		return err
	})
	if err != nil {
		return Result{}, err
	}
	if err := arrivals.awaitAll(ctx); err != nil {
		return Result{}, err
	}
	lat := commitToArrival(committed[skip:], arrivals.at[skip:])
	r := Result{Scenario: "kafka-paced-" + mode}
	r.Set("paced-rate", float64(total)/pacedFor.Seconds())
	r.Set("paced-msgs", float64(total-skip))
	r.setPercentiles("", lat)
	return r, nil
}

// kafkaArrivals is what a read_committed consumer of a paced run's topic
// saw: the warm-up message, and when each paced record ("p-<i>") first
// reached it.
type kafkaArrivals struct {
	at   []atomic.Int64
	seen atomic.Int64
	warm chan struct{}
}

// consumeArrivals starts consuming topic for a paced run of total
// records; stop ends the consumer.
func consumeArrivals(ctx context.Context, brokers []string, topic string, total int) (a *kafkaArrivals, stop func(), err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	a = &kafkaArrivals{at: make([]atomic.Int64, total), warm: make(chan struct{})}
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	go func() {
		for consumeCtx.Err() == nil {
			fs := cl.PollFetches(consumeCtx)
			now := time.Now().UnixNano()
			fs.EachRecord(func(r *kgo.Record) {
				if string(r.Key) == "warm-up" {
					close(a.warm)
					return
				}
				var i int
				if _, err := fmt.Sscanf(string(r.Key), "p-%d", &i); err == nil && i >= 0 && i < total &&
					a.at[i].CompareAndSwap(0, now) {
					a.seen.Add(1)
				}
			})
		}
	}()
	return a, func() { stopConsuming(); cl.Close() }, nil
}

// awaitWarm returns once the warm-up message has reached the consumer.
func (a *kafkaArrivals) awaitWarm(ctx context.Context) error {
	select {
	case <-a.warm:
		return nil
	case <-time.After(time.Minute):
		return errors.New("bench: the warm-up message did not reach the consumer within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitAll returns once every paced record has reached the consumer.
func (a *kafkaArrivals) awaitAll(ctx context.Context) error {
	total := int64(len(a.at))
	deadline := time.Now().Add(time.Minute)
	for a.seen.Load() < total {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d paced records consumed after a minute", a.seen.Load(), total)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
