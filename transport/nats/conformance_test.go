package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/transport/transporttest"
)

// The Sender passes the transport conformance suite against a
// nats-server of each subtest's own, exactly once inside the stream's
// duplicate window.
func TestConformance(t *testing.T) {
	transporttest.Run(t, natsHarness)
}

// ordersStream is the stream of the suite's destination, subject
// "orders", with a duplicate window longer than any test.
var ordersStream = jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}, Duplicates: time.Hour, Storage: jetstream.FileStorage}

// natsHarness gives a suite's subtest a private server, whose store
// outlives a restart, so an outage is the server stopped and started
// again on its port with what it held.
func natsHarness(t *testing.T) *transporttest.Harness {
	srv := startPrivateServer(t)
	bin := srv.cmd.Path
	nc, err := natsgo.Connect(srv.url(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(testCtx(t), ordersStream); err != nil {
		t.Fatal(err)
	}
	newSender := func(subject, stream string) func(t *testing.T, log *slog.Logger) mensageria.Sender {
		return func(t *testing.T, log *slog.Logger) mensageria.Sender {
			s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subject, Stream: stream, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	streamError := func(name string) func(err error) bool {
		return func(err error) bool {
			var se *StreamError
			return errors.As(err, &se) && strings.Contains(err.Error(), `stream "`+name+`"`)
		}
	}
	return &transporttest.Harness{
		NewSender: newSender("orders", "ORDERS"),
		Received:  func(t *testing.T) []transporttest.Received { return streamMessages(t, js, "ORDERS") },
		Classify:  func(err error) error { return classify("ORDERS", "orders.x", err) },
		Classes:   publishErrors,
		StartRefusals: []transporttest.StartRefusal{{
			Name: "StreamDeleted",
			NewSender: func(t *testing.T, log *slog.Logger) mensageria.Sender {
				cfg := jetstream.StreamConfig{Name: "GONE", Subjects: []string{"gone"}, Storage: jetstream.MemoryStorage}
				if _, err := js.CreateStream(testCtx(t), cfg); err != nil {
					t.Fatal(err)
				}
				s := newSender("gone", "GONE")(t, log)
				if err := js.DeleteStream(testCtx(t), "GONE"); err != nil {
					t.Fatal(err)
				}
				return s
			},
			Is: func(err error) bool {
				return streamError("GONE")(err) && errors.Is(err, jetstream.ErrStreamNotFound)
			},
			Says: []string{`stream "GONE"`, "create it"},
		}, {
			Name:      "NoStreamForSubject",
			NewSender: newSender("nostream.x", ""),
			Is: func(err error) bool {
				var se *StreamError
				return errors.As(err, &se) && errors.Is(err, jetstream.ErrStreamNotFound)
			},
			Says: []string{`no stream holds subject "nostream.x"`},
		}},
		Outage: &transporttest.Outage{
			Down:         func(*testing.T) { srv.stop() },
			Up:           func(*testing.T) { srv.start(bin) },
			Says:         []string{"not connected to the server"},
			PausedSays:   []string{"not connected to the server"},
			StartWarning: "could not be checked at start",
		},
		RouteFaults: []transporttest.RouteFault{{
			Name: "StreamDeleted",
			Begin: func(t *testing.T) {
				if err := js.DeleteStream(testCtx(t), "ORDERS"); err != nil {
					t.Fatal(err)
				}
			},
			End: func(t *testing.T) {
				if _, err := js.CreateStream(testCtx(t), ordersStream); err != nil {
					t.Fatal(err)
				}
			},
			Says:       []string{`stream "ORDERS"`},
			PausedSays: []string{`stream "ORDERS"`},
			Is:         streamError("ORDERS"),
		}},
		// Above the server's max_payload (1 MB): refused by the client.
		Poison: &transporttest.Poison{
			Payload: fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 1100<<10)),
			Says:    []string{"maximum payload exceeded"},
		},
		Features: transporttest.Features{ExactlyOnce: true, OrderedPerKey: true},
	}
}

// streamMessages reads every message of the stream, in its order.
func streamMessages(t *testing.T, js jetstream.JetStream, name string) []transporttest.Received {
	t.Helper()
	st, err := js.Stream(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []transporttest.Received
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(testCtx(t), seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, transporttest.Received{ID: m.Header.Get(HeaderMessageID), Key: m.Header.Get(HeaderKey), Payload: m.Data})
	}
	return out
}

// publishErrors is the table of docs/config.md ("Broker errors"), answer
// by answer.
var publishErrors = []transporttest.Class{
	{Err: natsgo.ErrMaxPayload, Want: transporttest.Permanent},
	{Err: apiError(400, jetstream.JSErrCodeStreamMessageExceedsMaximum), Want: transporttest.Permanent},
	{Err: jetstream.ErrNoStreamResponse, Want: transporttest.Unavailable},
	{Err: jetstream.ErrStreamNotFound, Want: transporttest.Unavailable},
	{Err: apiError(400, codeStreamNotMatch), Want: transporttest.Unavailable},
	{Err: apiError(503, codeStreamStoreFailed), Want: transporttest.Unavailable},
	{Err: apiError(503, 10008), Want: transporttest.Unavailable}, // JetStream temporarily unavailable
	{Err: jetstream.ErrJetStreamNotEnabled, Want: transporttest.Unavailable},
	{Err: jetstream.ErrAsyncPublishTimeout, Want: transporttest.Unavailable},
	{Err: jetstream.ErrTooManyStalledMsgs, Want: transporttest.Unavailable},
	{Err: natsgo.ErrTimeout, Want: transporttest.Unavailable},
	{Err: natsgo.ErrNoResponders, Want: transporttest.Unavailable},
	{Err: natsgo.ErrConnectionClosed, Want: transporttest.Unavailable},
	{Err: natsgo.ErrConnectionReconnecting, Want: transporttest.Unavailable},
	{Err: natsgo.ErrAuthorization, Want: transporttest.Unavailable},
	{Err: natsgo.ErrPermissionViolation, Want: transporttest.Unavailable},
	{Err: natsgo.ErrAuthExpired, Want: transporttest.Unavailable},
	{Err: natsgo.ErrAuthRevoked, Want: transporttest.Unavailable},
	{Err: natsgo.ErrNoServers, Want: transporttest.Unavailable},
	{Err: natsgo.ErrDisconnected, Want: transporttest.Unavailable},
	{Err: natsgo.ErrConnectionDraining, Want: transporttest.Unavailable},
	{Err: jetstream.ErrJetStreamNotEnabledForAccount, Want: transporttest.Unavailable},
	{Err: context.DeadlineExceeded, Want: transporttest.Unavailable},
	{Err: &NoAckError{Subject: "s", Waited: time.Second}, Want: transporttest.Unavailable},
	{Err: apiError(400, 10003), Want: transporttest.Retryable}, // a bad request the Sender does not know
	{Err: errors.New("something else"), Want: transporttest.Retryable},
}

func apiError(code int, errCode jetstream.ErrorCode) error {
	return &jetstream.APIError{Code: code, ErrorCode: errCode, Description: "injected"}
}
