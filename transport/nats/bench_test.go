package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria/internal/bench"
	"github.com/xadm/mensageria/internal/testdb"
)

// BenchmarkNatsRelay: the JetStream Sender with and without Nats-Msg-Id
// (the server's duplicate tracking), batch 100, two batches in flight, on a
// file-backed stream with a 2-minute window. Run with -benchtime 1x.
func BenchmarkNatsRelay(b *testing.B) {
	url := os.Getenv("MENSAGERIA_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := natsgo.Connect(url)
	if err != nil {
		testdb.Unavailable(b, "NATS at "+url, err)
	}
	defer nc.Close()
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
