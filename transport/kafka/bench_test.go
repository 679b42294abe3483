package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
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

func messagesFor(batch int) int {
	switch {
	case batch <= 1:
		return 1000
	case batch <= 10:
		return 5000
	default:
		return max(20000, batch*20)
	}
}

func report(b *testing.B, r bench.Result, names ...string) {
	b.Helper()
	for _, n := range names {
		b.ReportMetric(r.Metrics[n], n)
	}
}

// BenchmarkKafkaRelay: the relay's Kafka Sender, idempotent vs
// transactional, at batch sizes 1, 10, 100, 1000. Run with -benchtime 1x.
func BenchmarkKafkaRelay(b *testing.B) {
	for _, mode := range []string{"idempotent", "transactional"} {
		for _, batch := range []int{1, 10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, batch), func(b *testing.B) {
				c := benchCluster(b)
				var r bench.Result
				for range b.N {
					var err error
					r, err = bench.KafkaRelay(context.Background(), c.ListenAddrs(), mode, batch, messagesFor(batch))
					if err != nil {
						b.Fatal(err)
					}
				}
				report(b, r, "msgs/s", "p50-ms", "p99-ms")
			})
		}
	}
}

// BenchmarkKafkaRelayRatio: transactional over idempotent throughput at
// batch 100, measured in this run on one cluster. The machine is shared, so
// the two modes alternate over several rounds and the medians are
// compared. Target ≥ 0.8.
func BenchmarkKafkaRelayRatio(b *testing.B) {
	c := benchCluster(b)
	const rounds = 5
	var idem, tx []float64
	for range b.N {
		idem, tx = idem[:0], tx[:0]
		for range rounds {
			ri, err := bench.KafkaRelay(context.Background(), c.ListenAddrs(), "idempotent", 100, 20000)
			if err != nil {
				b.Fatal(err)
			}
			rt, err := bench.KafkaRelay(context.Background(), c.ListenAddrs(), "transactional", 100, 20000)
			if err != nil {
				b.Fatal(err)
			}
			idem, tx = append(idem, ri.Metrics["msgs/s"]), append(tx, rt.Metrics["msgs/s"])
		}
	}
	mi, mt := median(idem), median(tx)
	b.ReportMetric(mi, "idem-msgs/s")
	b.ReportMetric(mt, "tx-msgs/s")
	b.ReportMetric(mt/mi, "tx/idem-ratio")
}

// BenchmarkKafkaRelayDrain: the relay itself draining an outbox backlog in
// PostgreSQL into Kafka, idempotent vs transactional, at claim sizes 1, 10,
// 100, 1000. Run with -benchtime 1x.
func BenchmarkKafkaRelayDrain(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	for _, mode := range []string{"idempotent", "transactional"} {
		for _, batch := range []int{1, 10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/batch=%d", mode, batch), func(b *testing.B) {
				c := benchCluster(b)
				var r bench.Result
				for range b.N {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					var err error
					r, err = bench.KafkaRelayDrain(ctx, env, c.ListenAddrs(), mode, batch, messagesFor(batch))
					cancel()
					if err != nil {
						b.Fatal(err)
					}
				}
				report(b, r, "msgs/s")
			})
		}
	}
}

// BenchmarkKafkaRelayDrainRatio: the relay itself draining an outbox
// backlog in PostgreSQL into Kafka, idempotent vs transactional, claims of
// 100, everything else at the relay's defaults. The modes alternate over
// rounds on one cluster and one database, and the medians are compared.
// Target ≥ 0.8.
func BenchmarkKafkaRelayDrainRatio(b *testing.B) {
	env := bench.Env{Pool: testdb.Pool(b), Schema: testdb.Schema(b)}
	c := benchCluster(b)
	const (
		rounds = 3
		n      = 30000
	)
	var idem, tx []float64
	for range b.N {
		idem, tx = idem[:0], tx[:0]
		for range rounds {
			for _, mode := range []string{"idempotent", "transactional"} {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				r, err := bench.KafkaRelayDrain(ctx, env, c.ListenAddrs(), mode, 100, n)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				if mode == "idempotent" {
					idem = append(idem, r.Metrics["msgs/s"])
				} else {
					tx = append(tx, r.Metrics["msgs/s"])
				}
			}
		}
	}
	mi, mt := median(idem), median(tx)
	b.ReportMetric(mi, "idem-msgs/s")
	b.ReportMetric(mt, "tx-msgs/s")
	b.ReportMetric(mt/mi, "tx/idem-ratio")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkKafkaSink: consuming into PostgreSQL with the offsets in the
// database (kafka.Sink) vs plain at-least-once (same effects, offsets
// committed to Kafka after the database commit).
func BenchmarkKafkaSink(b *testing.B) {
	pool := testdb.Pool(b)
	schema := testdb.Schema(b)
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := drv.Migrate(ctx, driver.MigrateUp); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".applied (source text, part int, off bigint, value bytea)"); err != nil {
		b.Fatal(err)
	}
	insert := func(ctx context.Context, tx mensageria.Tx, topic string, p int32, off int64, v []byte) error {
		_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+schema+".applied VALUES ($1, $2, $3, $4)", topic, p, off, v)
		return err
	}
	const records = 20000
	c := benchCluster(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	rs := make([]*kgo.Record, records)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: "sink-bench", Key: fmt.Appendf(nil, "k%d", i%64), Value: []byte(`{"n":1,"pad":"0123456789abcdef0123456789abcdef"}`)}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	// The modes alternate over rounds, each going first in turn (the
	// machine may be shared), and the medians are compared.
	const rounds = 4
	res := map[bool][]bench.Result{}
	for range b.N {
		clear(res)
		for round := range rounds {
			for _, db := range []bool{round%2 == 0, round%2 == 1} {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				r, err := bench.KafkaSink(ctx, c.ListenAddrs(), "sink-bench", records, drv, insert, db)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				res[db] = append(res[db], r)
			}
		}
	}
	db, plain := medians(res[true]), medians(res[false])
	for _, m := range []string{"msgs/s", "tx-p50-ms", "tx-p99-ms"} {
		b.ReportMetric(db[m], "db-"+m)
		b.ReportMetric(plain[m], "plain-"+m)
	}
	b.ReportMetric(db["msgs/s"]/plain["msgs/s"], "db/plain-ratio")
}

// medians takes each metric's median over the rounds.
func medians(rs []bench.Result) map[string]float64 {
	out := map[string]float64{}
	for name := range rs[0].Metrics {
		var v []float64
		for _, r := range rs {
			v = append(v, r.Metrics[name])
		}
		out[name] = median(v)
	}
	return out
}
