package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

func benchConn(b *testing.B) *natsgo.Conn {
	b.Helper()
	url := os.Getenv("MENSAGERIA_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := natsgo.Connect(url)
	if err != nil {
		testdb.Unavailable(b, "NATS at "+url, err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// BenchmarkNatsRelay: the JetStream Sender with and without Nats-Msg-Id
// (the server's duplicate tracking), batch 100, two batches in flight, on a
// file-backed stream with a 2-minute window. Run with -benchtime 1x.
func BenchmarkNatsRelay(b *testing.B) {
	nc := benchConn(b)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	streams := map[bool]string{}
	for _, withID := range []bool{false, true} {
		stream := fmt.Sprintf("MB_%08x", rand.Uint32())
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"mb." + stream}, Duplicates: 2 * time.Minute}); err != nil {
			b.Fatal(err)
		}
		defer js.DeleteStream(ctx, stream)
		streams[withID] = stream
	}
	// The machine may be shared: the two modes alternate over rounds and
	// the medians are compared.
	const rounds = 3
	res := map[bool][]bench.Result{}
	for range b.N {
		clear(res)
		for range rounds {
			for _, withID := range []bool{false, true} {
				r, err := bench.NatsRelay(ctx, nc, "mb."+streams[withID], withID, 100, 20000)
				if err != nil {
					b.Fatal(err)
				}
				res[withID] = append(res[withID], r)
			}
		}
	}
	with, without := medians(res[true]), medians(res[false])
	for _, m := range []string{"msgs/s", "p50-ms", "p99-ms"} {
		b.ReportMetric(with[m], "msgid-"+m)
		b.ReportMetric(without[m], "plain-"+m)
	}
	b.ReportMetric(with["msgs/s"]/without["msgs/s"], "msgid/plain-ratio")
}

// BenchmarkNatsSink: consuming a stream into PostgreSQL with the stream
// sequence in the database (nats.Sink) vs plain at-least-once (the same
// effects and batches, each message acknowledged after the commit).
func BenchmarkNatsSink(b *testing.B) {
	nc := benchConn(b)
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
	insert := func(ctx context.Context, tx mensageria.Tx, subject string, p int32, off int64, v []byte) error {
		_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+schema+".applied VALUES ($1, $2, $3, $4)", subject, p, off, v)
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	const records = 20000
	stream := fmt.Sprintf("MBS_%08x", rand.Uint32())
	// In memory: a file-backed stream is read from disk by the first
	// consumer of a round and from the server's block cache by the second,
	// which favours whichever mode runs second.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"mbs." + stream},
		Storage: jetstream.MemoryStorage}); err != nil {
		b.Fatal(err)
	}
	defer js.DeleteStream(ctx, stream)
	for i := range records {
		if _, err := js.PublishAsync("mbs."+stream, fmt.Appendf(nil, `{"n":%d,"pad":"0123456789abcdef0123456789abcdef"}`, i)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing the records timed out")
	}
	// The modes alternate over rounds, each going first in turn (the
	// machine may be shared), and the medians are compared.
	const rounds = 4
	res := map[bool][]bench.Result{}
	for range b.N {
		clear(res)
		for round := range rounds {
			for _, db := range []bool{round%2 == 0, round%2 == 1} {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				r, err := bench.NatsSink(ctx, nc, stream, records, drv, insert, db)
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
		slices.Sort(v)
		out[name] = v[len(v)/2]
	}
	return out
}
