package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/testdb"
)

func natsURL() string { return testdb.NatsURL() }

// connect returns a connection, or skips (fails under CI) when the server is
// down, like the database helper.
func connect(t testing.TB) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(natsURL(), natsgo.Timeout(2*time.Second))
	if err != nil {
		testdb.Unavailable(t, "NATS at "+natsURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStream creates a uniquely named stream over its own subjects and
// deletes it when the test ends. It returns the stream and its subject.
func newStream(t testing.TB, nc *natsgo.Conn, dupWindow time.Duration) (jetstream.Stream, string) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("MT_%08x", rand.Uint32())
	subject := "mt." + name
	st, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{
		Name: name, Subjects: []string{subject + ".>"}, Duplicates: dupWindow, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		if err == context.DeadlineExceeded || err == jetstream.ErrJetStreamNotEnabled {
			testdb.Unavailable(t, "JetStream at "+natsURL(), err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return st, subject
}

func deliveries(typ string, from int64, n int) []*mensageria.Delivery {
	out := make([]*mensageria.Delivery, n)
	for i := range out {
		seq := from + int64(i)
		out[i] = &mensageria.Delivery{
			ID: uuid.Must(uuid.NewV7()), Type: typ, Key: fmt.Sprintf("key-%d", seq),
			Payload: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq)), Attempt: 1, Seq: seq,
			CreatedAt: time.Now(),
		}
	}
	return out
}

func msgCount(t testing.TB, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
