package nats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// publishEvents sends n events (keys key-1 to key-n) through a Sender into
// a new stream.
func publishEvents(t *testing.T, nc *natsgo.Conn, n int) (jetstream.Stream, []*mensageria.Delivery) {
	t.Helper()
	st, subj := newStream(t, nc, time.Minute)
	sender, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".events"})
	if err != nil {
		t.Fatal(err)
	}
	ds := deliveries("event", 1, n)
	if errs := sender.SendBatch(testCtx(t), ds); errs != nil {
		t.Fatal(errors.Join(errs...))
	}
	return st, ds
}

// Messages whose effect fails for good are skipped on their own, their
// sequence stored and acknowledged; the messages around them are applied
// once, and a transient failure is retried.
func TestSinkPoisonAndTransientEffects(t *testing.T) {
	nc := connect(t)
	store := newPGStore(t)
	const n = 10
	st, _ := publishEvents(t, nc, n)
	name := st.CachedInfo().Config.Name
	var transient atomic.Bool
	var log bytes.Buffer // written by Run only, read after it returns
	s, err := NewSink(SinkConfig{
		Conn: nc, Stream: name, Consumer: "poison", Driver: store.drv, Batch: n,
		MaxWait: 200 * time.Millisecond, RetryBackoff: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Effect: func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
			key := m.Headers().Get(HeaderKey)
			switch {
			case key == "key-3" || key == "key-8":
				return mensageria.Permanent(errors.New("unparseable"))
			case key == "key-6" && transient.CompareAndSwap(false, true):
				return errors.New("deadlock detected")
			}
			md, _ := m.Metadata()
			return store.insert(ctx, tx, md.Sequence.Stream, key)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		_, total := store.counts(t)
		return total == n-2 && s.Poisoned() == 2
	}, "every message applied or skipped")
	cons, err := st.Consumer(testCtx(t), "poison")
	if err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(testCtx(t))
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == n
	}, "every message acknowledged")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, _ := store.counts(t)
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("key-%d", i)
		want := 1
		if i == 3 || i == 8 {
			want = 0
		}
		if got[key] != want {
			t.Errorf("%s applied %d times, want %d", key, got[key], want)
		}
	}
	if !transient.Load() {
		t.Error("the transient failure never happened")
	}
	for _, seq := range []string{"stream sequence 3:", "stream sequence 8:"} {
		if !strings.Contains(log.String(), seq) || strings.Count(log.String(), "skipping the message") != 2 {
			t.Errorf("the skips are not logged, each with its sequence (%q):\n%s", seq, log.String())
		}
	}
	var stored int64
	if err := store.drv.InTx(testCtx(t), func(ctx context.Context, tx driver.Tx) error {
		var err error
		stored, _, err = tx.Offset(ctx, "poison", name, 0)
		return err
	}); err != nil || stored != n {
		t.Fatalf("stored sequence %d (%v), want %d: past the skipped ones", stored, err, n)
	}
}
