package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
)

func newCluster(t testing.TB, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// deliveries makes n deliveries with outbox row ids from, from+1, ...
func deliveries(typ string, from int64, n int) []*mensageria.Delivery {
	out := make([]*mensageria.Delivery, n)
	for i := range out {
		seq := from + int64(i)
		out[i] = &mensageria.Delivery{
			ID:      uuid.Must(uuid.NewV7()),
			Type:    typ,
			Key:     fmt.Sprintf("key-%d", seq%7),
			Payload: json.RawMessage(fmt.Sprintf(`{"seq":%d}`, seq)),
			Attempt: 1,
			Seq:     seq,
		}
	}
	return out
}

// consumeAll reads topic from the start to its current end, in the given
// isolation, and returns the data records.
func consumeAll(t testing.TB, addrs []string, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	admin, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ts := int64(-1)
	ends, err := listOffsets(ctx, admin, topic, ts)
	if err != nil {
		t.Fatal(err)
	}
	if !committed { // the high watermark, not the stable end
		ends, err = highWatermarks(ctx, admin, topic)
		if err != nil {
			t.Fatal(err)
		}
	}
	start := map[int32]kgo.Offset{}
	for p, e := range ends {
		if e > 0 {
			start[p] = kgo.NewOffset().AtStart()
		}
	}
	if len(start) == 0 {
		return nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	done := map[int32]bool{}
	for len(done) < len(start) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: %v (done %v of %v)", topic, ctx.Err(), done, ends)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset >= ends[r.Partition]-1 {
				done[r.Partition] = true
			}
		})
	}
	return out
}

func highWatermarks(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	// read_uncommitted ListOffsets latest is the high watermark.
	return listOffsetsIso(ctx, cl, topic, -1, 0)
}

// header returns a record header value.
func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// countByID counts records per message id header.
func countByID(rs []*kgo.Record) map[string]int {
	m := map[string]int{}
	for _, r := range rs {
		m[header(r, HeaderMessageID)]++
	}
	return m
}

// assertExactlyOnce checks that every delivery appears once and nothing
// else does.
func assertExactlyOnce(t testing.TB, rs []*kgo.Record, ds ...[]*mensageria.Delivery) {
	t.Helper()
	got := countByID(rs)
	want := 0
	for _, batch := range ds {
		for _, d := range batch {
			want++
			if n := got[d.ID.String()]; n != 1 {
				t.Errorf("message %d (%s) seen %d times by a read_committed consumer", d.Seq, d.ID, n)
			}
		}
	}
	if len(rs) != want {
		t.Errorf("read_committed consumer saw %d records, want %d", len(rs), want)
	}
}
