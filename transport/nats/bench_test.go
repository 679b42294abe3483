package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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
	for _, withID := range []bool{false, true} {
		name := "without-msg-id"
		if withID {
			name = "with-msg-id"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			stream := fmt.Sprintf("MB_%08x", rand.Uint32())
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"mb." + stream}, Duplicates: 2 * time.Minute}); err != nil {
				b.Fatal(err)
			}
			defer js.DeleteStream(ctx, stream)
			var r bench.Result
			for range b.N {
				if r, err = bench.NatsRelay(ctx, nc, "mb."+stream, withID, 100, 50000); err != nil {
					b.Fatal(err)
				}
			}
			for _, m := range []string{"msgs/s", "p50-ms", "p99-ms"} {
				b.ReportMetric(r.Metrics[m], m)
			}
		})
	}
}
