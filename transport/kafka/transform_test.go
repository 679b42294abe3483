package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria/mensageriatest"
)

func produceInput(t testing.TB, addrs []string, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i%5), Value: fmt.Appendf(nil, "v%d", i)}
	}
	if err := cl.ProduceSync(testCtx(t), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// One transform fails (the transaction aborts and rewinds) and the first
// transformer is killed in the middle of a transaction; its replacement
// finishes. The output holds every input once for read_committed.
func TestTransformerExactlyOnceInsideKafka(t *testing.T) {
	c := newCluster(t, "in", "out")
	const n = 300
	produceInput(t, c.ListenAddrs(), "in", n)

	var calls atomic.Int64
	crashed, release := make(chan struct{}), make(chan struct{})
	tr := func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
		switch calls.Add(1) {
		case 1:
			return nil, errors.New("transient transform failure")
		case 150:
			close(crashed)
			<-release // frozen mid-transaction, as a crashed process
		}
		return []*kgo.Record{{Topic: "out", Key: r.Key, Value: []byte(strings.ToUpper(string(r.Value)))}}, nil
	}
	cfg := TransformerConfig{
		Brokers: c.ListenAddrs(), Group: "enrich", Topics: []string{"in"},
		TransactionalID: "enrich-0", Transform: tr, MaxPollRecords: 40,
		Opts: []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
	}
	t1, err := NewTransformer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done1 := make(chan error, 1)
	go func() { done1 <- t1.Run(context.Background()) }()
	<-crashed
	// The process is gone: its connections drop, its open transaction
	// stays open until the replacement registers the same id.
	t1.sess.Client().Close()
	defer func() {
		close(release)
		err := <-done1
		c1, a1 := t1.Stats()
		t.Logf("crashed transformer: %v (committed %d, aborted %d)", err, c1, a1)
		if a1 == 0 {
			t.Error("the failing transform did not abort a transaction")
		}
	}()

	t2, err := NewTransformer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- t2.Run(ctx2) }()
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return len(consumeAll(t, c.ListenAddrs(), "out", true)) >= n
	}, "all records transformed")
	stop()
	<-done

	out := consumeAll(t, c.ListenAddrs(), "out", true)
	counts := map[string]int{}
	for _, r := range out {
		counts[string(r.Value)]++
	}
	for i := range n {
		if k := fmt.Sprintf("V%d", i); counts[k] != 1 {
			t.Errorf("%s seen %d times", k, counts[k])
		}
	}
	if len(out) != n {
		t.Errorf("read_committed saw %d outputs, want %d", len(out), n)
	}
}
